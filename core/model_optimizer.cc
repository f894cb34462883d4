#include "core/model_optimizer.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/model_internal.h"
#include "core/planner.h"
#include "core/value_blame.h"
#include "models/bayes_linear.h"
#include "models/tobit.h"

namespace infrarsi {
namespace {
// How many of the newest OOMs have their one-knob neighbours pooled.
constexpr size_t kOomsAround = 5;
}  // namespace

using namespace model_internal;  // NOLINT: this file is their user

Proposal ModelOptimizer::Propose(const SearchContext& ctx, const std::vector<Observation>& history,
                                 int n, uint64_t seed) {
  Proposal out;
  if (n <= 0) return out;
  const SessionSpec& spec = *ctx.spec;
  const Planner planner = PlannerFor(spec);
  const Space space(spec);
  std::mt19937_64 rng(seed);
  // Settings tried (history outside the space can never be proposed). Sets
  // of indices are flat (open addressing): a proposal inserts and probes
  // tens of thousands, and node-based sets spent about a tenth of its main
  // thread allocating and freeing (perf, search_bench --latency). None is
  // iterated, so their order (which Abseil varies) never matters.
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> tried;
  const SpaceIndexer index_of(spec);
  // The caller's kept indices where they fit this history and space (a
  // wrong one would index past the space's digits), else computed.
  std::vector<int64_t> computed_index;
  const int64_t space_size = spec.SpaceSize();
  const bool kept_index = ctx.history_index != nullptr && ctx.history_index->size() == history.size() &&
                          std::all_of(ctx.history_index->begin(), ctx.history_index->end(),
                                      [&](int64_t i) { return i >= -1 && i < space_size; });
  if (!kept_index) computed_index = index_of(history);
  const std::vector<int64_t>& history_index = kept_index ? *ctx.history_index : computed_index;
  // -1 where a hand-built spec's baseline lies outside the space.
  const int64_t baseline_index = IndexOf(spec, spec.baseline);
  for (int64_t i : history_index) {
    if (i >= 0 && seen.insert(i).second) tried.push_back(i);
  }
  // Contract violations and timeouts are evidence about the values that
  // ran (core/value_blame.h): a value blamed for certain is not proposed
  // again, and every setting is scored by the chance it keeps the contract.
  const ValueBlame blame(spec, history, &history_index);
  auto keeps_contract = [&](int64_t i) { return !blame.any() || !blame.CertainAt(i); };
  auto clean = [&](int64_t i) { return blame.any() ? 1.0 - blame.RiskAt(i) : 1.0; };
  // A setting whose step time is that of one that ran, is running or is
  // picked (knobs that cannot change it there: core/planner.h) cannot be
  // faster; one whose twins only ran out of memory may fit.
  absl::flat_hash_set<int64_t> timed;
  const bool same_time = options_.skip_equivalent && static_cast<bool>(planner.step_time_representative_at);
  if (same_time) {
    for (size_t i = 0; i < history.size(); ++i) {
      if (history_index[i] >= 0 && (Ran(history[i]) || InFlight(history[i].status))) {
        timed.insert(planner.step_time_representative_at(history_index[i]));
      }
    }
  }
  auto launches = [&](int64_t i) {
    return (!planner.launches_at || planner.launches_at(i)) && keeps_contract(i) &&
           (!same_time || !timed.count(planner.step_time_representative_at(i)));
  };
  std::vector<int64_t> picked;
  std::optional<Models> fitted;  // the models, fitted once per proposal when first needed
  auto take = [&](int64_t i, const std::string& why) {
    if (std::find(picked.begin(), picked.end(), i) != picked.end()) return;
    picked.push_back(i);
    if (same_time) timed.insert(planner.step_time_representative_at(i));
    out.configs.push_back(ConfigAt(spec, i));
    out.reasons.push_back(why);
    out.p_fit.push_back(fitted ? fitted->PFitAt(i) : -1.0);
    seen.insert(i);
  };
  auto near_picked = [&](int64_t i) {
    for (int64_t p : picked) {
      if (space.Distance(p, i) < 2) return true;
    }
    return false;
  };

  auto models = [&]() -> const Models& {
    if (!fitted) fitted.emplace(ctx, planner, history, options_, ctx.priors, &history_index);
    return *fitted;
  };

  // Start: the bank's settings, kept at least two knobs apart.
  std::vector<int64_t> warm;
  int warm_used = 0;
  for (const Config& w : ctx.warm_starts) {
    warm.push_back(IndexOf(spec, w));
    warm_used += warm.back() >= 0 && seen.count(warm.back()) > 0;
  }
  // A bank setting may come from a GPU with more memory: where the workload
  // has a textbook memory estimate, those the memory model expects not to
  // fit here are left out (the search finds their fitting neighbours).
  std::vector<double> warm_fit(warm.size(), 1.0);
  if (warm_used < options_.max_warm_starts && !warm.empty() && planner.memory_estimate_gib_at &&
      planner.capacity_gib > 0) {
    std::vector<int64_t> valid;
    for (int64_t w : warm) {
      if (w >= 0) valid.push_back(w);
    }
    const std::vector<Models::Prediction> pred = models().PredictAll(valid);
    for (size_t i = 0, j = 0; i < warm.size(); ++i) {
      if (warm[i] >= 0) warm_fit[i] = pred[j++].p_fit;
    }
  }
  for (size_t i = 0; i < warm.size(); ++i) {
    const int64_t w = warm[i];
    if (static_cast<int>(out.configs.size()) >= n || warm_used >= options_.max_warm_starts) break;
    if (w < 0 || seen.count(w) || !launches(w) || near_picked(w) || warm_fit[i] < 0.5) continue;
    take(w, "bank");
    ++warm_used;
  }
  // The best bank setting that would not fit here stands for its
  // neighbourhood: the best-scored setting one or two knobs away that the
  // memory model expects to fit (what memory savers make of it), unless
  // the search has already been within two knobs of it.
  bool bank_neighbour = false;  // proposed now or before
  size_t screened = 0;          // the first bank setting left out for memory
  while (screened < warm.size() &&
         (warm[screened] < 0 || seen.count(warm[screened]) || warm_fit[screened] >= 0.5)) {
    ++screened;
  }
  if (screened < warm.size() && static_cast<int>(out.configs.size()) < n &&
      warm_used < options_.max_warm_starts) {
    const int64_t w = warm[screened];
    bank_neighbour = std::any_of(tried.begin(), tried.end(), [&](int64_t t) {
      return t != baseline_index && space.Distance(t, w) <= 2;
    });
    if (!bank_neighbour) {
      absl::flat_hash_set<int64_t> near_set;
      std::vector<int64_t> near;
      space.ForEachWithinTwo(w, [&](int64_t c) {
        if (c != w && !seen.count(c) && launches(c) && !near_picked(c) && near_set.insert(c).second) {
          near.push_back(c);
        }
      });
      const std::vector<Models::Prediction> pred = models().PredictAll(near);
      size_t best = near.size();
      for (size_t j = 0; j < near.size(); ++j) {
        if (pred[j].p_fit >= 0.5 && (best == near.size() || pred[j].Score() > pred[best].Score())) best = j;
      }
      if (best < near.size()) {
        take(near[best], "bank+memory-saver");
        bank_neighbour = true;
      }
    }
  }
  if (static_cast<int>(out.configs.size()) >= n) return out;

  // Candidates: every untried setting that launches, or a sample plus the
  // neighbourhood of the best settings seen.
  std::vector<int64_t> pool;
  const int64_t size = spec.SpaceSize();
  if (size <= options_.max_enumerate) {
    for (int64_t i = 0; i < size; ++i) {
      if (!seen.count(i) && launches(i)) pool.push_back(i);
    }
  } else {
    absl::flat_hash_set<int64_t> pooled = seen;
    std::uniform_int_distribution<int64_t> pick(0, size - 1);
    for (int i = 0; i < options_.pool_size; ++i) {
      const int64_t c = pick(rng);
      if (pooled.insert(c).second && launches(c)) pool.push_back(c);
    }
    std::vector<const Observation*> ok;
    for (const Observation& o : history) {
      if (Ran(o)) ok.push_back(&o);
    }
    const size_t top = std::min<size_t>(ok.size(), 5);
    std::partial_sort(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(top), ok.end(),
                      [](const auto* a, const auto* b) { return a->step_time_s < b->step_time_s; });
    std::vector<int64_t> around;  // the best settings that ran, the newest OOMs
    for (size_t i = 0; i < top; ++i) around.push_back(IndexOf(spec, ok[i]->config));
    // An OOM's one-knob neighbours hold its memory savers (OomRetry).
    for (size_t i = history.size(), ooms = 0; i-- > 0 && ooms < kOomsAround;) {
      if (history[i].status == trial_status::kOom && history_index[i] >= 0) {
        around.push_back(history_index[i]);
        ++ooms;
      }
    }
    for (const int64_t base : around) {
      if (base < 0) continue;
      for (size_t k = 0; k < space.knobs(); ++k) {
        for (int64_t v = 0; v < space.radix(k); ++v) {
          const int64_t c = space.With(base, k, v);
          if (pooled.insert(c).second && launches(c)) pool.push_back(c);
        }
      }
    }
  }
  // The incumbent: the fastest setting that ran. Its neighbourhood (one or
  // two knobs changed) is where the last few percent usually are.
  int64_t incumbent = -1;
  double incumbent_time = 0;
  for (size_t i = 0; i < history.size(); ++i) {
    const Observation& o = history[i];
    if (Ran(o) && history_index[i] >= 0 && (incumbent < 0 || o.step_time_s < incumbent_time)) {
      incumbent = history_index[i];
      incumbent_time = o.step_time_s;
    }
  }
  if (incumbent >= 0 && size > options_.max_enumerate) {
    absl::flat_hash_set<int64_t> pooled(pool.begin(), pool.end());
    space.ForEachWithinTwo(incumbent, [&](int64_t c) {
      if (!seen.count(c) && pooled.insert(c).second && launches(c)) pool.push_back(c);
    });
    // And a sample of three-knob moves: the last step often needs three
    // knobs changed together (pp, tp and recompute, say).
    if (space.knobs() >= 3) {
      std::uniform_int_distribution<size_t> knob(0, space.knobs() - 1);
      for (int i = 0; i < options_.pool_size / 4; ++i) {
        int64_t c = incumbent;
        for (int j = 0; j < 3; ++j) {
          const size_t k = knob(rng);
          c = space.With(c, k, std::uniform_int_distribution<int64_t>(0, space.radix(k) - 1)(rng));
        }
        if (!seen.count(c) && pooled.insert(c).second && launches(c)) pool.push_back(c);
      }
    }
  }
  if (pool.empty()) return out;
  std::vector<std::string> why(pool.size(), "model");

  // Distinct settings measured (the doctor's baseline repeats count once);
  // only whether there are more than a few matters.
  std::set<std::string> measured;
  for (const Observation& o : history) {
    if (!InFlight(o.status) && measured.size() <= static_cast<size_t>(options_.initial_designs)) {
      measured.insert(ConfigKey(o.config));
    }
  }
  const int finished = static_cast<int>(measured.size());
  std::vector<double> score(pool.size(), 0.0);
  // Priors, bank starts or the bank's trials of this workload inform the
  // models from the first proposal: no space-filling then.
  const bool learned_from_bank =
      ctx.related != nullptr &&
      std::any_of(ctx.related->begin(), ctx.related->end(), [](const CtxRelated& r) { return Ran(r.obs); });
  // So does a textbook step-time estimate (the planner's, where the spec
  // carries a model shape): the step-time model starts from its
  // proportions (search_bench: the simulator suite's summed medians 235 ->
  // 194 without the two space-filling trials; the measured landscape, which
  // has no estimate, needs them: 6 -> 8 without).
  const bool estimated = options_.use_time_estimate && static_cast<bool>(planner.time_estimate_s);
  const bool informed =
      ctx.priors != nullptr || warm_used > 0 || bank_neighbour || learned_from_bank || estimated;
  const int initial = informed ? 0 : options_.initial_designs;
  if (finished < initial + 1) {
    // Cold start: far from everything tried (space-filling), weighted by
    // the chance the setting runs where the models can tell it (the
    // textbook memory estimate and the baseline's peak): a far setting
    // that runs out of memory teaches little and costs a trial.
    std::vector<Models::Prediction> pred;
    if (planner.capacity_gib > 0) pred = models().PredictAll(pool);
    for (size_t i = 0; i < pool.size(); ++i) {
      int dmin = 1 << 20;
      for (int64_t t : tried) dmin = std::min(dmin, space.Distance(pool[i], t));
      for (int64_t p : picked) dmin = std::min(dmin, space.Distance(pool[i], p));
      score[i] = dmin + std::uniform_real_distribution<double>(0, 0.5)(rng);
      if (!pred.empty()) score[i] *= pred[i].p_fit * pred[i].p_launch;
      score[i] *= clean(pool[i]);
      why[i] = "space-filling";
    }
  } else {
    const Models& m = models();
    std::vector<Models::Prediction> pred = m.PredictAll(pool);
    for (size_t i = 0; i < pool.size(); ++i) score[i] = pred[i].Score() * clean(pool[i]);
    // Memory-saver pairing: the best predicted speed-ups that would not fit
    // get the values the memory model prices cheapest (one, then two).
    if (m.memory()) {
      struct Saver {
        double price;
        size_t knob;
        int64_t value;
        bool operator<(const Saver& o) const { return price < o.price; }
      };
      std::vector<Saver> savers;
      // Priced by index, no Config built per value. ParseSpec keeps the
      // baseline in the space; a hand-built spec's baseline outside it has
      // no one-knob neighbours to price.
      const int64_t base_at = baseline_index;
      const double base_peak = base_at >= 0 ? m.PeakGibAt(base_at) : 0;
      for (size_t k = 0; base_at >= 0 && k < space.knobs(); ++k) {
        for (int64_t v = 0; v < space.radix(k); ++v) {
          if (space.Digit(base_at, k) == v) continue;
          const double price = m.PeakGibAt(space.With(base_at, k, v)) - base_peak;
          if (price < 0) savers.push_back({price, k, v});
        }
      }
      std::sort(savers.begin(), savers.end());
      std::vector<size_t> by_ei(pool.size());
      std::iota(by_ei.begin(), by_ei.end(), 0);
      std::sort(by_ei.begin(), by_ei.end(), [&](size_t a, size_t b) { return pred[a].ei > pred[b].ei; });
      absl::flat_hash_set<int64_t> pooled(pool.begin(), pool.end());
      std::vector<int64_t> extra;
      for (size_t r = 0, paired = 0; r < by_ei.size() && paired < 20; ++r) {
        const size_t i = by_ei[r];
        if (pred[i].p_fit >= 0.5) continue;
        ++paired;
        for (size_t a = 0; a < savers.size() && a < 4; ++a) {
          for (size_t b = a; b < savers.size() && b < 4; ++b) {
            const int64_t c = space.With(space.With(pool[i], savers[a].knob, savers[a].value),
                                         savers[b].knob, savers[b].value);
            if (c == pool[i] || seen.count(c) || !pooled.insert(c).second || !launches(c)) continue;
            extra.push_back(c);
          }
        }
      }
      const std::vector<Models::Prediction> extra_pred = m.PredictAll(extra);
      for (size_t j = 0; j < extra.size(); ++j) {
        pred.push_back(extra_pred[j]);
        score.push_back(extra_pred[j].Score() * clean(extra[j]));
        why.push_back("model+memory-saver");
      }
      pool.insert(pool.end(), extra.begin(), extra.end());
    }
    // The scores before the guards below: where they leave nothing worth a
    // trial, the picks still follow the models (the stop rule, reading an
    // expected gain of 0, ends the session once it may), not pool order.
    const std::vector<double> unguarded = score;
    const int oom_trials = static_cast<int>(std::count_if(
        history.begin(), history.end(), [](const Observation& o) { return o.status == trial_status::kOom; }));
    // Whether some setting worth a trial, more likely to fit than not, also
    // passes `also` (what the two stops below ask; the pass ends at the
    // first).
    auto any_likely_fit = [&](auto&& also) {
      for (size_t i = 0; i < pool.size(); ++i) {
        if (unguarded[i] > 0 && pred[i].p_fit >= 0.5 && also(i)) return true;
      }
      return false;
    };
    // After an OOM, a pool with nothing worth a trial more likely to fit
    // than not is as good as exhausted: the session stops (Proposal::stop).
    if (options_.stop_after_ooms > 0 && oom_trials >= options_.stop_after_ooms) {
      if (!any_likely_fit([](size_t) { return true; })) {
        out.stop = absl::StrFormat(
            "after %d out-of-memory trials no untried setting is more likely to fit in memory than not",
            oom_trials);
      }
    }
    // Every OOM is a trial paid for nothing: after k of them, a setting
    // must fit with probability 1 - 2^-(k + oom_caution_start) to be run
    // (the memory model's doubt about a setting is what a further OOM would
    // have cost).
    const int ooms = options_.oom_caution ? std::min(6, oom_trials + options_.oom_caution_start) : 0;
    auto caution = [&](std::vector<double>& s, int level) {
      if (level <= 0) return;
      const double min_fit = 1.0 - std::pow(0.5, level);
      for (size_t i = 0; i < pool.size(); ++i) {
        if (pred[i].p_fit < min_fit) s[i] = 0;
      }
    };
    caution(score, ooms);
    // A setting more likely slower than the baseline than not is not worth
    // its GPU-hours: the baseline already runs that well (a trust region
    // around a decent baseline; a naive one leaves nearly everything in).
    // The baseline's step time is the models' (the geometric mean of its
    // runs), the one the slowdown charge reads.
    const std::optional<double> measured_base = m.baseline_log_time();
    const bool have_base = measured_base.has_value();
    const double base_log = measured_base.value_or(0.0);
    auto baseline_floor = [&](std::vector<double>& s) {
      if (options_.min_p_beat_baseline <= 0 || !have_base) return;
      for (size_t i = 0; i < pool.size(); ++i) {
        if (pred[i].ProbabilityBelow(base_log) < options_.min_p_beat_baseline) s[i] = 0;
      }
    };
    baseline_floor(score);
    // Where no untried setting more likely to fit than not has a fair
    // chance to beat the baseline, the session stops (Proposal::stop,
    // before min_trials too): any further pick is a trial the models
    // expect to be slower than what already runs, or out of memory. Only
    // once half of min_trials search trials ran: a stop the priors reach
    // alone would never let the runs revise a wrong one.
    int search_ran = 0;
    for (size_t i = 0; i < history.size(); ++i) {
      search_ran += !InFlight(history[i].status) && history_index[i] != baseline_index;
    }
    bool no_fair_chance = false;
    if (options_.stop_p_beat_baseline > 0 && have_base && out.stop.empty() &&
        !any_likely_fit([&](size_t i) {
          return pred[i].ProbabilityBelow(base_log) >= options_.stop_p_beat_baseline;
        })) {
      if (2 * search_ran >= spec.min_trials) {
        no_fair_chance = true;
        out.stop = absl::StrFormat(
            "no untried setting likely to fit in memory has a %.0f%% chance to beat the baseline's step time",
            100 * options_.stop_p_beat_baseline);
      }
    }
    // Where no untried setting worth a trial is more likely to fit than not,
    // the fallback below would run one the memory model expects to run out
    // of memory, and after that OOM stop_after_ooms's stop would end the
    // session anyway: it stops now (Options::stop_unlikely_fits_after).
    if (options_.stop_unlikely_fits_after > 0 && m.memory() && have_base && out.stop.empty() &&
        search_ran >= options_.stop_unlikely_fits_after && !any_likely_fit([](size_t) { return true; })) {
      no_fair_chance = true;
      out.stop = absl::StrFormat(
          "after %d search trials no untried setting worth a trial is more likely to fit in memory than not",
          search_ran);
    }
    // What the stop rule reads: the most any setting is expected to gain
    // (its cost aside).
    out.expected_gain = 0;
    for (size_t i = 0; i < pred.size(); ++i) {
      out.expected_gain = std::max(out.expected_gain, score[i] * pred[i].cost);
    }
    // A probe's rule: values promising more than the stop's threshold, at a
    // setting that fits with probability >= min_fit (ProbeRule).
    auto probe_rule = [&](double min_fit, double min_p_beat, double min_expected) {
      ProbeRule rule;
      rule.min_promise = ctx.stop_below;
      rule.min_fit = min_fit;
      rule.min_p_beat = min_p_beat;
      rule.base_log = measured_base;
      rule.min_expected = min_expected;
      return rule;
    };
    // The probes' miss chance halves with every OOM paid.
    auto raised = [&](double min_fit) { return 1.0 - (1.0 - min_fit) * std::pow(0.5, oom_trials); };
    // Where the stop rule would end the session, a knob value no trial
    // held (finished or in flight) whose settings would gain more than the
    // stop's threshold were they to fit is probed first (the stop would
    // rest on priors and the textbook estimate for it): Options::
    // probe_untried_values.
    if (options_.probe_untried_values && ctx.stop_below > 0 && out.expected_gain < ctx.stop_below) {
      const ProbeRule rule = probe_rule(raised(options_.probe_min_fit), options_.probe_min_p_beat_baseline, 0);
      if (const std::optional<Probe> p = ProbeUntriedValue(space, history, history_index, pool, pred, clean, rule)) {
        out.expected_gain = p->promise;
        take(pool[p->at], "model (probe)");
        return out;
      }
    }
    // Where the session would stop now (no fair chance to beat the
    // baseline, or past min_trials nothing expected to gain more than the
    // noise) and no probe above qualifies, the stop may still rest on the
    // memory model's doubt about an untried value's settings at the memory
    // edge: its setting likeliest to fit among those that fit with
    // probability >= 1 - (1 - edge_probe_min_fit) x 2^-k after k OOMs, are
    // more likely than not to beat the baseline and are themselves expected
    // to gain edge_probe_min_expected x stop_below is run first (without
    // that last, the probe often came after the optimum and ran out of
    // memory).
    const bool stopping = no_fair_chance || (out.expected_gain < ctx.stop_below && search_ran >= spec.min_trials);
    if (options_.probe_untried_values && options_.edge_probe_min_fit > 0 && ctx.stop_below > 0 && stopping) {
      const ProbeRule rule = probe_rule(raised(options_.edge_probe_min_fit), options_.min_p_beat_baseline,
                                        options_.edge_probe_min_expected * ctx.stop_below);
      if (const std::optional<Probe> p = ProbeUntriedValue(space, history, history_index, pool, pred, clean, rule)) {
        if (no_fair_chance) out.stop.clear();
        out.expected_gain = p->promise;
        take(pool[p->at], "model (edge probe)");
        return out;
      }
    }
    // Where the session would stop now (any rule above) and no probe
    // qualifies, an OOM no trial has retried is retried with a memory
    // saver, as an engineer would (OomRetry): its one-knob neighbour
    // likeliest to fit among those that fit with probability >=
    // oom_retry_min_fit (not raised by the OOMs: the retry answers one)
    // and meet the edge probe's other conditions.
    if (options_.oom_retry_min_fit > 0 && ctx.stop_below > 0 && (stopping || !out.stop.empty())) {
      const ProbeRule rule = probe_rule(options_.oom_retry_min_fit, options_.min_p_beat_baseline,
                                        options_.edge_probe_min_expected * ctx.stop_below);
      // A saver worth the retry saves a residual sd of log peak by the
      // memory model and, where there is one, by the textbook estimate:
      // the model alone credited a bucket size with what another knob of
      // the OOM had cost (a development suite's MoE ran out of memory on
      // the retry).
      const Models& m = models();
      const double sigma = m.memory_sigma();
      auto saves = [&](int64_t c, int64_t oom) {
        if (planner.memory_estimate_gib_at &&
            std::log(planner.memory_estimate_gib_at(c)) > std::log(planner.memory_estimate_gib_at(oom)) - sigma) {
          return false;
        }
        return !m.memory() || std::log(m.PeakGibAt(c)) <= std::log(m.PeakGibAt(oom)) - sigma;
      };
      if (const std::optional<size_t> r = OomRetry(space, history, history_index, pool, pred, clean, saves, rule)) {
        out.stop.clear();
        out.expected_gain = pred[*r].GainIfItFits() * clean(pool[*r]);
        take(pool[*r], "model (OOM retry)");
        return out;
      }
    }
    // A trust region around the incumbent: picks change at most
    // trust_radius knobs of it, one more for every two trials that have
    // not beaten it (a decent baseline keeps what it has right; a stalled
    // search widens), and wider where nothing inside is worth a trial. A
    // setting outside that the models expect faster than the incumbent
    // with confidence (its mean plus one sd below it: the bank's trials or
    // the runs speak for it) stays a candidate.
    if (options_.trust_radius > 0 && incumbent >= 0) {
      int since_best = 0;
      for (size_t i = history.size(); i-- > 0;) {
        if (history_index[i] == incumbent && Ran(history[i])) break;
        since_best += !InFlight(history[i].status);
      }
      std::vector<double> best_at(space.knobs() + 1, 0.0);  // best score at each distance
      for (size_t i = 0; i < pool.size(); ++i) {
        double& b = best_at[static_cast<size_t>(space.Distance(pool[i], incumbent))];
        b = std::max(b, score[i]);
      }
      size_t radius = static_cast<size_t>(options_.trust_radius + since_best / 2);
      auto inside = [&](size_t r) {
        return *std::max_element(best_at.begin(), best_at.begin() + static_cast<std::ptrdiff_t>(std::min(r, space.knobs())) + 1);
      };
      while (radius < space.knobs() && inside(radius) <= 0) ++radius;
      const double best_log = m.best_log_time();
      for (size_t i = 0; i < pool.size(); ++i) {
        if (static_cast<size_t>(space.Distance(pool[i], incumbent)) > radius && pred[i].mu + pred[i].sd >= best_log) {
          score[i] = 0;
        }
      }
    }
    auto none = [](const std::vector<double>& s) {
      return std::none_of(s.begin(), s.end(), [](double v) { return v > 0; });
    };
    // Nothing passes: the OOM caution steps down one level at a time (the
    // baseline floor kept) before every guard goes.
    // Past its last level the caution turns soft: each OOM paid discounts a
    // setting by its chance to fit once more, so the picks lean to the
    // settings likeliest to fit rather than to whatever promises most.
    auto soft = [&](std::vector<double>& s) {
      if (options_.soft_caution <= 0) return;
      for (size_t i = 0; i < pool.size(); ++i) s[i] *= std::pow(pred[i].p_fit, options_.soft_caution * ooms);
    };
    for (int level = ooms - 1; options_.graded_fallback && none(score) && level >= 0; --level) {
      score = unguarded;
      if (level == 0 && options_.fallback_keeps_fit) {
        // Before the caution goes, the floor does: a setting that fits but
        // is likely slower than the baseline still teaches the step-time
        // model; one the memory model expects not to fit teaches it little
        // (a censored peak) and is a trial paid for nothing.
        caution(score, 1);
        soft(score);
        if (!none(score)) break;
        score = unguarded;
      }
      caution(score, level);
      baseline_floor(score);
      if (level == 0) soft(score);
    }
    if (none(score)) {
      score = unguarded;
      soft(score);
    }
    // Every `local_every`-th finished trial, the first pick is the best
    // scored setting near the incumbent: a global model over a large space
    // keeps enough doubt about far regions that expected improvement alone
    // would keep leaving the basin it has found. Unless it is worth little
    // next to the best pick anywhere (Options::local_min_share).
    const int done = static_cast<int>(std::count_if(
        history.begin(), history.end(), [](const Observation& o) { return !InFlight(o.status); }));
    if (options_.local_every > 0 && incumbent >= 0 && done % options_.local_every == 0) {
      size_t best_local = pool.size();
      for (size_t i = 0; i < pool.size(); ++i) {
        if (space.Distance(pool[i], incumbent) <= 2 &&
            (best_local == pool.size() || score[i] > score[best_local])) {
          best_local = i;
        }
      }
      if (best_local < pool.size() && score[best_local] > 0 &&
          score[best_local] >= options_.local_min_share * *std::max_element(score.begin(), score.end())) {
        take(pool[best_local], why[best_local] + " (local)");
      }
    }
  }
  // Take the best, keeping a batch's picks at least two knobs apart.
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  for (size_t i : order) {
    if (static_cast<int>(out.configs.size()) >= n) break;
    if (!near_picked(pool[i])) take(pool[i], why[i]);
  }
  for (size_t i : order) {  // small spaces may not allow the spacing
    if (static_cast<int>(out.configs.size()) >= n) break;
    take(pool[i], why[i]);
  }
  return out;
}

}  // namespace infrarsi
