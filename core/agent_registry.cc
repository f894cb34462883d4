#include "core/agent_registry.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace infrarsi {

absl::Status AgentRegistry::Validate(const v1::RegisterAgentRequest& r) {
  if (r.host().empty()) return absl::InvalidArgumentError("host: required");
  if (r.gpu_model().empty()) return absl::InvalidArgumentError("gpu_model: required");
  if (r.gpu_count() < 0) return absl::InvalidArgumentError("gpu_count: must be >= 0");
  if (r.memory_per_gpu_gib() < 0 || !std::isfinite(r.memory_per_gpu_gib())) {
    return absl::InvalidArgumentError("memory_per_gpu_gib: must be a finite number >= 0");
  }
  if (r.executors().empty()) return absl::InvalidArgumentError("executors: at least one required");
  RETURN_IF_ERROR(CheckExecutorNames({r.executors().begin(), r.executors().end()}));
  if (r.host().size() > 256) return absl::InvalidArgumentError("host: at most 256 characters");
  if (r.gpu_model().size() > 128) {
    return absl::InvalidArgumentError("gpu_model: at most 128 characters");
  }
  if (r.executors_size() > 16) return absl::InvalidArgumentError("executors: at most 16");
  if (r.teams_size() > 256) return absl::InvalidArgumentError("teams: at most 256");
  if (r.commands_size() > 256) return absl::InvalidArgumentError("commands: at most 256");
  for (const std::string& t : r.teams()) {
    if (t.empty() || t.size() > 128) {
      return absl::InvalidArgumentError("teams: 1-128 characters each");
    }
  }
  const std::vector<std::string> commands(r.commands().begin(), r.commands().end());
  return ParseCommandPrefixes(commands, "commands").status();
}

AgentScope AgentRegistry::ScopeOf(const storage::AgentRecord& a) {
  AgentScope scope;
  scope.token_team = a.team;
  scope.serves = DecodeStringList(a.serves);
  // Stored as the agent sent them, which Validate checked.
  scope.commands = ParseCommandPrefixes(DecodeStringList(a.commands), "commands")
                       .value_or(std::vector<CommandPrefix>{});
  return scope;
}

void AgentRegistry::Put(storage::AgentRecord a) {
  scopes_[a.id] = ScopeOf(a);
  const std::string id = a.id;
  agents_[id] = std::move(a);
}

storage::AgentRecord* AgentRegistry::Find(const std::string& id) {
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : &it->second;
}

const storage::AgentRecord* AgentRegistry::Find(const std::string& id) const {
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : &it->second;
}

absl::StatusOr<storage::AgentRecord*> AgentRegistry::Bound(const std::string& id,
                                                           const Principal& who) {
  storage::AgentRecord* a = Find(id);
  if (a == nullptr) {
    return absl::NotFoundError(absl::StrCat("agent_id: unknown agent '", id, "'; register first"));
  }
  if (a->token_id != who.token_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "agent_id: agent '", id, "' was registered with another token; an id stays bound to "
        "the token that registered it"));
  }
  return a;
}

bool AgentRegistry::Heard(const std::string& id, int64_t now_ms) const {
  auto it = agents_.find(id);
  return it != agents_.end() && it->second.state != kAgentGone &&
         it->second.last_heartbeat_ms >= now_ms - liveness_ms_ &&
         it->second.last_heartbeat_ms >= started_ms_;
}

bool AgentRegistry::Live(const std::string& id, int64_t now_ms) const {
  return Heard(id, now_ms) && agents_.at(id).state == kAgentActive;
}

std::string AgentRegistry::Describe(const storage::AgentRecord& a) {
  return absl::StrCat(a.id, " on ", a.host.empty() ? "?" : a.host, " (", a.gpu_count, " x ",
                      a.gpu_model, "; executors ", a.executors.empty() ? "none" : a.executors,
                      a.team.empty() ? "" : absl::StrCat("; team ", a.team),
                      a.state == kAgentActive ? "" : absl::StrCat("; ", a.state), ")");
}

