#include "core/session_manager.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/agent_health.h"
#include "core/patch_scope.h"
#include "core/agent_policy.h"
#include "core/agent_registry.h"
#include "core/agent_report.h"
#include "core/assignment.h"
#include "core/apply_plan.h"
#include "core/audit.h"
#include "core/bank.h"
#include "core/contract.h"
#include "core/doctor.h"
#include "core/integrity.h"
#include "core/model_optimizer.h"
#include "base/proto_util.h"
#include "base/random.h"
#include "core/report.h"
#include "core/slurm_job.h"
#include "base/status_macros.h"
#include "core/verification.h"
#include "models/stats.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

constexpr size_t kMaxEventBacklog = 2000;
constexpr size_t kFinishedEventBacklog = 64;
constexpr int kMaxInFlightPerSession = 16;

// Releases a mutex its caller already holds (taken by TryLock or Lock).
class HeldLock {
 public:
  explicit HeldLock(absl::Mutex* mu) : mu_(mu) {}
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock() { mu_->Unlock(); }

 private:
  absl::Mutex* mu_;
};

bool IsLeased(const std::string& status) {
  return status == ts::kLeased || status == ts::kRunning;
}

// What a session's search started from, as stored with the session:
// {"priors_label": ..., "warm_starts": N, "related": N, "priors": {...}}.
template <typename Inputs>
std::string EncodeSearchRecord(const Inputs& in, const LlmPatchRound& llm) {
  return absl::StrCat(R"({"priors_label":)", JsonQuote(in.priors_label), R"(,"warm_starts":)",
                      in.warm_start_count, R"(,"related":)", in.related_count, R"(,"priors":)",
                      in.priors ? EncodePriorsJson(*in.priors) : "null",
                      llm.asked ? absl::StrCat(R"(,"llm_patches":)", EncodeLlmPatchRound(llm)) : "",
                      "}");
}

// What the LLM is shown of a session's editable scope: its files at the
// locked commit, as far as they fit.
std::vector<std::pair<std::string, std::string>> EditableFiles(const SessionSpec& spec,
                                                               const SourceRepo* repo) {
  std::vector<std::pair<std::string, std::string>> out;
  if (repo == nullptr) return out;
  auto files = repo->ListFiles(spec.repository.url, spec.repository.base_commit);
  if (!files.ok()) return out;
  size_t total = 0;
  for (const std::string& f : *files) {
    // In scope exactly as a patch changing it would be.
    if (!CheckPatchScope("", {PatchedFile{f}}, spec.contract.editable, spec.contract.protected_files).ok()) {
      continue;
    }
    auto text = repo->ReadFile(spec.repository.url, spec.repository.base_commit, f, 64 << 10);
    if (!text.ok() || total + text->size() > kMaxLlmContextBytes) continue;
    total += text->size();
    out.emplace_back(f, *std::move(text));
  }
  return out;
}

v1::Contract ContractProto(const SessionSpec& spec, const std::string& hash) {
  const ContractSpec& c = spec.contract;
  v1::Contract p;
  p.set_hash(hash);
  p.set_workload_signature(spec.WorkloadSignature());
  p.set_tokens_per_step(c.tokens_per_step);
  p.set_timed_steps(c.timed_steps);
  p.set_data_seed_set(c.data_seed_set);
  p.set_data_seed(c.data_seed);
  p.set_loss_abs_tol(c.loss_abs_tol);
  p.set_loss_rel_tol(c.loss_rel_tol);
  p.set_timing_tolerance(c.timing_tolerance);
  for (const auto& x : c.precision) p.add_precision(x);
  p.set_optimizer_in_window(c.optimizer_in_window);
  for (const auto& x : c.editable) p.add_editable(x);
  for (const auto& x : c.protected_files) p.add_protected_files(x);
  for (const auto& [k, v] : c.protected_hashes) (*p.mutable_protected_hashes())[k] = v;
  for (const auto& patch : spec.patches) p.add_patches(patch.name);
  // The name a reader knows it by (a URL may carry credentials).
  p.set_repository(spec.repository.name.empty() ? spec.repository.url : spec.repository.name);
  p.set_base_commit(spec.repository.base_commit);
  for (const auto& [a, b] : spec.patch_conflicts) p.add_patch_conflicts(absl::StrCat(a, "+", b));
  for (const auto& patch : spec.patches) (*p.mutable_patch_diffs())[patch.name] = patch.diff;
  return p;
}

// The session's priors, given what priors_for found: patches' own priors
// in the spec make a session informed even without a priors file.
void UsePriors(std::pair<std::optional<Priors>, std::string> priors, const SessionSpec& spec,
               std::optional<Priors>* out, std::string* label) {
  *out = std::move(priors.first);
  *label = std::move(priors.second);
  const bool patch_priors =
      std::any_of(spec.patches.begin(), spec.patches.end(), [](const PatchSpec& p) { return p.has_prior; });
  if (patch_priors) {
    if (!out->has_value()) {
      *out = Priors();
      *label = "patch priors in the spec";
    } else {
      *label += " + patch priors in the spec";
    }
  }
}

// Stages whose trials may be leased.
bool IsLeasingStage(v1::Stage st) {
  return st == v1::STAGE_DOCTORING || st == v1::STAGE_RUNNING || st == v1::STAGE_VERIFYING;
}

// Stages a session stays in memory for: it may still move on by itself or
// is waiting for its team's next command.
constexpr const char* kActiveStages[] = {"initialized", "doctoring", "doctored", "running",
                                         "verifying"};
bool IsActiveStage(const std::string& stage) {
  return std::find(std::begin(kActiveStages), std::end(kActiveStages), stage) !=
         std::end(kActiveStages);
}

absl::Status StageError(const std::string& id, const std::string& stage, absl::string_view need) {
  return absl::FailedPreconditionError(
      absl::StrCat("session_id: session ", id, " is in stage ", stage, "; ", need));
}


}  // namespace

SessionManager::SessionManager(const Options& options)
    : options_(options), registry_(options.agent_liveness) {
  if (options_.optimizer) {
    optimizer_ = options_.optimizer;
  } else {
    owned_optimizer_ = std::make_unique<ModelOptimizer>();
    optimizer_ = owned_optimizer_.get();
  }
}

absl::StatusOr<std::unique_ptr<SessionManager>> SessionManager::Create(const Options& options) {
  if (options.storage == nullptr) return absl::InvalidArgumentError("storage: required");
  if (options.clock == nullptr) return absl::InvalidArgumentError("clock: required");
  if (options.lease_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_timeout: must be positive");
  }
  if (options.max_attempts < 1) return absl::InvalidArgumentError("max_attempts: must be >= 1");
  std::unique_ptr<SessionManager> m(new SessionManager(options));
  // The bank's reader and a second one for one session's reads (a
  // proposal's history, a report, a page of sessions), so that they never
  // queue behind a client looping on the bank. An injected reader serves
  // both.
  m->reader_ = m->session_reader_ = options.reader;
  if (options.reader == nullptr) {
    ASSIGN_OR_RETURN(m->reader_, storage::ReaderOf(options.storage, &m->owned_reader_));
    ASSIGN_OR_RETURN(m->session_reader_,
                     storage::ReaderOf(options.storage, &m->owned_session_reader_));
  }
  Bank::Options bo;
  bo.reader = m->reader_;
  ASSIGN_OR_RETURN(m->bank_, Bank::Create(bo));
  RETURN_IF_ERROR(m->Load());
  RETURN_IF_ERROR(m->ProposePending("", /*wait_for_busy=*/true));  // resumed sessions' windows
  return m;
}

std::shared_ptr<const SessionManager::SearchInputs> SessionManager::DecodeSearchRecord(
    const std::string& json, LlmPatchRound* llm) {
  auto in = std::make_shared<SearchInputs>();
  try {
    const YAML::Node n = YAML::Load(json);
    if (llm != nullptr && n["llm_patches"] && n["llm_patches"].IsMap()) {
      YAML::Emitter e;
      e << YAML::Flow << YAML::DoubleQuoted << n["llm_patches"];
      *llm = DecodeLlmPatchRound(e.c_str());
    }
    if (n["priors_label"]) in->priors_label = n["priors_label"].as<std::string>();
    if (n["warm_starts"]) in->warm_start_count = n["warm_starts"].as<int>();
    if (n["related"]) in->related_count = n["related"].as<int>();
    if (n["priors"] && n["priors"].IsMap()) {
      YAML::Emitter e;
      e << YAML::Flow << n["priors"];
      if (auto p = ParsePriors(e.c_str()); p.ok()) in->priors = *std::move(p);
    }
  } catch (const YAML::Exception&) {
    // Written by this code; a record that does not read shows no search.
  }
  return in;
}

std::shared_ptr<const SessionManager::SearchInputs> SessionManager::LightSearch(
    const SearchInputs& in) {
  auto light = std::make_shared<SearchInputs>();
  light->priors = in.priors;
  light->priors_label = in.priors_label;
  light->warm_start_count = in.warm_start_count;
  light->related_count = in.related_count;
  return light;
}

int64_t SessionManager::NowMs() const { return absl::ToUnixMillis(options_.clock->Now()); }

std::string SessionManager::NewId(const std::string& prefix) {
  return absl::StrCat(prefix, "-", SecureRandomHex(6));
}

