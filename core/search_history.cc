#include "core/search_history.h"

#include <algorithm>
#include <optional>

#include "base/status_macros.h"
#include "core/report.h"
#include "core/trial_status.h"

namespace infrarsi {

void SearchHistory::Clear() {
  rev_ = 0;
  ids_.clear();
  gpu_s_.clear();
  slot_.clear();
  observations_.clear();
  indices_.clear();
}

double SearchHistory::GpuSeconds() const {
  double sum = 0;
  for (double s : gpu_s_) sum += s;
  return sum;
}

absl::StatusOr<bool> SearchHistory::Apply(const std::vector<storage::TrialRecord>& changed) {
  for (const storage::TrialRecord& t : changed) {
    const bool learns = t.purpose != trial_purpose::kVerify;
    const auto at = std::lower_bound(ids_.begin(), ids_.end(), t.id);
    const size_t i = static_cast<size_t>(at - ids_.begin());
    const bool known = at != ids_.end() && *at == t.id;
    if (!known && at != ids_.end()) return false;  // new, below a trial it has
    if (known && (slot_[i] >= 0) != learns) return false;
    std::optional<Observation> o;
    if (learns) {
      ASSIGN_OR_RETURN(o, SearchObservationOf(*spec_, t));
    }
    const double gpu_s = TrialGpuSeconds(*spec_, t);
    if (known) {
      gpu_s_[i] = gpu_s;
      if (learns) {
        indices_[static_cast<size_t>(slot_[i])] = IndexOf(*spec_, o->config);
        observations_[static_cast<size_t>(slot_[i])] = std::move(*o);
      }
    } else {
      ids_.push_back(t.id);
      gpu_s_.push_back(gpu_s);
      slot_.push_back(learns ? static_cast<int>(observations_.size()) : -1);
      if (learns) {
        indices_.push_back(IndexOf(*spec_, o->config));  // once per trial, not per proposal
        observations_.push_back(std::move(*o));
      }
    }
    rev_ = std::max(rev_, t.rev);
  }
  return true;
}

absl::Status SearchHistory::Update(std::shared_ptr<const SessionSpec> spec, const ReadChanged& read) {
  if (spec != spec_) {
    Clear();
    spec_ = std::move(spec);
  }
  // Whatever fails below leaves the history empty, to be read afresh.
  auto fail = [&](absl::Status why) {
    Clear();
    return why;
  };
  absl::StatusOr<std::vector<storage::TrialRecord>> changed = read(rev_);
  if (!changed.ok()) return fail(changed.status());
  last_read_ = changed->size();
  absl::StatusOr<bool> applied = Apply(*changed);
  if (!applied.ok()) return fail(applied.status());
  if (*applied) return absl::OkStatus();
  Clear();
  changed = read(0);
  if (!changed.ok()) return fail(changed.status());
  last_read_ = changed->size();
  std::sort(changed->begin(), changed->end(),
            [](const storage::TrialRecord& a, const storage::TrialRecord& b) { return a.id < b.id; });
  applied = Apply(*changed);
  if (!applied.ok()) return fail(applied.status());
  if (!*applied) return fail(absl::InternalError("search history: a trial's id was read twice"));
  return absl::OkStatus();
}

}  // namespace infrarsi
