#include "core/agent_report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "core/trial_status.h"

namespace infrarsi {
namespace {

absl::Status Bad(const std::string& field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool Finite(double v) { return std::isfinite(v); }

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// Bitwise equality, so that a resent NaN loss equals itself.
bool Same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool SameRecord(const storage::StepRecord& a, const storage::StepRecord& b) {
  return a.step == b.step && Same(a.loss, b.loss) && a.tokens == b.tokens &&
         Same(a.step_time_s, b.step_time_s) && Same(a.peak_mem_gib, b.peak_mem_gib) &&
         a.warmup == b.warmup && a.phases == b.phases && a.extra == b.extra;
}

absl::Status CheckStep(const v1::StepMetrics& m, const std::string& f, const ReportLimits& limits) {
  if (m.step() < 0 || m.step() > 1000000000) {
    return Bad(f + ".step", absl::StrCat("must be in [0, 1e9], got ", m.step()));
  }
  if (Finite(m.loss()) && std::fabs(m.loss()) > kMaxAbsLoss) {
    return Bad(f + ".loss", absl::StrCat("a finite loss must be within +-", Num(kMaxAbsLoss),
                                         ", got ", Num(m.loss())));
  }
  if (m.tokens() < 0 || m.tokens() > kMaxTokensPerStep) {
    return Bad(f + ".tokens", absl::StrCat("must be in [0, 2^40], got ", m.tokens()));
  }
  const double t = m.step_time_s();
  const bool untimed_warmup = m.warmup() && t == 0;  // a warm-up line need not time itself
  if (!untimed_warmup && !(Finite(t) && t >= kMinStepTimeS && t <= kMaxStepTimeS)) {
    return Bad(f + ".step_time_s", absl::StrCat("must be a finite number of seconds in [",
                                                Num(kMinStepTimeS), ", ", Num(kMaxStepTimeS),
                                                "], got ", Num(t)));
  }
  if (!(Finite(m.peak_mem_gib()) && m.peak_mem_gib() >= 0 &&
        m.peak_mem_gib() <= limits.max_peak_mem_gib)) {
    return Bad(f + ".peak_mem_gib",
               absl::StrCat("must be in [0, ", Num(limits.max_peak_mem_gib),
                            "] GiB (the device's capacity with margin), got ",
                            Num(m.peak_mem_gib())));
  }
  if (m.phases_size() > 32) return Bad(f + ".phases", "at most 32 phases");
  for (const auto& [name, secs] : m.phases()) {
    bool ok_name = !name.empty() && name.size() <= 64;
    for (char c : name) ok_name = ok_name && (absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '-');
    if (!ok_name) return Bad(f + ".phases", "names are 1-64 letters, digits, '_', '.' or '-'");
    if (!(Finite(secs) && secs >= 0 && secs <= kMaxStepTimeS)) {
      return Bad(absl::StrCat(f, ".phases.", name),
                 absl::StrCat("must be a finite number of seconds >= 0, got ", Num(secs)));
    }
  }
  if (m.dtype().size() > 32) return Bad(f + ".dtype", "at most 32 characters");
  for (char c : m.dtype()) {
    if (!absl::ascii_isgraph(c)) return Bad(f + ".dtype", "printable characters only");
  }
  if (m.has_optimizer_steps() && (m.optimizer_steps() < 0 || m.optimizer_steps() > 1000000)) {
    return Bad(f + ".optimizer_steps", absl::StrCat("must be in [0, 1e6], got ", m.optimizer_steps()));
  }
  if (limits.agent_clock) {
    const double a = m.arrival_s();
    if (!(Finite(a) && a > 0 && a <= kMaxStepTimeS)) {
      return Bad(f + ".arrival_s",
                 absl::StrCat("the agent's clock must time every line of a process trial "
                              "(seconds since the process started, > 0), got ",
                              Num(a)));
    }
    const double err = m.arrival_error_s();
    if (!(Finite(err) && err > 0 && err <= kMaxPollIntervalS)) {
      return Bad(f + ".arrival_error_s",
                 absl::StrCat("must be in (0, ", Num(kMaxPollIntervalS), "] s, got ", Num(err)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MaxStepsPerTrial(int steps_per_run, int contract_timed_steps) {
  if (steps_per_run > 0) return std::min<int64_t>(kMaxStepsPerTrial, 10 * int64_t{steps_per_run});
  if (contract_timed_steps > 0) {
    return std::min<int64_t>(kMaxStepsPerTrial, 10 * (int64_t{contract_timed_steps} + 10));
  }
  return kMaxStepsPerTrial;
}

int64_t FirstStepOf(const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps) {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& m : steps) first = std::min(first, m.step());
  return first;
}

absl::StatusOr<std::vector<storage::StepRecord>> ValidateSteps(
    int64_t trial_id, const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps,
    const std::vector<storage::StepRecord>& stored, const ReportLimits& limits,
    const std::string& prefix) {
  return ValidateStepsOnTail(
      trial_id, steps, storage::Storage::StepTail{stored, static_cast<int64_t>(stored.size())},
      limits, prefix);
}

absl::StatusOr<std::vector<storage::StepRecord>> ValidateStepsOnTail(
    int64_t trial_id, const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps,
    const storage::Storage::StepTail& tail, const ReportLimits& limits,
    const std::string& prefix) {
  const std::vector<storage::StepRecord>& stored = tail.steps;
  std::map<int64_t, const storage::StepRecord*> by_step;
  for (const auto& r : stored) by_step[r.step] = &r;
  int64_t last = stored.empty() ? -1 : stored.back().step;
  // Stored steps passed this check: warm-up came first and arrivals only
  // grew, so the last stored step says both.
  bool timed_seen = !stored.empty() && !stored.back().warmup;
  double last_arrival = stored.empty() ? 0 : EvidenceOf(stored.back()).arrival_s;
  std::vector<storage::StepRecord> fresh;
  for (int i = 0; i < steps.size(); ++i) {
    const v1::StepMetrics& m = steps.Get(i);
    const std::string f = absl::StrCat(prefix, "[", i, "]");
    RETURN_IF_ERROR(CheckStep(m, f, limits));
    storage::StepRecord rec = StepRecordOf(trial_id, m, limits.agent_clock);
    if (m.step() <= last) {
      auto it = by_step.find(m.step());
      if (it != by_step.end() && SameRecord(*it->second, rec) && fresh.empty()) {
        continue;  // a resend of what is stored: harmless
      }
      return Bad(f + ".step",
                 it != by_step.end()
                     ? absl::StrCat("step ", m.step(), " was already reported with other values")
                     : absl::StrCat("step ", m.step(), " comes after step ", last,
                                    ": steps must be reported in order, without duplicates"));
    }
    if (m.warmup() && timed_seen) {
      return Bad(f + ".warmup",
                 absl::StrCat("warm-up step ", m.step(), " after a timed step: warm-up comes first"));
    }
    if (limits.agent_clock && m.arrival_s() < last_arrival) {
      return Bad(f + ".arrival_s", absl::StrCat("line of step ", m.step(), " arrived at ",
                                                Num(m.arrival_s()), " s, before the previous line (",
                                                Num(last_arrival), " s)"));
    }
    if (tail.count + static_cast<int64_t>(fresh.size()) >= limits.max_steps) {
      return Bad(prefix, absl::StrCat("trial ", trial_id, " may report at most ", limits.max_steps,
                                      " metrics lines (10x a baseline run's, at most ",
                                      kMaxStepsPerTrial, ")"));
    }
    timed_seen = timed_seen || !m.warmup();
    last = m.step();
    last_arrival = limits.agent_clock ? m.arrival_s() : 0;
    fresh.push_back(std::move(rec));
  }
  return fresh;
}

absl::Status ValidateOutcome(const v1::TrialOutcome& o,
                             const std::vector<storage::StepRecord>& all_steps,
                             const ReportLimits& limits) {
  if (!(Finite(o.wall_s()) && o.wall_s() >= 0 && o.wall_s() <= kMaxStepTimeS * 10)) {
    return Bad("outcome.wall_s", absl::StrCat("must be a finite number of seconds >= 0, got ",
                                              Num(o.wall_s())));
  }
  // An out-of-memory trial may state what it needed (a simulator knows),
  // which is past the capacity by definition; anything else fits on it.
  const double max_peak = o.status() == trial_status::kOom ? kMaxOomPeakGib : limits.max_peak_mem_gib;
  if (!(Finite(o.peak_mem_gib()) && o.peak_mem_gib() >= 0 && o.peak_mem_gib() <= max_peak)) {
    return Bad("outcome.peak_mem_gib",
               absl::StrCat("must be in [0, ", Num(max_peak), "] GiB (",
                            o.status() == trial_status::kOom ? "what an out-of-memory trial needed"
                                                : "the device's capacity with margin",
                            "), got ", Num(o.peak_mem_gib())));
  }
  if (o.protected_changed_size() > 1000) return Bad("outcome.protected_changed", "at most 1000 paths");
  if (!limits.agent_clock) {
    if (!o.clock().empty() && o.clock() != "simulated") {
      return Bad("outcome.clock", absl::StrCat("this session's executor is simulated; got '",
                                               o.clock(), "'"));
    }
    return absl::OkStatus();
  }
  // A process that never reported a step (it failed to start, say) has
  // nothing for the clock to confirm.
  if (all_steps.empty() && o.status() != "ok" && o.clock().empty()) return absl::OkStatus();
  if (o.clock() != "agent") {
    return Bad("outcome.clock",
               absl::StrCat("this session's trials run a real process, which the agent's clock "
                            "must time; got '",
                            o.clock(), "'"));
  }
  if (!(Finite(o.poll_interval_s()) && o.poll_interval_s() > 0 &&
        o.poll_interval_s() <= kMaxPollIntervalS)) {
    return Bad("outcome.poll_interval_s",
               absl::StrCat("must be in (0, ", Num(kMaxPollIntervalS), "] s, got ",
                            Num(o.poll_interval_s())));
  }
  if (limits.max_wall_s > 0 && o.wall_s() > limits.max_wall_s) {
    return Bad("outcome.wall_s", absl::StrFormat(
                                     "the trial was leased %.3f s ago by the server's clock; it "
                                     "cannot have run %.3f s",
                                     limits.max_wall_s, o.wall_s()));
  }
  double last_arrival = 0;
  for (const auto& r : all_steps) last_arrival = std::max(last_arrival, EvidenceOf(r).arrival_s);
  if (last_arrival > o.wall_s() + o.poll_interval_s()) {
    return Bad("outcome.wall_s",
               absl::StrFormat("the process ended at %.6f s but its last line arrived at %.6f s",
                               o.wall_s(), last_arrival));
  }
  // Never a cheat's lever: a wider resolution only makes the verification
  // surer of less (core/doctor.h, JudgeCandidate). Bounded all the same.
  if (!(Finite(o.wall_resolution_s()) && o.wall_resolution_s() >= 0 &&
        o.wall_resolution_s() <= o.wall_s())) {
    return Bad("outcome.wall_resolution_s",
               absl::StrCat("must be in [0, wall_s = ", Num(o.wall_s()), "] s, got ",
                            Num(o.wall_resolution_s())));
  }
  return absl::OkStatus();
}

storage::StepRecord StepRecordOf(int64_t trial_id, const v1::StepMetrics& m, bool agent_clock) {
  storage::StepRecord sr;
  sr.trial_id = trial_id;
  sr.step = m.step();
  sr.loss = m.loss();
  sr.tokens = m.tokens();
  sr.step_time_s = m.step_time_s();
  sr.peak_mem_gib = m.peak_mem_gib();
  sr.warmup = m.warmup();
  // Stored compactly: six significant digits (a microsecond in a second,
  // all a phase profile resolves) and no zero-valued phases (a missing
  // phase reads as zero). Per-step phases were 45% of the database.
  std::map<std::string, double> phases;
  for (const auto& [name, secs] : m.phases()) {
    if (secs != 0) phases[name] = secs;
  }
  sr.phases = EncodeDoubleMapJson(phases, /*digits=*/6);
  StepEvidence e;
  e.optimizer_steps = m.has_optimizer_steps() ? m.optimizer_steps() : -1;
  e.arrival_s = agent_clock ? m.arrival_s() : 0;
  e.arrival_error_s = agent_clock ? m.arrival_error_s() : 0;
  if (m.has_data_seed()) e.data_seed = m.data_seed();
  e.dtype = m.dtype();
  sr.extra = EncodeStepExtra(e);
  return sr;
}

StepEvidence EvidenceOf(const storage::StepRecord& r) {
  StepEvidence e;
  e.step = r.step;
  e.warmup = r.warmup;
  e.loss = r.loss;
  e.tokens = r.tokens;
  e.step_time_s = r.step_time_s;
  DecodeStepExtra(r.extra, &e);
  return e;
}

TrialEvidence EvidenceOfTrial(const std::vector<storage::StepRecord>& steps, double wall_s,
                              bool agent_clock, double poll_interval_s) {
  TrialEvidence e;
  for (const auto& r : steps) e.steps.push_back(EvidenceOf(r));
  e.wall_s = wall_s;
  e.agent_clock = agent_clock;
  e.poll_interval_s = poll_interval_s;
  return e;
}

TrialEvidence EvidenceOfOutcome(const v1::TrialOutcome& o) {
  const bool agent = o.clock() == "agent";
  std::vector<storage::StepRecord> steps;
  for (const auto& m : o.steps()) steps.push_back(StepRecordOf(0, m, agent));
  TrialEvidence e = EvidenceOfTrial(steps, o.wall_s(), agent, o.poll_interval_s());
  e.protected_changed.assign(o.protected_changed().begin(), o.protected_changed().end());
  return e;
}

}  // namespace infrarsi