absl::Status SessionManager::Load() {
  // Sequence numbers start from the clock so a watcher that reconnects after
  // a restart never waits for numbers the new process already used.
  next_seq_ = std::max<int64_t>(1, absl::ToUnixMicros(options_.clock->Now()));
  ASSIGN_OR_RETURN(auto agents, options_.storage->ListAgents());
  // Active sessions only: finished ones are read back when asked for.
  storage::SessionQuery q;
  q.stages.assign(std::begin(kActiveStages), std::end(kActiveStages));
  ASSIGN_OR_RETURN(auto records, options_.storage->ListSessionsPage(q));
  std::vector<std::shared_ptr<SessionState>> loaded;
  for (auto& rec : records) {
    ASSIGN_OR_RETURN(std::shared_ptr<SessionState> s, Restore(std::move(rec), options_.storage));
    loaded.push_back(std::move(s));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& a : agents) registry_.Put(std::move(a));
    for (const auto& s : loaded) sessions_[s->rec.id].state = s;
  }
  for (const auto& s : loaded) PublishStageLocked(*s);  // nothing else runs yet
  RETURN_IF_ERROR(RebuildQueue());
  // Resume: a running session whose window is short (the server died
  // between a completion and its follow-up) gets refilled.
  for (const auto& sp : loaded) {
    SessionState* s = sp.get();
    absl::MutexLock lock(&s->sync.mu);
    const v1::Stage stage = StageFromName(s->rec.stage);
    if (stage == v1::STAGE_RUNNING) {
      std::pair<std::optional<Priors>, std::string> priors{std::nullopt, "none"};
      if (options_.priors_for) priors = options_.priors_for(s->spec);
      ASSIGN_OR_RETURN(Bank::Seeds seeds, bank_->SeedsFor(s->spec, s->rec.id, s->rec.team));
      RETURN_IF_ERROR(StartSearchLocked(*s, std::move(priors), std::move(seeds)));
      RETURN_IF_ERROR(TransactLocked(*s, [&] { return FillWindowLocked(*s); }));
    } else if (stage == v1::STAGE_VERIFYING || stage == v1::STAGE_DOCTORING) {
      ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
      RETURN_IF_ERROR(TransactLocked(*s, [&] {
        return stage == v1::STAGE_DOCTORING ? AdvanceDoctorLocked(*s, trials)
                                            : AdvanceVerificationLocked(*s, trials);
      }));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SessionManager::SessionState>> SessionManager::Restore(
    storage::SessionRecord rec, storage::Storage* storage) {
  SpecParseOptions po;
  po.spec_dir = rec.spec_dir;
  // Frozen at Init: what was sent then is in the record and the contract.
  po.stored = true;
  po.team_known = !rec.team.empty();
  // The frozen contract wins over anything re-derived from the spec.
  const v1::Contract frozen = FromJson<v1::Contract>(rec.contract);
  const std::map<std::string, std::string> diffs(frozen.patch_diffs().begin(),
                                                 frozen.patch_diffs().end());
  po.frozen_patch_diffs = &diffs;
  auto spec = ParseSpec(rec.spec_yaml, po);
  if (!spec.ok()) {
    return absl::DataLossError(absl::StrCat("session ", rec.id,
                                            ": stored spec no longer parses: ",
                                            spec.status().message()));
  }
  auto s = std::make_unique<SessionState>();
  s->rec = std::move(rec);
  s->spec = *std::move(spec);
  s->spec.contract.protected_hashes = {frozen.protected_hashes().begin(),
                                       frozen.protected_hashes().end()};
  s->spec.repository.base_commit = frozen.base_commit();
  if (!s->rec.landscape.empty()) s->spec.replay.landscape_content = s->rec.landscape;
  for (const std::string& pair : frozen.patch_conflicts()) {
    const size_t plus = pair.find('+');
    if (plus != std::string::npos) {
      s->spec.patch_conflicts.emplace_back(pair.substr(0, plus), pair.substr(plus + 1));
    }
  }
  s->doctor = FromJson<v1::DoctorReport>(s->rec.doctor_report);
  s->verification = FromJson<v1::Verification>(s->rec.verification);
  // What its search started from, for the report (a running session's
  // search is started again by Load).
  if (!s->rec.search.empty()) {
    s->search = DecodeSearchRecord(s->rec.search, &s->llm_round);
    // The LLM's admitted patches are candidates of this session as its
    // own are: back into the spec (asked once, never again).
    RETURN_IF_ERROR(RestoreLlmPatches(s->llm_round, &s->spec));
  }
  ASSIGN_OR_RETURN(auto trials, storage->ListTrials(s->rec.id));
  for (const auto& t : trials) {
    s->host_failures += t.status == ts::kFailed || t.status == ts::kTimeout;
    s->cost_s += t.cost_s + t.lost_s;
    if (t.purpose != "search") continue;
    ++s->search_total;
    if (IsInFlightStatus(t.status)) ++s->search_in_flight;
    if (!IsInFlightStatus(t.status) && t.status != ts::kCancelled) ++s->search_done;
    if (t.status == ts::kOk && (s->best_trial_id == 0 || t.step_time_s < s->best_step_time_s)) {
      s->best_trial_id = t.id;
      s->best_step_time_s = t.step_time_s;
      ASSIGN_OR_RETURN(s->best_config, DecodeConfigJson(t.config));
    }
  }
  return s;
}

void SessionManager::Trim() {
  std::vector<std::shared_ptr<SessionState>> kept;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<uint64_t, std::string>> finished;
    for (const auto& [id, e] : sessions_) {
      if (e.active || e.pins > 0 || e.proposing || refill_pending_.count(id)) continue;
      finished.emplace_back(e.touched, id);
    }
    std::sort(finished.begin(), finished.end());
    const size_t drop =
        finished.size() > options_.finished_cache ? finished.size() - options_.finished_cache : 0;
    for (size_t i = 0; i < finished.size(); ++i) {
      if (i < drop) {
        queue_.RemoveSession(finished[i].second);
        sessions_.erase(finished[i].second);
      } else {
        kept.push_back(sessions_.at(finished[i].second).state);
      }
    }
  }
  // A finished session's backlog: the newest events (a watcher further
  // behind starts again from a snapshot). Under each one's own lock.
  for (const auto& s : kept) {
    absl::MutexLock lock(&s->sync.mu);
    if (s->events.size() > kFinishedEventBacklog) {
      const size_t drop = s->events.size() - kFinishedEventBacklog;
      s->dropped_through_seq = s->events[drop - 1].seq();
      s->events.erase(s->events.begin(), s->events.begin() + static_cast<std::ptrdiff_t>(drop));
      s->events.shrink_to_fit();
    }
  }
}

TrialQueue::Requirement SessionManager::RequirementOf(const SessionState& s) const {
  TrialQueue::Requirement r;
  r.gpu_model = absl::AsciiStrToLower(s.spec.gpu);
  r.gpu_count = s.spec.gpu_count;
  r.executor = s.spec.ExecutorName();
  r.team = s.rec.team;
  r.pool = s.spec.pool;
  return r;
}

absl::Status SessionManager::WriteTrialLocked(const SessionState& s, storage::TrialRecord& t) {
  t.executor = s.spec.ExecutorName();
  if (t.id == 0) {
    ASSIGN_OR_RETURN(t.id, options_.storage->InsertTrial(t));
  } else {
    RETURN_IF_ERROR(options_.storage->UpdateTrial(t));
  }
  // Filed whatever the stage (a doctor queues its runs before it moves to
  // doctoring); a lease checks the stage, and a session that stops leasing
  // takes its work out (SaveSessionLocked). A lease that sees this entry
  // before the transaction commits waits for the session's lock and looks
  // again.
  absl::MutexLock lock(&mu_);
  if (t.status == ts::kQueued) {
    queue_.Put(t, RequirementOf(s));
  } else {
    queue_.Remove(t.id);
  }
  return absl::OkStatus();
}

absl::Status SessionManager::RebuildQueue() {
  ASSIGN_OR_RETURN(auto queued, options_.storage->ListTrialsByStatus(
                                    ts::kQueued, std::numeric_limits<int32_t>::max()));
  absl::MutexLock lock(&mu_);
  queue_.Clear();
  for (const auto& t : queued) {
    auto it = sessions_.find(t.session_id);
    // A queued trial of a session not in memory is of a finished one.
    if (it == sessions_.end() || !it->second.leasing) continue;
    queue_.Put(t, RequirementOf(*it->second.state));
  }
  return absl::OkStatus();
}

absl::Status SessionManager::RebuildSessionQueueLocked(const SessionState& s) {
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s.rec.id));
  const bool leasing = IsLeasingStage(StageFromName(s.rec.stage));
  absl::MutexLock lock(&mu_);
  queue_.RemoveSession(s.rec.id);
  if (!leasing) return absl::OkStatus();
  for (const auto& t : trials) {
    if (t.status == ts::kQueued) queue_.Put(t, RequirementOf(s));
  }
  return absl::OkStatus();
}

void SessionManager::PublishStageLocked(const SessionState& s) {
  const v1::Stage stage = StageFromName(s.rec.stage);
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(s.rec.id);
  if (it == sessions_.end() || it->second.state.get() != &s) return;  // not (yet) in the table
  Entry& e = it->second;
  e.active = IsActiveStage(s.rec.stage);
  e.leasing = IsLeasingStage(stage);
  e.running = stage == v1::STAGE_RUNNING;
  // Work of a session that stopped leasing leaves the queue.
  if (!e.leasing) queue_.RemoveSession(s.rec.id);
}

SessionManager::SessionRef::SessionRef(SessionManager* m, std::shared_ptr<SessionState> s)
    : m_(m), state_(std::move(s)) {}

SessionManager::SessionRef::SessionRef(SessionRef&& o) noexcept
    : m_(o.m_), state_(std::move(o.state_)) {
  o.m_ = nullptr;
}

SessionManager::SessionRef& SessionManager::SessionRef::operator=(SessionRef&& o) noexcept {
  if (this != &o) {
    Release();
    m_ = o.m_;
    state_ = std::move(o.state_);
    o.m_ = nullptr;
  }
  return *this;
}

SessionManager::SessionRef::~SessionRef() { Release(); }

void SessionManager::SessionRef::Release() {
  if (m_ != nullptr && state_ != nullptr) m_->Unpin(state_->rec.id, state_.get());
  m_ = nullptr;
  state_.reset();
}

SessionManager::SessionRef SessionManager::PinLocked(Entry& e) {
  ++e.pins;
  e.touched = next_touch_++;
  return SessionRef(this, e.state);
}

void SessionManager::Unpin(const std::string& id, const SessionState* s) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end() && it->second.state.get() == s) --it->second.pins;
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::Find(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("session_id: required");
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) return PinLocked(it->second);
  }
  // A finished session that left memory: read it back (its own record and
  // trials, whatever the history's size) without any lock. Nothing changes
  // it meanwhile: a session changes only while pinned, and a pinned one is
  // never let go.
  auto rec = options_.storage->GetSession(id);
  if (absl::IsNotFound(rec.status())) return NoSuchSession(id);
  if (!rec.ok()) return rec.status();
  ASSIGN_OR_RETURN(std::shared_ptr<SessionState> s, Restore(*std::move(rec), options_.storage));
  // Its event backlog did not come back with it: a watcher from before
  // starts again from a snapshot (which shows where the session is now),
  // never waits for events that were let go.
  s->dropped_through_seq = next_seq_.load() - 1;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = sessions_.try_emplace(id);
  if (inserted) {
    // Another call may have read it back meanwhile: then theirs is used.
    it->second.state = std::move(s);
    const SessionState& st = *it->second.state;
    it->second.active = IsActiveStage(st.rec.stage);
    it->second.leasing = IsLeasingStage(StageFromName(st.rec.stage));
    it->second.running = StageFromName(st.rec.stage) == v1::STAGE_RUNNING;
  }
  return PinLocked(it->second);
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::FindFor(const std::string& id,
                                                                   const Principal& who,
                                                                   Action action) {
  RETURN_IF_ERROR(Authorize(who, action));
  ASSIGN_OR_RETURN(SessionRef s, Find(id));
  if (!who.SeesTeam(s->rec.team)) return NoSuchSession(id);
  return s;
}

absl::StatusOr<SessionManager::SessionRef> SessionManager::RecordedSession(
    const storage::TrialRecord& t) {
  auto s = Find(t.session_id);
  if (absl::IsNotFound(s.status())) {
    return absl::InternalError(absl::StrCat("trial ", t.id, " has no session"));
  }
  return s;
}

v1::SessionSummary SessionManager::SummaryOf(const SessionState& s) {
  v1::SessionSummary out;
  out.set_session_id(s.rec.id);
  out.set_name(s.rec.name);
  out.set_stage(StageFromName(s.rec.stage));
  out.set_stage_name(s.rec.stage);
  out.mutable_workload()->set_model(s.spec.model);
  out.mutable_workload()->set_global_batch(s.spec.global_batch);
  out.mutable_workload()->set_seq_len(s.spec.seq_len);
  out.mutable_workload()->set_flops_per_token(SpecFlopsPerToken(s.spec));
  out.mutable_hardware()->set_gpu(s.spec.gpu);
  out.mutable_hardware()->set_count(s.spec.gpu_count);
  out.set_workload_signature(s.rec.workload_signature);
  out.set_trials_done(s.search_done);
  out.set_trials_planned(s.rec.max_trials);
  out.set_baseline_step_time_s(s.rec.baseline_step_time_s);
  out.set_baseline_cv(s.rec.baseline_cv);
  const double base = s.rec.baseline_step_time_s;
  out.set_noise_floor(s.doctor.noise_floor());
  const int promoted = s.verification.promoted_rank();
  if (promoted > 0 && promoted <= s.verification.candidates_size()) {
    // A verified promotion: its speedup is the A/B estimate.
    const auto& c = s.verification.candidates(promoted - 1);
    out.set_promoted(true);
    out.set_best_speedup(c.speedup());
    out.set_best_step_time_s(base / c.speedup());
    *out.mutable_best_config() = c.config();
  } else if (s.best_trial_id != 0 && (base == 0 || s.best_step_time_s < base)) {
    out.set_best_step_time_s(s.best_step_time_s);
    CopyConfig(s.best_config, out.mutable_best_config());
    if (base > 0) out.set_best_speedup(base / s.best_step_time_s);
  } else if (base > 0) {
    out.set_best_step_time_s(base);
    CopyConfig(s.spec.baseline, out.mutable_best_config());
    out.set_best_speedup(1.0);
  }
  out.set_contract_hash(s.rec.contract_hash);
  out.set_created_unix_ms(s.rec.created_ms);
  out.set_error(s.rec.error);
  out.set_applied_commit(s.rec.applied_commit);
  out.set_notice(s.notice);
  out.set_last_event_seq(LastEventSeq(s));
  out.set_cost_s(s.cost_s);
  return out;
}

int64_t SessionManager::LastEventSeq(const SessionState& s) {
  return s.events.empty() ? s.dropped_through_seq : s.events.back().seq();
}

