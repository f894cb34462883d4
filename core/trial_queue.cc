#include "core/trial_queue.h"

#include <vector>

namespace infrarsi {

void TrialQueue::Put(const storage::TrialRecord& t, const Requirement& req) {
  Remove(t.id);
  by_id_[t.id] = Entry{t, req};
  by_req_[req].insert(t.id);
}

void TrialQueue::Remove(int64_t trial_id) {
  auto it = by_id_.find(trial_id);
  if (it == by_id_.end()) return;
  auto r = by_req_.find(it->second.req);
  if (r != by_req_.end()) {
    r->second.erase(trial_id);
    if (r->second.empty()) by_req_.erase(r);
  }
  by_id_.erase(it);
}

void TrialQueue::RemoveSession(const std::string& session_id) {
  std::vector<int64_t> ids;
  for (const auto& [id, e] : by_id_) {
    if (e.trial.session_id == session_id) ids.push_back(id);
  }
  for (int64_t id : ids) Remove(id);
}

void TrialQueue::Clear() {
  by_id_.clear();
  by_req_.clear();
}

const storage::TrialRecord* TrialQueue::Find(int64_t trial_id) const {
  auto it = by_id_.find(trial_id);
  return it == by_id_.end() ? nullptr : &it->second.trial;
}

std::optional<int64_t> TrialQueue::Oldest(
    const std::function<bool(const Requirement&)>& fits,
    const std::function<bool(const storage::TrialRecord&)>& accept) const {
  // A k-way merge over the fitting requirements (k is small: the distinct
  // hardware and tenancy shapes of the queued sessions).
  using It = std::set<int64_t>::const_iterator;
  std::vector<std::pair<It, It>> heads;
  for (const auto& [req, ids] : by_req_) {
    if (fits(req)) heads.emplace_back(ids.begin(), ids.end());
  }
  while (true) {
    std::pair<It, It>* best = nullptr;
    for (auto& h : heads) {
      if (h.first != h.second && (best == nullptr || *h.first < *best->first)) best = &h;
    }
    if (best == nullptr) return std::nullopt;
    const int64_t id = *best->first;
    ++best->first;
    if (accept(by_id_.at(id).trial)) return id;
  }
}

}  // namespace infrarsi
