// A trial's statuses and purposes, as stored and as the API shows them, and
// the rules about them that more than one part needs (written once here).
#ifndef INFRARSI_CORE_TRIAL_STATUS_H_
#define INFRARSI_CORE_TRIAL_STATUS_H_

#include <string>

namespace infrarsi {

namespace trial_status {
inline constexpr char kQueued[] = "queued";
inline constexpr char kLeased[] = "leased";
inline constexpr char kRunning[] = "running";
inline constexpr char kOk[] = "ok";
inline constexpr char kOom[] = "oom";
inline constexpr char kFailed[] = "failed";
inline constexpr char kTimeout[] = "timeout";
inline constexpr char kViolation[] = "violation";
inline constexpr char kCancelled[] = "cancelled";
// A search trial the server stopped early: its timed steps already showed,
// with confidence, that it is slower than the best known by more than the
// noise floor. Its step time is the median of the steps it ran; it counts
// in the cost, is never promoted and never run again as is.
inline constexpr char kPruned[] = "pruned";
// Not a trial status: a bank entry's, for a search trial whose timed-window
// gain its verification could not confirm over the whole run (too few runs
// to call it a violation). Other sessions are not seeded from it as ok.
inline constexpr char kUnconfirmed[] = "unconfirmed";
// Not a trial status: an agent's answer when its policy does not let it run
// a trial (the trial goes back to the queue for another agent).
inline constexpr char kRefused[] = "refused";
// Not a trial status either: the infrastructure failed the trial (a node
// failure, a preemption, the agent shutting down its Slurm job); it runs
// again, not held against its setting.
inline constexpr char kInfra[] = "infra";
}  // namespace trial_status

// Why a trial was run (storage::TrialRecord::purpose).
namespace trial_purpose {
inline constexpr char kDoctor[] = "doctor";  // a baseline run of the doctor
inline constexpr char kSearch[] = "search";  // a setting the search proposed
inline constexpr char kVerify[] = "verify";  // an A/B re-run of the verification
}  // namespace trial_purpose

// Queued, leased or running: not finished yet.
inline bool IsInFlightStatus(const std::string& status) {
  return status == trial_status::kQueued || status == trial_status::kLeased ||
         status == trial_status::kRunning;
}

// Leased or running: an agent holds it.
inline bool IsLeasedStatus(const std::string& status) {
  return status == trial_status::kLeased || status == trial_status::kRunning;
}

// A finished trial's status that may be its host's fault (it failed or ran
// out of time), where the setting itself may be fine: the evidence of a
// broken host, and what the agents' "failed" counts show. An OOM, a
// contract violation or a cancel is the setting's (or the team's) doing.
inline bool IsHostFailureStatus(const std::string& status) {
  return status == trial_status::kFailed || status == trial_status::kTimeout;
}

// One of the outcomes an agent may report (TrialOutcome.status).
inline bool IsAgentOutcome(const std::string& status) {
  return status == trial_status::kOk || status == trial_status::kOom ||
         status == trial_status::kFailed || status == trial_status::kTimeout ||
         status == trial_status::kRefused || status == trial_status::kInfra;
}

}  // namespace infrarsi

#endif  // INFRARSI_CORE_TRIAL_STATUS_H_