void SessionManager::EmitLocked(SessionState& s, const std::string& kind,
                                const storage::TrialRecord* trial, const std::string& message) {
  v1::SessionEvent ev;
  ev.set_seq(next_seq_.fetch_add(1));
  ev.set_kind(kind);
  ev.set_message(message);
  if (trial) *ev.mutable_trial() = TrialViewOf(*trial);
  *ev.mutable_session() = SummaryOf(s);
  s.events.push_back(std::move(ev));
  if (s.events.size() > kMaxEventBacklog) {
    const size_t drop = s.events.size() - kMaxEventBacklog;
    s.dropped_through_seq = s.events[drop - 1].seq();
    s.events.erase(s.events.begin(), s.events.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  s.sync.events.SignalAll();
}

absl::Status SessionManager::TransactLocked(SessionState& s,
                                            const std::function<absl::Status()>& fn) {
  // Snapshot everything but the event backlog, which can be long.
  std::vector<v1::SessionEvent> events = std::move(s.events);
  SessionState saved = s;
  s.events = std::move(events);
  const int64_t last_seq = next_seq_.load() - 1;
  absl::Status st = options_.storage->Transaction(fn);
  if (!st.ok()) {
    events = std::move(s.events);
    events.erase(std::remove_if(events.begin(), events.end(),
                                [&](const v1::SessionEvent& e) { return e.seq() > last_seq; }),
                 events.end());
    s = std::move(saved);
    s.events = std::move(events);
    // The table and the queue followed writes storage just rolled back.
    PublishStageLocked(s);
    if (absl::Status q = RebuildSessionQueueLocked(s); !q.ok()) {
      return absl::Status(st.code(), absl::StrCat(st.message(), "; and the lease queue could not "
                                                                "be re-read: ", q.message()));
    }
  }
  return st;
}

absl::Status SessionManager::SaveSessionLocked(SessionState& s, const std::string& stage) {
  const std::string old = s.rec.stage;
  s.rec.stage = stage;
  s.rec.updated_ms = NowMs();
  RETURN_IF_ERROR(options_.storage->UpdateSession(s.rec));
  PublishStageLocked(s);
  if (!IsLeasingStage(StageFromName(stage))) s.notice.clear();  // nothing waits any more
  // A search that ended lets go of its inputs (the spec's copy, the bank's
  // seeds and related trials), keeping what the report shows.
  if (StageFromName(stage) != v1::STAGE_RUNNING &&
      (!s.search->related.empty() || !s.search->warm_starts.empty())) {
    s.search = LightSearch(*s.search);
  }
  if (old != stage) EmitLocked(s, "stage_changed", nullptr);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Init

absl::StatusOr<v1::SessionSummary> SessionManager::Init(const v1::InitRequest& request,
                                                        const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kSubmit));
  if (request.spec_yaml().empty()) return absl::InvalidArgumentError("spec_yaml: required");
  // The files the spec names, as sent: the manager reads no path.
  std::map<std::string, std::string> files;
  size_t total = 0;
  for (int i = 0; i < request.files_size(); ++i) {
    const v1::SpecFile& f = request.files(i);
    const std::string field = absl::StrCat("files[", i, "]");
    if (f.field().empty()) return absl::InvalidArgumentError(field + ".field: required");
    if (f.content().size() > kMaxSpecFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".content: ", f.field(), " is ",
                                                     f.content().size(), " bytes, more than ",
                                                     kMaxSpecFileBytes));
    }
    total += f.content().size();
    if (!files.emplace(f.field(), f.content()).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".field: '", f.field(), "' sent twice"));
    }
  }
  if (total > kMaxSpecFilesBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("files: ", total, " bytes in all, more than ", kMaxSpecFilesBytes));
  }
  std::set<std::string> used;
  SpecParseOptions po;
  po.spec_dir = request.spec_dir();
  po.files = &files;
  po.files_used = &used;
  po.blob_hash = options_.blob_hash;
  po.source_repo = options_.source_repo;
  po.team_known = !who.team.empty();
  // Naming a URL makes the server read it: an admin's (and the open
  // server's) privilege; teams name what an admin registered for them.
  po.may_name_urls = who.open || who.role == Role::kAdmin;
  po.repository_url = [&](const std::string& name) -> absl::StatusOr<std::string> {
    auto repo = options_.storage->GetRepository(name);
    // Another team's repository answers as a missing one does.
    if (!repo.ok() || !(who.SeesTeam(repo->team))) {
      if (repo.ok() || absl::IsNotFound(repo.status())) {
        return absl::NotFoundError(absl::StrCat("no repository '", name,
                                                "' is registered for your team (an admin "
                                                "registers them: infrarsi-server repo add)"));
      }
      return repo.status();
    }
    return repo->url;
  };
  ASSIGN_OR_RETURN(SessionSpec spec, ParseSpec(request.spec_yaml(), po));
  for (const auto& [field, content] : files) {
    if (!used.count(field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("files: '", field, "' is not a file this spec names"));
    }
  }

  auto s = std::make_shared<SessionState>();
  s->spec = std::move(spec);
  storage::SessionRecord& rec = s->rec;
  rec.id = NewId("ses");
  rec.name = s->spec.name;
  rec.spec_yaml = request.spec_yaml();
  rec.spec_dir = request.spec_dir();
  rec.stage = StageName(v1::STAGE_INITIALIZED);
  // The contract: what no trial may change. Frozen here; nothing else in the
  // API can edit it.
  rec.contract_hash = StableHash(ContractText(s->spec));
  rec.contract = ToJson(ContractProto(s->spec, rec.contract_hash));
  rec.workload_signature = s->spec.WorkloadSignature();
  rec.gpu_model = s->spec.gpu;
  rec.created_ms = rec.updated_ms = NowMs();
  rec.doctor_repeats = s->spec.doctor_repeats;
  rec.max_trials = s->spec.max_trials;
  rec.team = who.team;
  rec.share_bank = s->spec.share_bank;
  rec.landscape = s->spec.replay.landscape_content;
  RETURN_IF_ERROR(options_.storage->InsertSession(rec));
  // Nobody else sees it before it is in the table.
  EmitLocked(*s, "stage_changed", nullptr);
  v1::SessionSummary out = SummaryOf(*s);
  absl::MutexLock lock(&mu_);
  Entry& e = sessions_[rec.id];
  e.state = std::move(s);
  e.touched = next_touch_++;
  return out;
}

// ------------------------------------------------------------------ Doctor

absl::StatusOr<v1::SessionSummary> SessionManager::Doctor(const v1::DoctorRequest& request,
                                                          const Principal& who) {
  if (request.repeats() < 0 || request.repeats() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("repeats: must be in [0, 100], got ", request.repeats()));
  }
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  if (StageFromName(s->rec.stage) != v1::STAGE_INITIALIZED) {
    return StageError(s->rec.id, s->rec.stage, "doctor runs once, right after init");
  }
  const int repeats = request.repeats() > 0 ? request.repeats() : s->spec.doctor_repeats;
  // Spread the baseline runs over the live agents that can run them, so a
  // slow host shows up; a pinned agent that dies hands its runs to others.
  std::vector<std::string> hosts;
  {
    absl::MutexLock table(&mu_);
    // Refused up front when it can never run (more GPUs than any agent
    // holds), rather than queued to wait forever.
    if (std::string why = registry_.WhyNoneCanHold(RequirementOf(*s)); !why.empty()) {
      return absl::FailedPreconditionError(why);
    }
    hosts = registry_.LiveFitting(RequirementOf(*s), NowMs());
  }
  // A watch from here sees the whole stage: its start, why it waits, every run.
  const int64_t watch_from = LastEventSeq(*s);
  RETURN_IF_ERROR(TransactLocked(*s, [&]() -> absl::Status {
    for (int i = 0; i < repeats; ++i) {
      storage::TrialRecord t;
      t.session_id = s->rec.id;
      t.purpose = "doctor";
      if (hosts.size() > 1) t.pin_agent = hosts[static_cast<size_t>(i) % hosts.size()];
      t.config = EncodeConfigJson(s->spec.baseline);
      t.status = ts::kQueued;
      t.created_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(*s, t));
    }
    s->rec.doctor_repeats = repeats;
    return SaveSessionLocked(*s, StageName(v1::STAGE_DOCTORING));
  }));
  RefreshNoticeLocked(*s);  // said at once when no agent can run it
  work_cv_.SignalAll();
  v1::SessionSummary out = SummaryOf(*s);
  out.set_last_event_seq(watch_from);
  return out;
}

absl::Status SessionManager::AdvanceDoctorLocked(SessionState& s,
                                                 const std::vector<storage::TrialRecord>& trials) {
  std::vector<DoctorRun> runs;
  std::map<std::string, int> statuses;
  std::set<std::string> fields;
  int timed_steps = 0;
  const storage::TrialRecord* violated = nullptr;
  const storage::TrialRecord* first_lost = nullptr;  // the first run that did not finish ok
  int doctor_runs = 0;
  for (const auto& t : trials) {
    if (t.purpose != "doctor") continue;
    if (IsInFlightStatus(t.status)) return absl::OkStatus();  // not done yet
    ++doctor_runs;
    ++statuses[t.status];
    if (t.status == ts::kViolation && violated == nullptr) violated = &t;
    if (t.status != ts::kOk && t.status != ts::kCancelled && first_lost == nullptr) first_lost = &t;
    if (t.status != ts::kOk) continue;
    ASSIGN_OR_RETURN(auto steps, options_.storage->ListSteps(t.id));
    DoctorRun run;
    run.agent = t.agent;
    run.step_time_s = t.step_time_s;
    run.steps = static_cast<int>(steps.size());
    if (t.observed_steps > 0) {
      // The agent's clock: its figures were derived when the trial ended.
      run.window_s = t.observed_window_s;
      run.agent_step_time_s = t.observed_window_s / t.observed_steps;
      run.clock_slack_s = t.clock_slack_s;
      const TrialEvidence e = EvidenceOfTrial(steps, t.cost_s, /*agent_clock=*/true, 0);
      run.tail_s = TimeOnAgentClock(e).tail_s;
    }
    std::map<std::string, std::vector<double>> phases;
    for (const auto& sr : steps) {
      run.losses[sr.step] = sr.loss;
      const StepEvidence e = EvidenceOf(sr);
      if (e.data_seed) fields.insert("data_seed");
      if (!e.dtype.empty()) fields.insert("dtype");
      if (e.optimizer_steps >= 0) fields.insert("optimizer_steps");
      if (sr.warmup) continue;
      auto ph = DecodeDoubleMapJson(sr.phases);
      if (ph.ok() && !ph->empty()) fields.insert("phases");
      if (ph.ok()) {
        for (const auto& [name, secs] : *ph) phases[name].push_back(secs);
      }
    }
    size_t timed = 0;
    for (const auto& sr : steps) timed += !sr.warmup;
    for (auto& [name, v] : phases) {
      v.resize(std::max(v.size(), timed), 0.0);  // a phase left out of a step took no time
      run.phases[name] = models::Median(v);
    }
    if (runs.empty()) {
      for (const auto& sr : steps) timed_steps += !sr.warmup;
    }
    runs.push_back(std::move(run));
  }
  auto fail = [&](std::string why) {
    s.rec.error = std::move(why);
    return SaveSessionLocked(s, StageName(v1::STAGE_FAILED));
  };
  if (violated != nullptr && violated->violation == "instrumentation") {
    return fail(absl::StrCat("doctor: the baseline's metrics lines lack what the contract needs (",
                             violated->error, "); the workload cannot be verified"));
  }
  if (violated != nullptr) {
    return fail(absl::StrCat("doctor: the baseline itself breaks the contract (",
                             violated->violation, "): ", violated->error));
  }
  // Runs that did not finish ok, said with the first one's error and host.
  auto lost = [&] {
    return absl::StrCat(
        "(", absl::StrJoin(statuses, ", ", absl::PairFormatter("=")), "); the first, trial ",
        first_lost->id, " on agent ", first_lost->agent.empty() ? "?" : first_lost->agent, ": ",
        first_lost->error.empty() ? first_lost->status : first_lost->error.substr(0, 500));
  };
  if (runs.empty()) {
    return fail(first_lost != nullptr
                    ? absl::StrCat("doctor: no baseline run succeeded ", lost())
                    : absl::StrCat("doctor: no baseline run succeeded (",
                                   absl::StrJoin(statuses, ", ", absl::PairFormatter("=")), ")"));
  }
  // Instrumentation: the contract can only be checked on what is reported.
  std::vector<std::string> missing;
  if (s.spec.contract.data_seed_set && !fields.count("data_seed")) missing.push_back("data_seed");
  if (s.spec.contract.optimizer_in_window && !fields.count("optimizer_steps")) {
    missing.push_back("optimizer_steps");
  }
  if (!missing.empty()) {
    return fail(absl::StrCat("doctor: the baseline's metrics lines lack ",
                             absl::StrJoin(missing, ", "),
                             ", which the contract needs; the workload cannot be verified"));
  }
  v1::DoctorReport report = BuildDoctorReport(runs, s.spec.verify.runs);
  report.set_timed_steps(timed_steps);
  for (const char* f : {"step", "loss", "tokens", "step_time_s", "peak_mem_gib"}) fields.insert(f);
  for (const auto& f : fields) report.add_fields_seen(f);
  // Honest repeats of the baseline must agree within the loss tolerance, or
  // no trial can be judged against them.
  const ContractSpec& c = s.spec.contract;
  double worst = 0, worst_tol = 0;
  for (const DoctorRun& run : runs) {
    for (const auto& [step, loss] : run.losses) {
      if (step < 0 || step >= report.reference_losses_size()) continue;
      const double ref = report.reference_losses(static_cast<int>(step));
      const double tol = c.loss_abs_tol + c.loss_rel_tol * std::fabs(ref);
      if (std::fabs(loss - ref) - tol > worst - worst_tol) {
        worst = std::fabs(loss - ref);
        worst_tol = tol;
      }
    }
  }
  if (worst > worst_tol) {
    return fail(absl::StrFormat(
        "doctor: baseline runs disagree on the loss by %.3g, more than the tolerance %.3g: "
        "the workload is not deterministic enough to verify (fix its seeds or loosen "
        "contract.loss_abs_tol)",
        worst, worst_tol));
  }
  if (first_lost != nullptr) {
    report.set_warning(absl::StrCat(report.warning(), report.warning().empty() ? "" : "; ",
                                    doctor_runs - static_cast<int>(runs.size()), " of ",
                                    doctor_runs, " baseline runs were lost ", lost(),
                                    "; the baseline rests on the other ", runs.size()));
  }
  if (std::fabs(report.drift()) > std::max(0.02, 3 * report.cv())) {
    report.set_warning(absl::StrCat(
        report.warning(), report.warning().empty() ? "" : "; ",
        absl::StrFormat("the baseline drifted %.1f%% between the first and last runs",
                        100 * report.drift())));
  }
  s.doctor = report;
  s.rec.doctor_report = ToJson(report);
  s.rec.baseline_step_time_s = report.median_step_time_s();
  s.rec.baseline_cv = report.cv();
  s.rec.baseline_runs = report.runs();
  return SaveSessionLocked(s, StageName(v1::STAGE_DOCTORED));
}

