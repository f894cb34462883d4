#include "core/agent_health.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"

#include "core/slurm_job.h"
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
    if (!IsHostFailureStatus(t.status) || t.agent.empty()) continue;
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

std::vector<FailingNode> FindFailingNodes(const std::vector<storage::TrialRecord>& trials) {
  namespace ts = trial_status;
  std::map<std::string, FailingNode> by_node;
  auto note = [&](const std::string& node, const storage::TrialRecord& t, const std::string& why) {
    FailingNode& n = by_node[node];
    n.node = node;
    if (!n.trial_ids.empty() && n.trial_ids.back() == t.id) return;
    if (n.trial_ids.empty()) n.first_error = why;
    n.trial_ids.push_back(t.id);
  };
  // config -> the node sets it finished ok on
  std::map<std::string, std::vector<std::set<std::string>>> ok_on;
  for (const auto& t : trials) {
    if (t.status != ts::kOk || t.slurm.empty()) continue;
    const std::vector<std::string> nodes = SlurmNodes(DecodeSlurmJob(t.slurm));
    if (!nodes.empty()) ok_on[t.config].emplace_back(nodes.begin(), nodes.end());
  }
  for (const auto& t : trials) {
    if (t.slurm.empty()) continue;
    const v1::SlurmJob job = DecodeSlurmJob(t.slurm);
    for (const std::string& n : job.failed_nodes()) {
      note(n, t, absl::StrCat("node failure in trial ", t.id));
    }
    if (!IsHostFailureStatus(t.status)) continue;
    auto it = ok_on.find(t.config);
    if (it == ok_on.end()) continue;
    // A node the setting never finished ok on is the suspect; one it
    // did finish on is not.
    for (const std::string& n : SlurmNodes(job)) {
      bool ran_ok_there = false;
      for (const std::set<std::string>& ok_nodes : it->second) ran_ok_there |= ok_nodes.count(n) > 0;
      if (!ran_ok_there) note(n, t, t.error);
    }
  }
  std::vector<FailingNode> out;
  for (auto& [name, n] : by_node) out.push_back(std::move(n));
  return out;
}

}  // namespace infrarsi
