// SearchDriver: keeps running sessions' search windows full. A session
// whose window has room is marked pending; ProposePending makes each
// pending session's proposal (fitting the search's models: up to tens of
// milliseconds) with no lock held, at most one per session at a time, and
// hands it back through SessionWriter, the narrow interface the session
// manager implements (as Nomad's scheduler plans through its Planner): the
// driver never touches a session's state or storage itself.
//
// Thread safety: thread-safe. Its lock (the pending and proposing marks)
// is a leaf held for microseconds: nothing is called under it.
#ifndef INFRARSI_CORE_SEARCH_DRIVER_H_
#define INFRARSI_CORE_SEARCH_DRIVER_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/metrics.h"
#include "core/optimizer.h"
#include "core/search_history.h"
#include "core/session_state.h"
#include "storage/storage.h"

namespace infrarsi {

// What the driver asks of the sessions' owner. Each call takes the
// session's lock itself and changes the session in one transaction.
class SessionWriter {
 public:
  virtual ~SessionWriter() = default;
  struct Window {
    enum class State {
      kBusy,     // its lock was held (and not waited for): left pending
      kSettled,  // nothing to propose: not running, or the window was
                 // settled (refilled, or the run finished) under its lock
      kOpen,     // `room` settings wanted, from `inputs`
    };
    State state = State::kSettled;
    int room = 0;
    std::shared_ptr<const SearchInputs> inputs;
    // The expected gain below which Settle's stop rule ends the search
    // (SearchStopBelow; SearchContext::stop_below).
    double stop_below = 0;
    // The session's memo of its proposals (SearchContext::memo), held
    // here while the proposal runs outside the session's lock.
    std::shared_ptr<ProposalMemo> memo;
    // The session's trials as its search last read them (SessionState::
    // search_history), brought up to date here outside the session's
    // lock; null: read them all.
    std::shared_ptr<SearchHistory> history;
  };
  // Under the session's lock (waited for when `wait`, else only tried): the
  // room in its window. Before settling it, and on any result but kOpen
  // and kBusy, the writer ends the driver's proposal mark under that lock
  // (SearchDriver::EndProposal).
  virtual absl::StatusOr<Window> OpenWindow(const std::string& session_id, bool wait) = 0;
  // The session's trials written after `after_rev` (0: all of them), by
  // id (Storage::ListTrialsChangedSince), read with no lock held.
  virtual absl::StatusOr<std::vector<storage::TrialRecord>> ReadTrials(
      const std::string& session_id, int64_t after_rev) = 0;
  // Under the session's lock: ends the proposal mark, then queues what the
  // window still has room for of `proposal` (non-null), or stops the
  // search for `stop` (non-empty).
  virtual absl::Status Settle(const std::string& session_id, const Proposal* proposal,
                              const std::string& stop) = 0;
};

class SearchDriver {
 public:
  struct Options {
    SessionWriter* writer = nullptr;  // required; not owned
    Optimizer* optimizer = nullptr;   // required; not owned
  };
  explicit SearchDriver(const Options& options);
  SearchDriver(const SearchDriver&) = delete;
  SearchDriver& operator=(const SearchDriver&) = delete;

  // A proposal is due for session `id`.
  void MarkPending(const std::string& id);
  // A proposal for `id` is being made (its result will settle the window).
  bool IsProposing(const std::string& id) const;
  // Ends the proposal mark of `id` (the writer calls it under the session's
  // lock before it settles the window).
  void EndProposal(const std::string& id);

  // Makes the proposals of pending sessions and hands them to the writer:
  // only session `only` when it is given (the caller's own, whose lock it
  // waits for), else every one. A call for every one waits for a busy
  // session's lock only when `wait_for_busy`; otherwise that session stays
  // pending for its lock's holder or the reaper. On an error the session
  // stays pending, for the next call.
  absl::Status ProposePending(const std::string& only, bool wait_for_busy);

  // How long proposals took, since start.
  Histogram::Snapshot Latency() const { return latency_.Take(); }
  // Trials read from storage for the proposals, since start: each
  // proposal reads those written since its session's last read (all of
  // them after a restart), so this grows with the trials' writes, not with
  // proposals x history.
  int64_t TrialsRead() const { return trials_read_.load(std::memory_order_relaxed); }

 private:
  const Options options_;
  Histogram latency_;
  std::atomic<int64_t> trials_read_{0};
  mutable absl::Mutex mu_;
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> proposing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SEARCH_DRIVER_H_