// ------------------------------------------------------------------ Run

absl::StatusOr<v1::SessionSummary> SessionManager::Run(const v1::RunRequest& request,
                                                       const Principal& who) {
  if (request.max_trials() < 0 || request.max_trials() > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_trials: must be in [0, 100000], got ", request.max_trials()));
  }
  // Priors may come over the network and the bank's seeds grow with
  // history: both are read before taking the lock.
  std::pair<std::optional<Priors>, std::string> priors{std::nullopt, "none"};
  Bank::Seeds seeds;
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  {
    absl::MutexLock lock(&s->sync.mu);
    if (StageFromName(s->rec.stage) != v1::STAGE_DOCTORED) {
      return StageError(s->rec.id, s->rec.stage, "run needs a finished doctor (stage doctored)");
    }
  }
  // The spec and the team are fixed: read without the lock.
  if (options_.priors_for) priors = options_.priors_for(s->spec);
  ASSIGN_OR_RETURN(seeds, bank_->SeedsFor(s->spec, s->rec.id, s->rec.team));
  // The LLM's patches, once, before the search: admitted onto a copy of the
  // spec outside the lock (git checks each), swapped in under it.
  std::optional<std::pair<SessionSpec, LlmPatchRound>> llm;
  if (options_.llm_patches) llm = AskLlmPatches(*s, seeds);
  absl::ReleasableMutexLock lock(&s->sync.mu);
  // Looked at again: another call may have started it meanwhile.
  if (StageFromName(s->rec.stage) != v1::STAGE_DOCTORED) {
    return StageError(s->rec.id, s->rec.stage, "run needs a finished doctor (stage doctored)");
  }
  {
    absl::MutexLock table(&mu_);
    if (std::string why = registry_.WhyNoneCanHold(RequirementOf(*s)); !why.empty()) {
      return absl::FailedPreconditionError(why);
    }
  }
  if (llm) {
    s->spec = std::move(llm->first);
    s->llm_round = std::move(llm->second);
  }
  RETURN_IF_ERROR(StartSearchLocked(*s, std::move(priors), std::move(seeds)));
  s->stop_reason.clear();
  // A watch from here sees the whole run: its start, why it waits, every trial.
  const int64_t watch_from = LastEventSeq(*s);
  RETURN_IF_ERROR(TransactLocked(*s, [&]() -> absl::Status {
    if (request.max_trials() > 0) s->rec.max_trials = request.max_trials();
    RETURN_IF_ERROR(SaveSessionLocked(*s, StageName(v1::STAGE_RUNNING)));
    return FillWindowLocked(*s);
  }));
  RefreshNoticeLocked(*s);
  // The first proposals, outside the lock; the summary shows them queued.
  lock.Release();
  RETURN_IF_ERROR(ProposePending(s->rec.id, /*wait_for_busy=*/true));
  work_cv_.SignalAll();
  absl::MutexLock again(&s->sync.mu);
  v1::SessionSummary out = SummaryOf(*s);
  out.set_last_event_seq(watch_from);
  return out;
}

std::optional<std::pair<SessionSpec, LlmPatchRound>> SessionManager::AskLlmPatches(
    SessionState& s, const Bank::Seeds& seeds) {
  v1::DoctorReport doctor;
  {
    absl::MutexLock lock(&s.sync.mu);
    if (s.llm_round.asked) return std::nullopt;  // once per session
    doctor = s.doctor;
  }
  std::pair<SessionSpec, LlmPatchRound> out{s.spec, LlmPatchRound()};
  LlmPatchRound& round = out.second;
  round.asked = true;  // whatever comes of it, this was the session's one ask
  if (s.spec.repository.url.empty() || s.spec.contract.editable.empty()) {
    round.note = "not asked: the session has no repository or no editable scope";
    return out;
  }
  LlmPatchContext ctx;
  ctx.spec = &s.spec;
  ctx.doctor = &doctor;
  ctx.files = EditableFiles(s.spec, options_.source_repo);
  ctx.bank = absl::StrCat(seeds.related.size(), " trials of this workload from other sessions, ",
                          seeds.warm_starts.size(), " of their best settings");
  auto body = options_.llm_patches(ctx);
  if (!body.ok()) {
    round.note = absl::StrCat("not used: ", body.status().message());
    return out;
  }
  auto admitted = AdmitLlmPatches(*body, options_.source_repo, &out.first);
  if (!admitted.ok()) {
    round.note = absl::StrCat("not used: ", admitted.status().message());
    return out;
  }
  round = *std::move(admitted);
  return out;
}

absl::Status SessionManager::CheckLeaseHolder(const storage::TrialRecord& t,
                                              const Principal& who,
                                              const std::string& agent_id) {
  if (t.lease_token_id != who.token_id || (!agent_id.empty() && agent_id != t.lease_agent)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "lease_token: trial ", t.id, " is leased to another agent; a lease is bound to the "
        "agent and the token that took it"));
  }
  return absl::OkStatus();
}

int SessionManager::LiveAgentsFor(const SessionState& s) const {
  const TrialQueue::Requirement req = RequirementOf(s);
  absl::MutexLock lock(&mu_);
  return static_cast<int>(registry_.LiveFitting(req, NowMs()).size());
}

absl::Status SessionManager::StartSearchLocked(
    SessionState& s, std::pair<std::optional<Priors>, std::string> priors, Bank::Seeds seeds) {
  auto in = std::make_shared<SearchInputs>();
  in->spec = s.spec;
  UsePriors(std::move(priors), s.spec, &in->priors, &in->priors_label);
  in->warm_starts = std::move(seeds.warm_starts);
  in->related = std::move(seeds.related);
  in->warm_start_count = static_cast<int>(in->warm_starts.size());
  in->related_count = static_cast<int>(in->related.size());
  s.rec.search = EncodeSearchRecord(*in, s.llm_round);
  s.search = std::move(in);
  return absl::OkStatus();
}

int SessionManager::WindowRoomLocked(SessionState& s) {
  // Keep one trial in flight per live agent: enough to use the cluster, few
  // enough that every proposal sees nearly all results.
  const int window = std::clamp(LiveAgentsFor(s), 1, kMaxInFlightPerSession);
  const int budget_left = s.rec.max_trials - s.search_total;
  if (budget_left <= 0 && s.stop_reason.empty()) {
    s.stop_reason = absl::StrCat("trial budget spent (", s.rec.max_trials, " search trials)");
  }
  return std::min(window - s.search_in_flight, budget_left);
}

absl::Status SessionManager::FillWindowLocked(SessionState& s) {
  if (StageFromName(s.rec.stage) != v1::STAGE_RUNNING) return absl::OkStatus();
  if (WindowRoomLocked(s) > 0 && s.stop_reason.empty()) {
    MarkPending(s.rec.id);
    return absl::OkStatus();
  }
  bool proposing = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(s.rec.id);
    proposing = it != sessions_.end() && it->second.proposing;
  }
  // A proposal being made finishes the run itself if it queues nothing.
  if (s.search_in_flight == 0 && !proposing) return FinishRunLocked(s);
  return absl::OkStatus();
}

void SessionManager::MarkPending(const std::string& id) {
  absl::MutexLock lock(&mu_);
  refill_pending_.insert(id);
}

void SessionManager::SetProposing(const std::string& id, bool proposing) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.proposing = proposing;
}

absl::Status SessionManager::ProposePending(const std::string& only, bool wait_for_busy) {
  std::set<std::string> skipped;  // busy, left pending
  for (;;) {
    // One pending session at a time: under the table's lock it is marked
    // as proposing (so no other thread proposes for it); under its own, its
    // window is measured and its inputs (immutable) are shared; its trials
    // are read and the models fitted with no lock held.
    SessionRef s;
    {
      absl::MutexLock lock(&mu_);
      std::string picked;
      for (const std::string& pending : refill_pending_) {
        if ((!only.empty() && pending != only) || skipped.count(pending)) continue;
        auto it = sessions_.find(pending);
        if (it == sessions_.end() || !it->second.proposing) {
          picked = pending;
          break;
        }
      }
      if (picked.empty()) return absl::OkStatus();
      refill_pending_.erase(picked);
      auto it = sessions_.find(picked);
      if (it == sessions_.end()) continue;
      it->second.proposing = true;
      s = PinLocked(it->second);
    }
    const std::string id = s->rec.id;
    std::shared_ptr<const SearchInputs> in;
    int want = 0;
    if (!wait_for_busy && !s->sync.mu.TryLock()) {
      SetProposing(id, false);
      MarkPending(id);
      skipped.insert(id);
      continue;
    }
    if (wait_for_busy) s->sync.mu.Lock();
    {
      HeldLock lock(&s->sync.mu);
      if (StageFromName(s->rec.stage) != v1::STAGE_RUNNING) {
        SetProposing(id, false);
        continue;
      }
      want = s->stop_reason.empty() ? WindowRoomLocked(*s) : 0;
      if (want <= 0) {
        SetProposing(id, false);
        if (absl::Status st = TransactLocked(*s, [&] { return FillWindowLocked(*s); }); !st.ok()) {
          MarkPending(id);
          return st;
        }
        continue;
      }
      in = s->search;
    }
    // Ends a proposal that was not made: the session may be proposed for
    // again (`retry`), or stops its search for `stop`.
    auto give_up = [&](absl::Status why, bool retry, const std::string& stop) -> absl::Status {
      absl::MutexLock lock(&s->sync.mu);
      SetProposing(id, false);
      if (retry) MarkPending(id);
      if (!stop.empty()) {
        s->stop_reason = stop;
        absl::Status st = TransactLocked(*s, [&] { return FillWindowLocked(*s); });
        if (!st.ok()) MarkPending(id);
        if (why.ok()) return st;
      }
      return why;
    };
    // The session's own trials (committed before the lock was let go; a
    // trial finishing meanwhile shows as in flight, which the search treats
    // as taken), on the session reader.
    auto trials = session_reader_->ListTrials(id);
    if (!trials.ok()) return give_up(trials.status(), /*retry=*/true, "");
    double gpu_s = 0;
    auto history = SearchHistoryOf(in->spec, *trials, &gpu_s);
    if (!history.ok()) return give_up(history.status(), /*retry=*/true, "");
    if (in->spec.max_gpu_hours > 0 && gpu_s >= in->spec.max_gpu_hours * 3600) {
      RETURN_IF_ERROR(give_up(absl::OkStatus(), /*retry=*/false,
                              absl::StrFormat("GPU-hour budget spent (%.2f of %.2f GPU-hours)",
                                              gpu_s / 3600, in->spec.max_gpu_hours)));
      continue;
    }
    // Seeded by the session and its progress: a restarted server proposes
    // what the old one would have.
    const uint64_t seed = in->spec.seed * 0x9e3779b97f4a7c15ULL + history->size();
    SearchContext ctx;
    ctx.spec = &in->spec;
    ctx.priors = in->priors ? &*in->priors : nullptr;
    ctx.warm_starts = in->warm_starts;
    ctx.related = &in->related;
    const absl::Time began = absl::Now();
    const Proposal p = optimizer_->Propose(ctx, *history, want, seed);
    proposal_latency_.Observe(absl::ToDoubleSeconds(absl::Now() - began));
    {
      absl::MutexLock lock(&s->sync.mu);
      SetProposing(id, false);
      absl::Status st = TransactLocked(*s, [&] { return ApplyProposalLocked(*s, p); });
      if (!st.ok()) {
        MarkPending(id);
        return st;
      }
    }
    work_cv_.SignalAll();
  }
}

