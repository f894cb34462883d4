// What becomes of a leased trial when something other than a result ends
// its lease (an agent's refusal, an infrastructure failure, an expired or
// abandoned lease, an undelivered lease), and how a reported finish is
// judged from its per-step records. Pure functions over records read
// beforehand: the session manager applies what they decide in one
// transaction, and their tests need no storage.
#ifndef INFRARSI_CORE_TRIAL_RULES_H_
#define INFRARSI_CORE_TRIAL_RULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec.h"
#include "storage/storage.h"

namespace infrarsi {

// A decision about a leased trial.
struct Disposition {
  enum class Kind { kRequeue, kFinish };
  Kind kind = Kind::kRequeue;
  // kRequeue: why (the trial's note); whether the attempt its lease counted
  // is given back; whether any host may take it (else it stays pinned).
  std::string note;
  bool refund_attempt = false;
  bool unpin = true;
  // Wall seconds the attempt spent that count against the session (not the
  // trial's own cost: nothing of the attempt is learnt from).
  double lost_s = 0;
  // kFinish: its final status and error, and the cost charged to it.
  std::string status;
  std::string error;
  double cost_s = 0;
};

// The agent `t.lease_agent`'s policy refused it (`why`, the agent's words,
// maybe empty): another live agent that may run it takes it
// (`another_may_run`), unless its attempts are spent; else it fails.
Disposition DecideRefusal(const storage::TrialRecord& t, const std::string& why,
                          bool another_may_run, int max_attempts);
// The agent's infrastructure failed it (`error`, maybe empty) after
// `reported_wall_s`, which is bounded by the server's own clock since the
// lease (`now_ms`): re-run elsewhere, or failed after `max_attempts`.
Disposition DecideInfraFailure(const storage::TrialRecord& t, const std::string& error,
                               double reported_wall_s, int64_t now_ms, int max_attempts);
// Its lease ran out: re-queued for any host, or failed after max_attempts.
Disposition DecideExpiry(const storage::TrialRecord& t, int max_attempts);
// Its agent let go of it (`why`: "deregistered"): a lease handed back before
// the trial started costs no attempt; one abandoned mid-run does (else
// leasing and leaving could churn a trial forever).
Disposition DecideAbandoned(const storage::TrialRecord& t, const std::string& why);
// The poll that took it had gone before the lease was delivered: no attempt
// counted, and an A/B arm stays pinned to its host.
Disposition DecideUndelivered(const storage::TrialRecord& t);

// What a finish the agent reported as `status` amounts to, from the trial's
// per-step records (`steps`, as stored) and the peak memory it reported:
// the step time that counts is the median timed step computed here, never
// an agent's summary. "ok" without one timed line is a contract violation
// (timed_steps) where the contract expects lines, else a failure.
struct ReportedFinish {
  std::string status;
  std::string violation;  // set with status "violation"
  std::string error;      // set when the status changed
  double step_time_s = 0;
  double peak_mem_gib = 0;
};
ReportedFinish JudgeReportedFinish(const std::string& status,
                                   const std::vector<storage::StepRecord>& steps,
                                   double reported_peak_mem_gib, int expected_timed_steps);

// Whether a search trial still running cannot win: at least
// kMinPruneSteps timed steps so far (and fewer than `expected_timed_steps`,
// 0: unknown), and even its fastest one is slower than `incumbent_s` (the
// best search trial's step time, else the baseline's) by more than twice
// the noise floor (at least 1%). The fastest step is the trial's most
// favourable evidence, so a noisy step never prunes a fast setting.
//
// Memory: where `capacity_gib` > 0, a step (warm-up included) whose peak is
// past it prunes the trial at once, as out of memory (`memory` set): it
// cannot run as a candidate however fast its steps are.
inline constexpr int kMinPruneSteps = 3;
struct PruneVerdict {
  bool prune = false;
  bool memory = false;     // pruned for memory past capacity
  double step_time_s = 0;  // the median of the timed steps so far (0: none)
  double peak_mem_gib = 0;
  std::string reason;
};
PruneVerdict JudgePrune(const std::vector<storage::StepRecord>& steps, double incumbent_s,
                        double noise_floor, int expected_timed_steps, double capacity_gib = 0);

// The device memory a trial's peak is judged against where the spec fixes
// it: the replay's emulated capacity, the simulated GPU's; 0 for a real
// process (a real GPU's own limit ends the run itself, and what its
// allocator reports may exceed a catalog's figure).
double DeclaredCapacityGib(const SessionSpec& spec);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_TRIAL_RULES_H_
