#include "core/doctor_verdict.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/agent_report.h"
#include "core/contract.h"
#include "core/doctor.h"
#include "core/trial_status.h"
#include "models/stats.h"

namespace infrarsi {

namespace ts = trial_status;

std::vector<int64_t> DoctorRunsToRead(const std::vector<storage::TrialRecord>& trials,
                                      bool* done) {
  std::vector<int64_t> out;
  *done = true;
  for (const auto& t : trials) {
    if (t.purpose != trial_purpose::kDoctor) continue;
    if (IsInFlightStatus(t.status)) {
      *done = false;
      return {};
    }
    if (t.status == ts::kOk) out.push_back(t.id);
  }
  return out;
}

namespace {

// An error with its numbers as '#': the same failure on two trials differs
// in trial ids, attempts and scratch paths.
std::string Signature(const storage::TrialRecord& t) {
  std::string out = t.status + ":";
  bool in_number = false;
  for (char c : t.error) {
    const bool digit = c >= '0' && c <= '9';
    if (digit && in_number) continue;
    out += digit ? '#' : c;
    in_number = digit;
  }
  return out;
}

}  // namespace

std::string RepeatedDoctorFailure(const std::vector<storage::TrialRecord>& trials) {
  std::vector<const storage::TrialRecord*> failed;
  int pending = 0;
  for (const auto& t : trials) {
    if (t.purpose != trial_purpose::kDoctor) continue;
    if (IsInFlightStatus(t.status)) {
      ++pending;
      continue;
    }
    if (t.status == ts::kOk) return "";  // a baseline ran: the doctor goes on
    if (t.status != ts::kCancelled) failed.push_back(&t);
  }
  if (failed.size() < 2 || Signature(*failed[0]) != Signature(*failed[1])) return "";
  return absl::StrCat("stopped early: the first two baseline runs failed the same way (trials ",
                      failed[0]->id, " and ", failed[1]->id, ", ", failed[0]->status, ")",
                      pending > 0 ? absl::StrCat("; ", pending, " more not run") : "");
}

DoctorVerdict JudgeDoctor(const SessionSpec& spec, const std::vector<storage::TrialRecord>& trials,
                          const std::map<int64_t, std::vector<storage::StepRecord>>& steps_of) {
  DoctorVerdict v;
  std::vector<DoctorRun> runs;
  std::map<std::string, int> statuses;
  std::set<std::string> fields;
  int timed_steps = 0;
  const storage::TrialRecord* violated = nullptr;
  const storage::TrialRecord* first_lost = nullptr;  // the first run that did not finish ok
  int doctor_runs = 0;
  static const std::vector<storage::StepRecord> kNone;
  for (const auto& t : trials) {
    if (t.purpose != trial_purpose::kDoctor) continue;
    if (IsInFlightStatus(t.status)) return v;  // not done yet
    ++doctor_runs;
    ++statuses[t.status];
    if (t.status == ts::kViolation && violated == nullptr) violated = &t;
    if (t.status != ts::kOk && t.status != ts::kCancelled && first_lost == nullptr) first_lost = &t;
    if (t.status != ts::kOk) continue;
    auto found = steps_of.find(t.id);
    const std::vector<storage::StepRecord>& steps = found == steps_of.end() ? kNone : found->second;
    DoctorRun run;
    run.agent = t.agent;
    run.step_time_s = t.step_time_s;
    run.steps = static_cast<int>(steps.size());
    if (t.observed_steps > 0) {
      // The agent's clock: its figures were derived when the trial ended.
      run.window_s = t.observed_window_s;
      run.agent_step_time_s = t.observed_window_s / t.observed_steps;
      run.clock_slack_s = t.clock_slack_s;
      const TrialEvidence e = EvidenceOfTrial(steps, t.cost_s, /*agent_clock=*/true, 0);
      run.tail_s = TimeOnAgentClock(e).tail_s;
    }
    std::map<std::string, std::vector<double>> phases;
    for (const auto& sr : steps) {
      run.losses[sr.step] = sr.loss;
      const StepEvidence e = EvidenceOf(sr);
      if (e.data_seed) fields.insert("data_seed");
      if (!e.dtype.empty()) fields.insert("dtype");
      if (e.optimizer_steps >= 0) fields.insert("optimizer_steps");
      if (sr.warmup) continue;
      auto ph = DecodeDoubleMapJson(sr.phases);
      if (ph.ok() && !ph->empty()) fields.insert("phases");
      if (ph.ok()) {
        for (const auto& [name, secs] : *ph) phases[name].push_back(secs);
      }
    }
    size_t timed = 0;
    for (const auto& sr : steps) timed += !sr.warmup;
    for (auto& [name, times] : phases) {
      times.resize(std::max(times.size(), timed), 0.0);  // a phase left out of a step took no time
      run.phases[name] = models::Median(times);
    }
    if (runs.empty()) timed_steps = static_cast<int>(timed);
    runs.push_back(std::move(run));
  }
  v.done = true;
  if (violated != nullptr && violated->violation == "instrumentation") {
    v.failure = absl::StrCat("doctor: the baseline's metrics lines lack what the contract needs (",
                             violated->error, "); the workload cannot be verified");
    return v;
  }
  if (violated != nullptr) {
    v.failure = absl::StrCat("doctor: the baseline itself breaks the contract (",
                             violated->violation, "): ", violated->error);
    return v;
  }
  // Runs that did not finish ok, said with the first one's error and host.
  auto lost = [&] {
    return absl::StrCat(
        "(", absl::StrJoin(statuses, ", ", absl::PairFormatter("=")), "); the first, trial ",
        first_lost->id, " on agent ", first_lost->agent.empty() ? "?" : first_lost->agent, ": ",
        first_lost->error.empty() ? first_lost->status : first_lost->error);
  };
  if (runs.empty()) {
    v.failure = first_lost != nullptr
                    ? absl::StrCat("doctor: no baseline run succeeded ", lost())
                    : absl::StrCat("doctor: no baseline run succeeded (",
                                   absl::StrJoin(statuses, ", ", absl::PairFormatter("=")), ")");
    return v;
  }
  // Instrumentation: the contract can only be checked on what is reported.
  std::vector<std::string> missing;
  if (spec.contract.data_seed_set && !fields.count("data_seed")) missing.push_back("data_seed");
  if (spec.contract.optimizer_in_window && !fields.count("optimizer_steps")) {
    missing.push_back("optimizer_steps");
  }
  if (!missing.empty()) {
    v.failure = absl::StrCat("doctor: the baseline's metrics lines lack ",
                             absl::StrJoin(missing, ", "),
                             ", which the contract needs; the workload cannot be verified");
    return v;
  }
  v1::DoctorReport report = BuildDoctorReport(runs, spec.verify.runs);
  report.set_timed_steps(timed_steps);
  for (const char* f : {"step", "loss", "tokens", "step_time_s", "peak_mem_gib"}) fields.insert(f);
  for (const auto& f : fields) report.add_fields_seen(f);
  // Honest repeats of the baseline must agree within the loss tolerance, or
  // no trial can be judged against them.
  const ContractSpec& c = spec.contract;
  double worst = 0, worst_tol = 0;
  for (const DoctorRun& run : runs) {
    for (const auto& [step, loss] : run.losses) {
      if (step < 0 || step >= report.reference_losses_size()) continue;
      const double ref = report.reference_losses(static_cast<int>(step));
      const double tol = c.loss_abs_tol + c.loss_rel_tol * std::fabs(ref);
      if (std::fabs(loss - ref) - tol > worst - worst_tol) {
        worst = std::fabs(loss - ref);
        worst_tol = tol;
      }
    }
  }
  if (worst > worst_tol) {
    v.failure = absl::StrFormat(
        "doctor: baseline runs disagree on the loss by %.3g, more than the tolerance %.3g: "
        "the workload is not deterministic enough to verify (fix its seeds or loosen "
        "contract.loss_abs_tol)",
        worst, worst_tol);
    return v;
  }
  if (first_lost != nullptr) {
    report.set_warning(absl::StrCat(report.warning(), report.warning().empty() ? "" : "; ",
                                    doctor_runs - static_cast<int>(runs.size()), " of ",
                                    doctor_runs, " baseline runs were lost ", lost(),
                                    "; the baseline rests on the other ", runs.size()));
  }
  if (std::fabs(report.drift()) > std::max(0.02, 3 * report.cv())) {
    report.set_warning(absl::StrCat(
        report.warning(), report.warning().empty() ? "" : "; ",
        absl::StrFormat("the baseline drifted %.1f%% between the first and last runs",
                        100 * report.drift())));
  }
  v.report = std::move(report);
  return v;
}

}  // namespace infrarsi