absl::Status SessionManager::ApplyProposalLocked(SessionState& s, const Proposal& p) {
  // The session may have moved on while the proposal was made (cancelled,
  // trials finished, agents gone): queue what there is still room for.
  if (StageFromName(s.rec.stage) != v1::STAGE_RUNNING) return absl::OkStatus();
  const int room = s.stop_reason.empty() ? WindowRoomLocked(s) : 0;
  // Stop: nothing left to try, or nothing expected to beat the best by
  // more than the noise (checked only once min_trials ran).
  const double stop_below = std::max(s.spec.stop_gain, s.doctor.noise_floor());
  if (room <= 0) {
    // Nothing to queue (the budget went meanwhile).
  } else if (p.configs.empty()) {
    s.stop_reason = "every setting of the space was tried";
  } else if (s.search_done >= s.spec.min_trials && p.expected_gain >= 0 &&
             p.expected_gain < stop_below) {
    s.stop_reason = absl::StrFormat(
        "no setting is expected to beat the best by more than %.2f%% (expected gain %.3f%%) "
        "after %d search trials",
        100 * stop_below, 100 * p.expected_gain, s.search_done);
  } else {
    for (size_t i = 0; i < p.configs.size() && static_cast<int>(i) < room; ++i) {
      storage::TrialRecord t;
      t.session_id = s.rec.id;
      t.purpose = "search";
      t.config = EncodeConfigJson(p.configs[i]);
      t.tag = p.reasons[i];
      t.status = ts::kQueued;
      t.created_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(s, t));
      ++s.search_total;
      ++s.search_in_flight;
    }
  }
  return FillWindowLocked(s);
}

absl::Status SessionManager::FinishRunLocked(SessionState& s) {
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s.rec.id));
  ASSIGN_OR_RETURN(VerificationPlan plan,
                   PlanVerification(s.spec, s.rec.id, s.rec.baseline_step_time_s, s.doctor,
                                    s.stop_reason, trials, NowMs()));
  s.verification = std::move(plan.verification);
  s.rec.verification = ToJson(s.verification);
  if (plan.runs.empty()) {
    s.rec.best_trial_id = 0;
    return SaveSessionLocked(s, StageName(v1::STAGE_SEARCHED));
  }
  for (storage::TrialRecord& t : plan.runs) RETURN_IF_ERROR(WriteTrialLocked(s, t));
  work_cv_.SignalAll();
  return SaveSessionLocked(s, StageName(v1::STAGE_VERIFYING));
}

absl::Status SessionManager::AdvanceVerificationLocked(SessionState& s,
                                                       std::vector<storage::TrialRecord> trials) {
  VerificationDecision d = DecideVerification(s.spec, s.doctor, s.verification, trials, NowMs());
  if (!d.done) return absl::OkStatus();
  for (const VerificationDecision::Implausible& bad : d.implausible) {
    for (auto& t : trials) {
      if (t.id != bad.trial_id) continue;
      t.status = ts::kViolation;
      t.violation = "implausible";
      t.error = bad.error;
      RETURN_IF_ERROR(WriteTrialLocked(s, t));
      if (absl::Status b = options_.storage->SetBankStatus(t.id, t.status);
          !b.ok() && !absl::IsNotFound(b)) {
        return b;
      }
      if (t.id == s.best_trial_id) s.best_trial_id = 0;
    }
  }
  if (s.best_trial_id == 0) {
    // The best search trial, now that some may have been disqualified.
    for (const auto& t : trials) {
      if (t.purpose == "search" && t.status == ts::kOk &&
          (s.best_trial_id == 0 || t.step_time_s < s.best_step_time_s)) {
        s.best_trial_id = t.id;
        s.best_step_time_s = t.step_time_s;
        ASSIGN_OR_RETURN(s.best_config, DecodeConfigJson(t.config));
      }
    }
  }
  s.verification = std::move(d.verification);
  s.rec.best_trial_id = d.promoted_trial_id;
  s.rec.verification = ToJson(s.verification);
  return SaveSessionLocked(s, StageName(v1::STAGE_SEARCHED));
}

// ------------------------------------------------------------------ agents

absl::StatusOr<v1::RegisterAgentResponse> SessionManager::RegisterAgent(
    const v1::RegisterAgentRequest& r, const Principal& who) {
  RETURN_IF_ERROR(AgentRegistry::Validate(r));
  const std::vector<std::string> commands(r.commands().begin(), r.commands().end());
  storage::AgentRecord a;
  {
    absl::MutexLock lock(&mu_);
    if (!r.agent_id().empty() && registry_.Contains(r.agent_id())) {
      // Keeping an id is for the agent that registered it: same token.
      ASSIGN_OR_RETURN(storage::AgentRecord * old, registry_.Bound(r.agent_id(), who));
      a.id = old->id;
      // A drain or a quarantine outlives a reconnect; a deregistered
      // agent that comes back is active again.
      if (old->state != kAgentGone) {
        a.state = old->state;
        a.state_reason = old->state_reason;
      }
    } else {
      a.id = NewId("agt");
    }
    // A quarantined host stays quarantined under a new id (an agent that is
    // restarted registers afresh) until an admin resumes it.
    if (a.state == kAgentActive) {
      for (const auto& [id, other] : registry_.All()) {
        if (other.state == kAgentQuarantined && other.host == r.host() &&
            other.token_id == who.token_id) {
          a.state = kAgentQuarantined;
          a.state_reason = absl::StrCat("host ", r.host(), " was quarantined as ", id, ": ",
                                        other.state_reason);
          break;
        }
      }
    }
  }
  a.host = r.host();
  a.gpu_model = r.gpu_model();
  a.gpu_count = r.gpu_count();
  a.memory_per_gpu_gib = r.memory_per_gpu_gib();
  a.executors = absl::StrJoin(r.executors(), ",");
  a.registered_ms = a.last_heartbeat_ms = NowMs();
  a.token_id = who.token_id;
  // An agent token scoped to a team serves that team only; an admin's (or
  // the open server's) and an unscoped agent token form the shared pool.
  a.team = who.role == Role::kAgent && !who.open ? who.team : "";
  a.serves = EncodeStringList({r.teams().begin(), r.teams().end()});
  a.commands = EncodeStringList(commands);
  RETURN_IF_ERROR(options_.storage->PutAgent(a));
  std::vector<SessionRef> running;
  {
    absl::MutexLock lock(&mu_);
    registry_.Put(a);
    for (auto& [id, e] : sessions_) {
      if (e.running) running.push_back(PinLocked(e));
    }
  }
  // A new agent widens running sessions' windows.
  for (SessionRef& s : running) {
    absl::MutexLock lock(&s->sync.mu);
    if (StageFromName(s->rec.stage) != v1::STAGE_RUNNING) continue;
    RETURN_IF_ERROR(TransactLocked(*s, [&] { return FillWindowLocked(*s); }));
  }
  running.clear();
  work_cv_.SignalAll();
  // The agent is registered; a failed refill, or one of a busy session,
  // stays pending.
  ProposePending("", /*wait_for_busy=*/false).IgnoreError();
  v1::RegisterAgentResponse resp;
  resp.set_agent_id(a.id);
  resp.set_lease_timeout_ms(absl::ToInt64Milliseconds(options_.lease_timeout));
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.lease_timeout / 3));
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> SessionManager::Heartbeat(const v1::HeartbeatRequest& r,
                                                                 const Principal& who) {
  storage::AgentRecord copy;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(storage::AgentRecord * agent, registry_.Bound(r.agent_id(), who));
    agent->last_heartbeat_ms = NowMs();
    copy = *agent;
  }
  RETURN_IF_ERROR(options_.storage->PutAgent(copy));  // storage: never under mu_
  v1::HeartbeatResponse resp;
  resp.set_server_unix_ms(NowMs());
  return resp;
}

absl::StatusOr<std::optional<v1::TrialAssignment>> SessionManager::TryLease(
    const std::string& agent_id, const Principal& who) {
  // Sessions whose lock was busy when their trial came up: their work is
  // passed over for other sessions' (a lease never waits behind another
  // session's work while there is other work), and waited for only when
  // nothing else is left.
  std::set<std::string> busy;
  for (int round = 0; round < 64; ++round) {
    std::optional<int64_t> pick;
    SessionRef s;
    storage::AgentRecord agent;
    bool wait_for_busy = false;
    {
      absl::MutexLock lock(&mu_);
      ASSIGN_OR_RETURN(storage::AgentRecord * bound, registry_.Bound(agent_id, who));
      bound->last_heartbeat_ms = NowMs();
      agent = *bound;
      // Draining, quarantined or gone: it finishes what it holds, takes no more.
      if (agent.state != kAgentActive) return std::optional<v1::TrialAssignment>();
      // Only work this agent could run is looked at: the requirement
      // (hardware, executor, tenancy) first, then the trial (its stage,
      // refusals, command policy, pinning).
      auto runnable = [&](const storage::TrialRecord& t, bool skip_busy) {
        auto sit = sessions_.find(t.session_id);
        if (sit == sessions_.end() || !sit->second.leasing) return false;
        if (skip_busy && busy.count(t.session_id)) return false;
        if (!registry_.AllowsTrial(agent, sit->second.state->spec, t)) return false;
        // A/B pairs run on one host; if that host is gone, any may take over.
        return t.pin_agent.empty() || t.pin_agent == agent.id ||
               !registry_.Live(t.pin_agent, NowMs());
      };
      auto fits = [&](const TrialQueue::Requirement& req) { return registry_.Fits(agent, req); };
      pick = queue_.Oldest(fits, [&](const storage::TrialRecord& t) { return runnable(t, true); });
      wait_for_busy = !pick && !busy.empty();
      if (wait_for_busy) {
        pick = queue_.Oldest(fits, [&](const storage::TrialRecord& t) { return runnable(t, false); });
      }
      if (!pick) return std::optional<v1::TrialAssignment>();
      s = PinLocked(sessions_.at(queue_.Find(*pick)->session_id));
    }
    // The session's lock after the table's is let go (the lock order).
    if (wait_for_busy) {
      s->sync.mu.Lock();  // nothing else is left: wait for it
    } else if (!s->sync.mu.TryLock()) {
      busy.insert(s->rec.id);
      continue;
    }
    HeldLock session_lock(&s->sync.mu);
    // The queue as the session's committed state has it (the pick may have
    // come from a transaction of this session that was still open).
    storage::TrialRecord t;
    {
      absl::MutexLock lock(&mu_);
      const storage::TrialRecord* queued = queue_.Find(*pick);
      auto sit = sessions_.find(s->rec.id);
      if (queued == nullptr || queued->session_id != s->rec.id || sit == sessions_.end() ||
          !sit->second.leasing) {
        continue;  // taken or withdrawn meanwhile: look again
      }
      t = *queued;
    }
    t.status = ts::kLeased;
    t.attempts += 1;
    t.lease_agent = agent.id;
    // A credential: 192 bits from the kernel's generator, bound to the
    // token that took it.
    t.lease_token = SecureRandomHex(24);
    t.lease_token_id = who.token_id;
    t.lease_deadline_ms = NowMs() + absl::ToInt64Milliseconds(options_.lease_timeout);
    t.leased_ms = NowMs();
    // Built before the lease is written: a trial that cannot be described
    // is not handed out.
    if (s->spec.slurm.enabled && s->spec.slurm.exclude_failed_nodes && !s->failing_nodes) {
      ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
      s->failing_nodes.emplace();
      for (const FailingNode& n : FindFailingNodes(trials)) s->failing_nodes->push_back(n.node);
    }
    ASSIGN_OR_RETURN(v1::TrialAssignment a,
                     AssignmentFor(s->rec, s->spec, t, options_.lease_timeout,
                                   s->failing_nodes.value_or(std::vector<std::string>())));
    RETURN_IF_ERROR(options_.storage->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(options_.storage->DeleteSteps(t.id));  // a fresh attempt
      return options_.storage->UpdateTrial(t);
    }));
    {
      absl::MutexLock lock(&mu_);
      queue_.Remove(t.id);
    }
    EmitLocked(*s, "trial_leased", &t);
    return std::optional<v1::TrialAssignment>(std::move(a));
  }
  return std::optional<v1::TrialAssignment>();  // raced 64 times: the agent asks again
}

