#include "core/bank.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/proto_util.h"
#include "base/status_macros.h"
#include "core/trial_status.h"

namespace infrarsi {
namespace {

constexpr const char* kStatuses[] = {trial_status::kOk,      trial_status::kOom,
                                     trial_status::kFailed,  trial_status::kTimeout,
                                     trial_status::kViolation, trial_status::kCancelled,
                                     trial_status::kPruned, trial_status::kUnconfirmed};
constexpr const char* kPurposes[] = {trial_purpose::kDoctor, trial_purpose::kSearch,
                                     trial_purpose::kVerify};
constexpr int kMaxKnobFilters = 64;
constexpr size_t kMaxFilterBytes = 256;

bool OneOf(const std::string& v, const auto& allowed) {
  return std::find(std::begin(allowed), std::end(allowed), v) != std::end(allowed);
}

std::string Listed(const auto& allowed) {
  std::string out;
  for (const char* a : allowed) absl::StrAppend(&out, out.empty() ? "" : ", ", a);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Bank>> Bank::Create(const Options& options) {
  if (options.reader == nullptr) return absl::InvalidArgumentError("reader: required");
  if (options.seed_rows < 1) return absl::InvalidArgumentError("seed_rows: must be >= 1");
  return std::unique_ptr<Bank>(new Bank(options));
}

storage::BankRecord Bank::EntryFor(const storage::SessionRecord& s, const SessionSpec& spec,
                                   const storage::TrialRecord& t, int64_t now_ms) {
  storage::BankRecord b;
  b.session_id = s.id;
  b.trial_id = t.id;
  b.workload_signature = s.workload_signature;
  b.gpu_model = spec.gpu;
  b.gpu_count = spec.gpu_count;
  b.config = t.config;
  b.status = t.status;
  b.step_time_s = t.step_time_s;
  b.peak_mem_gib = t.peak_mem_gib;
  b.cost_s = t.cost_s;
  b.created_ms = now_ms;
  b.team = s.team;
  b.shared = s.share_bank;
  b.purpose = t.purpose;
  if (auto c = DecodeConfigJson(t.config); c.ok()) {
    for (const auto& [k, v] : *c) b.knobs.emplace_back(k, v);
  }
  return b;
}

absl::StatusOr<Bank::Seeds> Bank::SeedsFor(const SessionSpec& spec, const std::string& session_id,
                                           const std::string& team) const {
  // Relevance tiers: the same workload on the same GPU, on another GPU, the
  // same model at another shape, then any session with the same knobs.
  const std::string sig = spec.WorkloadSignature();
  const std::string model = sig.substr(0, sig.find('/'));
  std::vector<storage::BankRecord> rows;
  std::set<int64_t> seen;
  // The same workload first, so that a busy bank of other workloads cannot
  // crowd it out of the cap; then anything.
  for (const bool same_workload : {true, false}) {
    storage::BankFilter f;
    f.status = "ok";
    f.purpose = "";  // doctor and verify runs are measurements too
    if (same_workload) f.workload_signature = sig;
    f.visible_to_team = team;
    f.limit = options_.seed_rows;
    ASSIGN_OR_RETURN(auto page, options_.reader->QueryBank(f));
    for (auto& b : page) {
      if (seen.insert(b.id).second) rows.push_back(std::move(b));
    }
  }
  struct Entry {
    int tier;
    int rank;  // rank within its session, fastest first
    double time;
    Config config;
  };
  std::map<std::string, std::vector<std::pair<double, Config>>> by_session;
  std::map<std::string, int> tier_of;
  std::vector<std::pair<int64_t, SearchContext::Related>> related;  // by bank id
  for (const auto& b : rows) {
    if (b.session_id == session_id || b.step_time_s <= 0) continue;
    auto c = DecodeConfigJson(b.config);
    if (!c.ok() || c->size() != spec.knobs.size()) continue;
    bool in_space = true;
    for (const Knob& k : spec.knobs) {
      auto it = c->find(k.name);
      in_space = in_space && it != c->end() &&
                 std::find(k.values.begin(), k.values.end(), it->second) != k.values.end();
    }
    if (!in_space) continue;
    const int tier = b.workload_signature == sig
                         ? (absl::EqualsIgnoreCase(b.gpu_model, spec.gpu) ? 0 : 1)
                         : (b.workload_signature.substr(0, b.workload_signature.find('/')) == model
                                ? 2
                                : 3);
    tier_of[b.session_id] = tier;
    if (tier <= 1) {
      SearchContext::Related r;
      r.obs.config = *c;
      r.obs.status = "ok";
      r.obs.step_time_s = b.step_time_s;
      r.obs.peak_mem_gib = b.peak_mem_gib;
      r.source = b.session_id;
      related.emplace_back(b.id, std::move(r));
    }
    by_session[b.session_id].push_back({b.step_time_s, *std::move(c)});
  }
  std::vector<Entry> entries;
  for (auto& [sid, list] : by_session) {
    std::sort(list.begin(), list.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < list.size() && i < 5; ++i) {
      entries.push_back({tier_of[sid], static_cast<int>(i), list[i].first, list[i].second});
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.tier, a.rank, a.time) < std::tie(b.tier, b.rank, b.time);
  });
  Seeds out;
  for (const Entry& e : entries) {
    if (out.warm_starts.size() >= 12) break;
    if (e.config == spec.baseline) continue;
    if (std::find(out.warm_starts.begin(), out.warm_starts.end(), e.config) ==
        out.warm_starts.end()) {
      out.warm_starts.push_back(e.config);
    }
  }
  // The newest related trials, oldest of them first (the order they ran),
  // so a proposal's cost stays bounded however large the bank grows.
  std::sort(related.begin(), related.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  if (related.size() > SearchContext::kMaxRelated) related.resize(SearchContext::kMaxRelated);
  for (auto it = related.rbegin(); it != related.rend(); ++it) {
    out.related.push_back(std::move(it->second));
  }
  return out;
}

absl::StatusOr<v1::QueryExperienceResponse> Bank::Query(const v1::QueryExperienceRequest& request,
                                                        const Principal& who) const {
  RETURN_IF_ERROR(Authorize(who, Action::kRead));
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, 1000], got ", request.page_size()));
  }
  if (!request.status().empty() && !OneOf(request.status(), kStatuses)) {
    return absl::InvalidArgumentError(absl::StrCat("status: unknown trial status '",
                                                   request.status(), "'; one of ",
                                                   Listed(kStatuses)));
  }
  if (!request.purpose().empty() && !OneOf(request.purpose(), kPurposes)) {
    return absl::InvalidArgumentError(absl::StrCat("purpose: unknown purpose '",
                                                   request.purpose(), "'; one of ",
                                                   Listed(kPurposes)));
  }
  // Each knob pair is a subquery (and a count of its index range): a caller
  // may not make one query cost thousands of them.
  if (request.knobs_size() > kMaxKnobFilters) {
    return absl::InvalidArgumentError(absl::StrCat("knobs: at most ", kMaxKnobFilters, " pairs, got ",
                                                   request.knobs_size()));
  }
  for (const auto& [k, v] : request.knobs()) {
    if (k.empty() || k.size() > kMaxFilterBytes || v.size() > kMaxFilterBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("knobs: names 1-", kMaxFilterBytes, " bytes, values at most ", kMaxFilterBytes));
    }
  }
  if (request.workload_signature().size() > kMaxFilterBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload_signature: at most ", kMaxFilterBytes, " bytes"));
  }
  if (request.gpu_model().size() > kMaxFilterBytes) {
    return absl::InvalidArgumentError(absl::StrCat("gpu_model: at most ", kMaxFilterBytes, " bytes"));
  }
  if (!request.order().empty() && request.order() != "newest" && request.order() != "oldest" &&
      request.order() != "fastest") {
    return absl::InvalidArgumentError(
        absl::StrCat("order: '", request.order(), "' is not newest, oldest or fastest"));
  }
  const bool fastest = request.order() == "fastest";
  if (fastest && !request.status().empty() && request.status() != "ok") {
    return absl::InvalidArgumentError(absl::StrCat(
        "status: order fastest ranks finished ok trials; got status '", request.status(), "'"));
  }
  storage::BankFilter f;
  f.workload_signature = request.workload_signature();
  f.gpu_model = request.gpu_model();
  f.status = fastest ? "ok" : request.status();
  f.purpose = request.purpose();
  f.oldest_first = request.order() == "oldest";
  f.fastest = fastest;
  for (const auto& [k, v] : request.knobs()) f.knobs.emplace_back(k, v);
  std::sort(f.knobs.begin(), f.knobs.end());  // a map's order is not stable
  if (!who.open && who.role != Role::kAdmin) f.visible_to_team = who.team;
  // Tokens carry the order they were issued for ("n123", "o123", "f123").
  const char want = fastest ? 'f' : f.oldest_first ? 'o' : 'n';
  if (!request.page_token().empty()) {
    const std::string& tok = request.page_token();
    if (tok[0] != want || !absl::SimpleAtoi(tok.substr(1), &f.cursor) || f.cursor <= 0) {
      return absl::InvalidArgumentError(
          "page_token: not a token this server issued for this order");
    }
  }
  const int32_t page = request.page_size() > 0 ? request.page_size() : 50;
  f.limit = page + 1;  // one more tells whether there is a next page
  ASSIGN_OR_RETURN(auto rows, options_.reader->QueryBank(f));
  if (rows.empty() && request.page_token().empty()) {
    // Nothing matched: a knob no entry has is a misspelling to name, not an
    // empty table to show.
    for (const auto& [k, v] : f.knobs) {
      ASSIGN_OR_RETURN(bool known, options_.reader->BankHasKnob(k, f.visible_to_team));
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            "knobs: no trial in the bank has a knob named '", k,
            "' (misspelt? the knob names are those of the sessions' specs)"));
      }
    }
  }
  const bool more = rows.size() > static_cast<size_t>(page);
  if (more) rows.resize(static_cast<size_t>(page));
  v1::QueryExperienceResponse resp;
  for (const auto& b : rows) {
    v1::ExperienceEntry* e = resp.add_entries();
    e->set_id(b.id);
    e->set_session_id(b.session_id);
    e->set_trial_id(b.trial_id);
    e->set_workload_signature(b.workload_signature);
    e->set_gpu_model(b.gpu_model);
    e->set_gpu_count(b.gpu_count);
    if (auto c = DecodeConfigJson(b.config); c.ok()) {
      CopyConfig(*c, e->mutable_config());
    }
    e->set_status(b.status);
    e->set_step_time_s(b.step_time_s);
    e->set_peak_mem_gib(b.peak_mem_gib);
    e->set_cost_s(b.cost_s);
    e->set_created_unix_ms(b.created_ms);
    e->set_purpose(b.purpose);
  }
  if (more) resp.set_next_page_token(absl::StrCat(std::string(1, want), rows.back().id));
  return resp;
}

}  // namespace infrarsi
