#include "core/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/agent_health.h"
#include "core/slurm_job.h"
#include "core/trial_rules.h"
#include "core/audit.h"
#include "core/integrity.h"
#include "core/model_optimizer.h"
#include "base/proto_util.h"
#include "base/status_macros.h"
#include "core/trial_status.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

bool IsFailure(const std::string& status) {
  return status == ts::kOom || status == ts::kFailed || status == ts::kTimeout ||
         status == ts::kViolation;
}


}  // namespace

void MarkRecordedBeforeFreezing(v1::SessionReport* rep, const std::string& release) {
  rep->set_recorded(absl::StrCat(
      "rebuilt by infrarsi ", release,
      ": the session finished under an older release, before reports were kept as they were "
      "when their session finished; which checks ran then, its search strategy and its memory "
      "model's figures are not known"));
  for (v1::IntegrityCheck& c : *rep->mutable_integrity()) {
    c.set_ran(false);
    c.set_detail(absl::StrCat("not known to have run: recorded before this release, and the check "
                              "may not have existed then (this release checks: ",
                              c.detail(), ")"));
  }
  rep->mutable_search()->set_strategy("unknown (recorded before this release)");
  rep->mutable_search()->set_memory_sigma(0);
  for (v1::TrialView& t : *rep->mutable_trials()) t.set_predicted_peak_mem_gib(0);
  for (v1::KnobEffect& k : *rep->mutable_search()->mutable_knob_effects()) {
    k.clear_mem_avg();
    k.set_memory_price_gib(0);
  }
}

v1::TrialView TrialViewOf(const storage::TrialRecord& t) {
  v1::TrialView v;
  v.set_id(t.id);
  if (auto c = DecodeConfigJson(t.config); c.ok()) CopyConfig(*c, v.mutable_config());
  v.set_status(t.status);
  v.set_purpose(t.purpose);
  v.set_step_time_s(t.step_time_s);
  v.set_peak_mem_gib(t.peak_mem_gib);
  v.set_agent(t.agent.empty() ? t.lease_agent : t.agent);
  v.set_attempts(t.attempts);
  v.set_cost_s(t.cost_s);
  v.set_error(t.error);
  v.set_note(t.note);
  v.set_isolation(t.isolation);
  v.set_violation(t.violation);
  v.set_tag(t.tag);
  if (t.observed_steps > 0) v.set_observed_step_time_s(t.observed_window_s / t.observed_steps);
  if (!t.slurm.empty()) *v.mutable_slurm() = DecodeSlurmJob(t.slurm);
  v.set_infra_lost_s(t.lost_s);
  v.set_failure_class(FailureClass(t.status, t.violation, t.error));
  return v;
}

double TrialGpuSeconds(const SessionSpec& spec, const storage::TrialRecord& t) {
  return (t.cost_s + t.lost_s) * std::max(1, spec.gpu_count);
}

absl::StatusOr<Observation> SearchObservationOf(const SessionSpec& spec, const storage::TrialRecord& t) {
  Observation o;
  ASSIGN_OR_RETURN(o.config, DecodeConfigJson(t.config));
  FillKnobDefaults(spec, &o.config);
  // A pruned trial ran: the models learn the step time its steps showed,
  // or, where its memory went past the device's, that it does not fit.
  o.status = t.status;
  if (t.status == trial_status::kPruned) {
    const double capacity = DeclaredCapacityGib(spec);
    o.status = capacity > 0 && t.peak_mem_gib > capacity ? trial_status::kOom : trial_status::kOk;
  }
  o.step_time_s = t.step_time_s;
  o.peak_mem_gib = t.peak_mem_gib;
  return o;
}

absl::StatusOr<std::vector<Observation>> SearchHistoryOf(
    const SessionSpec& spec, const std::vector<storage::TrialRecord>& trials, double* gpu_seconds) {
  std::vector<Observation> history;
  *gpu_seconds = 0;
  for (const auto& t : trials) {
    *gpu_seconds += TrialGpuSeconds(spec, t);
    if (t.purpose == trial_purpose::kVerify) continue;
    ASSIGN_OR_RETURN(Observation o, SearchObservationOf(spec, t));
    history.push_back(std::move(o));
  }
  return history;
}

