#include "core/contract.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {

AgentClockTiming TimeOnAgentClock(const TrialEvidence& e) {
  AgentClockTiming t;
  size_t first = e.steps.size();
  for (size_t i = 0; i < e.steps.size(); ++i) {
    if (!e.steps[i].warmup) {
      first = i;
      break;
    }
  }
  if (first == e.steps.size()) {
    t.why_not = "no timed step reported";
    return t;
  }
  for (const StepEvidence& s : e.steps) {
    if (!(s.arrival_s > 0)) {
      t.why_not = absl::StrCat("step ", s.step, " has no arrival time on the agent's clock");
      return t;
    }
  }
  // The window opens when the line before the first timed step arrived;
  // without one, at the first timed line (that step's start is unseen).
  const StepEvidence* opener = first > 0 ? &e.steps[first - 1] : &e.steps[first];
  for (size_t i = first > 0 ? first : 1; i < e.steps.size(); ++i) {
    if (e.steps[i].warmup) continue;
    ++t.window_steps;
    t.reported_s += e.steps[i].step_time_s;
  }
  if (t.window_steps == 0) {
    t.why_not =
        "the only timed step has no metrics line before it, so the agent's clock never saw it "
        "start (report a warm-up step first)";
    return t;
  }
  t.observed_s = e.steps.back().arrival_s - opener->arrival_s;
  auto late = [&](const StepEvidence& s) {
    return s.arrival_error_s > 0 ? s.arrival_error_s : e.poll_interval_s;
  };
  t.slack_s = late(*opener) + late(e.steps.back());
  t.tail_s = std::max(0.0, e.wall_s - e.steps.back().arrival_s);
  t.valid = true;
  return t;
}

TailCharge ChargeForTail(const AgentClockTiming& t, const ContractReference& ref) {
  TailCharge charge;
  if (!t.valid || ref.tail_s < 0 || t.window_steps <= 0) return charge;
  charge.extra_s = std::max(0.0, t.tail_s - ref.tail_s);
  if (charge.extra_s <= 0) return charge;
  charge.step_time_s = (t.observed_s + charge.extra_s) / t.window_steps;
  charge.note = absl::StrFormat(
      "charged %.4f s: the process ran %.4f s after its last metrics line, the baseline at most "
      "%.4f s; work no step reports counts against its step time (%.6f s per timed step)",
      charge.extra_s, t.tail_s, ref.tail_s, charge.step_time_s);
  return charge;
}