absl::Status SessionManager::ReturnUndelivered(int64_t trial_id, const std::string& lease_token,
                                               const Principal& who) {
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(trial_id));
  SessionState& s = *lt.session;
  storage::TrialRecord& t = lt.trial;
  if (lease_token.empty() || t.lease_token != lease_token || t.status != ts::kLeased) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: not the undelivered lease of trial ", trial_id));
  }
  RETURN_IF_ERROR(CheckLeaseHolder(t, who, ""));
  // It never reached an agent: no attempt counted, and an A/B arm stays
  // pinned to its host (which is still there).
  RETURN_IF_ERROR(TransactLocked(s, [&] {
    return RequeueLocked(s, t,
                         absl::StrCat("the poll of agent ", t.lease_agent,
                                      " that took it had gone; re-queued"),
                         /*refund_attempt=*/true, /*unpin=*/false);
  }));
  work_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<SessionManager::LockedTrial> SessionManager::LockTrial(int64_t trial_id) {
  ASSIGN_OR_RETURN(storage::TrialRecord first, options_.storage->GetTrial(trial_id));
  LockedTrial lt;
  ASSIGN_OR_RETURN(lt.session, RecordedSession(first));
  lt.lock = std::make_unique<absl::MutexLock>(&lt.session->sync.mu);
  // Read again under the session's lock: what it says now is what counts.
  ASSIGN_OR_RETURN(lt.trial, options_.storage->GetTrial(trial_id));
  return lt;
}

absl::StatusOr<std::vector<storage::TrialRecord>> SessionManager::LeasedTrials(
    const std::function<bool(const storage::TrialRecord&)>& pick) {
  std::vector<storage::TrialRecord> out;
  for (const char* status : {ts::kLeased, ts::kRunning}) {
    ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrialsByStatus(status, 100000));
    for (auto& t : trials) {
      if (pick(t)) out.push_back(std::move(t));
    }
  }
  return out;
}

absl::Status SessionManager::RequeueLocked(SessionState& s, storage::TrialRecord& t,
                                           std::string note, bool refund_attempt, bool unpin) {
  if (refund_attempt) t.attempts = std::max(0, t.attempts - 1);
  t.status = ts::kQueued;
  t.lease_deadline_ms = 0;
  if (unpin) t.pin_agent.clear();
  t.note = std::move(note);
  // The lease token is kept: a late report or completion of the old lease is
  // recognised and refused once the trial is leased again. Its steps go
  // when it is (a fresh attempt).
  RETURN_IF_ERROR(WriteTrialLocked(s, t));
  EmitLocked(s, "trial_requeued", &t);
  return absl::OkStatus();
}

absl::StatusOr<v1::DeregisterAgentResponse> SessionManager::DeregisterAgent(
    const v1::DeregisterAgentRequest& r, const Principal& who) {
  storage::AgentRecord copy;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(storage::AgentRecord * agent, registry_.Bound(r.agent_id(), who));
    agent->state = kAgentGone;
    agent->state_reason = "deregistered";
    copy = *agent;
  }
  RETURN_IF_ERROR(options_.storage->PutAgent(copy));
  ASSIGN_OR_RETURN(int requeued, RequeueLeasesOf(copy.id, "deregistered"));
  v1::DeregisterAgentResponse resp;
  resp.set_requeued(requeued);
  return resp;
}

absl::StatusOr<int> SessionManager::RequeueLeasesOf(const std::string& agent_id,
                                                    const std::string& why) {
  ASSIGN_OR_RETURN(auto held, LeasedTrials([&](const storage::TrialRecord& t) {
                     return t.lease_agent == agent_id;
                   }));
  int requeued = 0;
  for (const storage::TrialRecord& seen : held) {
    ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(seen.id));
    SessionState& s = *lt.session;
    storage::TrialRecord& t = lt.trial;
    if (!IsLeased(t.status) || t.lease_token != seen.lease_token) continue;
    // A lease handed back before the trial started costs no attempt; one
    // abandoned mid-run does (else leasing and leaving could churn a trial
    // forever).
    RETURN_IF_ERROR(TransactLocked(s, [&] {
      return RequeueLocked(s, t, absl::StrCat("agent ", agent_id, " ", why, "; re-queued"),
                           /*refund_attempt=*/t.status == ts::kLeased, /*unpin=*/true);
    }));
    ++requeued;
  }
  if (requeued > 0) work_cv_.SignalAll();
  return requeued;
}

v1::AgentInfo SessionManager::AgentInfoOf(const storage::AgentRecord& a) const {
  v1::AgentInfo out;
  out.set_agent_id(a.id);
  out.set_host(a.host);
  out.set_gpu_model(a.gpu_model);
  out.set_gpu_count(a.gpu_count);
  for (absl::string_view e : absl::StrSplit(a.executors, ',', absl::SkipEmpty())) {
    out.add_executors(std::string(e));
  }
  out.set_team(a.team);
  out.set_last_seen_unix_ms(a.last_heartbeat_ms);
  out.set_live(registry_.Heard(a.id, NowMs()));
  out.set_state(a.state);
  out.set_state_reason(a.state_reason);
  return out;
}

absl::StatusOr<v1::ListAgentsResponse> SessionManager::ListAgents(const v1::ListAgentsRequest& r,
                                                                  const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kRead));
  v1::ListAgentsResponse resp;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, a] : registry_.All()) {
      if (a.state == kAgentGone && !r.include_gone()) continue;
      // A team sees the shared pool and its own agents.
      if (!who.open && who.role != Role::kAdmin && !a.team.empty() && a.team != who.team) continue;
      *resp.add_agents() = AgentInfoOf(a);
    }
  }
  // What each ran, from an index on the reader, without any lock.
  for (v1::AgentInfo& info : *resp.mutable_agents()) {
    ASSIGN_OR_RETURN(auto counts, reader_->CountAgentTrials(info.agent_id()));
    for (const auto& [status, n] : counts) {
      if (status == ts::kOk) {
        info.set_trials_ok(info.trials_ok() + n);
      } else if (status == ts::kFailed || status == ts::kTimeout) {
        info.set_trials_failed(info.trials_failed() + n);
      } else if (!IsInFlightStatus(status)) {
        info.set_trials_other(info.trials_other() + n);
      }
    }
  }
  return resp;
}

absl::StatusOr<v1::AgentInfo> SessionManager::SetAgentState(const v1::SetAgentStateRequest& r,
                                                             const Principal& who) {
  if (!who.open && who.role != Role::kAdmin) {
    return absl::PermissionDeniedError(absl::StrCat(
        "permission denied: role ", RoleName(who.role),
        " may not drain, quarantine or resume agents (an admin's)"));
  }
  if (r.state() != kAgentActive && r.state() != kAgentDraining &&
      r.state() != kAgentQuarantined) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state: must be draining, quarantined or active (resume); got '", r.state(), "'"));
  }
  if (r.reason().size() > 1024) {
    return absl::InvalidArgumentError("reason: at most 1024 bytes");
  }
  storage::AgentRecord copy;
  v1::AgentInfo info;
  {
    absl::MutexLock lock(&mu_);
    storage::AgentRecord* a = registry_.Find(r.agent_id());
    if (a == nullptr) {
      return absl::NotFoundError(absl::StrCat("agent_id: no agent '", r.agent_id(), "'"));
    }
    if (a->state == kAgentGone) {
      return absl::FailedPreconditionError(
          absl::StrCat("agent_id: agent ", a->id, " deregistered; it registers again to serve"));
    }
    a->state = r.state();
    a->state_reason = r.state() == kAgentActive
                          ? ""
                          : (r.reason().empty() ? absl::StrCat(r.state(), " by an admin")
                                                : r.reason());
    copy = *a;
    info = AgentInfoOf(*a);
  }
  RETURN_IF_ERROR(options_.storage->PutAgent(copy));
  work_cv_.SignalAll();  // a resumed agent may take work now
  return info;
}

void SessionManager::RefreshNoticeLocked(SessionState& s) {
  std::string notice;
  if (IsLeasingStage(StageFromName(s.rec.stage))) {
    const TrialQueue::Requirement req = RequirementOf(s);
    absl::MutexLock lock(&mu_);
    notice = registry_.WhyNoneFits(req, NowMs());
  }
  if (notice == s.notice) return;
  s.notice = notice;
  EmitLocked(s, "notice", nullptr,
             notice.empty() ? "an agent can take this session's work again" : notice);
}

void SessionManager::RefreshNotices() {
  std::vector<SessionRef> leasing;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, e] : sessions_) {
      if (e.leasing) leasing.push_back(PinLocked(e));
    }
  }
  for (SessionRef& s : leasing) {
    if (!s->sync.mu.TryLock()) continue;  // busy: the next tick
    HeldLock lock(&s->sync.mu);
    RefreshNoticeLocked(*s);
  }
}

absl::Status SessionManager::QuarantineBrokenHostsLocked(
    SessionState& s, const std::vector<storage::TrialRecord>& trials) {
  for (const BrokenHost& h : FindBrokenHosts(trials, kQuarantineAfterFailures)) {
    storage::AgentRecord copy;
    {
      absl::MutexLock lock(&mu_);
      storage::AgentRecord* a = registry_.Find(h.agent_id);
      if (a == nullptr || a->state != kAgentActive) continue;
      a->state = kAgentQuarantined;
      a->state_reason = absl::StrCat(h.trial_ids.size(), " trials of session ", s.rec.id,
                                     " failed here that succeeded on other agents (first: ",
                                     h.first_error.substr(0, 300), ")");
      copy = *a;
    }
    RETURN_IF_ERROR(options_.storage->PutAgent(copy));
    EmitLocked(s, "agent_quarantined", nullptr,
               absl::StrCat("agent ", copy.id, " on ", copy.host, " quarantined: ",
                            copy.state_reason, "; an admin resumes it with `infrarsi agents "
                            "resume ", copy.id, "`"));
  }
  return absl::OkStatus();
}

bool SessionManager::WaitForWork(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return false;
  work_cv_.WaitWithTimeout(&mu_, timeout);
  return !shutdown_;
}

ReportLimits SessionManager::LimitsLocked(const SessionState& s,
                                         const storage::TrialRecord& t) const {
  ReportLimits l;
  // Memory: the GPU's capacity with a margin. The catalog's for a GPU it
  // knows: what an agent registered is the agent's word, and a rogue one
  // would raise its own bound. Otherwise the agent's, within the cap for a
  // device nobody knows.
  constexpr double kUnknownDeviceGib = 16384;
  double capacity = 0;
  if (const models::sim::GpuSpec* g = models::sim::FindGpu(s.spec.gpu)) {
    capacity = g->memory_gib;
  } else {
    absl::MutexLock lock(&mu_);
    if (const storage::AgentRecord* a = registry_.Find(t.lease_agent)) {
      capacity = a->memory_per_gpu_gib;
    }
  }
  l.max_peak_mem_gib = capacity > 0 ? std::min(capacity * 1.1 + 1, kUnknownDeviceGib) : kUnknownDeviceGib;
  l.max_steps = MaxStepsPerTrial(s.doctor.steps_per_run(), s.spec.contract.timed_steps);
  l.agent_clock = s.spec.executor_kind == SessionSpec::ExecutorKind::kProcess;
  if (l.agent_clock && t.leased_ms > 0) {
    // The server's own clock bounds how long the trial can have run.
    l.max_wall_s = 1.02 * static_cast<double>(NowMs() - t.leased_ms) / 1000.0 + 5.0;
  }
  return l;
}

absl::StatusOr<v1::ReportProgressResponse> SessionManager::ReportProgress(
    const v1::ReportProgressRequest& r, const Principal& who) {
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(r.trial_id()));
  SessionState& s = *lt.session;
  storage::TrialRecord& t = lt.trial;
  if (r.lease_token().empty() || r.lease_token() != t.lease_token) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: not the current lease of trial ", t.id));
  }
  RETURN_IF_ERROR(CheckLeaseHolder(t, who, r.agent_id()));
  v1::ReportProgressResponse resp;
  if (t.status == ts::kCancelled) {
    resp.set_cancelled(true);
    return resp;
  }
  if (!IsLeased(t.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: trial ", t.id, " is ", t.status, ", not leased"));
  }
  // Every number is checked before anything is stored, against the steps
  // this report may resend and the last one (not the whole trial: a long
  // trial reports thousands of times).
  ASSIGN_OR_RETURN(auto stored, options_.storage->ListStepTail(t.id, FirstStepOf(r.steps())));
  ASSIGN_OR_RETURN(std::vector<storage::StepRecord> steps,
                   ValidateStepsOnTail(t.id, r.steps(), stored, LimitsLocked(s, t), "steps"));
  if (r.has_slurm()) {
    RETURN_IF_ERROR(ValidateSlurmJob(r.slurm(), "slurm"));
    t.slurm = MergeSlurmJob(t.slurm, r.slurm());
  }
  {
    absl::MutexLock table(&mu_);
    if (storage::AgentRecord* a = registry_.Find(t.lease_agent)) a->last_heartbeat_ms = NowMs();
  }
  // Pending in Slurm's queue is not running: the lease is renewed, the
  // trial shows as leased with its job pending.
  const bool queued_in_slurm = steps.empty() && r.has_slurm() &&
                               (r.slurm().state() == "PENDING" || r.slurm().state() == "CONFIGURING");
  if (!queued_in_slurm) t.status = ts::kRunning;
  t.lease_deadline_ms = NowMs() + absl::ToInt64Milliseconds(options_.lease_timeout);
  RETURN_IF_ERROR(options_.storage->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(options_.storage->PutSteps(steps));
    return options_.storage->UpdateTrial(t);
  }));
  resp.set_lease_deadline_unix_ms(t.lease_deadline_ms);
  return resp;
}

