#include "core/integrity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/agent_report.h"
#include "core/contract.h"
#include "core/doctor.h"
#include "core/log_readers.h"

namespace infrarsi {

std::vector<v1::IntegrityCheck> DescribeIntegrityChecks(const SessionSpec& spec,
                                                        const v1::DoctorReport& doctor,
                                                        const v1::Verification& verification) {
  std::vector<v1::IntegrityCheck> out;
  auto add = [&](const std::string& name, bool ran, const std::string& detail) {
    v1::IntegrityCheck c;
    c.set_name(name);
    c.set_ran(ran);
    c.set_detail(detail);
    out.push_back(std::move(c));
  };
  const bool process = spec.Executor().runs_code;
  add("agent reports", true,
      absl::StrCat("every number an agent sent was checked before it was stored: finite, "
                   "positive step times, losses within +-",
                   absl::StrFormat("%g", kMaxAbsLoss),
                   ", peak memory within the device's capacity, steps in order without "
                   "duplicates, at most ",
                   MaxStepsPerTrial(doctor.steps_per_run(), spec.contract.timed_steps),
                   " lines per trial, wall time consistent with the steps"));
  std::vector<std::string> rules = {
      absl::StrCat("tokens per step ", spec.contract.tokens_per_step),
      absl::StrFormat("loss within %g + %g x |baseline|", spec.contract.loss_abs_tol,
                      spec.contract.loss_rel_tol)};
  if (spec.contract.data_seed_set) rules.push_back(absl::StrCat("data seed ", spec.contract.data_seed));
  if (!spec.contract.precision.empty()) {
    rules.push_back(absl::StrCat("precision in {", absl::StrJoin(spec.contract.precision, ", "), "}"));
  }
  if (spec.contract.optimizer_in_window) rules.push_back("the optimizer step inside the timer");
  if (!spec.contract.protected_files.empty()) {
    rules.push_back(absl::StrCat("protected files unchanged (",
                                 absl::StrJoin(spec.contract.protected_files, ", "), ")"));
  }
  add("contract", true, absl::StrJoin(rules, "; "));
  // A log reader sees only what the framework prints: the checks its lines
  // cannot feed are listed as not run, with what would run them.
  if (process && !spec.process.metrics.UsesHarness()) {
    const std::string& name = spec.process.metrics.reader;
    const ReaderTraits* t = ReaderTraitsOf(name);
    add("log reader", true,
        absl::StrCat("steps read from the job's own ", spec.process.metrics.stream, " by the ",
                     name, " reader; each line timed on arrival by the agent's clock; the first ",
                     spec.process.metrics.warmup_steps, " line(s) warm-up"));
    const bool states_tokens = t != nullptr && t->tokens;
    add("tokens stated by the log", states_tokens,
        states_tokens ? (name == "megatron"
                             ? std::string("the global batch size and the consumed samples' "
                                           "increase each line states, times the tokens per "
                                           "sample, against the contract")
                         : name == "torchtitan"
                             ? std::string("each timed line's tokens per second x its step time "
                                           "x the GPUs, within 25% of the contract's tokens "
                                           "(a rate, not a count: a smaller batch shows)")
                             : std::string("the tokens each line states, when it states them, "
                                           "against the contract"))
                      : absl::StrCat("the ", name,
                                     " reader's lines state no tokens: the contract's figure "
                                     "is used, so a smaller batch is caught only through the "
                                     "loss"));
    const bool states_time = t != nullptr && t->step_time;
    add("reported step times", states_time,
        states_time
            ? std::string("the log's step times are checked against the agent's clock")
            : absl::StrCat("the ", name,
                           " log states no step time: the agent's clock between lines is "
                           "the step time"));
    add("optimizer in window", false,
        "a log reader cannot see optimizer.step(); the harness counts it (contract."
        "optimizer_in_window)");
    if (!spec.contract.precision.empty()) {
      add("precision", false,
          absl::StrCat("the ", name, " reader's lines state no dtype: contract.precision bounds "
                                     "the precision knob only"));
    }
  }
  if (process) {
    add("agent clock", true,
        absl::StrFormat(
            "every trial's timed steps must report at least %.0f%% of the time the agent's "
            "clock saw over the timed window (slack: twice the agent's read interval, once per "
            "trial), the lines must not arrive together, and the process may run after its last "
            "line only as long as the baseline did (%s)",
            100 * (1 - spec.contract.timing_tolerance),
            doctor.clock() == "agent" ? absl::StrFormat("%.4f s", doctor.tail_s())
                                      : std::string("not measured yet")));
  } else {
    add("agent clock", false,
        absl::StrCat("the ", spec.ExecutorName(),
                     " executor runs no process to time: its step times are simulated"));
  }
  if (!process) {
    add("whole run", false, "simulated executor: no process start and exit to time");
  } else if (verification.candidates_size() == 0) {
    add("whole run", false, "no candidate was verified");
  } else {
    add("whole run", true,
        "each verified candidate's A/B runs were timed on the agent's clock from process start to "
        "exit; at least half the time it saves per run in the timed window must be saved there");
  }
  add("noise floor", true,
      absl::StrFormat(
          "floor %.3f%%: the larger of both clocks' (reported and the agent's), never below the "
          "clocks' resolution %.3f%% nor %.1f%%; baseline runs agreeing to the last digit: %s; A/B "
          "runs agreeing to the last digit are not promoted",
          100 * doctor.noise_floor(), 100 * doctor.resolution_floor(), 100 * kMinNoiseFloor,
          doctor.suspicious() ? "yes (no promotion)" : "no"));
  const double flops = SpecFlopsPerStep(spec);
  const double peak = PeakFlopsPerGpu(spec);
  if (flops <= 0) {
    add("mfu", false, "the spec states neither workload.params nor workload.flops_per_token");
  } else if (peak <= 0) {
    add("mfu", false, absl::StrCat("GPU '", spec.gpu, "' is not in the catalog: its peak is unknown"));
  } else {
    add("mfu", true,
        absl::StrFormat("no timed step may be faster than %.3g model FLOPs at %d x %.3g FLOP/s "
                        "(%.4g s: 100%% MFU)",
                        flops, std::max(1, spec.gpu_count), peak, flops / SpecPeakFlops(spec)));
  }
  return out;
}

}  // namespace infrarsi
