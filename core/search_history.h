// SearchHistory: one session's trials as its search learns from them
// (SearchHistoryOf), kept between the session's proposals and brought up
// to date from the trials written since the last read (storage's revs:
// ListTrialsChangedSince). At 2,000 trials reading and decoding every
// stored setting before each proposal cost more than the proposal; a
// proposal now reads the few trials that changed since the last.
//
// Thread safety: thread-compatible. The search driver updates and reads a
// session's history in one proposal at a time (its proposing mark).
#ifndef INFRARSI_CORE_SEARCH_HISTORY_H_
#define INFRARSI_CORE_SEARCH_HISTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/optimizer.h"
#include "core/spec.h"
#include "storage/storage.h"

namespace infrarsi {

class SearchHistory {
 public:
  // Reads the session's trials written after `after_rev`, by id (storage's
  // ListTrialsChangedSince; after_rev 0: all of them).
  using ReadChanged =
      std::function<absl::StatusOr<std::vector<storage::TrialRecord>>(int64_t after_rev)>;

  // Brings the history up to date under `spec` (non-null; held). A spec
  // is fixed while a session runs and replaced, never changed in place, so
  // another pointer than the last Update's means the stored settings are
  // decoded afresh (FillKnobDefaults depends on the spec). What a read
  // cannot apply in place (a trial new to the history below one it has,
  // a trial turned into a verification re-run or back) makes it read
  // every trial again. On an error the history is empty (rev 0) and
  // the next Update reads every trial: nothing is half-applied.
  absl::Status Update(std::shared_ptr<const SessionSpec> spec, const ReadChanged& read);

  // What SearchHistoryOf(spec, trials) returns for the session's trials as
  // of the last Update, and the GPU-seconds it counts (the same sum, in
  // the same order, bit for bit).
  const std::vector<Observation>& observations() const { return observations_; }
  // IndexOf(spec, setting) of each of observations(), found once per trial
  // read (SearchContext::history_index).
  const std::vector<int64_t>& space_indices() const { return indices_; }
  double GpuSeconds() const;
  // The highest rev applied (0: none).
  int64_t rev() const { return rev_; }
  // How many trials the last Update read (for tests and benchmarks).
  size_t last_read() const { return last_read_; }

 private:
  void Clear();
  // Applies `changed` in place; false where it cannot (see Update), the
  // history then partly applied and to be cleared.
  absl::StatusOr<bool> Apply(const std::vector<storage::TrialRecord>& changed);

  std::shared_ptr<const SessionSpec> spec_;
  int64_t rev_ = 0;
  size_t last_read_ = 0;
  // Every trial, by id: its id, GPU-seconds and index in observations_
  // (-1: a verification re-run, which the search does not learn from).
  std::vector<int64_t> ids_;
  std::vector<double> gpu_s_;
  std::vector<int> slot_;
  std::vector<Observation> observations_;
  std::vector<int64_t> indices_;  // parallel to observations_
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SEARCH_HISTORY_H_