absl::StatusOr<v1::CompleteTrialResponse> SessionManager::CompleteTrial(
    const v1::CompleteTrialRequest& r, const Principal& who) {
  std::string session_id;
  auto resp = RecordCompletion(r, who, &session_id);
  // The follow-up proposal for its session, outside the lock. The
  // completion is recorded whatever happens to it; a failed one stays
  // pending for the reaper.
  if (resp.ok()) ProposePending(session_id, /*wait_for_busy=*/true).IgnoreError();
  return resp;
}

absl::StatusOr<v1::CompleteTrialResponse> SessionManager::RecordCompletion(
    const v1::CompleteTrialRequest& r, const Principal& who, std::string* session_id) {
  const v1::TrialOutcome& o = r.outcome();
  const std::string& status = o.status();
  if (status != ts::kOk && status != ts::kOom && status != ts::kFailed &&
      status != ts::kTimeout && status != ts::kRefused && status != ts::kInfra) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outcome.status: must be one of ok, oom, failed, timeout, refused, infra; got '", status,
        "'"));
  }
  if (o.has_slurm()) RETURN_IF_ERROR(ValidateSlurmJob(o.slurm(), "outcome.slurm"));
  ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(r.trial_id()));
  SessionRef& s = lt.session;
  storage::TrialRecord& t = lt.trial;
  *session_id = t.session_id;
  v1::CompleteTrialResponse resp;
  const bool token_ok = !r.lease_token().empty() && r.lease_token() == t.lease_token;
  if (token_ok) RETURN_IF_ERROR(CheckLeaseHolder(t, who, r.agent_id()));
  if (!IsInFlightStatus(t.status)) {
    if (token_ok) {
      // A retried completion (the reply was lost): harmless.
      resp.set_accepted(t.status != ts::kCancelled);
      resp.set_duplicate(t.status != ts::kCancelled);
      return resp;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: trial ", t.id, " is already ", t.status,
                     " and this lease is not the one that finished it"));
  }
  if (!token_ok || !IsLeased(t.status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease_token: stale or unknown lease for trial ", t.id));
  }
  if (o.has_slurm()) {
    t.slurm = MergeSlurmJob(t.slurm, o.slurm());
    s->failing_nodes.reset();  // read again by the next lease
  }
  if (status == ts::kRefused) {
    RETURN_IF_ERROR(TransactLocked(*s, [&] { return RefuseLocked(*s, t, o.error()); }));
    work_cv_.SignalAll();
    resp.set_accepted(true);
    return resp;
  }
  if (status == ts::kInfra) {
    RETURN_IF_ERROR(TransactLocked(*s, [&] { return InfraFailedLocked(*s, t, o); }));
    work_cv_.SignalAll();
    resp.set_accepted(true);
    return resp;
  }

  // Every number is checked before anything is stored: a bad report is
  // refused whole, and the trial stays the agent's to finish (or expires).
  const ReportLimits limits = LimitsLocked(*s, t);
  ASSIGN_OR_RETURN(auto stored, options_.storage->ListSteps(t.id));
  ASSIGN_OR_RETURN(std::vector<storage::StepRecord> new_steps,
                   ValidateSteps(t.id, o.steps(), stored, limits, "outcome.steps"));
  std::vector<storage::StepRecord> steps = stored;
  steps.insert(steps.end(), new_steps.begin(), new_steps.end());
  RETURN_IF_ERROR(ValidateOutcome(o, steps, limits));
  const std::vector<std::string> changed(o.protected_changed().begin(),
                                         o.protected_changed().end());
  RETURN_IF_ERROR(TransactLocked(*s, [&]() -> absl::Status {
    RETURN_IF_ERROR(options_.storage->PutSteps(new_steps));
    // The step time that counts is computed here from the per-step records,
    // never taken from an agent's summary.
    std::vector<double> timed;
    double peak = o.peak_mem_gib();
    for (const auto& sr : steps) {
      if (!sr.warmup) timed.push_back(sr.step_time_s);
      peak = std::max(peak, sr.peak_mem_gib);
    }
    t.status = status;
    t.error = o.error().substr(0, kMaxReportTextBytes);
    t.note = o.note().substr(0, kMaxReportTextBytes);
    t.isolation = o.isolation().substr(0, kMaxReportTextBytes);
    t.peak_mem_gib = peak;
    t.cost_s = o.wall_s();
    t.agent = t.lease_agent;
    t.finished_ms = NowMs();
    if (status == ts::kOk) {
      const int expected = ExpectedTimedSteps(*s, t);
      if (timed.empty() && expected > 0) {
        // "ok" without one timed line is the contract's missing-lines case
        // (a process that exits before its pacing thread wrote them), not
        // a crash.
        t.status = ts::kViolation;
        t.violation = "timed_steps";
        t.error = absl::StrCat("timed_steps: reported 0 timed steps, the contract says ", expected);
      } else if (timed.empty()) {
        t.status = ts::kFailed;
        t.error = "no timed steps reported";
      } else {
        t.step_time_s = models::Median(timed);
      }
    }
    TrialEvidence e =
        EvidenceOfTrial(steps, t.cost_s, limits.agent_clock, limits.agent_clock ? o.poll_interval_s() : 0);
    e.protected_changed = changed;
    if (limits.agent_clock) {
      // What the agent's clock saw of the timed window, for the doctor and
      // the verification.
      const AgentClockTiming timing = TimeOnAgentClock(e);
      t.observed_window_s = timing.valid ? timing.observed_s : 0;
      t.observed_steps = timing.valid ? timing.window_steps : 0;
      t.clock_slack_s = timing.valid ? timing.slack_s : 0;
    }
    ApplyContractLocked(*s, t, e);
    return FinishTrialLocked(*s, t);
  }));
  resp.set_accepted(true);
  return resp;
}

int SessionManager::ExpectedTimedSteps(const SessionState& s, const storage::TrialRecord& t) {
  // As many as the contract says; else, after the doctor, as many as the
  // baseline reported (the doctor's own runs set that figure).
  const int n = s.spec.contract.timed_steps;
  return n == 0 && t.purpose != "doctor" ? s.doctor.timed_steps() : n;
}

void SessionManager::ApplyContractLocked(const SessionState& s, storage::TrialRecord& t,
                                         const TrialEvidence& e) const {
  // Only a trial that produced numbers (or touched protected files) has
  // anything to check; a crash is already not a result.
  if (t.status != ts::kOk && e.protected_changed.empty()) return;
  // The doctor's own runs build the reference; later trials are held to it.
  ContractReference ref;
  ref.expected_timed_steps = ExpectedTimedSteps(s, t);
  ref.flops_per_step = SpecFlopsPerStep(s.spec);
  ref.peak_flops = SpecPeakFlops(s.spec);
  if (t.purpose != "doctor") {
    ref.losses.assign(s.doctor.reference_losses().begin(), s.doctor.reference_losses().end());
    // Only a doctor that ran on the agent's clock measured the tail.
    ref.tail_s = s.doctor.clock() == "agent" ? s.doctor.tail_s() : -1;
  }
  if (auto v = CheckContract(s.spec.contract, ref, e)) {
    t.status = ts::kViolation;
    t.violation = v->kind;
    t.error = absl::StrCat(v->kind, ": ", v->reason);
    return;
  }
  if (t.status != ts::kOk || !e.agent_clock) return;
  // Time it ran after its last line beyond the baseline's is charged to
  // its steps: no accusation (a checkpoint write varies), and no gain
  // from work moved past the last line either.
  const TailCharge charge = ChargeForTail(TimeOnAgentClock(e), ref);
  if (charge.extra_s > 0 && charge.step_time_s > t.step_time_s) {
    t.step_time_s = charge.step_time_s;
    t.note = (t.note.empty() ? charge.note : absl::StrCat(t.note, "; ", charge.note))
                 .substr(0, kMaxReportTextBytes);
  }
}

absl::Status SessionManager::FinishTrialLocked(SessionState& s, storage::TrialRecord& t) {
  RETURN_IF_ERROR(WriteTrialLocked(s, t));
  RETURN_IF_ERROR(
      options_.storage->AddBankEntry(Bank::EntryFor(s.rec, s.spec, t, NowMs())).status());
  s.cost_s += t.cost_s;
  if (t.status == ts::kFailed || t.status == ts::kTimeout) ++s.host_failures;
  const v1::Stage stage = StageFromName(s.rec.stage);
  // The session's trials (this one written), read once for what needs them:
  // the broken-host check once any trial of the session has failed, and
  // the doctor's or the verification's verdict.
  const bool check_hosts = s.host_failures > 0 && !t.agent.empty();
  const bool advance = (t.purpose == "doctor" && stage == v1::STAGE_DOCTORING) ||
                       (t.purpose == "verify" && stage == v1::STAGE_VERIFYING);
  std::vector<storage::TrialRecord> trials;
  if (check_hosts || advance) {
    ASSIGN_OR_RETURN(trials, options_.storage->ListTrials(s.rec.id));
  }
  if (check_hosts) RETURN_IF_ERROR(QuarantineBrokenHostsLocked(s, trials));

  if (t.purpose == "doctor" || t.purpose == "verify") {
    EmitLocked(s, "trial_finished", &t);
    if (!advance) return absl::OkStatus();
    return t.purpose == "doctor" ? AdvanceDoctorLocked(s, trials)
                                 : AdvanceVerificationLocked(s, std::move(trials));
  }
  --s.search_in_flight;
  ++s.search_done;
  if (t.status == ts::kOk && (s.best_trial_id == 0 || t.step_time_s < s.best_step_time_s)) {
    s.best_trial_id = t.id;
    s.best_step_time_s = t.step_time_s;
    ASSIGN_OR_RETURN(s.best_config, DecodeConfigJson(t.config));
  }
  EmitLocked(s, "trial_finished", &t);  // after the counters: it carries them
  if (stage == v1::STAGE_RUNNING) return FillWindowLocked(s);
  return absl::OkStatus();
}

absl::Status SessionManager::RefuseLocked(SessionState& s, storage::TrialRecord& t,
                                          const std::string& why) {
  const std::string agent = t.lease_agent;
  const std::string reason = absl::StrCat(
      "agent ", agent, " refused it: ",
      why.empty() ? std::string("its policy") : why.substr(0, kMaxReportTextBytes));
  t.refused_by = t.refused_by.empty() ? agent : absl::StrCat(t.refused_by, ",", agent);
  // Another live agent that may run it and has not refused it?
  bool other = false;
  {
    absl::MutexLock lock(&mu_);
    other = registry_.AnotherMayRun(RequirementOf(s), s.spec, t, NowMs());
  }
  if (!other || t.attempts >= options_.max_attempts) {
    t.status = ts::kFailed;
    t.error = absl::StrCat("refused: ", reason,
                           other ? "" : "; no other live agent may run it under its policy");
    t.agent = agent;
    t.finished_ms = NowMs();
    return FinishTrialLocked(s, t);
  }
  return RequeueLocked(s, t, reason, /*refund_attempt=*/false, /*unpin=*/true);
}

absl::Status SessionManager::InfraFailedLocked(SessionState& s, storage::TrialRecord& t,
                                               const v1::TrialOutcome& o) {
  const std::string why = absl::StrCat(
      "infrastructure: ", o.error().empty() ? std::string("the agent's infrastructure failed it")
                                            : o.error().substr(0, kMaxReportTextBytes));
  // Spent all the same: counted in the session's cost, not the trial's;
  // never more than the server's own clock allows since the lease (an
  // agent's word must not spend another session's budget).
  double wall = std::isfinite(o.wall_s()) ? std::clamp(o.wall_s(), 0.0, 365 * 86400.0) : 0;
  if (t.leased_ms > 0) {
    wall = std::min(wall, 1.02 * static_cast<double>(NowMs() - t.leased_ms) / 1000.0 + 5.0);
  }
  if (t.attempts < options_.max_attempts) {
    t.lost_s += wall;
    s.cost_s += wall;
    // Not the setting's fault: it runs again (elsewhere, if the agent is
    // broken), and nothing of this attempt is learnt from.
    return RequeueLocked(s, t, absl::StrCat(why, "; re-queued"), /*refund_attempt=*/false,
                         /*unpin=*/true);
  }
  t.status = ts::kFailed;
  t.error = absl::StrCat(why, " (", t.attempts, " attempts)");
  t.cost_s = wall;
  t.agent = t.lease_agent;
  t.finished_ms = NowMs();
  return FinishTrialLocked(s, t);
}

