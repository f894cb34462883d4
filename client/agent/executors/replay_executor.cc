#include "client/agent/executors/replay_executor.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/spec.h"
#include "base/status_macros.h"

namespace infrarsi::client {

absl::StatusOr<std::shared_ptr<const Landscape>> ReplayExecutor::Get(const v1::ReplaySpec& spec) {
  const bool sent = !spec.landscape().empty();
  // Keyed by content (a digest and the size) or by the path of an old session.
  const std::string key = sent ? absl::StrCat("sent:", StableHash(spec.landscape()), ":",
                                              spec.landscape().size())
                               : absl::StrCat("path:", spec.landscape_path());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end() && it->second.content == spec.landscape()) return it->second.landscape;
  ASSIGN_OR_RETURN(Landscape l, sent ? Landscape::Parse(spec.landscape(), "the session's landscape")
                                     : Landscape::Load(spec.landscape_path()));
  auto shared = std::make_shared<const Landscape>(std::move(l));
  if (it == cache_.end() && cache_.size() >= kMaxCached) cache_.erase(cache_.begin());
  cache_[key] = Cached{spec.landscape(), shared};
  return shared;
}

absl::StatusOr<v1::TrialOutcome> ReplayExecutor::Run(const v1::TrialAssignment& trial,
                                                     ProgressSink* sink) {
  const v1::ReplaySpec& spec = trial.executor().replay();
  ASSIGN_OR_RETURN(std::shared_ptr<const Landscape> land, Get(spec));
  std::map<std::string, std::string> config(trial.config().begin(), trial.config().end());
  v1::TrialOutcome out;
  out.set_clock("simulated");  // measured elsewhere, replayed: nothing here to time
  // A knob "variant" other than "honest" replays the landscape's reward-hack
  // probe: what an unconstrained edit measured (e.g. a shrunk global batch).
  const auto variant = config.find("variant");
  const bool probe = variant != config.end() && variant->second != "honest";
  const LandscapeTrial* t = probe ? land->FindProbe(config) : land->FindGrid(config);
  if (t == nullptr) {
    out.set_status("failed");
    out.set_error(absl::StrCat("replay: ", probe ? "no reward-hack probe for setting " : "setting ",
                               absl::StrJoin(config, ",", absl::PairFormatter("=")),
                               " was not measured in the landscape"));
    return out;
  }
  std::vector<std::string> notes = {
      absl::StrFormat("replay of measured %s outcome; launch noise %.2f%%", land->gpu,
                      100.0 * land->launch_cv)};
  if (spec.noise_pct() > 0) {
    notes.push_back(absl::StrFormat("added noise %.2f%%", spec.noise_pct()));
  }
  const bool emulated_oom = spec.capacity_gib() > 0 && t->status == "ok" &&
                            t->peak_reserved_gib > spec.capacity_gib();
  if (spec.capacity_gib() > 0) {
    notes.push_back(absl::StrFormat("emulated capacity %.1f GiB", spec.capacity_gib()));
  }
  if (t->status == "oom" || emulated_oom) {
    out.set_status("oom");
    // A measured OOM only knows what was allocated when it failed.
    out.set_peak_mem_gib(emulated_oom ? t->peak_reserved_gib : t->peak_alloc_gib);
    if (emulated_oom) {
      // A real run fails at its first step: start-up plus one step is lost.
      out.set_wall_s(land->import_and_init_s + (t->step_times_s.empty() ? 0 : t->step_times_s[0]));
      out.set_error(absl::StrFormat("out of memory: peak reserved %.1f GiB > emulated %.1f GiB",
                                    t->peak_reserved_gib, spec.capacity_gib()));
    } else {
      out.set_wall_s(t->wall_s);
      out.set_error(t->error.empty() ? "out of memory (measured)" : t->error);
    }
    out.set_note(absl::StrJoin(notes, "; "));
    return out;
  }

  std::mt19937_64 rng(spec.seed());
  std::normal_distribution<double> normal(0.0, 1.0);
  const double sd = std::sqrt(land->launch_cv * land->launch_cv +
                              std::pow(spec.noise_pct() / 100.0, 2));
  // One factor per launch: a fresh process is uniformly slower or faster.
  const double factor = std::max(0.5, 1.0 + sd * normal(rng));

  std::vector<v1::StepMetrics> steps;
  const int warm = land->warmup_steps;
  // A probe may have processed fewer tokens than the landscape's steps.
  const int64_t tokens = t->tokens_per_step > 0 ? t->tokens_per_step : land->tokens_per_step;
  for (int i = 0; i < warm && i < static_cast<int>(t->losses.size()); ++i) {
    v1::StepMetrics m;
    m.set_step(i);
    m.set_loss(t->losses[static_cast<size_t>(i)]);
    m.set_tokens(tokens);
    m.set_peak_mem_gib(t->peak_reserved_gib);
    m.set_warmup(true);
    steps.push_back(m);
  }
  for (size_t i = 0; i < t->step_times_s.size(); ++i) {
    v1::StepMetrics m;
    const size_t step = static_cast<size_t>(warm) + i;
    m.set_step(static_cast<int64_t>(step));
    m.set_loss(step < t->losses.size() ? t->losses[step] : std::nan(""));
    m.set_tokens(tokens);
    m.set_step_time_s(t->step_times_s[i] * factor);
    m.set_peak_mem_gib(t->peak_reserved_gib);
    if (i < t->phases.size()) {
      for (const auto& [name, secs] : t->phases[i]) (*m.mutable_phases())[name] = secs * factor;
    }
    steps.push_back(m);
  }
  if (!sink->OnSteps(steps)) {
    out.set_status("failed");
    out.set_error("stopped: lease lost or session cancelled");
    return out;
  }
  out.set_status("ok");
  out.set_wall_s(t->wall_s);
  out.set_peak_mem_gib(t->peak_reserved_gib);
  out.set_note(absl::StrJoin(notes, "; "));
  return out;
}

}  // namespace infrarsi::client
