#include "core/agent_health.h"

#include <map>
#include <set>

#include "core/trial_status.h"

namespace infrarsi {

std::vector<BrokenHost> FindBrokenHosts(const std::vector<storage::TrialRecord>& trials,
                                        int min_failures) {
  namespace ts = trial_status;
  std::map<std::string, std::set<std::string>> ok_on;  // config -> agents it ran ok on
  for (const auto& t : trials) {
    if (t.status == ts::kOk && !t.agent.empty()) ok_on[t.config].insert(t.agent);
  }
  std::map<std::string, BrokenHost> by_agent;
  for (const auto& t : trials) {
    if ((t.status != ts::kFailed && t.status != ts::kTimeout) || t.agent.empty()) continue;
    auto it = ok_on.find(t.config);
    if (it == ok_on.end()) continue;
    const bool elsewhere = it->second.size() > 1 || !it->second.count(t.agent);
    if (!elsewhere) continue;
    BrokenHost& h = by_agent[t.agent];
    h.agent_id = t.agent;
    if (h.trial_ids.empty()) h.first_error = t.error;
    h.trial_ids.push_back(t.id);
  }
  std::vector<BrokenHost> out;
  for (auto& [id, h] : by_agent) {
    if (static_cast<int>(h.trial_ids.size()) >= min_failures) out.push_back(std::move(h));
  }
  return out;
}

}  // namespace infrarsi
