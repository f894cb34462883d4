#include "core/trial_rules.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/agent_report.h"
#include "core/trial_status.h"
#include "models/stats.h"

namespace infrarsi {

namespace ts = trial_status;

namespace {

Disposition Requeue(std::string note, bool refund_attempt, bool unpin) {
  Disposition d;
  d.kind = Disposition::Kind::kRequeue;
  d.note = std::move(note);
  d.refund_attempt = refund_attempt;
  d.unpin = unpin;
  return d;
}

Disposition Finish(std::string status, std::string error) {
  Disposition d;
  d.kind = Disposition::Kind::kFinish;
  d.status = std::move(status);
  d.error = std::move(error);
  return d;
}

}  // namespace

Disposition DecideRefusal(const storage::TrialRecord& t, const std::string& why,
                          bool another_may_run, int max_attempts) {
  const std::string reason = absl::StrCat(
      "agent ", t.lease_agent, " refused it: ",
      why.empty() ? std::string("its policy") : why.substr(0, kMaxReportTextBytes));
  if (!another_may_run || t.attempts >= max_attempts) {
    return Finish(ts::kFailed,
                  absl::StrCat("refused: ", reason,
                               another_may_run ? ""
                                               : "; no other live agent may run it under its "
                                                 "policy"));
  }
  return Requeue(reason, /*refund_attempt=*/false, /*unpin=*/true);
}

Disposition DecideInfraFailure(const storage::TrialRecord& t, const std::string& error,
                               double reported_wall_s, int64_t now_ms, int max_attempts) {
  const std::string why = absl::StrCat(
      "infrastructure: ", error.empty() ? std::string("the agent's infrastructure failed it")
                                        : error.substr(0, kMaxReportTextBytes));
  // Spent all the same; never more than the server's own clock allows since
  // the lease (an agent's word must not spend another session's budget).
  double wall =
      std::isfinite(reported_wall_s) ? std::clamp(reported_wall_s, 0.0, 365 * 86400.0) : 0;
  if (t.leased_ms > 0) {
    wall = std::min(wall, 1.02 * static_cast<double>(now_ms - t.leased_ms) / 1000.0 + 5.0);
  }
  if (t.attempts < max_attempts) {
    // Not the setting's fault: it runs again (elsewhere, if the agent is
    // broken), and nothing of this attempt is learnt from.
    Disposition d = Requeue(absl::StrCat(why, "; re-queued"), /*refund_attempt=*/false,
                            /*unpin=*/true);
    d.lost_s = wall;
    return d;
  }
  Disposition d = Finish(ts::kFailed, absl::StrCat(why, " (", t.attempts, " attempts)"));
  d.cost_s = wall;
  return d;
}

Disposition DecideExpiry(const storage::TrialRecord& t, int max_attempts) {
  if (t.attempts >= max_attempts) {
    return Finish(ts::kFailed, absl::StrCat("lease expired ", t.attempts, " times (last agent ",
                                            t.lease_agent, " stopped reporting)"));
  }
  // The pinned host just failed it: any host may take it.
  return Requeue(absl::StrCat("lease of agent ", t.lease_agent, " expired at attempt ", t.attempts,
                              "; re-queued"),
                 /*refund_attempt=*/false, /*unpin=*/true);
}

Disposition DecideAbandoned(const storage::TrialRecord& t, const std::string& why) {
  return Requeue(absl::StrCat("agent ", t.lease_agent, " ", why, "; re-queued"),
                 /*refund_attempt=*/t.status == ts::kLeased, /*unpin=*/true);
}

Disposition DecideUndelivered(const storage::TrialRecord& t) {
  return Requeue(
      absl::StrCat("the poll of agent ", t.lease_agent, " that took it had gone; re-queued"),
      /*refund_attempt=*/true, /*unpin=*/false);
}

ReportedFinish JudgeReportedFinish(const std::string& status,
                                   const std::vector<storage::StepRecord>& steps,
                                   double reported_peak_mem_gib, int expected_timed_steps) {
  ReportedFinish out;
  out.status = status;
  std::vector<double> timed;
  out.peak_mem_gib = reported_peak_mem_gib;
  for (const auto& sr : steps) {
    if (!sr.warmup) timed.push_back(sr.step_time_s);
    out.peak_mem_gib = std::max(out.peak_mem_gib, sr.peak_mem_gib);
  }
  if (status != ts::kOk) return out;
  if (timed.empty() && expected_timed_steps > 0) {
    // "ok" without one timed line is the contract's missing-lines case (a
    // process that exits before its pacing thread wrote them), not a crash.
    out.status = ts::kViolation;
    out.violation = "timed_steps";
    out.error = absl::StrCat("timed_steps: reported 0 timed steps, the contract says ",
                             expected_timed_steps);
  } else if (timed.empty()) {
    out.status = ts::kFailed;
    out.error = "no timed steps reported";
  } else {
    out.step_time_s = models::Median(timed);
  }
  return out;
}

double DeclaredCapacityGib(const SessionSpec& spec) {
  switch (spec.executor_kind) {
    case SessionSpec::ExecutorKind::kReplay: return spec.replay.capacity_gib;
    case SessionSpec::ExecutorKind::kSim: return spec.sim.cluster.gpu.memory_gib;
    default: return 0;
  }
}

PruneVerdict JudgePrune(const std::vector<storage::StepRecord>& steps, double incumbent_s,
                        double noise_floor, int expected_timed_steps, double capacity_gib) {
  PruneVerdict v;
  if (capacity_gib > 0) {
    for (const storage::StepRecord& s : steps) {
      if (!(s.peak_mem_gib > capacity_gib)) continue;  // NaN never prunes
      v.prune = v.memory = true;
      v.peak_mem_gib = s.peak_mem_gib;
      std::vector<double> timed;
      for (const storage::StepRecord& t : steps) {
        if (!t.warmup && t.step_time_s > 0 && std::isfinite(t.step_time_s)) timed.push_back(t.step_time_s);
      }
      if (!timed.empty()) v.step_time_s = models::Median(timed);
      v.reason = absl::StrCat("pruned at step ", s.step, ": its peak memory (",
                              absl::StrFormat("%.2f", s.peak_mem_gib), " GiB) is past the device's ",
                              absl::StrFormat("%.2f", capacity_gib), " GiB");
      return v;
    }
  }
  if (!(incumbent_s > 0)) return v;
  std::vector<double> timed;
  for (const storage::StepRecord& s : steps) {
    if (!s.warmup && s.step_time_s > 0 && std::isfinite(s.step_time_s)) timed.push_back(s.step_time_s);
  }
  const int n = static_cast<int>(timed.size());
  if (n < kMinPruneSteps || (expected_timed_steps > 0 && n >= expected_timed_steps)) return v;
  const double margin = 2 * std::max(noise_floor, 0.01);
  const double fastest = *std::min_element(timed.begin(), timed.end());
  if (fastest <= incumbent_s * (1 + margin)) return v;
  v.prune = true;
  v.step_time_s = models::Median(timed);
  v.reason = absl::StrCat(
      "pruned after ", n, expected_timed_steps > 0 ? absl::StrCat(" of ", expected_timed_steps) : "",
      " timed steps: its fastest step (", absl::StrFormat("%.4g", fastest),
      " s) is slower than the best known (", absl::StrFormat("%.4g", incumbent_s), " s) by ",
      absl::StrFormat("%.1f", 100 * (fastest / incumbent_s - 1)), "%, more than twice the noise floor (",
      absl::StrFormat("%.2f", 100 * std::max(noise_floor, 0.01)), "%)");
  return v;
}

}  // namespace infrarsi
