// TrialQueue: the queued trials, indexed by what running them requires, so
// that a lease looks only at work the asking agent could run.
//
// Each trial is filed under its session's Requirement (GPU model, GPU count,
// executor, team and pool). Oldest() asks the caller once per distinct
// requirement whether the agent fits it, then walks the fitting ones in
// trial-id order: a queue full of work nobody here can run costs a lease one
// call per requirement, not one per trial, and can never hide runnable work
// behind it.
//
// Thread safety: none; the session manager guards it with its lock.
#ifndef INFRARSI_CORE_TRIAL_QUEUE_H_
#define INFRARSI_CORE_TRIAL_QUEUE_H_

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/spec.h"
#include "storage/storage.h"

namespace infrarsi {

class TrialQueue {
 public:
  struct Requirement {
    std::string gpu_model;  // lower case
    int32_t gpu_count = 0;
    std::string executor;   // "process", "replay", "sim"
    std::string team;       // the owning session's team
    SessionSpec::Pool pool = SessionSpec::Pool::kAny;  // which agents it may use
    auto operator<=>(const Requirement&) const = default;
  };

  // Files (or refiles, replacing the copy held) trial `t` under `req`.
  void Put(const storage::TrialRecord& t, const Requirement& req);
  // Unknown ids are ignored.
  void Remove(int64_t trial_id);
  // Every trial of `session_id` (a session that stopped running).
  void RemoveSession(const std::string& session_id);
  void Clear();
  // The queued copy of a trial, or null.
  const storage::TrialRecord* Find(int64_t trial_id) const;

  // The oldest trial whose requirement `fits` and which `accept`s, if any.
  // `fits` is called at most once per distinct requirement; `accept` in id
  // order over the fitting requirements' trials until it returns true.
  std::optional<int64_t> Oldest(
      const std::function<bool(const Requirement&)>& fits,
      const std::function<bool(const storage::TrialRecord&)>& accept) const;

  // Every queued trial, oldest first.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [id, e] : by_id_) fn(e.trial);
  }
  size_t size() const { return by_id_.size(); }
  size_t requirements() const { return by_req_.size(); }

 private:
  struct Entry {
    storage::TrialRecord trial;
    Requirement req;
  };
  std::map<int64_t, Entry> by_id_;
  std::map<Requirement, std::set<int64_t>> by_req_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_TRIAL_QUEUE_H_