std::string AgentRegistry::WhyNoneFits(const TrialQueue::Requirement& req, int64_t now_ms) const {
  if (!LiveFitting(req, now_ms).empty()) return "";
  std::vector<std::string> heard;
  for (const auto& [id, a] : agents_) {
    // Only agents the session's team may know of: the shared pool and its
    // own (another team's hosts are none of its business).
    if (!a.team.empty() && a.team != req.team) continue;
    if (Heard(id, now_ms)) heard.push_back(Describe(a));
  }
  return absl::StrCat(
      "no live agent can run this session's trials: they need ", req.gpu_count, " x ",
      req.gpu_model, " with the ", req.executor, " executor",
      req.team.empty() ? "" : absl::StrCat(" for team ", req.team),
      req.pool == SessionSpec::Pool::kTeam ? " on the team's own agents (pool: team)" : "",
      "; live agents: ",
      heard.empty() ? std::string("none") : absl::StrJoin(heard, ", "));
}

std::string AgentRegistry::WhyNoneCanHold(const TrialQueue::Requirement& req) const {
  std::vector<std::string> smaller;
  for (const auto& [id, a] : agents_) {
    if (a.state == kAgentGone || absl::AsciiStrToLower(a.gpu_model) != req.gpu_model) continue;
    TrialQueue::Requirement same = req;
    same.gpu_count = 1;  // everything but the count
    if (!Fits(a, same)) continue;
    if (a.gpu_count >= req.gpu_count) return "";
    smaller.push_back(Describe(a));
  }
  if (smaller.empty()) return "";
  return absl::StrCat(
      "hardware: ", req.gpu_count, " x ", req.gpu_model, " with the ", req.executor,
      " executor: no registered agent holds that many GPUs (a trial runs on one agent); agents: ",
      absl::StrJoin(smaller, ", "),
      req.executor == "slurm"
          ? "; a Slurm agent holds --slurm-max-nodes x --slurm-gpus-per-node GPUs"
      : req.executor == "process"
          ? "; run a multi-node trial as a Slurm job: add executor.slurm to the spec and run an "
            "agent with --executors slurm on a submit host (README: Slurm)"
          : absl::StrCat("; the ", req.executor, " executor runs the whole cluster on one host: "
                         "an agent registers its GPU count (--gpu-count ", req.gpu_count,
                         "); a real multi-node run needs executor.slurm"));
}

bool AgentRegistry::Fits(const storage::AgentRecord& a, const TrialQueue::Requirement& req) const {
  if (absl::AsciiStrToLower(a.gpu_model) != req.gpu_model) return false;
  if (a.gpu_count < req.gpu_count) return false;
  bool executor = false;
  for (absl::string_view e : absl::StrSplit(a.executors, ',')) {
    executor = executor || e == req.executor;
  }
  if (!executor) return false;
  auto scope = scopes_.find(a.id);
  return scope != scopes_.end() && TenancyRefusal(scope->second, req.team, req.pool).empty();
}

bool AgentRegistry::MayRun(const storage::AgentRecord& a, const TrialQueue::Requirement& req,
                           const SessionSpec& spec, const storage::TrialRecord* t) const {
  return Fits(a, req) && (t == nullptr || AllowsTrial(a, spec, *t));
}

bool AgentRegistry::AllowsTrial(const storage::AgentRecord& a, const SessionSpec& spec,
                                const storage::TrialRecord& t) const {
  for (absl::string_view refused : absl::StrSplit(t.refused_by, ',', absl::SkipEmpty())) {
    if (refused == a.id) return false;
  }
  const AgentScope& scope = scopes_.at(a.id);
  if (spec.Executor().runs_code && !scope.commands.empty()) {
    auto cfg = DecodeConfigJson(t.config);
    if (!cfg.ok()) return false;
    const std::vector<std::string> argv = SubstituteCommand(spec.process.argv, *cfg);
    if (!CommandAllowed(argv, scope.commands)) return false;
  }
  return true;
}

std::vector<std::string> AgentRegistry::LiveFitting(const TrialQueue::Requirement& req,
                                                    int64_t now_ms) const {
  std::vector<std::string> out;
  for (const auto& [id, a] : agents_) {
    if (Live(id, now_ms) && Fits(a, req)) out.push_back(id);
  }
  return out;
}

bool AgentRegistry::AnotherMayRun(const TrialQueue::Requirement& req, const SessionSpec& spec,
                                  const storage::TrialRecord& t, int64_t now_ms) const {
  for (const auto& [id, a] : agents_) {
    if (Live(id, now_ms) && MayRun(a, req, spec, &t)) return true;
  }
  return false;
}

}  // namespace infrarsi
