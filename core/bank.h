// Bank: the experience bank's read side and the shape of its entries.
//
// Every finished trial becomes a bank entry (EntryFor, written by the session
// manager inside the trial's own transaction). Reads are of two kinds: the
// seeds a new search starts from (the best settings of similar workloads and
// the related trials its models learn from) and QueryExperience for users
// and other services.
//
// Reads cost what they return, not what the bank holds: every query is
// newest first with a cap, filtered in SQL on indexed columns (who may read
// an entry is on the entry itself), and runs on the reader connection
// without any lock of the session manager, so a client looping on the bank
// never stalls a live session.
//
// Thread safety: thread-safe; it keeps no state besides the reader, whose
// implementation serialises its own calls.
#ifndef INFRARSI_CORE_BANK_H_
#define INFRARSI_CORE_BANK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/auth.h"
#include "core/optimizer.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

class Bank {
 public:
  struct Options {
    // Required; not owned; must outlive the bank. Reads only: the server
    // passes a second connection (Storage::OpenReader) so that bank reads
    // never queue behind the writer.
    storage::Storage* reader = nullptr;
    // Rows a search's seeds read, at most, per query (newest first); two
    // queries run per seed: the same workload, then any workload.
    int32_t seed_rows = 2000;
  };
  static absl::StatusOr<std::unique_ptr<Bank>> Create(const Options& options);

  // What a new search of `spec` starts from: up to 12 distinct settings
  // (not the baseline) that were fastest in sessions of the same workload
  // on the same GPU, then on another GPU, then the same model at another
  // shape, then any workload with the same knobs; and the newest
  // SearchContext::kMaxRelated trials of the same workload (any GPU). Only
  // settings inside `spec`'s space, only entries `team` may read, never
  // the session's own (`session_id`).
  struct Seeds {
    std::vector<Config> warm_starts;
    std::vector<SearchContext::Related> related;
  };
  absl::StatusOr<Seeds> SeedsFor(const SessionSpec& spec, const std::string& session_id,
                                 const std::string& team) const;

  // The entries `who` may read (its team's and shared ones; all for an
  // admin or an open server) that match the request, a page at a time.
  // INVALID_ARGUMENT naming the field for an unknown status, purpose or
  // order, a page size out of [0, 1000] or a page token this server did
  // not issue.
  absl::StatusOr<v1::QueryExperienceResponse> Query(const v1::QueryExperienceRequest& request,
                                                    const Principal& who) const;

  // The entry of finished trial `t` of session `s` (spec `spec`).
  static storage::BankRecord EntryFor(const storage::SessionRecord& s, const SessionSpec& spec,
                                      const storage::TrialRecord& t, int64_t now_ms);

 private:
  explicit Bank(const Options& options) : options_(options) {}
  const Options options_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_BANK_H_
