// TrialScheduler: which agents are live and who may lease which queued
// trial. It owns the agent registry (core/agent_registry), the lease queue
// (core/trial_queue), what it needs to know of each session that has work
// (whether its stage leases, whether it searches, what its trials require,
// its spec for command policies), the signal that new work may be there,
// and the count of leases that ran out. Like Nomad's eval broker, it alone
// decides who takes what; the session manager writes the leases.
//
// It never calls storage: the manager reads and writes the records, and
// tells the scheduler what it wrote (File, PutAgent) in the same breath.
//
// Thread safety: thread-safe. Its lock is a leaf held for microseconds:
// nothing is called under it (no storage, no session's lock, no other
// leaf). Agents' records are handed out as copies.
#ifndef INFRARSI_CORE_TRIAL_SCHEDULER_H_
#define INFRARSI_CORE_TRIAL_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "core/agent_registry.h"
#include "core/auth.h"
#include "core/spec.h"
#include "core/trial_queue.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

class TrialScheduler {
 public:
  struct Options {
    // Agents heartbeat this often (the server says so at registration)...
    absl::Duration heartbeat_interval = absl::Seconds(5);
    // ...and count as dead once this many beats in a row were missed (15 s
    // by default): a pinned run moves on to another agent then.
    int heartbeat_misses = 3;
    // Not owned; must outlive the scheduler. Default: the real clock.
    Clock* clock = Clock::Real();
  };
  explicit TrialScheduler(const Options& options);
  TrialScheduler(const TrialScheduler&) = delete;
  TrialScheduler& operator=(const TrialScheduler&) = delete;

  // ----- sessions and their work
  // What the scheduler knows of a session with work.
  struct SessionWork {
    bool leasing = false;  // its stage leases (core/stage.h)
    bool running = false;  // it searches: a new agent widens its window
    TrialQueue::Requirement req;
    // For agents' command policies; read only while the session leases.
    std::shared_ptr<const SessionSpec> spec;
  };
  // Says what session `id`'s stage means for its work; one that stops
  // leasing has its work taken out of the queue.
  void SetSession(const std::string& id, SessionWork work);
  // A session that left memory: its work goes too.
  void ForgetSession(const std::string& id);
  // Files trial `t` (queued: in the queue under `req`; anything else: out).
  void File(const storage::TrialRecord& t, const TrialQueue::Requirement& req);
  // Session `id`'s part of the queue, as storage has it (`trials`: all of
  // its trials; the queued ones are filed if it leases).
  void RefileSession(const std::string& id, const std::vector<storage::TrialRecord>& trials);
  // The whole queue, as storage has it (start-up): the queued trials of
  // sessions that lease.
  void Rebuild(const std::vector<storage::TrialRecord>& queued);
  // Sessions that lease / that search, by id.
  std::vector<std::string> LeasingSessions() const;
  std::vector<std::string> RunningSessions() const;

  // ----- leases
  // The oldest queued trial agent `agent_id` (bound to `who`) may run, if
  // it takes work (active) and one is there; counts as hearing from it.
  // Trials of sessions in `busy` are passed over unless nothing else is
  // left (then `waited` is set: the caller waits for that session's lock).
  struct Pick {
    storage::AgentRecord agent;
    int64_t trial_id = 0;
    std::string session_id;
    bool waited = false;
  };
  absl::StatusOr<std::optional<Pick>> PickFor(const std::string& agent_id, const Principal& who,
                                              const std::set<std::string>& busy);
  // The queued copy of trial `trial_id` if it is still queued for session
  // `session_id` and that session still leases (else it was taken or
  // withdrawn meanwhile).
  std::optional<storage::TrialRecord> StillQueued(int64_t trial_id,
                                                  const std::string& session_id) const;
  // A lease ran out (for GetStats).
  void CountExpiry();

  // ----- agents
  // The record a registration makes (its id kept for the token that
  // registered it, a drain or quarantine outliving the reconnect, a
  // quarantined host staying so under a new id); `new_id` when it gets one.
  // Not put in the registry: PutAgent, once storage has it.
  absl::StatusOr<storage::AgentRecord> PlanRegistration(const v1::RegisterAgentRequest& r,
                                                        const Principal& who,
                                                        const std::string& new_id);
  void PutAgent(storage::AgentRecord a);
  // Heard from: agent `agent_id`, bound to `who` (NOT_FOUND, PERMISSION_DENIED).
  // `revived` (optional) is set when it was not live before this call (a
  // restarted server hearing from it for the first time, or an agent back
  // from silence): running sessions may widen their windows.
  absl::StatusOr<storage::AgentRecord> Touch(const std::string& agent_id, const Principal& who,
                                             bool* revived = nullptr);
  // Heard from, by way of a trial it holds (no token check: the lease was).
  void Heard(const std::string& agent_id);
  // A clean exit: the agent is gone (its record returned for storage).
  absl::StatusOr<storage::AgentRecord> MarkGone(const std::string& agent_id, const Principal& who);
  // An admin's drain, quarantine or resume (validated here): the record for
  // storage and what the API shows.
  absl::StatusOr<std::pair<storage::AgentRecord, v1::AgentInfo>> SetState(
      const std::string& agent_id, const std::string& state, const std::string& reason);
  // Quarantines an active agent for `reason`; nullopt when it is not one.
  std::optional<storage::AgentRecord> Quarantine(const std::string& agent_id,
                                                 const std::string& reason);
  // The agents `who` may see (an admin all, a team its own and the shared
  // pool), gone ones only with `include_gone`.
  std::vector<v1::AgentInfo> ListAgents(const Principal& who, bool include_gone) const;

  // ----- what fits (core/agent_registry.h has the rules)
  std::string WhyNoneCanHold(const TrialQueue::Requirement& req) const;
  std::string WhyNoneFits(const TrialQueue::Requirement& req) const;
  std::vector<std::string> LiveFitting(const TrialQueue::Requirement& req) const;
  bool AnotherMayRun(const TrialQueue::Requirement& req, const SessionSpec& spec,
                     const storage::TrialRecord& t) const;
  // Session `session_id`'s queued trials pinned to an agent that missed at
  // least one heartbeat and has not yet been counted dead (what they wait
  // for): trial id -> agent id.
  std::map<int64_t, std::string> PinnedToSilent(const std::string& session_id) const;
  // How long an agent may stay silent before it counts as dead.
  absl::Duration liveness() const { return liveness_; }
  // The GPU memory agent `agent_id` registered (0: unknown).
  double MemoryPerGpuGib(const std::string& agent_id) const;

  // ----- the work signal
  // Wakes every WaitForWork.
  void Signal();
  // Blocks up to `timeout` (real time) or until Signal(); false once
  // Shutdown() was called.
  bool WaitForWork(absl::Duration timeout);
  void Shutdown();

  struct Stats {
    size_t queued_trials = 0;
    int64_t leases_expired = 0;
    std::map<std::string, int> agents_by_state;  // registered, not deregistered
    int agents_live = 0;                        // heard from and taking work
  };
  Stats GetStats() const;

 private:
  int64_t NowMs() const { return absl::ToUnixMillis(clock_->Now()); }
  v1::AgentInfo InfoOf(const storage::AgentRecord& a) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration liveness_;
  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  AgentRegistry registry_ ABSL_GUARDED_BY(mu_);
  TrialQueue queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SessionWork> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t leases_expired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_TRIAL_SCHEDULER_H_
