// SessionState: one session's data in the server's memory (its record,
// spec, doctor report, verification, search inputs, counters derived from
// its trials, the best-trial rule, its event backlog), with the lock that
// guards it. What may be computed from a state alone lives here: its
// summary, its restore from storage, the search record stored with it.
//
// Thread safety: `spec`, `rec.id` and `rec.team` are fixed once the state
// is in the session table and may be read without a lock (the spec changes
// once, in stage doctored, when the LLM's admitted patches are swapped in:
// no trial of it is leasable then). Everything else is guarded by
// `sync.mu`; every method requires it held, or the state to be the caller's
// own (not yet shared, or a copy).
#ifndef INFRARSI_CORE_SESSION_STATE_H_
#define INFRARSI_CORE_SESSION_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/bank.h"
#include "core/llm_patches.h"
#include "core/optimizer.h"
#include "core/search_history.h"
#include "core/priors.h"
#include "core/spec.h"
#include "core/trial_queue.h"
#include "core/trial_status.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// What a session's search started from besides its trials. Set when the
// run starts and never changed after, so a proposal made outside every
// lock holds it by a shared pointer.
struct SearchInputs {
  // The session's spec (fixed at Init), shared so a proposal need not copy
  // it (patches alone may be megabytes).
  SessionSpec spec;
  std::optional<Priors> priors;
  std::string priors_label = "none";
  std::vector<Config> warm_starts;
  // The bank's trials of the same workload (any GPU) the models learn from.
  std::vector<SearchContext::Related> related;
  // How many of each there were: what the report shows once the vectors
  // are let go (a session that stopped searching keeps only these, its
  // priors and their label).
  int warm_start_count = 0;
  int related_count = 0;
};

// The stored record of what a search started from (the session record's
// `search`), as EncodeSearchRecord writes it; `llm` (optional) receives the
// LLM's patch round stored with it. A record that does not read gives an
// empty search.
std::shared_ptr<const SearchInputs> DecodeSearchRecord(const std::string& json,
                                                       LlmPatchRound* llm = nullptr);
std::string EncodeSearchRecord(const SearchInputs& in, const LlmPatchRound& llm);
// The same inputs without what only proposals use (the spec's copy, the
// seeds, the related trials).
std::shared_ptr<const SearchInputs> LightSearch(const SearchInputs& in);

struct SessionState {
  storage::SessionRecord rec;
  SessionSpec spec;
  // Derived from trials, kept incrementally.
  int search_in_flight = 0;
  int search_total = 0;  // search trials ever created
  int search_done = 0;   // finished search trials
  // Wall seconds its trials took (and attempts the infrastructure failed
  // lost): the report's total_cost_s, kept for the session list.
  double cost_s = 0;
  double best_step_time_s = 0;  // best ok search trial, 0: none
  int64_t best_trial_id = 0;
  Config best_config;
  v1::DoctorReport doctor;          // decoded rec.doctor_report
  v1::Verification verification;    // decoded rec.verification
  std::vector<v1::SessionEvent> events;  // bounded backlog, oldest first
  int64_t dropped_through_seq = 0;       // newest seq dropped from it
  std::shared_ptr<const SearchInputs> search = std::make_shared<const SearchInputs>();
  // What its search's proposals keep between them (SearchContext::memo),
  // made by the first proposal of a run and let go when the run ends; not
  // stored (a restarted server's first proposal starts its fits afresh).
  std::shared_ptr<ProposalMemo> proposal_memo;
  // Its trials as its search last read them (SearchDriver), kept and let
  // go with the memo; not stored (a restarted server reads them all once).
  std::shared_ptr<SearchHistory> search_history;
  std::string stop_reason;  // set when the search stops early
  // The LLM's patch proposals, asked once when the run starts (stored in
  // rec.search; its admitted patches are in `spec`).
  LlmPatchRound llm_round;
  // Why its work waits (SessionSummary.notice); not stored: the reaper
  // says it again after a restart.
  std::string notice;
  // The last write of this session's that storage refused for want of room
  // (disk full, a quota), until one succeeds: said first in the notice, so
  // a stall is never silent.
  std::string write_error;
  // Its trials that failed or timed out (IsHostFailureStatus): while there
  // are none, no host can be broken by its evidence (the check is skipped).
  int host_failures = 0;
  // A Slurm session's nodes noted as failing its trials (its jobs'
  // --exclude): read from its trials by the first lease after a completion
  // that carried a job, not by every lease.
  std::optional<std::vector<std::string>> failing_nodes;

  // The session's lock and the signal of its events. A copy of the state
  // (a transaction's snapshot) copies the data only: the copy gets a lock
  // of its own, and assigning a state back keeps the target's.
  struct Sync {
    Sync() = default;
    Sync(const Sync&) {}
    Sync& operator=(const Sync&) { return *this; }
    absl::Mutex mu;
    absl::CondVar events;
  };
  mutable Sync sync;

  // The state rebuilt from its record and its trials, read from `storage`.
  // DATA_LOSS when the stored spec no longer parses.
  static absl::StatusOr<std::unique_ptr<SessionState>> Restore(storage::SessionRecord rec,
                                                               storage::Storage* storage);

  // Its summary, from the state alone.
  v1::SessionSummary Summary() const;
  // The seq of its newest event (kept or dropped).
  int64_t LastEventSeq() const;
  // Appends `ev` (its seq newer than every one held) to the backlog, which
  // keeps the newest `max_backlog`, and wakes the watchers.
  void AddEvent(v1::SessionEvent ev, size_t max_backlog);
  // Keeps the newest `keep` events (a watcher further behind starts again
  // from a snapshot) and gives the rest's memory back.
  void TrimBacklog(size_t keep);
  // The best-trial rule: a finished search trial `t` that is ok and faster
  // than the best so far becomes the best.
  absl::Status ConsiderBest(const storage::TrialRecord& t);
  // What running its trials requires of an agent (the lease queue's key).
  TrialQueue::Requirement Requirement() const;
  // Sets `search` and the record's `search` from what the run starts with:
  // the priors priors_for found (patches' own priors in the spec make a
  // session informed even without a priors file) and the bank's seeds.
  void StartSearch(std::pair<std::optional<Priors>, std::string> priors, Bank::Seeds seeds);
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SESSION_STATE_H_
