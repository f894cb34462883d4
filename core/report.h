// Report assembly: a session's report (what a reviewer needs to believe a
// promotion, and what the search cost) from a snapshot of the session and
// its trials. Pure: the session manager takes the snapshot under its lock
// and builds the report after letting it go.
//
// Thread safety: free functions over their arguments.
#ifndef INFRARSI_CORE_REPORT_H_
#define INFRARSI_CORE_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/llm_patches.h"
#include "core/optimizer.h"
#include "core/priors.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// One session as the report sees it.
struct ReportInputs {
  storage::SessionRecord rec;
  SessionSpec spec;
  v1::SessionSummary summary;  // the session's summary at the snapshot
  v1::DoctorReport doctor;
  v1::Verification verification;
  int64_t best_trial_id = 0;  // the fastest ok search trial (0: none)
  Config best_config;         // its setting
  // The search's inputs: the priors it used (not owned; null: none) and
  // how many bank seeds and related trials it started from.
  const Priors* priors = nullptr;
  std::string priors_label = "none";
  int warm_starts = 0;
  int related_trials = 0;
  std::string stop_reason;  // why the search stopped early, if it did
  LlmPatchRound llm_round;  // the LLM's patch proposals, if it was asked
};

// The report of `in` with its `trials` (all of the session's, by id);
// `optimizer` names the strategy and explains the knobs' effects.
absl::StatusOr<v1::SessionReport> BuildReport(const ReportInputs& in,
                                              const std::vector<storage::TrialRecord>& trials,
                                              const Optimizer& optimizer);

// A finished session's report rebuilt by a release other than the one it
// finished under (it finished before reports were frozen): whether each
// check ran then is not known, nor the search's strategy, and today's
// memory model's figures are not what that session saw; all are said so
// rather than claimed.
void MarkRecordedBeforeFreezing(v1::SessionReport* rep, const std::string& release);

// A trial as the API shows it.
v1::TrialView TrialViewOf(const storage::TrialRecord& t);

// What the search learns from `trials` (verification re-runs left out: the
// search has their first measurement), and the GPU-seconds all of them cost
// on the spec's GPUs. Settings recorded before a knob existed read as its
// baseline value (FillKnobDefaults).
// SearchHistory (core/search_history.h) keeps it between proposals.
absl::StatusOr<std::vector<Observation>> SearchHistoryOf(
    const SessionSpec& spec, const std::vector<storage::TrialRecord>& trials, double* gpu_seconds);
// What SearchHistoryOf makes of one trial that is not a verification
// re-run, and what each trial adds to its GPU-seconds.
absl::StatusOr<Observation> SearchObservationOf(const SessionSpec& spec, const storage::TrialRecord& t);
double TrialGpuSeconds(const SessionSpec& spec, const storage::TrialRecord& t);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_REPORT_H_