std::optional<Violation> CheckContract(const ContractSpec& c, const ContractReference& ref,
                                       const TrialEvidence& e) {
  auto v = [](std::string kind, std::string reason) {
    return std::optional<Violation>(Violation{std::move(kind), std::move(reason)});
  };
  if (!e.protected_changed.empty()) {
    return v("protected_file", absl::StrCat("protected file changed: ",
                                            absl::StrJoin(e.protected_changed, ", ")));
  }
  int timed = 0;
  double reported = 0;
  for (const StepEvidence& s : e.steps) {
    timed += !s.warmup;
    reported += s.step_time_s;
  }
  if (ref.expected_timed_steps > 0 && timed != ref.expected_timed_steps) {
    return v("timed_steps", absl::StrCat("reported ", timed, " timed steps, the contract says ",
                                         ref.expected_timed_steps));
  }
  for (const StepEvidence& s : e.steps) {
    if (s.warmup) continue;
    if (s.tokens != c.tokens_per_step) {
      return v("tokens_per_step",
               absl::StrCat("step ", s.step, " processed ", s.tokens,
                            " tokens, the contract says ", c.tokens_per_step,
                            " per optimizer step"));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!c.data_seed_set) break;
    if (!s.data_seed.has_value()) {
      return v("instrumentation",
               absl::StrCat("step ", s.step, " does not report data_seed, which the contract needs"));
    }
    if (*s.data_seed != c.data_seed) {
      return v("data_seed", absl::StrCat("step ", s.step, " used data seed ", *s.data_seed,
                                         ", the contract says ", c.data_seed));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (c.precision.empty()) break;
    if (s.dtype.empty()) continue;  // only what the harness reports can be checked
    if (!PrecisionAllowed(c.precision, s.dtype)) {
      return v("precision", absl::StrCat("step ", s.step, " ran in ", s.dtype,
                                         ", the contract allows ",
                                         absl::StrJoin(c.precision, ", ")));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!std::isfinite(s.loss)) {
      return v("loss_nan", absl::StrCat("step ", s.step, " loss is ", s.loss));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (s.step < 0 || static_cast<size_t>(s.step) >= ref.losses.size()) continue;
    const double base = ref.losses[static_cast<size_t>(s.step)];
    const double tol = c.loss_abs_tol + c.loss_rel_tol * std::fabs(base);
    const double diff = std::fabs(s.loss - base);
    if (diff > tol) {
      return v("loss", absl::StrFormat(
                           "step %d loss %.6f differs from the baseline's %.6f by %.3g "
                           "(tolerance %.3g)",
                           s.step, s.loss, base, diff, tol));
    }
  }
  // Physics: no step does its model FLOPs faster than the hardware's peak.
  if (ref.flops_per_step > 0 && ref.peak_flops > 0) {
    const double fastest = ref.flops_per_step / ref.peak_flops;
    for (const StepEvidence& s : e.steps) {
      if (s.warmup || s.step_time_s >= fastest) continue;
      return v("impossible",
               absl::StrFormat("step %d reported %.6g s, which implies %.0f%% MFU (%.3g model "
                               "FLOPs per step at a peak of %.3g FLOP/s): physically impossible",
                               s.step, s.step_time_s, 100 * fastest / s.step_time_s,
                               ref.flops_per_step, ref.peak_flops));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!c.optimizer_in_window || s.warmup) continue;
    if (s.optimizer_steps < 0) {
      return v("instrumentation", absl::StrCat("step ", s.step,
                                               " does not report optimizer_steps, which the "
                                               "contract needs"));
    }
    if (s.optimizer_steps != 1) {
      return v("timing", absl::StrCat("step ", s.step, " ran ", s.optimizer_steps,
                                      " optimizer steps inside the timed window (expected 1): "
                                      "the optimizer step was moved outside the timer"));
    }
  }
  if (e.agent_clock) {
    const AgentClockTiming t = TimeOnAgentClock(e);
    if (!t.valid) return v("instrumentation", absl::StrCat("agent's clock: ", t.why_not));
    const double tol = c.timing_tolerance;
    // The tail after the last line is charged (ChargeForTail), never
    // judged here: how long it takes varies without bound on a real host.
    if (t.reported_s < (1.0 - tol) * t.observed_s - t.slack_s) {
      return v("timing",
               absl::StrFormat(
                   "the %d timed steps report %.4f s in total but the agent's clock saw %.4f s "
                   "between the line before the first of them and the last one: the trial "
                   "reports faster than it ran (tolerance %.0f%%, clock resolution %.4f s)",
                   t.window_steps, t.reported_s, t.observed_s, 100 * tol, t.slack_s));
    }
    if (t.observed_s < (1.0 - tol) * t.reported_s - t.slack_s) {
      return v("timing",
               absl::StrFormat("the %d timed steps report %.4f s in total but their metrics "
                               "lines arrived within %.4f s of each other on the agent's clock: "
                               "lines written together (after the work, or by another thread) "
                               "time nothing",
                               t.window_steps, t.reported_s, t.observed_s));
    }
  }
  if (e.wall_s > 0 && reported > e.wall_s * 1.05 + 2 * e.poll_interval_s) {
    return v("timing", absl::StrFormat("steps report %.3f s in total but the trial ran %.3f s",
                                       reported, e.wall_s));
  }
  return std::nullopt;
}

std::optional<Violation> CheckContractSoFar(const ContractSpec& c, ContractReference ref,
                                            TrialEvidence e) {
  ref.expected_timed_steps = 0;
  e.agent_clock = false;
  e.wall_s = 0;
  return CheckContract(c, ref, e);
}

double SpecFlopsPerToken(const SessionSpec& spec) {
  if (spec.flops_per_token > 0) return spec.flops_per_token;
  if (spec.params > 0) return 6 * spec.params;
  if (spec.Executor().simulated) {
    return models::sim::ModelFlopsPerToken(spec.sim.model);
  }
  // Not a real job's declared shape: the textbook's count (attention
  // included) is the simulator's own, and over a real trainer's kernels a
  // count that runs high would call honest steps impossible.
  return 0;
}

double PeakFlopsPerGpu(const SessionSpec& spec) {
  const models::sim::GpuSpec* gpu = models::sim::FindGpu(spec.gpu);
  if (gpu == nullptr) return 0;
  // The precisions trials may run at: the knob's values, the contract's
  // list, the simulator's or the declared shape's fixed setting.
  std::vector<std::string> may;
  if (const Knob* k = spec.FindKnob("precision")) may = k->values;
  if (may.empty()) may = spec.contract.precision;
  if (auto it = spec.sim.fixed.find("precision"); may.empty() && it != spec.sim.fixed.end()) {
    may = {it->second};
  }
  if (spec.shape) {
    if (auto it = spec.shape->fixed.find("precision"); may.empty() && it != spec.shape->fixed.end()) {
      may = {it->second};
    }
  }
  bool fp8 = may.empty();
  for (const std::string& p : may) {
    const std::string lower = absl::AsciiStrToLower(p);
    fp8 = fp8 || absl::StrContains(lower, "fp8") || absl::StrContains(lower, "float8") ||
          absl::StrContains(lower, "e4m3") || absl::StrContains(lower, "e5m2");
  }
  const double tflops = fp8 && gpu->fp8_tflops > 0 ? gpu->fp8_tflops : gpu->bf16_tflops;
  return tflops * 1e12;
}

double SpecFlopsPerStep(const SessionSpec& spec) {
  return SpecFlopsPerToken(spec) * static_cast<double>(spec.contract.tokens_per_step);
}

double SpecPeakFlops(const SessionSpec& spec) {
  return PeakFlopsPerGpu(spec) * std::max(1, spec.gpu_count);
}

std::string EncodeStepExtra(const StepEvidence& s) {
  std::string out = "{";
  absl::StrAppend(&out, "\"optimizer_steps\":", s.optimizer_steps);
  if (s.arrival_s > 0) absl::StrAppendFormat(&out, ",\"arrival_s\":%.17g", s.arrival_s);
  if (s.arrival_error_s > 0) {
    absl::StrAppendFormat(&out, ",\"arrival_error_s\":%.17g", s.arrival_error_s);
  }
  if (s.data_seed) absl::StrAppend(&out, ",\"data_seed\":", *s.data_seed);
  if (!s.dtype.empty()) absl::StrAppend(&out, ",\"dtype\":", JsonQuote(s.dtype));
  return out + "}";
}

void DecodeStepExtra(const std::string& json, StepEvidence* s) {
  google::protobuf::Struct st;
  if (json.empty() || !google::protobuf::util::JsonStringToMessage(json, &st).ok()) return;
  const auto& f = st.fields();
  if (auto it = f.find("optimizer_steps"); it != f.end()) {
    s->optimizer_steps = static_cast<int>(it->second.number_value());
  }
  if (auto it = f.find("arrival_s"); it != f.end()) s->arrival_s = it->second.number_value();
  if (auto it = f.find("arrival_error_s"); it != f.end()) {
    s->arrival_error_s = it->second.number_value();
  }
  if (auto it = f.find("data_seed"); it != f.end()) {
    s->data_seed = static_cast<int64_t>(it->second.number_value());
  }
  if (auto it = f.find("dtype"); it != f.end()) s->dtype = it->second.string_value();
}

v1::Contract ContractProtoOf(const SessionSpec& spec, const std::string& hash) {
  const ContractSpec& c = spec.contract;
  v1::Contract p;
  p.set_hash(hash);
  p.set_workload_signature(spec.WorkloadSignature());
  p.set_tokens_per_step(c.tokens_per_step);
  p.set_timed_steps(c.timed_steps);
  p.set_data_seed_set(c.data_seed_set);
  p.set_data_seed(c.data_seed);
  p.set_loss_abs_tol(c.loss_abs_tol);
  p.set_loss_rel_tol(c.loss_rel_tol);
  p.set_timing_tolerance(c.timing_tolerance);
  for (const auto& x : c.precision) p.add_precision(x);
  p.set_optimizer_in_window(c.optimizer_in_window);
  for (const auto& x : c.editable) p.add_editable(x);
  for (const auto& x : c.protected_files) p.add_protected_files(x);
  for (const auto& [k, v] : c.protected_hashes) (*p.mutable_protected_hashes())[k] = v;
  for (const auto& patch : spec.patches) p.add_patches(patch.name);
  // The name a reader knows it by (a URL may carry credentials).
  p.set_repository(spec.repository.name.empty() ? spec.repository.url : spec.repository.name);
  p.set_base_commit(spec.repository.base_commit);
  for (const auto& [a, b] : spec.patch_conflicts) p.add_patch_conflicts(absl::StrCat(a, "+", b));
  for (const auto& patch : spec.patches) (*p.mutable_patch_diffs())[patch.name] = patch.diff;
  if (spec.executor_kind == SessionSpec::ExecutorKind::kProcess) {
    p.set_metrics_reader(spec.process.metrics.UsesHarness() ? "harness"
                                                            : spec.process.metrics.reader);
  }
  return p;
}

}  // namespace infrarsi
