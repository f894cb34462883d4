#include "core/session_state.h"

#include <algorithm>

#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/proto_util.h"
#include "base/status_macros.h"
#include "core/contract.h"
#include "core/stage.h"
#include "core/trial_status.h"

namespace infrarsi {

namespace ts = trial_status;

std::string EncodeSearchRecord(const SearchInputs& in, const LlmPatchRound& llm) {
  // {"priors_label": ..., "warm_starts": N, "related": N, "priors": {...}}
  return absl::StrCat(R"({"priors_label":)", JsonQuote(in.priors_label), R"(,"warm_starts":)",
                      in.warm_start_count, R"(,"related":)", in.related_count, R"(,"priors":)",
                      in.priors ? EncodePriorsJson(*in.priors) : "null",
                      llm.asked ? absl::StrCat(R"(,"llm_patches":)", EncodeLlmPatchRound(llm)) : "",
                      "}");
}

std::shared_ptr<const SearchInputs> DecodeSearchRecord(const std::string& json,
                                                       LlmPatchRound* llm) {
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

std::shared_ptr<const SearchInputs> LightSearch(const SearchInputs& in) {
  auto light = std::make_shared<SearchInputs>();
  light->priors = in.priors;
  light->priors_label = in.priors_label;
  light->warm_start_count = in.warm_start_count;
  light->related_count = in.related_count;
  return light;
}

absl::StatusOr<std::unique_ptr<SessionState>> SessionState::Restore(storage::SessionRecord rec,
                                                                     storage::Storage* storage) {
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
  // search is started again by the manager's Load).
  if (!s->rec.search.empty()) {
    s->search = DecodeSearchRecord(s->rec.search, &s->llm_round);
    // The LLM's admitted patches are candidates of this session as its
    // own are: back into the spec (asked once, never again).
    RETURN_IF_ERROR(RestoreLlmPatches(s->llm_round, &s->spec));
  }
  ASSIGN_OR_RETURN(auto trials, storage->ListTrials(s->rec.id));
  for (const auto& t : trials) {
    s->host_failures += IsHostFailureStatus(t.status);
    s->cost_s += t.cost_s + t.lost_s;
    if (t.purpose != trial_purpose::kSearch) continue;
    ++s->search_total;
    if (IsInFlightStatus(t.status)) ++s->search_in_flight;
    if (!IsInFlightStatus(t.status) && t.status != ts::kCancelled) ++s->search_done;
    RETURN_IF_ERROR(s->ConsiderBest(t));
  }
  return s;
}

absl::Status SessionState::ConsiderBest(const storage::TrialRecord& t) {
  if (t.purpose != trial_purpose::kSearch || t.status != ts::kOk) return absl::OkStatus();
  if (best_trial_id != 0 && t.step_time_s >= best_step_time_s) return absl::OkStatus();
  ASSIGN_OR_RETURN(Config config, DecodeConfigJson(t.config));
  best_trial_id = t.id;
  best_step_time_s = t.step_time_s;
  best_config = std::move(config);
  return absl::OkStatus();
}

v1::SessionSummary SessionState::Summary() const {
  v1::SessionSummary out;
  out.set_session_id(rec.id);
  out.set_name(rec.name);
  out.set_stage(StageFromName(rec.stage));
  out.set_stage_name(rec.stage);
  out.mutable_workload()->set_model(spec.model);
  out.mutable_workload()->set_global_batch(spec.global_batch);
  out.mutable_workload()->set_seq_len(spec.seq_len);
  out.mutable_workload()->set_flops_per_token(SpecFlopsPerToken(spec));
  out.mutable_hardware()->set_gpu(spec.gpu);
  out.mutable_hardware()->set_count(spec.gpu_count);
  out.set_workload_signature(rec.workload_signature);
  out.set_trials_done(search_done);
  out.set_trials_planned(rec.max_trials);
  out.set_baseline_step_time_s(rec.baseline_step_time_s);
  out.set_baseline_cv(rec.baseline_cv);
  const double base = rec.baseline_step_time_s;
  out.set_noise_floor(doctor.noise_floor());
  const int promoted = verification.promoted_rank();
  if (promoted > 0 && promoted <= verification.candidates_size()) {
    // A verified promotion: its speedup is the A/B estimate.
    const auto& c = verification.candidates(promoted - 1);
    out.set_promoted(true);
    out.set_best_speedup(c.speedup());
    out.set_best_step_time_s(base / c.speedup());
    *out.mutable_best_config() = c.config();
  } else if (best_trial_id != 0 && (base == 0 || best_step_time_s < base)) {
    out.set_best_step_time_s(best_step_time_s);
    CopyConfig(best_config, out.mutable_best_config());
    if (base > 0) out.set_best_speedup(base / best_step_time_s);
  } else if (base > 0) {
    out.set_best_step_time_s(base);
    CopyConfig(spec.baseline, out.mutable_best_config());
    out.set_best_speedup(1.0);
  }
  // A run that ended without a promotion says so, and why, wherever a
  // best is shown (a fastest unverified trial is no result).
  const v1::Stage stage = StageFromName(rec.stage);
  if (!out.promoted() && (stage == v1::STAGE_SEARCHED || stage == v1::STAGE_APPLIED)) {
    out.set_not_promoted(!verification.summary().empty() ? verification.summary()
                         : !stop_reason.empty()          ? stop_reason
                                                         : "no candidate cleared the noise floor");
  }
  out.set_contract_hash(rec.contract_hash);
  out.set_created_unix_ms(rec.created_ms);
  out.set_error(rec.error);
  out.set_applied_commit(rec.applied_commit);
  out.set_notice(notice);
  out.set_last_event_seq(LastEventSeq());
  out.set_cost_s(cost_s);
  return out;
}

int64_t SessionState::LastEventSeq() const {
  return events.empty() ? dropped_through_seq : events.back().seq();
}

void SessionState::AddEvent(v1::SessionEvent ev, size_t max_backlog) {
  events.push_back(std::move(ev));
  if (events.size() > max_backlog) {
    const size_t drop = events.size() - max_backlog;
    dropped_through_seq = events[drop - 1].seq();
    events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  sync.events.SignalAll();
}

void SessionState::TrimBacklog(size_t keep) {
  if (events.size() <= keep) return;
  const size_t drop = events.size() - keep;
  dropped_through_seq = events[drop - 1].seq();
  events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(drop));
  events.shrink_to_fit();
}

TrialQueue::Requirement SessionState::Requirement() const {
  TrialQueue::Requirement r;
  r.gpu_model = absl::AsciiStrToLower(spec.gpu);
  r.gpu_count = spec.gpu_count;
  r.executor = spec.ExecutorName();
  r.team = rec.team;
  r.pool = spec.pool;
  return r;
}

void SessionState::StartSearch(std::pair<std::optional<Priors>, std::string> priors,
                               Bank::Seeds seeds) {
  auto in = std::make_shared<SearchInputs>();
  in->spec = spec;
  in->priors = std::move(priors.first);
  in->priors_label = std::move(priors.second);
  const bool patch_priors = std::any_of(spec.patches.begin(), spec.patches.end(),
                                        [](const PatchSpec& p) { return p.has_prior; });
  if (patch_priors) {
    if (!in->priors.has_value()) {
      in->priors = Priors();
      in->priors_label = "patch priors in the spec";
    } else {
      in->priors_label += " + patch priors in the spec";
    }
  }
  in->warm_starts = std::move(seeds.warm_starts);
  in->related = std::move(seeds.related);
  in->warm_start_count = static_cast<int>(in->warm_starts.size());
  in->related_count = static_cast<int>(in->related.size());
  rec.search = EncodeSearchRecord(*in, llm_round);
  search = std::move(in);
}

}  // namespace infrarsi