absl::Status SessionManager::ExpireLeases() {
  RETURN_IF_ERROR(RequeueExpired());
  RefreshNotices();
  // Also retries refills a storage error or a busy session left pending.
  return ProposePending("", /*wait_for_busy=*/true);
}

absl::Status SessionManager::RequeueExpired() {
  Trim();  // the reaper's tick bounds how long finished sessions stay
  const int64_t now = NowMs();
  ASSIGN_OR_RETURN(auto expired, LeasedTrials([&](const storage::TrialRecord& t) {
                     return t.lease_deadline_ms < now;
                   }));
  bool requeued = false;
  for (const storage::TrialRecord& seen : expired) {
    // A report or a completion may have come in since the list was read.
    ASSIGN_OR_RETURN(LockedTrial lt, LockTrial(seen.id));
    SessionState& s = *lt.session;
    storage::TrialRecord& t = lt.trial;
    if (!IsLeased(t.status) || t.lease_token != seen.lease_token || t.lease_deadline_ms >= now) {
      continue;
    }
    const std::string agent = t.lease_agent;
    ++leases_expired_;
    RETURN_IF_ERROR(TransactLocked(s, [&]() -> absl::Status {
      if (t.attempts >= options_.max_attempts) {
        t.status = ts::kFailed;
        t.error = absl::StrCat("lease expired ", t.attempts, " times (last agent ", agent,
                               " stopped reporting)");
        t.agent = agent;
        t.finished_ms = now;
        return FinishTrialLocked(s, t);
      }
      // The pinned host just failed it: any host may take it.
      return RequeueLocked(s, t,
                           absl::StrCat("lease of agent ", agent, " expired at attempt ",
                                        t.attempts, "; re-queued"),
                           /*refund_attempt=*/false, /*unpin=*/true);
    }));
    requeued = true;
  }
  if (requeued) work_cv_.SignalAll();
  return absl::OkStatus();
}

// ------------------------------------------------------------------ read side

absl::StatusOr<v1::SessionSummary> SessionManager::GetSession(const std::string& session_id,
                                                              const Principal& who) {
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
  absl::MutexLock lock(&s->sync.mu);
  return SummaryOf(*s);
}

absl::StatusOr<v1::ListSessionsResponse> SessionManager::ListSessions(
    const v1::ListSessionsRequest& request, const Principal& who) {
  RETURN_IF_ERROR(Authorize(who, Action::kRead));
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, 1000], got ", request.page_size()));
  }
  storage::SessionQuery q;
  if (!who.open && who.role != Role::kAdmin) {
    q.any_team = false;
    q.team = who.team;
  }
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &q.before_seq) || q.before_seq <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token this server issued");
  }
  const int32_t page = request.page_size() > 0 ? request.page_size() : 100;
  q.limit = page + 1;
  // The page's records come from the reader, without the lock.
  ASSIGN_OR_RETURN(auto records, session_reader_->ListSessionsPage(q));
  const bool more = records.size() > static_cast<size_t>(page);
  if (more) records.resize(static_cast<size_t>(page));
  // Sessions in memory are summarised under their own locks; the others
  // are read back without any (a page of finished sessions costs ~0.3 ms
  // each) and without entering memory: a listing must not fill the cache.
  std::vector<std::shared_ptr<SessionState>> resident(records.size());
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < records.size(); ++i) {
      auto it = sessions_.find(records[i].id);
      if (it != sessions_.end()) resident[i] = it->second.state;
    }
  }
  // A session busy with its own work is read as storage has it (its last
  // committed state) rather than waited for.
  std::vector<std::optional<v1::SessionSummary>> summaries(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (resident[i] == nullptr || !resident[i]->sync.mu.TryLock()) continue;
    HeldLock lock(&resident[i]->sync.mu);
    summaries[i] = SummaryOf(*resident[i]);
  }
  v1::ListSessionsResponse resp;
  if (more) resp.set_next_page_token(absl::StrCat(records.back().seq));
  for (size_t i = 0; i < records.size(); ++i) {
    if (!summaries[i]) {
      ASSIGN_OR_RETURN(auto state, Restore(std::move(records[i]), session_reader_));
      summaries[i] = SummaryOf(*state);
    }
    *resp.add_sessions() = *std::move(summaries[i]);
  }
  return resp;
}

absl::StatusOr<v1::SessionSummary> SessionManager::Cancel(const std::string& session_id,
                                                          const Principal& who) {
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  // A searched session has finished too: cancelling it would only take
  // away its result (apply needs the searched stage).
  if (IsTerminalStage(StageFromName(s->rec.stage)) ||
      StageFromName(s->rec.stage) == v1::STAGE_SEARCHED) {
    return StageError(s->rec.id, s->rec.stage, "it has already ended; cancel stops an unfinished one");
  }
  ASSIGN_OR_RETURN(auto trials, options_.storage->ListTrials(s->rec.id));
  RETURN_IF_ERROR(TransactLocked(*s, [&]() -> absl::Status {
    for (auto& t : trials) {
      if (!IsInFlightStatus(t.status)) continue;
      t.status = ts::kCancelled;
      t.finished_ms = NowMs();
      RETURN_IF_ERROR(WriteTrialLocked(*s, t));
    }
    s->search_in_flight = 0;
    return SaveSessionLocked(*s, StageName(v1::STAGE_CANCELLED));
  }));
  return SummaryOf(*s);
}

absl::StatusOr<v1::SessionReport> SessionManager::Report(const std::string& session_id,
                                                        const Principal& who) {
  // A snapshot under the lock; the trials are read and the models fitted
  // without it (a report of a long session costs what the session holds).
  ReportInputs in;
  std::shared_ptr<const SearchInputs> search;  // keeps in.priors alive
  {
    ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
    absl::MutexLock lock(&s->sync.mu);
    in.summary = SummaryOf(*s);
    in.rec = s->rec;
    in.spec = s->spec;
    in.doctor = s->doctor;
    in.verification = s->verification;
    in.best_trial_id = s->best_trial_id;
    in.best_config = s->best_config;
    search = s->search;
    in.stop_reason = s->stop_reason;
    in.llm_round = s->llm_round;
  }
  in.priors = search->priors ? &*search->priors : nullptr;
  in.priors_label = search->priors_label;
  in.warm_starts = search->warm_start_count;
  in.related_trials = search->related_count;
  ASSIGN_OR_RETURN(auto trials, session_reader_->ListTrials(in.rec.id));
  return BuildReport(in, trials, *optimizer_);
}

// ------------------------------------------------------------------ Apply

absl::StatusOr<v1::ApplyResponse> SessionManager::Apply(const v1::ApplyRequest& request,
                                                        const Principal& who) {
  if (!request.repo_path().empty()) {
    return absl::InvalidArgumentError(
        "repo_path: the server commits into no repository; `infrarsi apply --repo PATH` commits "
        "into your own clone");
  }
  if (request.branch().empty()) return absl::InvalidArgumentError("branch: required");
  if (!request.commit().empty() &&
      (request.commit().size() != 40 ||
       request.commit().find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return absl::InvalidArgumentError("commit: a full SHA-1 in lower-case hex");
  }
  ASSIGN_OR_RETURN(SessionRef s, FindFor(request.session_id(), who, Action::kSubmit));
  absl::MutexLock lock(&s->sync.mu);
  const v1::Stage stage = StageFromName(s->rec.stage);
  if (stage != v1::STAGE_SEARCHED && stage != v1::STAGE_APPLIED) {
    return StageError(s->rec.id, s->rec.stage, "apply needs a finished run (stage searched)");
  }
  const int rank = s->verification.promoted_rank();
  if (s->rec.best_trial_id == 0 || rank <= 0 || rank > s->verification.candidates_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session_id: session ", s->rec.id, " promoted no setting (",
        s->verification.summary().empty() ? "no setting beat the baseline"
                                          : s->verification.summary(),
        "); nothing to apply"));
  }
  ApplyInputs in;
  in.spec = &s->spec;
  in.session_id = s->rec.id;
  in.session_name = s->rec.name;
  in.workload_signature = s->rec.workload_signature;
  in.contract_hash = s->rec.contract_hash;
  in.baseline_step_time_s = s->rec.baseline_step_time_s;
  in.baseline_cv = s->rec.baseline_cv;
  in.baseline_runs = s->rec.baseline_runs;
  in.noise_floor = s->doctor.noise_floor();
  in.promoted = s->verification.candidates(rank - 1);
  in.trial_id = s->rec.best_trial_id;
  in.config = Config(in.promoted.config().begin(), in.promoted.config().end());
  in.contract = FromJson<v1::Contract>(s->rec.contract);
  // The same plan every time, author time included: a retried commit is
  // the same commit.
  in.decided_unix_s = (s->verification.decided_unix_ms() > 0 ? s->verification.decided_unix_ms()
                                                             : s->rec.created_ms) / 1000;
  v1::ApplyResponse resp;
  BuildApplyPlan(in, &resp);
  resp.set_branch(request.branch());
  resp.set_dry_run(request.dry_run());
  resp.set_commit(s->rec.applied_commit);
  if (request.commit().empty() || request.dry_run()) return resp;
  // The second call: record the commit the caller made from this plan.
  if (stage == v1::STAGE_APPLIED) {
    if (request.commit() == s->rec.applied_commit) return resp;  // a retry
    return absl::FailedPreconditionError(absl::StrCat("session_id: session ", s->rec.id,
                                                      " was already applied as commit ",
                                                      s->rec.applied_commit));
  }
  RETURN_IF_ERROR(TransactLocked(*s, [&] {
    s->rec.applied_commit = request.commit();
    return SaveSessionLocked(*s, StageName(v1::STAGE_APPLIED));
  }));
  resp.set_commit(request.commit());
  return resp;
}

// ------------------------------------------------------------------ events, bank

absl::StatusOr<std::vector<v1::SessionEvent>> SessionManager::WaitEvents(
    const std::string& session_id, int64_t after_seq, absl::Duration timeout,
    const Principal& who) {
  // Pinned: it stays in memory while the lock is let go.
  ASSIGN_OR_RETURN(SessionRef s, FindFor(session_id, who, Action::kRead));
  absl::MutexLock lock(&s->sync.mu);
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  std::vector<v1::SessionEvent> out;
  if (after_seq <= 0 || after_seq < s->dropped_through_seq) {
    // Sequence numbers are global, so "now" covers everything seen so far.
    v1::SessionEvent snap;
    snap.set_seq(next_seq_.load() - 1);
    snap.set_kind("snapshot");
    *snap.mutable_session() = SummaryOf(*s);
    out.push_back(std::move(snap));
    return out;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (!shutdown_ && (s->events.empty() || s->events.back().seq() <= after_seq)) {
    if (s->sync.events.WaitWithDeadline(&s->sync.mu, deadline)) break;
  }
  for (const auto& ev : s->events) {
    if (ev.seq() > after_seq) out.push_back(ev);
  }
  return out;
}

absl::StatusOr<v1::QueryExperienceResponse> SessionManager::QueryExperience(
    const v1::QueryExperienceRequest& request, const Principal& who) {
  return bank_->Query(request, who);  // no lock of ours: the bank reads on its own connection
}

void SessionManager::Shutdown() {
  std::vector<std::shared_ptr<SessionState>> all;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    work_cv_.SignalAll();
    for (const auto& [id, e] : sessions_) all.push_back(e.state);
  }
  // A watcher checks the flag under its session's lock before it waits, so
  // a signal sent under that lock reaches it.
  for (const auto& s : all) {
    absl::MutexLock lock(&s->sync.mu);
    s->sync.events.SignalAll();
  }
}

absl::StatusOr<int64_t> SessionManager::PruneSteps(int32_t limit) {
  if (options_.step_retention <= absl::ZeroDuration()) return 0;
  const int64_t before = absl::ToUnixMillis(options_.clock->Now() - options_.step_retention);
  return options_.storage->PruneSteps({"searched", "applied", "cancelled", "failed"}, before,
                                      limit);
}

SessionManager::Stats SessionManager::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats st;
  st.resident_sessions = sessions_.size();
  st.queued_trials = queue_.size();
  st.leases_expired = leases_expired_.load();
  const int64_t now = NowMs();
  for (const auto& [id, a] : registry_.All()) {
    if (a.state == kAgentGone) continue;
    ++st.agents_by_state[a.state];
    st.agents_live += registry_.Live(id, now);
  }
  return st;
}

}  // namespace infrarsi
