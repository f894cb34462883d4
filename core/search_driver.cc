#include "core/search_driver.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace infrarsi {

SearchDriver::SearchDriver(const Options& options) : options_(options) {}

void SearchDriver::MarkPending(const std::string& id) {
  absl::MutexLock lock(&mu_);
  pending_.insert(id);
}

bool SearchDriver::IsProposing(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  return proposing_.count(id) > 0;
}

void SearchDriver::EndProposal(const std::string& id) {
  absl::MutexLock lock(&mu_);
  proposing_.erase(id);
}

absl::Status SearchDriver::ProposePending(const std::string& only, bool wait_for_busy) {
  std::set<std::string> skipped;  // busy, left pending
  for (;;) {
    // One pending session at a time, marked as proposing so that no other
    // thread proposes for it meanwhile.
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& pending : pending_) {
        if ((!only.empty() && pending != only) || skipped.count(pending)) continue;
        if (!proposing_.count(pending)) {
          id = pending;
          break;
        }
      }
      if (id.empty()) return absl::OkStatus();
      pending_.erase(id);
      proposing_.insert(id);
    }
    auto window = options_.writer->OpenWindow(id, wait_for_busy);
    if (!window.ok()) {
      EndProposal(id);
      MarkPending(id);
      return window.status();
    }
    if (window->state == SessionWriter::Window::State::kBusy) {
      {
        absl::MutexLock lock(&mu_);
        proposing_.erase(id);
        pending_.insert(id);
      }
      skipped.insert(id);
      continue;
    }
    if (window->state == SessionWriter::Window::State::kSettled) continue;
    const SearchInputs& in = *window->inputs;
    // Ends a proposal that was not made and marks the session pending again
    // (both at once, so a completion never sees neither mark).
    auto give_up = [&](absl::Status why) {
      absl::MutexLock lock(&mu_);
      proposing_.erase(id);
      pending_.insert(id);
      return why;
    };
    // The session's own trials, those written since its last proposal
    // read (a trial finishing meanwhile shows as in flight, which the
    // search treats as taken).
    std::shared_ptr<SearchHistory> kept = window->history;
    if (!kept) kept = std::make_shared<SearchHistory>();
    // The spec as a pointer into the inputs it lives in, held with them.
    std::shared_ptr<const SessionSpec> spec(window->inputs, &in.spec);
    if (absl::Status st = kept->Update(std::move(spec), [&](int64_t after_rev) {
          auto read = options_.writer->ReadTrials(id, after_rev);
          if (read.ok()) trials_read_.fetch_add(static_cast<int64_t>(read->size()), std::memory_order_relaxed);
          return read;
        });
        !st.ok()) {
      return give_up(st);
    }
    const std::vector<Observation>* history = &kept->observations();
    const double gpu_s = kept->GpuSeconds();
    if (in.spec.max_gpu_hours > 0 && gpu_s >= in.spec.max_gpu_hours * 3600) {
      const std::string stop = absl::StrFormat("GPU-hour budget spent (%.2f of %.2f GPU-hours)",
                                               gpu_s / 3600, in.spec.max_gpu_hours);
      if (absl::Status st = options_.writer->Settle(id, nullptr, stop); !st.ok()) {
        MarkPending(id);
        return st;
      }
      continue;
    }
    // Seeded by the session and its progress: a restarted server proposes
    // what the old one would have.
    const uint64_t seed = in.spec.seed * 0x9e3779b97f4a7c15ULL + history->size();
    SearchContext ctx;
    ctx.spec = &in.spec;
    ctx.priors = in.priors ? &*in.priors : nullptr;
    ctx.warm_starts = in.warm_starts;
    ctx.related = &in.related;
    ctx.stop_below = window->stop_below;
    ctx.memo = window->memo.get();
    ctx.history_index = &kept->space_indices();
    const absl::Time began = absl::Now();
    const Proposal p = options_.optimizer->Propose(ctx, *history, window->room, seed);
    latency_.Observe(absl::ToDoubleSeconds(absl::Now() - began));
    if (absl::Status st = options_.writer->Settle(id, &p, ""); !st.ok()) {
      MarkPending(id);
      return st;
    }
  }
}

}  // namespace infrarsi