absl::StatusOr<v1::SessionReport> BuildReport(const ReportInputs& in,
                                              const std::vector<storage::TrialRecord>& trials,
                                              const Optimizer& optimizer) {
  v1::SessionReport rep;
  rep.set_session_id(in.rec.id);
  rep.set_name(in.rec.name);
  rep.set_stage(in.rec.stage);
  *rep.mutable_workload() = in.summary.workload();
  *rep.mutable_hardware() = in.summary.hardware();
  rep.set_contract_hash(in.rec.contract_hash);
  rep.set_applied_commit(in.rec.applied_commit);

  v1::SessionReport::Baseline* base = rep.mutable_baseline();
  CopyConfig(in.spec.baseline, base->mutable_config());
  base->set_step_time_s(in.rec.baseline_step_time_s);
  base->set_cv(in.rec.baseline_cv);
  base->set_runs(in.rec.baseline_runs);

  v1::SessionReport::Best* best = rep.mutable_best();
  *best->mutable_config() = in.summary.best_config();
  best->set_step_time_s(in.summary.best_step_time_s());
  best->set_speedup(in.summary.best_speedup());
  // The trial behind the config shown: the promoted candidate's when one
  // was promoted (not always the fastest search trial), else the fastest.
  if (in.summary.promoted()) {
    best->set_trial_id(in.verification.candidates(in.verification.promoted_rank() - 1).trial_id());
  } else if (in.best_trial_id != 0 && in.summary.best_speedup() > 1.0) {
    best->set_trial_id(in.best_trial_id);
  }

  *rep.mutable_contract() = FromJson<v1::Contract>(in.rec.contract);
  *rep.mutable_doctor() = in.doctor;
  *rep.mutable_verification() = in.verification;
  v1::SessionReport::FailedTrials* failed = rep.mutable_failed_trials();
  double total = 0, infra = 0;
  for (const auto& t : trials) {
    v1::TrialView* view = rep.add_trials();
    *view = TrialViewOf(t);
    for (const Knob& k : in.spec.knobs) {
      if (!view->config().contains(k.name) && in.spec.baseline.count(k.name)) {
        (*view->mutable_config())[k.name] = in.spec.baseline.at(k.name);
      }
    }
    total += t.cost_s + t.lost_s;
    infra += t.lost_s;
    if (t.status == ts::kViolation) {
      (*rep.mutable_violations_by_kind())[t.violation] += 1;
      (*rep.mutable_violation_cost_s_by_kind())[t.violation] += t.cost_s;
    }
    if (IsFailure(t.status)) {
      failed->set_count(failed->count() + 1);
      failed->set_cost_s(failed->cost_s() + t.cost_s);
      (*failed->mutable_count_by_status())[t.status] += 1;
      (*failed->mutable_cost_s_by_status())[t.status] += t.cost_s;
    }
  }
  rep.set_total_cost_s(total);
  rep.set_infra_cost_s(infra);
  std::vector<FailedTrialCost> costs;
  for (const auto& t : trials) {
    if (!IsFailure(t.status)) continue;
    FailedTrialCost c;
    c.status = t.status;
    c.violation = t.violation;
    c.error = t.error;
    c.cost_s = t.cost_s;
    ASSIGN_OR_RETURN(c.config, DecodeConfigJson(t.config));
    FillKnobDefaults(in.spec, &c.config);
    costs.push_back(std::move(c));
  }
  for (const BrokenHost& h : FindBrokenHosts(trials)) {
    v1::SessionReport::BrokenHost* b = rep.add_broken_hosts();
    b->set_agent_id(h.agent_id);
    b->set_failed(static_cast<int32_t>(h.trial_ids.size()));
    b->set_first_error(h.first_error);
    for (int64_t id : h.trial_ids) b->add_trial_ids(id);
  }
  for (const FailingNode& n : FindFailingNodes(trials)) {
    v1::SessionReport::NotedNode* b = rep.add_noted_nodes();
    b->set_node(n.node);
    b->set_failed(static_cast<int32_t>(n.trial_ids.size()));
    b->set_first_error(n.first_error);
    for (int64_t id : n.trial_ids) b->add_trial_ids(id);
  }
  for (const FailureCost& c : FailureCosts(in.spec, costs)) {
    v1::SessionReport::FailureCost* f = rep.add_failure_costs();
    f->set_failure_class(c.failure_class);
    f->set_knob(c.knob);
    f->set_value(c.value);
    f->set_trials(c.trials);
    f->set_gpu_s(c.gpu_s);
  }
  // The promoted setting's source changes, each inside the editable scope:
  // the promoted candidate's, which is not always the fastest search trial
  // (that one may have failed its A/B runs).
  const int rank = in.verification.promoted_rank();
  if (rank > 0 && rank <= in.verification.candidates_size()) {
    const auto& promoted = in.verification.candidates(rank - 1).config();
    const Config config(promoted.begin(), promoted.end());
    for (const SourcePathAudit& a : AuditSourcePaths(in.spec, config)) {
      v1::SessionReport::SourcePath* p = rep.add_source_audit();
      p->set_path(a.path);
      p->set_patch(a.patch);
      p->set_editable_glob(a.editable_glob);
    }
  }

  for (v1::IntegrityCheck& c : DescribeIntegrityChecks(in.spec, in.doctor, in.verification)) {
    *rep.add_integrity() = std::move(c);
  }

  for (const LlmPatchOutcome& o : in.llm_round.outcomes) {
    v1::SessionReport::LlmPatch* p = rep.add_llm_patches();
    p->set_name(o.name);
    p->set_rationale(o.rationale);
    p->set_accepted(o.accepted);
    p->set_reason(o.reason);
    for (const std::string& path : o.paths) p->add_paths(path);
    p->set_has_prior(o.has_prior);
    p->set_prior_time(o.prior_time);
    if (o.accepted) p->set_knob(PatchKnobName(o.name));
  }
  rep.set_llm_patches_note(in.llm_round.note);

  v1::SearchSummary* search = rep.mutable_search();
  search->set_strategy(optimizer.Name());
  search->set_priors(in.priors_label);
  search->set_warm_starts(in.warm_starts);
  search->set_related_trials(in.related_trials);
  search->set_stop_reason(in.verification.search_stop().empty() ? in.stop_reason
                                                                 : in.verification.search_stop());
  for (const auto& t : trials) {
    if (t.purpose == trial_purpose::kSearch && !t.tag.empty()) (*search->mutable_proposals_by_reason())[t.tag]++;
  }
  double unused = 0;
  ASSIGN_OR_RETURN(std::vector<Observation> history, SearchHistoryOf(in.spec, trials, &unused));
  if (!history.empty()) {
    SearchContext ctx;
    ctx.spec = &in.spec;
    ctx.priors = in.priors;
    const auto* mo = dynamic_cast<const ModelOptimizer*>(&optimizer);
    double memory_sigma = 0;
    MemoryFit fit;
    const std::vector<KnobEffectEstimate> effects = ExplainKnobs(
        ctx, history, mo ? mo->options() : ModelOptimizer::Options(), &memory_sigma, &fit);
    search->set_memory_sigma(memory_sigma);
    search->set_capacity_gib(fit.capacity_gib);
    // Every trial of a setting the model saw (verification re-runs share
    // their candidate's setting).
    if (!fit.predicted_peak_gib.empty()) {
      for (v1::TrialView& v : *rep.mutable_trials()) {
        const Config c(v.config().begin(), v.config().end());
        auto it = fit.predicted_peak_gib.find(ConfigKey(c));
        if (it != fit.predicted_peak_gib.end()) v.set_predicted_peak_mem_gib(it->second);
      }
    }
    for (const KnobEffectEstimate& e : effects) {
      v1::KnobEffect* k = search->add_knob_effects();
      k->set_knob(e.knob);
      k->set_value(e.value);
      k->set_has_prior(e.has_prior);
      k->set_prior_time(e.prior_time);
      k->set_prior_time_sd(e.prior_time_sd);
      k->set_prior_mem(e.prior_mem);
      k->set_prior_mem_sd(e.prior_mem_sd);
      k->set_time(e.time);
      k->set_time_sd(e.time_sd);
      k->set_mem(e.mem);
      k->set_mem_sd(e.mem_sd);
      k->set_revised_time(e.revised_time);
      k->set_revised_mem(e.revised_mem);
      k->set_trials(e.trials);
      k->set_memory_price_gib(e.memory_price_gib);
      k->set_miscalibrated(e.miscalibrated);
      k->set_note(e.note);
      k->set_confounded_with(e.confounded_with);
      auto put = [](const PercentEffect& from, v1::PercentEffect* to) {
        to->set_known(from.known);
        to->set_pct(from.pct);
        to->set_low(from.low);
        to->set_high(from.high);
        to->set_settings(from.settings);
      };
      put(e.time_avg, k->mutable_time_avg());
      put(e.time_at_best, k->mutable_time_at_best());
      put(e.revised_time_avg, k->mutable_revised_time_avg());
      put(e.mem_avg, k->mutable_mem_avg());
    }
  }
  return rep;
}


}  // namespace infrarsi
