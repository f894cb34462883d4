// AgentRegistry: the agents the server knows, what each may run, and which
// are live. Part of the trial scheduler beside TrialQueue: the queue says
// what work needs, the registry says which agent fits it.
//
// An agent id is bound to the token that registered it; an agent fits a
// session's work when its GPU model (case-insensitive), GPU count, executor
// and tenancy match, and a trial when, besides, it has not refused it and
// its operator's command policy allows the trial's command.
//
// Thread safety: none; the session manager guards it with its lock.
#ifndef INFRARSI_CORE_AGENT_REGISTRY_H_
#define INFRARSI_CORE_AGENT_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/agent_policy.h"
#include "core/auth.h"
#include "core/spec.h"
#include "core/trial_queue.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// Agent states (storage::AgentRecord::state).
inline constexpr char kAgentActive[] = "active";
inline constexpr char kAgentDraining[] = "draining";
inline constexpr char kAgentQuarantined[] = "quarantined";
inline constexpr char kAgentGone[] = "gone";

class AgentRegistry {
 public:
  // An agent is live if it was heard from within `liveness`, by this
  // registry: one read back from storage (a server restart) is not live
  // until it is heard from again, whenever it was last heard before.
  AgentRegistry(absl::Duration liveness, int64_t started_ms)
      : liveness_ms_(absl::ToInt64Milliseconds(liveness)), started_ms_(started_ms) {}

  // INVALID_ARGUMENT naming the field for a registration the server must
  // not take (sizes, counts, executor names, command prefixes).
  static absl::Status Validate(const v1::RegisterAgentRequest& r);

  // Inserts or replaces by id (its policy parsed once, here).
  void Put(storage::AgentRecord a);
  bool Contains(const std::string& id) const { return agents_.count(id) > 0; }
  // Null for an unknown id.
  storage::AgentRecord* Find(const std::string& id);
  const storage::AgentRecord* Find(const std::string& id) const;
  // The agent `id`, if `who` holds the token it was registered with:
  // NOT_FOUND for an unknown id, PERMISSION_DENIED for another token.
  absl::StatusOr<storage::AgentRecord*> Bound(const std::string& id, const Principal& who);

  // Heard from within the liveness period (since this registry began) and
  // not deregistered.
  bool Heard(const std::string& id, int64_t now_ms) const;
  // Heard, and active: it takes work (not draining or quarantined).
  bool Live(const std::string& id, int64_t now_ms) const;
  // Every agent, by id.
  const std::map<std::string, storage::AgentRecord>& All() const { return agents_; }
  // "agt-1 on node-3 (8 x H100; executors process; draining)".
  static std::string Describe(const storage::AgentRecord& a);
  // Why no live agent can take work that needs `req` (what it needs, and
  // the agents heard from that its team may know of: the shared pool and
  // its own, with what they have); "" when one can.
  std::string WhyNoneFits(const TrialQueue::Requirement& req, int64_t now_ms) const;
  // Why no agent can ever hold work that needs `req`: agents of its GPU
  // model and executor that its team may use are registered (and not
  // gone), but none has as many GPUs as it needs (a trial runs on one
  // agent: a multi-node trial needs Slurm). "" otherwise, also when no such
  // agent registered yet (they may be starting: WhyNoneFits says so).
  std::string WhyNoneCanHold(const TrialQueue::Requirement& req) const;
  // Whether agent `a` fits work that needs `req` (hardware, executor,
  // tenancy).
  bool Fits(const storage::AgentRecord& a, const TrialQueue::Requirement& req) const;
  // Whether `a` may run trial `t` of a session with `spec` and `req`: it
  // fits, has not refused it, and its command policy allows its command.
  bool MayRun(const storage::AgentRecord& a, const TrialQueue::Requirement& req,
              const SessionSpec& spec, const storage::TrialRecord* t) const;
  // MayRun's checks of the trial itself, for an agent already known to fit
  // (a lease walks only work filed under requirements the agent fits).
  bool AllowsTrial(const storage::AgentRecord& a, const SessionSpec& spec,
                   const storage::TrialRecord& t) const;
  // Live agents that fit `req`, by id.
  std::vector<std::string> LiveFitting(const TrialQueue::Requirement& req, int64_t now_ms) const;
  // Whether a live agent other than those that refused `t` may run it.
  bool AnotherMayRun(const TrialQueue::Requirement& req, const SessionSpec& spec,
                     const storage::TrialRecord& t, int64_t now_ms) const;

 private:
  static AgentScope ScopeOf(const storage::AgentRecord& a);
  const int64_t liveness_ms_;
  const int64_t started_ms_;
  std::map<std::string, storage::AgentRecord> agents_;
  std::map<std::string, AgentScope> scopes_;  // each agent's tenancy and policy
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AGENT_REGISTRY_H_
