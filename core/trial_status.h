// A trial's statuses, as stored and as the API shows them.
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
// Not a trial status: an agent's answer when its policy does not let it run
// a trial (the trial goes back to the queue for another agent).
inline constexpr char kRefused[] = "refused";
// Not a trial status either: the infrastructure failed the trial (a node
// failure, a preemption, the agent shutting down its Slurm job); it runs
// again, not held against its setting.
inline constexpr char kInfra[] = "infra";
}  // namespace trial_status

// Queued, leased or running: not finished yet.
inline bool IsInFlightStatus(const std::string& status) {
  return status == trial_status::kQueued || status == trial_status::kLeased ||
         status == trial_status::kRunning;
}

}  // namespace infrarsi

#endif  // INFRARSI_CORE_TRIAL_STATUS_H_
