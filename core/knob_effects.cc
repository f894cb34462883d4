// ExplainKnobs: each knob's estimated effect on step time, the chance a
// setting runs and its peak memory, from the models the search fits
// (core/model_internal.h).
#include <algorithm>
#include <cmath>
#include <optional>

#include "core/model_internal.h"
#include "core/model_optimizer.h"
#include "core/planner.h"
#include "absl/strings/str_cat.h"

namespace infrarsi {

using namespace model_internal;  // NOLINT: this file is their user

namespace {

// exp(contrast) - 1 in percent, with the interval's bounds.
template <typename Model>
PercentEffect Percent(const Model& m, const Eigen::VectorXd& contrast, int settings) {
  PercentEffect e;
  e.known = settings > 0;
  e.settings = settings;
  if (!e.known) return e;
  const double mean = m.Mean(contrast);
  const double sd = std::sqrt(std::max(0.0, m.MeanVariance(contrast)));
  e.pct = 100.0 * std::expm1(mean);
  e.low = 100.0 * std::expm1(mean - 1.96 * sd);
  e.high = 100.0 * std::expm1(mean + 1.96 * sd);
  return e;
}

}  // namespace

std::vector<KnobEffectEstimate> ExplainKnobs(const SearchContext& ctx,
                                             const std::vector<Observation>& history,
                                             const ModelOptimizer::Options& options,
                                             double* memory_sigma, MemoryFit* memory_fit) {
  const SessionSpec& spec = *ctx.spec;
  const Planner planner = PlannerFor(spec);
  // "From the runs alone": without the textbook step-time estimate (a real
  // job's declared shape gives one whose proportions the search trusts
  // within about 15%, which the runs on a real trainer need not bear out:
  // on the measured H200 landscape its sdpa effect read -55% against the
  // paired trials' -68%, the interval missing it) nor the built-in priors
  // for what it leaves out.
  ModelOptimizer::Options runs_only = options;
  runs_only.use_time_estimate = false;
  runs_only.flash_off_prior = 0;
  runs_only.fused_off_prior = 0;
  const Models cold(ctx, planner, history, runs_only, nullptr);
  std::optional<Models> revised;
  if (ctx.priors != nullptr) revised.emplace(ctx, planner, history, options, ctx.priors);
  const Models& post = revised ? *revised : cold;
  if (memory_sigma != nullptr) *memory_sigma = post.memory_sigma();
  if (memory_fit != nullptr) {
    *memory_fit = MemoryFit();
    if (post.memory()) {
      memory_fit->capacity_gib = planner.capacity_gib;
      for (const Observation& o : history) {
        const std::string key = ConfigKey(o.config);
        if (!memory_fit->predicted_peak_gib.count(key)) {
          memory_fit->predicted_peak_gib[key] = post.PeakGib(o.config);
        }
      }
    }
  }
  std::vector<KnobEffectEstimate> out;
  const Features& f = cold.features();
  const double base_peak = post.PeakGib(spec.baseline);
  // The distinct settings that ran, and the fastest of them.
  std::vector<Config> ran;
  std::set<std::string> seen;
  const Observation* fastest = nullptr;
  for (const Observation& o : history) {
    if (!Ran(o)) continue;
    if (fastest == nullptr || o.step_time_s < fastest->step_time_s) fastest = &o;
    if (seen.insert(ConfigKey(o.config)).second) ran.push_back(o.config);
  }
  // Where a version would not launch or not fit, the value has no step time
  // there to compare.
  auto runs = [&](const Config& c) {
    if (planner.launch_check && !planner.launch_check(c).empty()) return false;
    return planner.capacity_gib <= 0 || !post.memory() || post.PeakGib(c) <= planner.capacity_gib;
  };
  for (const Knob& k : spec.knobs) {
    for (const std::string& v : k.values) {
      const int i = f.MainIndex(k.name, v);
      if (i < 0) continue;
      KnobEffectEstimate e;
      e.knob = k.name;
      e.value = v;
      e.has_prior = ctx.priors != nullptr;
      if (e.has_prior) {
        const Effect p = ctx.priors->EffectOf(spec, k.name, v);
        e.prior_time = p.time;
        e.prior_time_sd = p.time_sd;
        e.prior_mem = p.mem;
        e.prior_mem_sd = p.mem_sd;
      }
      e.time = cold.time().weights()[i];
      e.time_sd = cold.time().WeightSd(i);
      e.revised_time = post.time().weights()[i];
      if (cold.memory()) {
        e.mem = cold.memory()->weights()[i];
        e.mem_sd = cold.memory()->WeightSd(i);
        e.revised_mem = post.memory()->weights()[i];
        Config c = spec.baseline;
        c[k.name] = v;
        e.memory_price_gib = post.PeakGib(c) - base_peak;
      }
      for (const Observation& o : history) e.trials += Ran(o) && o.config.at(k.name) == v;
      // Confounded: another non-baseline value ran exactly where this one
      // did (dtype=bfloat16 only ever beside micro_batch=16 was credited
      // with micro-batch's gain).
      if (v != spec.baseline.at(k.name) && e.trials > 0) {
        for (const Knob& other : spec.knobs) {
          if (other.name == k.name || !e.confounded_with.empty()) continue;
          for (const std::string& w : other.values) {
            if (w == spec.baseline.at(other.name)) continue;
            bool together = true, any = false;
            for (const Config& s : ran) {
              const bool has_v = s.at(k.name) == v, has_w = s.at(other.name) == w;
              together = together && has_v == has_w;
              any = any || (has_v && has_w);
            }
            if (together && any) {
              e.confounded_with = absl::StrCat(other.name, "=", w);
              break;
            }
          }
        }
      }
      // Contrasts: each setting that ran with this value against the same
      // setting with the baseline's value, where both are expected to run.
      const std::string& base_value = spec.baseline.at(k.name);
      Eigen::VectorXd time_sum = Eigen::VectorXd::Zero(cold.TimeX(spec.baseline).size());
      Eigen::VectorXd post_time_sum = Eigen::VectorXd::Zero(post.TimeX(spec.baseline).size());
      Eigen::VectorXd mem_sum;
      if (post.memory()) mem_sum = Eigen::VectorXd::Zero(post.MemX(spec.baseline).size());
      int n = 0;
      for (const Config& s : ran) {
        Config with = s, without = s;
        with[k.name] = v;
        without[k.name] = base_value;
        if (!runs(with) || !runs(without)) continue;
        ++n;
        time_sum += cold.TimeX(with) - cold.TimeX(without);
        post_time_sum += post.TimeX(with) - post.TimeX(without);
        if (post.memory()) mem_sum += post.MemX(with) - post.MemX(without);
      }
      if (n > 0) {
        const double inv = 1.0 / n;
        e.time_avg = Percent(cold.time(), time_sum * inv, n);
        e.revised_time_avg = Percent(post.time(), post_time_sum * inv, n);
        if (post.memory()) e.mem_avg = Percent(*post.memory(), mem_sum * inv, n);
      }
      if (fastest != nullptr) {
        Config with = fastest->config, without = fastest->config;
        with[k.name] = v;
        without[k.name] = base_value;
        if (runs(with) && runs(without)) {
          e.time_at_best = Percent(cold.time(), cold.TimeX(with) - cold.TimeX(without), 1);
        }
      }
      if (e.has_prior) {
        const double dt = e.time - e.prior_time;
        const double st = std::sqrt(e.time_sd * e.time_sd + e.prior_time_sd * e.prior_time_sd);
        char buf[160];
        if (e.trials > 0 && std::fabs(dt) > 2 * st) {
          e.miscalibrated = true;
          std::snprintf(buf, sizeof(buf), "time: prior %+.2f, runs %+.2f +- %.2f", e.prior_time,
                        e.time, e.time_sd);
          e.note = buf;
        }
        // With a textbook estimate the memory prior covers only its residue.
        if (cold.memory() && !planner.memory_estimate_gib && e.trials > 0) {
          const double dm = e.mem - e.prior_mem;
          const double sm = std::sqrt(e.mem_sd * e.mem_sd + e.prior_mem_sd * e.prior_mem_sd);
          if (std::fabs(dm) > 2 * sm) {
            e.miscalibrated = true;
            std::snprintf(buf, sizeof(buf), "%smemory: prior %+.2f, runs %+.2f +- %.2f",
                          e.note.empty() ? "" : "; ", e.prior_mem, e.mem, e.mem_sd);
            e.note += buf;
          }
        }
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace infrarsi
