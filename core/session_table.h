// SessionTable: which sessions are in the server's memory, which are pinned
// there, and the order the cache of finished ones lets them go in. It holds
// each session's state by a shared pointer; what is inside a state is
// guarded by the state's own lock (core/session_state.h), never by this
// table's.
//
// A session stays in memory while it is active (initialized to verifying:
// it may move on by itself, or waits for its team) or while any Ref to it
// lives; beyond that, Trim lets the least recently found finished ones go
// once more than `finished_cache` are held.
//
// Thread safety: thread-safe. Its lock is a leaf held for microseconds:
// nothing is called under it (no storage, no session's lock, no other
// leaf). A Ref's destructor takes it briefly, so a Ref must not be dropped
// while the caller holds this table's lock (it never does: the lock is
// private).
#ifndef INFRARSI_CORE_SESSION_TABLE_H_
#define INFRARSI_CORE_SESSION_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/session_state.h"

namespace infrarsi {

class SessionTable {
 public:
  // A session found in the table, pinned (kept in memory) while the Ref
  // lives. Move-only; an empty Ref holds nothing.
  class Ref {
   public:
    Ref() = default;
    Ref(Ref&& o) noexcept;
    Ref& operator=(Ref&& o) noexcept;
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    ~Ref();
    SessionState& operator*() const { return *state_; }
    SessionState* operator->() const { return state_.get(); }
    SessionState* get() const { return state_.get(); }
    explicit operator bool() const { return state_ != nullptr; }

   private:
    friend class SessionTable;
    Ref(SessionTable* table, std::shared_ptr<SessionState> s);
    void Release();
    SessionTable* table_ = nullptr;
    std::shared_ptr<SessionState> state_;
  };

  // `finished_cache`: finished sessions kept after their last use.
  explicit SessionTable(size_t finished_cache) : finished_cache_(finished_cache) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // The session `id`, pinned; an empty Ref when it is not in memory.
  Ref Pin(const std::string& id);
  // Puts `s` in the table unless a state for its id is already there (read
  // back by another call meanwhile: then that one is kept), and returns the
  // one in the table, pinned. `active`: whether it stays in memory.
  Ref Insert(std::shared_ptr<SessionState> s, bool active);
  // Whether `s` (if it is still the state the table holds for `id`) stays
  // in memory whatever the cache.
  void SetActive(const std::string& id, const SessionState* s, bool active);
  // Those of `ids` that are in memory, pinned.
  std::vector<Ref> PinAll(const std::vector<std::string>& ids);
  // The states of `ids` that are in memory (null where one is not), not
  // pinned: for a read that must not keep them.
  std::vector<std::shared_ptr<SessionState>> Peek(const std::vector<std::string>& ids) const;
  // Every state in memory, not pinned.
  std::vector<std::shared_ptr<SessionState>> All() const;

  struct Trimmed {
    std::vector<std::string> dropped;                  // left memory
    std::vector<std::shared_ptr<SessionState>> kept;   // finished ones that stay
  };
  // Lets the least recently found finished, unpinned sessions beyond the
  // cache leave memory.
  Trimmed Trim();

  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<SessionState> state;
    uint64_t touched = 0;  // when it was last found (for the cache)
    int pins = 0;          // Refs held: it stays in memory
    bool active = true;    // stays in memory whatever the cache
  };
  Ref PinLocked(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(const std::string& id, const SessionState* s) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t finished_cache_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_touch_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SESSION_TABLE_H_
