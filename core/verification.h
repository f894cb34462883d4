// Verification: the A/B re-runs that stand between a search's fastest
// settings and a promotion.
//
// Pure logic: PlanVerification says which re-runs to queue once a search
// ends; DecideVerification judges them once they have all finished. The
// session manager writes what these return (trials, the session's stage and
// record) in one transaction; nothing here reads or writes storage.
//
// Thread safety: free functions over their arguments.
#ifndef INFRARSI_CORE_VERIFICATION_H_
#define INFRARSI_CORE_VERIFICATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

struct VerificationPlan {
  // The candidates (rank, search trial, setting, agent), or, with no
  // candidate, the summary saying why.
  v1::Verification verification;
  // The re-runs to queue: for each candidate, spec.verify.runs pairs of
  // baseline and candidate in a seeded random order, both arms pinned to
  // the host that measured the candidate. Empty: nothing to verify.
  std::vector<storage::TrialRecord> runs;
};

// `trials`: the session's (search trials that beat `baseline_step_time_s`
// are the candidates, the fastest spec.verify.candidates of them).
absl::StatusOr<VerificationPlan> PlanVerification(const SessionSpec& spec,
                                                  const std::string& session_id,
                                                  double baseline_step_time_s,
                                                  const v1::DoctorReport& doctor,
                                                  const std::string& search_stop,
                                                  const std::vector<storage::TrialRecord>& trials,
                                                  int64_t now_ms);

struct VerificationDecision {
  // False while any verify run is still queued or running: nothing decided.
  bool done = false;
  // The plan's candidates with their verdicts, the promoted rank (0: none)
  // and the summary.
  v1::Verification verification;
  // Trials (search and verify runs of candidates) whose own numbers cannot
  // be true: they become violations "implausible" with this error, and
  // leave the bank's results with them.
  struct Implausible {
    int64_t trial_id = 0;
    std::string error;
  };
  std::vector<Implausible> implausible;
  // Search trials (then their clean verify runs) of candidates whose
  // timed-window gain verification could not confirm over the whole run
  // (CandidateVerdict::unconfirmed), or one of whose reruns broke the
  // contract: they stay ok in their session, but the bank no longer offers
  // them to other sessions as fast results (bank status "unconfirmed").
  std::vector<int64_t> unconfirmed;
  int64_t promoted_trial_id = 0;  // the promoted candidate's search trial
  // Not empty: no verdict yet. Nothing cleared, and candidates whose pairs
  // spread as only a busier host's do (CandidateVerdict::host_noisier) get
  // another round: these fresh pairs, numbered after their last, to queue.
  // `verification` is then the plan for that round (its `round` one more,
  // each such candidate's `first_run` and `earlier_reason` set); the
  // implausible trials above are final, and `unconfirmed` leaves out the
  // re-verified candidates (their fresh pairs decide).
  std::vector<storage::TrialRecord> retry_runs;
};

// Judges `plan` (the session's stored verification) against its runs among
// `trials`, by the doctor's noise floor and the integrity rules
// (core/doctor.h JudgeCandidate). Each candidate is judged on the pairs of
// its latest round only (from its `first_run`); a round of fresh pairs
// follows a busier host's at most spec.verify.busier_retries times, so a
// candidate that is no faster gets at most that many more chances to clear.
VerificationDecision DecideVerification(const SessionSpec& spec, const v1::DoctorReport& doctor,
                                        const v1::Verification& plan,
                                        const std::vector<storage::TrialRecord>& trials,
                                        int64_t now_ms);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_VERIFICATION_H_
