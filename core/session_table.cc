#include "core/session_table.h"

#include <algorithm>

namespace infrarsi {

SessionTable::Ref::Ref(SessionTable* table, std::shared_ptr<SessionState> s)
    : table_(table), state_(std::move(s)) {}

SessionTable::Ref::Ref(Ref&& o) noexcept : table_(o.table_), state_(std::move(o.state_)) {
  o.table_ = nullptr;
}

SessionTable::Ref& SessionTable::Ref::operator=(Ref&& o) noexcept {
  if (this != &o) {
    Release();
    table_ = o.table_;
    state_ = std::move(o.state_);
    o.table_ = nullptr;
  }
  return *this;
}

SessionTable::Ref::~Ref() { Release(); }

void SessionTable::Ref::Release() {
  if (table_ != nullptr && state_ != nullptr) table_->Unpin(state_->rec.id, state_.get());
  table_ = nullptr;
  state_.reset();
}

SessionTable::Ref SessionTable::PinLocked(Entry& e) {
  ++e.pins;
  e.touched = next_touch_++;
  return Ref(this, e.state);
}

void SessionTable::Unpin(const std::string& id, const SessionState* s) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.state.get() == s) --it->second.pins;
}

SessionTable::Ref SessionTable::Pin(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return Ref();
  return PinLocked(it->second);
}

SessionTable::Ref SessionTable::Insert(std::shared_ptr<SessionState> s, bool active) {
  const std::string id = s->rec.id;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.try_emplace(id);
  if (inserted) {
    it->second.state = std::move(s);
    it->second.active = active;
  }
  return PinLocked(it->second);
}

void SessionTable::SetActive(const std::string& id, const SessionState* s, bool active) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.state.get() == s) it->second.active = active;
}

std::vector<SessionTable::Ref> SessionTable::PinAll(const std::vector<std::string>& ids) {
  std::vector<Ref> out;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    auto it = entries_.find(id);
    if (it != entries_.end()) out.push_back(PinLocked(it->second));
  }
  return out;
}

std::vector<std::shared_ptr<SessionState>> SessionTable::Peek(
    const std::vector<std::string>& ids) const {
  std::vector<std::shared_ptr<SessionState>> out(ids.size());
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = entries_.find(ids[i]);
    if (it != entries_.end()) out[i] = it->second.state;
  }
  return out;
}

std::vector<std::shared_ptr<SessionState>> SessionTable::All() const {
  std::vector<std::shared_ptr<SessionState>> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : entries_) out.push_back(e.state);
  return out;
}

SessionTable::Trimmed SessionTable::Trim() {
  Trimmed out;
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, std::string>> finished;
  for (const auto& [id, e] : entries_) {
    if (e.active || e.pins > 0) continue;
    finished.emplace_back(e.touched, id);
  }
  std::sort(finished.begin(), finished.end());
  const size_t drop = finished.size() > finished_cache_ ? finished.size() - finished_cache_ : 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (i < drop) {
      out.dropped.push_back(finished[i].second);
      entries_.erase(finished[i].second);
    } else {
      out.kept.push_back(entries_.at(finished[i].second).state);
    }
  }
  return out;
}

size_t SessionTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace infrarsi
