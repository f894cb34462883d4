// The generated suite is what issue 33's targets are judged on: its
// workloads must be valid sessions whose baselines run, its draw must repeat,
// and its split must not move when the suite grows.
#include "tests/bench/workload_suite.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "core/model_optimizer.h"
#include "core/optimizer.h"
#include "core/sim_landscape.h"
#include "core/spec.h"
#include "models/cluster_sim.h"

namespace infrarsi::bench {
namespace {

namespace ms = models::sim;

TEST(WorkloadSuiteTest, WorkloadsAreSessionsWhoseBaselinesRunAndHaveRoomToGain) {
  auto suite = GenerateSuite(8);
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_EQ(suite->size(), 8u);
  std::set<std::string> names;
  int held_out = 0;
  for (const SuiteWorkload& w : *suite) {
    SCOPED_TRACE(w.name);
    EXPECT_TRUE(names.insert(w.name).second);
    auto spec = ParseSpec(w.yaml, SpecParseOptions());
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->name, w.name);
    EXPECT_GE(spec->knobs.size(), 5u);
    EXPECT_LE(spec->knobs.size(), 15u);
    EXPECT_LE(spec->SpaceSize(), 400000);
    for (const char* k : {"tp", "pp", "micro_batch", "recompute"}) EXPECT_NE(spec->FindKnob(k), nullptr) << k;
    const ms::SimResult base = ms::Simulate(spec->sim.model, spec->sim.cluster, SimKnobs(*spec, spec->baseline));
    ASSERT_EQ(base.status, ms::Status::kOk) << base.message;
    EXPECT_GE(w.optimum_gain, 1.05);
    EXPECT_NEAR(base.step_time_s / w.best_step_s, w.optimum_gain, 1e-9);
    // The recorded optimum is one: no setting of a sample is faster.
    for (int64_t i = 0; i < spec->SpaceSize(); i += 97) {
      const ms::SimResult r = ms::Simulate(spec->sim.model, spec->sim.cluster, SimKnobs(*spec, ConfigAt(*spec, i)));
      if (r.status == ms::Status::kOk) {
        EXPECT_GE(r.step_time_s, w.best_step_s - 1e-12);
      }
    }
    held_out += w.held_out;
  }
  EXPECT_EQ(held_out, 4);  // one of each pair
  for (size_t j = 0; j + 1 < suite->size(); j += 2) EXPECT_NE((*suite)[j].held_out, (*suite)[j + 1].held_out);
}

TEST(WorkloadSuiteTest, TheDrawRepeatsAndAWorkloadDependsOnlyOnItsIndex) {
  auto a = GenerateSuite(6);
  ASSERT_TRUE(a.ok()) << a.status();
  for (int i : {5, 2}) {
    auto w = GenerateWorkload(i);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->yaml, (*a)[static_cast<size_t>(i)].yaml);
    EXPECT_EQ(w->held_out, (*a)[static_cast<size_t>(i)].held_out);
  }
  auto other = GenerateWorkload(2, kSuiteSeed + 1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->yaml, (*a)[2].yaml);
  EXPECT_FALSE(GenerateWorkload(-1).ok());
}

// Issue 33's guards, on the generated workloads whose sessions showed the
// defects (search_bench --generalize, SEARCH_TRACE): each compared with the
// search as it was (the guard's option off), which fails the expectation.
struct Session {
  int ooms = 0, trials = 0;
  int slower = 0;  // trials slower than the baseline, or failed
  std::vector<Config> picks;
  std::vector<int> from_incumbent;  // knobs each pick changed of the fastest that ran before it
};
Session RunSession(const SessionSpec& spec, const ModelOptimizer::Options& o, uint64_t seed, int budget) {
  ModelOptimizer opt(o);
  SearchContext ctx;
  ctx.spec = &spec;
  ctx.stop_below = SearchStopBelow(spec, 0.015);  // what the server's stop reads (below)
  auto observe = [&](const Config& c) { return SimulatedObservation(spec, c); };
  std::vector<Observation> history = {observe(spec.baseline)};
  Session s;
  for (int n = 1; n <= budget; ++n) {
    const Proposal p = opt.Propose(ctx, history, 1, seed * 1000 + static_cast<uint64_t>(n));
    if (p.configs.empty()) break;
    // The server's stop rule (the spec's, the noise floor 1.5%).
    if (!SearchStopReason(spec, n - 1, p, 0.015).empty()) break;
    const Observation* best = nullptr;
    for (const Observation& o : history) {
      if (o.status == "ok" && (best == nullptr || o.step_time_s < best->step_time_s)) best = &o;
    }
    int changed = 0;
    for (const auto& [k, v] : p.configs[0]) changed += best->config.at(k) != v;
    s.from_incumbent.push_back(changed);
    history.push_back(observe(p.configs[0]));
    s.slower += history.back().status != "ok" || history.back().step_time_s > history.front().step_time_s;
    s.picks.push_back(p.configs[0]);
    s.ooms += history.back().status == "oom";
    ++s.trials;
  }
  return s;
}

// Sessions seeded 1..seeds summed: OOMs, trials, trials slower than the
// baseline.
Session OverSeeds(const SessionSpec& spec, const ModelOptimizer::Options& o, int seeds, int budget) {
  Session sum;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
    const Session s = RunSession(spec, o, seed, budget);
    sum.ooms += s.ooms;
    sum.trials += s.trials;
    sum.slower += s.slower;
  }
  return sum;
}

// The fastest step time among the baseline and a session's picks that ran.
double BestStep(const SessionSpec& spec, const Session& s) {
  double b = SimulatedObservation(spec, spec.baseline).step_time_s;
  for (const Config& c : s.picks) {
    const Observation o = SimulatedObservation(spec, c);
    if (o.status == "ok") b = std::min(b, o.step_time_s);
  }
  return b;
}

// The fastest step time of any setting of the space that runs.
double OptimumStep(const SessionSpec& spec) {
  double best = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < spec.SpaceSize(); ++i) {
    const Observation o = SimulatedObservation(spec, ConfigAt(spec, i));
    if (o.status == "ok") best = std::min(best, o.step_time_s);
  }
  return best;
}

SessionSpec Parsed(const SuiteWorkload& w) {
  auto spec = ParseSpec(w.yaml, SpecParseOptions());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Generated workload `index` (of the suite drawn with `suite_seed`: the
// judged suite by default, a development suite otherwise), parsed, or nullopt (the failure added) where
// it is not the workload a test's comment describes: its name must start
// with `prefix`.
std::optional<SessionSpec> SuiteSpec(int index, const std::string& prefix, uint64_t suite_seed = kSuiteSeed) {
  auto w = GenerateWorkload(index, suite_seed);
  if (!w.ok()) {
    ADD_FAILURE() << w.status();
    return std::nullopt;
  }
  if (w->name.rfind(prefix, 0) != 0) {
    ADD_FAILURE() << "workload " << index << " is " << w->name << ", not " << prefix;
    return std::nullopt;
  }
  return Parsed(*w);
}

// On the suite's workload `index` (SuiteSpec's arguments), sessions seeded
// 1..3 under the defaults and under `was` (a guard off, named by `what` in
// the printout): the defaults' best within 2% of the optimum with at most
// one OOM, where `was`'s is not (the defect shows).
void ExpectTheOptimumNowNotBefore(int index, const std::string& prefix, uint64_t suite_seed,
                                  const ModelOptimizer::Options& was, const char* what) {
  const std::optional<SessionSpec> suite_spec = SuiteSpec(index, prefix, suite_seed);
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  const double best_step = OptimumStep(spec);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    const Session now = RunSession(spec, ModelOptimizer::Options(), seed, 30);
    const Session old = RunSession(spec, was, seed, 30);
    const double now_best = BestStep(spec, now) / best_step, old_best = BestStep(spec, old) / best_step;
    std::printf("seed %d: best %.3f of the optimum in %d trials (%d OOMs); %.3f in %d (%d OOMs) %s\n",
                static_cast<int>(seed), now_best, now.trials, now.ooms, old_best, old.trials, old.ooms, what);
    EXPECT_GT(old_best, 1.02) << "the defect no longer shows";
    EXPECT_LE(now_best, 1.02);
    EXPECT_LE(now.ooms, 1);
  }
}

TEST(SearchGuardsTest, AfterOomsOnlySettingsLikelyToFitRunAndTheSearchStops) {
  // g14: an 8x22B MoE on 16 nodes of A100-40GB whose hand-tuned baseline
  // barely fits: 4 settings of 576 run. The search found the optimum by the
  // third trial and then ran out of memory 27 times in 30.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(14, "g14-moe-8x22b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  ModelOptimizer::Options off;
  off.oom_caution = false;
  off.min_p_beat_baseline = 0;
  // The search as it was: a fixed share of the memory model's doubt (with
  // the doubt learned from the runs, no OOMs without the caution either).
  off.learn_memory_doubt = false;
  const int ooms_on = OverSeeds(spec, ModelOptimizer::Options(), 3, 30).ooms;
  const int ooms_off = OverSeeds(spec, off, 3, 30).ooms;
  std::printf("OOMs in 3 sessions of 30 trials: %d with the caution, %d without\n", ooms_on, ooms_off);
  EXPECT_LE(ooms_on, 3 * 8) << ooms_on << " OOMs in 3 sessions (" << ooms_off << " without the caution)";
  EXPECT_LT(2 * ooms_on, ooms_off) << ooms_on << " vs " << ooms_off;
}

TEST(SearchGuardsTest, WhenNothingLeftIsLikelyToFitTheSearchStopsBeforeMinTrials) {
  // g14 again: the five settings that fit ran by trial 6 (the optimum at
  // 3), then four OOMs to reach min_trials (10), every session. After an
  // OOM, a proposal with no untried setting more likely to fit than not
  // now stops the session.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(14, "g14-moe-8x22b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  // (The stops where nothing likely to fit is likely to beat the baseline,
  // or is worth a trial, now end these sessions before their first OOM:
  // off in both arms, so this guard is measured alone.)
  ModelOptimizer::Options on;
  on.stop_p_beat_baseline = 0;
  on.stop_unlikely_fits_after = 0;
  ModelOptimizer::Options on_to_min = on;  // as it was
  on_to_min.stop_after_ooms = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    const Session now = RunSession(spec, on, seed, 30);
    const Session was = RunSession(spec, on_to_min, seed, 30);
    std::printf("seed %d: %d OOMs in %d trials, %d OOMs in %d without the stop\n", static_cast<int>(seed),
                now.ooms, now.trials, was.ooms, was.trials);
    EXPECT_GE(was.ooms, 3) << "the defect no longer shows";
    EXPECT_LE(now.ooms, 1);
    EXPECT_LT(now.trials, was.trials);
    // The same best setting found.
    EXPECT_DOUBLE_EQ(BestStep(spec, now), BestStep(spec, was));
  }
}

TEST(SearchGuardsTest, WhereNothingWorthATrialIsLikelyToFitTheSearchStopsBeforeAnOom) {
  // Development suite 3's g37: a 405B on 64 nodes of A100-40GB with a
  // hand-tuned baseline, whose optimum (vpp 2) sits at 97% of memory. Every
  // seed found it at trial 1; by trial 3 no untried setting worth a trial
  // was more likely to fit than not, so the fallback ran one at P(fits)
  // 0.24 (gradients reduced in fp32, +6 GiB) that ran out of memory, and
  // only then did the after-OOM stop end the session: a third of its
  // trials paid for nothing. Now the session stops before that pick.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(37, "g37-dense-405b", 3);
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  ModelOptimizer::Options was;
  was.stop_unlikely_fits_after = 0;
  const double best_step = OptimumStep(spec);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    const Session now = RunSession(spec, ModelOptimizer::Options(), seed, 30);
    const Session old = RunSession(spec, was, seed, 30);
    std::printf("seed %d: %d OOMs in %d trials; %d OOMs in %d waiting for the OOM\n", static_cast<int>(seed),
                now.ooms, now.trials, old.ooms, old.trials);
    EXPECT_GE(old.ooms, 1) << "the defect no longer shows";
    EXPECT_EQ(now.ooms, 0);
    EXPECT_LT(now.trials, old.trials);
    EXPECT_LE(BestStep(spec, now) / best_step, 1.02);
  }
}

TEST(SearchGuardsTest, AtTheMemoryEdgeThePicksLeanToSettingsLikelyToFit) {
  // g16: a 405B model at 32k context whose hand-tuned baseline peaks at
  // 79.1 of 79.2 GiB. The memory model can say of no other setting that it
  // fits more likely than not, so the caution let everything through and
  // the picks followed expected improvement: P(fits) 0.2-0.4 each, ten OOMs
  // in ten trials, session after session.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(16, "g16-dense-405b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  // Sessions that go on after OOMs (with the stop after one, both arms
  // would end at the first: 1.5 OOMs a session in the bench).
  ModelOptimizer::Options soft_opts;
  soft_opts.stop_after_ooms = 0;
  soft_opts.stop_p_beat_baseline = 0;  // likewise: it would end them sooner
  soft_opts.stop_unlikely_fits_after = 0;  // and this, before the first OOM
  // Every local pick taken, as measured (with three quarters of the best
  // score asked of one, 12 of 44 OOMs without the soft caution, 5 with).
  soft_opts.local_min_share = 0;
  // The caution's effect alone: with the priors on flash attention and
  // fused kernels (both on in this baseline) the picks keep them on, and
  // both arms pick elsewhere (25 against 27 of 45).
  soft_opts.flash_off_prior = 0;
  soft_opts.fused_off_prior = 0;
  // As it was measured: P(fits) with the memory model's whole doubt. With
  // a tenth of it (the default now) the picks tell the edge apart without
  // the soft caution too (9 of 45 OOMs without it, 7 with), checked last,
  // and so with the doubt learned from the runs (the default now), which
  // would hide the defect.
  const ModelOptimizer::Options learned = soft_opts;
  soft_opts.learn_memory_doubt = false;
  const ModelOptimizer::Options scaled = soft_opts;
  soft_opts.memory_doubt_scale = 1;
  ModelOptimizer::Options hard = soft_opts;  // the caution dropped where nothing passes
  hard.soft_caution = 0;
  const Session soft = OverSeeds(spec, soft_opts, 4, 30), was = OverSeeds(spec, hard, 4, 30);
  const int ooms_soft = soft.ooms, trials_soft = soft.trials, ooms_hard = was.ooms, trials_hard = was.trials;
  std::printf("OOMs in 4 sessions: %d of %d trials with the soft caution, %d of %d without\n", ooms_soft,
              trials_soft, ooms_hard, trials_hard);
  // Measured: 29 of 40 against 40 of 40 while the textbook estimate said
  // bf16 gradient reduction costs memory (it saves here); with that fixed,
  // 22 of 45 against 27 of 45; at 4ea503d (the risk charge, the estimate
  // under low precision), 7 of 45 against 29 of 47. Most OOMs stay at this
  // edge: 15% fewer is what is asked.
  EXPECT_GE(2 * ooms_hard, trials_hard) << "the defect no longer shows: " << ooms_hard << " of " << trials_hard;
  EXPECT_LE(20 * ooms_soft, 17 * ooms_hard) << ooms_soft << " of " << trials_soft << " against " << ooms_hard;
  const Session now = OverSeeds(spec, scaled, 4, 30);
  std::printf("With a tenth of the doubt: %d OOMs of %d trials\n", now.ooms, now.trials);
  EXPECT_LE(now.ooms, ooms_soft);
  const Session sure = OverSeeds(spec, learned, 4, 30);
  std::printf("With the doubt learned: %d OOMs of %d trials\n", sure.ooms, sure.trials);
  EXPECT_LE(sure.ooms, ooms_soft);
}

TEST(SearchGuardsTest, WhereNothingPassesTheBaselineFloorASettingLikelyToFitRunsBeforeOneThatIsNot) {
  // g12: a 405B model whose hand-tuned baseline is the fastest setting
  // that fits. Past the first trials no setting that fits was more likely
  // than not to beat the baseline, so the guards left nothing, and the
  // fallback dropped the OOM caution before the baseline floor: the pick
  // was the setting expected fastest, which the memory model expected not
  // to fit (one OOM a session, every session).
  const std::optional<SessionSpec> suite_spec = SuiteSpec(12, "g12-dense-405b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  // (Where the floor leaves nothing likely to fit, the session now stops
  // (WhereNothingLikelyToFitIsLikelyToBeatTheBaselineTheSearchStops): off
  // in both arms, so this fallback is measured where it still runs.)
  ModelOptimizer::Options now;
  now.stop_p_beat_baseline = 0;
  // Likewise the charge for an expected slowdown against the baseline
  // (OnAHandTunedBaselineThePicksAreLikelyFasterNotMerelyDoubted): with it
  // the picks that reach this fallback differ, one OOM a session either way.
  now.risk_weight = 0;
  ModelOptimizer::Options was = now;
  was.fallback_keeps_fit = false;
  const Session on = OverSeeds(spec, now, 4, 30), off = OverSeeds(spec, was, 4, 30);
  std::printf("OOMs in 4 sessions: %d in %d trials keeping the fit, %d in %d without\n", on.ooms, on.trials,
              off.ooms, off.trials);
  EXPECT_GE(off.ooms, 3) << "the defect no longer shows";
  EXPECT_LT(2 * on.ooms, off.ooms);
}

TEST(SearchGuardsTest, WhereNothingLikelyToFitIsLikelyToBeatTheBaselineTheSearchStops) {
  // g12 (above) and g14 (an 8x22B MoE whose hand-tuned baseline barely
  // fits): once no untried setting likely to fit had a 0.4 chance to beat
  // the baseline (the baseline floor's guard left nothing), the fallback
  // still ran one until
  // min_trials (10) or an OOM ended the session: g12's tenth trial was the
  // baseline with overlap off (slower), g14's seventh an OOM, every session.
  // Now the proposal advises stopping there. (The stop where nothing worth
  // a trial is likely to fit, WhereNothingWorthATrialIsLikelyToFitThe-
  // SearchStopsBeforeAnOom, ends these sessions at the same trial: off in
  // both arms, so this stop is measured alone.)
  const std::pair<int, const char*> workloads[] = {{12, "g12-dense-405b"}, {14, "g14-moe-8x22b"}};
  ModelOptimizer::Options on;
  on.stop_unlikely_fits_after = 0;
  ModelOptimizer::Options was = on;
  was.stop_p_beat_baseline = 0;
  for (const auto& [index, prefix] : workloads) {
    SCOPED_TRACE(prefix);
    const std::optional<SessionSpec> suite_spec = SuiteSpec(index, prefix);
    ASSERT_TRUE(suite_spec.has_value());
    const SessionSpec& spec = *suite_spec;
    int slower_now = 0, slower_was = 0;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(seed);
      const Session now = RunSession(spec, on, seed, 30);
      const Session off = RunSession(spec, was, seed, 30);
      std::printf("%s seed %d: %d of %d trials slower than the baseline or failed, %d of %d without the stop\n",
                  prefix, static_cast<int>(seed), now.slower, now.trials, off.slower, off.trials);
      EXPECT_LT(now.trials, off.trials);
      EXPECT_LE(now.slower, off.slower);
      EXPECT_DOUBLE_EQ(BestStep(spec, now), BestStep(spec, off)) << "the stop came before the best setting";
      slower_now += now.slower;
      slower_was += off.slower;
    }
    EXPECT_LT(slower_now, slower_was);
  }
}

TEST(SearchGuardsTest, WithTheEstimateReadingTheModelsConfigTheEdgeProbeStaysOff) {
  // The edge probe (Options::edge_probe_min_fit) runs, before a stop, a
  // value no trial held at its setting likeliest to fit, P(fits) >= 0.4.
  // It found the optima of the tuning half's g18 and g06 (175B models:
  // pp 16 with selective recompute, or none, at the memory edge), which
  // the planner's memory estimate then put over the device on dropout
  // masks those models do not store. With the estimate reading the model's
  // config (TextbookMemoryTest.WithoutDropoutNoMasksAndOnlyTheSoftmaxScores,
  // ActivationsAtTheModelsWidths) their sessions find those optima without
  // it, and on three development suites it ran only settings out of memory
  // after the optimum: OOMs per session summed 37.6 with it, 30.6 without,
  // the same trials to 2%. Development suite 2's g29, a 34B on four H200
  // nodes, hand-tuned: every session has the optimum by trial 3; the probe
  // ran pp 16 at trial 11 (145.5 of 139.8 GiB). Off by default now.
  ModelOptimizer::Options was;
  was.edge_probe_min_fit = 0.4;
  {
    const std::optional<SessionSpec> suite_spec = SuiteSpec(29, "g29-dense-34b", 2);
    ASSERT_TRUE(suite_spec.has_value());
    const SessionSpec& spec = *suite_spec;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(seed);
      const Session now = RunSession(spec, ModelOptimizer::Options(), seed, 30);
      const Session old = RunSession(spec, was, seed, 30);
      std::printf("g29-dense-34b seed %d: %d OOMs in %d trials; %d in %d with the edge probe\n",
                  static_cast<int>(seed), now.ooms, now.trials, old.ooms, old.trials);
      EXPECT_GE(old.ooms, 1) << "the defect no longer shows";
      EXPECT_EQ(now.ooms, 0);
      EXPECT_DOUBLE_EQ(BestStep(spec, now), BestStep(spec, old));
    }
  }
  // The workloads it was for reach their optima without it.
  const std::pair<int, const char*> workloads[] = {{18, "g18-dense-175b"}, {6, "g06-dense-175b"}};
  for (const auto& [index, prefix] : workloads) {
    SCOPED_TRACE(prefix);
    const std::optional<SessionSpec> suite_spec = SuiteSpec(index, prefix);
    ASSERT_TRUE(suite_spec.has_value());
    const SessionSpec& spec = *suite_spec;
    const double best_step = OptimumStep(spec);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(seed);
      const Session now = RunSession(spec, ModelOptimizer::Options(), seed, 30);
      std::printf("%s seed %d: best %.3f of the optimum in %d trials (%d OOMs)\n", prefix, static_cast<int>(seed),
                  BestStep(spec, now) / best_step, now.trials, now.ooms);
      EXPECT_LE(BestStep(spec, now) / best_step, 1.02);
      EXPECT_LE(now.ooms, 1);
    }
  }
}

TEST(SearchGuardsTest, AnOomIsRetriedWithAMemorySaverBeforeTheSessionStops) {
  // g16: a 405B model on 16 nodes of A100-80GB whose hand-tuned baseline
  // sits at 79.1 of 79.2 GiB. The optimum (1.13x) is pp 8, cp 2 with
  // bf16 gradient reduction (76.4 GiB); pp 8, cp 2 alone runs out of
  // memory (86.1). Sessions that tried the latter stopped right after it
  // ("after 1 out-of-memory trials no untried setting is more likely to
  // fit than not"), no faster than the baseline: the memory saver that
  // would have fixed the OOM (P(fits) 0.42 by the memory model) was not
  // even among the candidates. Now the OOM's one-knob neighbours are, and
  // one that saves memory is run before the stop.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(16, "g16-dense-405b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  const double best_step = OptimumStep(spec);
  auto best_of = [&](const Session& s) { return BestStep(spec, s) / best_step; };
  ModelOptimizer::Options was;
  was.oom_retry_min_fit = 0;
  int stopped_by_the_oom = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    const Session now = RunSession(spec, ModelOptimizer::Options(), seed, 30);
    const Session off = RunSession(spec, was, seed, 30);
    std::printf("seed %d: best %.3f of the optimum in %d trials (%d OOMs); %.3f in %d (%d OOMs) without\n",
                static_cast<int>(seed), best_of(now), now.trials, now.ooms, best_of(off), off.trials, off.ooms);
    // Where the retry had nothing to answer, the sessions are the same.
    if (off.ooms == 0) {
      EXPECT_EQ(now.trials, off.trials);
      continue;
    }
    if (best_of(off) <= 1.02) continue;
    ++stopped_by_the_oom;
    EXPECT_LE(best_of(now), 1.02);
    EXPECT_LE(now.ooms, 1);
  }
  EXPECT_GE(stopped_by_the_oom, 2) << "the defect no longer shows";
}

TEST(SearchGuardsTest, AnOomRetryNeedsASaverTheTextbookEstimateSeesToo) {
  // Development suite 3's g29 (an 8x22B MoE on 4 nodes of H200): its
  // sessions find the optimum (bf16 gradient reduction, 131.0 GiB) at once
  // and later run out of memory on a neighbour without bf16 and with a
  // smaller gradient bucket (140.2 of 139.8). The memory model, from these
  // few runs, credited the bucket size with the OOM, and the retry ran the
  // bigger bucket without bf16: a second OOM in every session. The textbook
  // estimate knows a bucket size saves next to nothing.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(29, "g29-moe-8x22b", 3);
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  const double best_step = OptimumStep(spec);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(seed);
    const Session s = RunSession(spec, ModelOptimizer::Options(), seed, 30);
    std::printf("seed %d: best %.3f of the optimum in %d trials, %d OOMs\n", static_cast<int>(seed),
                BestStep(spec, s) / best_step, s.trials, s.ooms);
    EXPECT_LE(BestStep(spec, s) / best_step, 1.02);
    EXPECT_LE(s.ooms, 1);
  }
}

TEST(SearchGuardsTest, AHandTunedBaselineKeepsWhatItHasRightInTheFirstPicks) {
  // g24: a 34B model whose hand-tuned baseline (flash attention, the
  // distributed optimizer, overlap on) is 1.17x from the optimum, three
  // knobs away. The first global pick used to change up to eight knobs and
  // ran 2x slower than the optimum.
  const std::optional<SessionSpec> suite_spec = SuiteSpec(24, "g24-dense-34b");
  ASSERT_TRUE(suite_spec.has_value());
  const SessionSpec& spec = *suite_spec;
  ModelOptimizer::Options off;  // the search as it was
  off.trust_radius = 0;
  off.cost_weight = 0;
  off.min_p_beat_baseline = 0;
  // ...before knob effects beyond the estimate had a tight prior too (alone
  // that keeps g24's baseline as well: 9 of 60 slower either way).
  off.estimated_main_effect_var = 0.5;
  off.stall_trials = 0;
  off.oom_caution_start = 0;
  off.learn_memory_doubt = false;
  int far_on = 0, far_off = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    for (const auto& [opts, far] : {std::pair{ModelOptimizer::Options(), &far_on}, std::pair{off, &far_off}}) {
      // The region starts at three knobs of the fastest setting so far and
      // widens by one every two trials that do not beat it: the first two
      // picks stay within 3.
      const Session s = RunSession(spec, opts, seed, 2);
      for (int changed : s.from_incumbent) *far += changed > 3;
    }
  }
  std::printf("picks more than 3 knobs from the incumbent in 5 x 2 trials: %d with the guards, %d without\n",
              far_on, far_off);
  // Whole sessions (the server's stop rule): the share of trials slower than
  // the baseline, which every one of them pays for in GPU-hours.
  const Session on = OverSeeds(spec, ModelOptimizer::Options(), 3, 20), was = OverSeeds(spec, off, 3, 20);
  const int slower_on = on.slower, trials_on = on.trials, slower_off = was.slower, trials_off = was.trials;
  std::printf("trials slower than the baseline: %d of %d with the guards, %d of %d without\n", slower_on,
              trials_on, slower_off, trials_off);
  EXPECT_LT(static_cast<double>(slower_on) / trials_on, 0.75 * slower_off / trials_off);
  EXPECT_EQ(far_on, 0) << "picks more than three knobs from the incumbent in the first two trials";
  EXPECT_GT(far_off, 0) << "the search as it was: no far pick (the test shows nothing)";
}

TEST(SearchGuardsTest, OnAHandTunedBaselineThePicksAreLikelyFasterNotMerelyDoubted) {
  // g12 (a 405B model) and g24 (34B), hand-tuned baselines: picks passed
  // the baseline floor (P(beat) >= 0.5) on doubt alone, and expected
  // improvement prefers the most doubted (traced on a development suite's
  // 8B workload: a first pick at P 0.53 with an sd of 0.27 in log step
  // time, mostly from knobs no run had changed yet, fused kernels and
  // parameter-gather overlap turned off: 4% slower than the baseline). Trials
  // slower than the baseline: 3 of 27 and 9 of 54 in three sessions each.
  // Now a setting's expected slowdown against the baseline (risk_weight
  // of it) is charged against its expected improvement.
  const std::pair<int, const char*> workloads[] = {{12, "g12-dense-405b"}, {24, "g24-dense-34b"}};
  ModelOptimizer::Options was;
  was.risk_weight = 0;
  int slower_now = 0, trials_now = 0, slower_was = 0, trials_was = 0;
  for (const auto& [index, prefix] : workloads) {
    SCOPED_TRACE(prefix);
    const std::optional<SessionSpec> suite_spec = SuiteSpec(index, prefix);
    ASSERT_TRUE(suite_spec.has_value());
    const Session now = OverSeeds(*suite_spec, ModelOptimizer::Options(), 3, 30);
    const Session old = OverSeeds(*suite_spec, was, 3, 30);
    std::printf("%s: slower than the baseline %d of %d trials, %d of %d without the charge\n", prefix,
                now.slower, now.trials, old.slower, old.trials);
    slower_now += now.slower;
    trials_now += now.trials;
    slower_was += old.slower;
    trials_was += old.trials;
  }
  ASSERT_GT(slower_was, 0) << "the defect no longer shows";
  EXPECT_LT(4 * slower_now * trials_was, 3 * slower_was * trials_now)
      << slower_now << " of " << trials_now << " against " << slower_was << " of " << trials_was;
}

TEST(SearchGuardsTest, TheRiskChargeKeepsAHandTunedSessionsTrialsFasterThanItsBaseline) {
  // With the planner's estimates closer (the memory estimate at the model's
  // config and precision), a charge of 0.3 of the expected slowdown against
  // the baseline left hand-tuned sessions running, once they held their
  // optimum, neighbours slower than the baseline that expected improvement
  // still favoured for their doubt: development suite 2's g27 (an 8x22B MoE
  // on eight H100 nodes, 1.15x available, the optimum at trial 1) ran 30%
  // of its trials slower than the baseline, suite 1's g22 (3B on four
  // A100-40GB nodes) 17% (over three seeds here: 9 of 30, 6 of 36). At
  // 0.6, 3 of 21 and 0 of 30, and three development suites' summed means
  // of trials to within 2% fell too (958.9 -> 912.9). (A local pick now
  // needs three quarters of the best score, ALocalPickWorthLittleNextTo-
  // TheBestGivesWayToIt, which leaves g27 3 of 30 at 0.3: off in both arms,
  // as measured, so the charge is measured alone. So is the stall's growth
  // kept off untried values, Options::stall_grows_untried, which leaves
  // g22 3 of 33 at 0.3: its doubt-driven neighbours were part of this
  // defect.)
  ModelOptimizer::Options on;
  on.local_min_share = 0;
  on.stall_grows_untried = true;
  ModelOptimizer::Options was = on;
  was.risk_weight = 0.3;
  const std::tuple<int, const char*, uint64_t> workloads[] = {{27, "g27-moe-8x22b", 2}, {22, "g22-dense-3b", 1}};
  for (const auto& [index, prefix, suite_seed] : workloads) {
    SCOPED_TRACE(prefix);
    const std::optional<SessionSpec> suite_spec = SuiteSpec(index, prefix, suite_seed);
    ASSERT_TRUE(suite_spec.has_value());
    const SessionSpec& spec = *suite_spec;
    const double best_step = OptimumStep(spec);
    int slower_now = 0, trials_now = 0, slower_was = 0, trials_was = 0;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const Session now = RunSession(spec, on, seed, 30);
      const Session old = RunSession(spec, was, seed, 30);
      EXPECT_LE(BestStep(spec, now) / best_step, 1.02) << "seed " << seed;
      slower_now += now.slower;
      trials_now += now.trials;
      slower_was += old.slower;
      trials_was += old.trials;
    }
    std::printf("%s: slower than the baseline %d of %d trials; %d of %d at a charge of 0.3\n", prefix, slower_now,
                trials_now, slower_was, trials_was);
    EXPECT_GT(slower_was, 0.15 * trials_was) << "the defect no longer shows";
    EXPECT_LE(slower_now, 0.15 * trials_now);
  }
}

TEST(SearchGuardsTest, PFitsTellsASettingAtTheMemoryEdgeFromOneWellInside) {
  // The memory model's doubt about its weights, whole, gave every setting
  // near the memory edge P(fits) 0.5-0.7 alike (picks the model gave 0.5-0.7
  // ran out of memory 6.5% of the time over three development suites), so
  // the score could not tell the fast settings at the edge from the slower
  // ones well inside. P(fits) now counts a tenth of that doubt
  // (Options::memory_doubt_scale). Development suite 2's g21: an 8x22B MoE
  // on 64 nodes of A100-40GB, hand-tuned (pp 4, ep 8, full recompute);
  // the optimum, pp 8 with micro-batch 1 and no recompute, peaks at 36.6
  // of 39.4 GiB. With the whole doubt every session stops after 10 trials
  // at 1.059 of the optimum, never having run it; with a tenth it runs at
  // trial 5. (Where this test anchored before, suite 2's g04, a 70B at
  // the edge, the planner's estimate at the model's widths now finds the
  // optimum either way.)
  ModelOptimizer::Options was;
  was.memory_doubt_scale = 1;
  ExpectTheOptimumNowNotBefore(21, "g21-moe-8x22b", 2, was, "with the whole doubt");
}

TEST(SearchGuardsTest, ALocalPickWorthLittleNextToTheBestGivesWayToIt) {
  // Every second finished trial the first pick was the best-scored setting
  // within two knobs of the incumbent, however little it was worth next to
  // the best-scored setting anywhere. Development suite 2's g04 (a 70B on
  // 16 nodes of A100-40GB, naive baseline): no session of the bench's ten
  // got within 2% of the optimum in 30 trials; these sessions end at 1.218
  // of it. A local pick now needs three quarters of the best score, and
  // they reach the optimum in 19 trials.
  ModelOptimizer::Options was;
  was.local_min_share = 0;
  ExpectTheOptimumNowNotBefore(4, "g04-dense-70b", 2, was, "taking every local pick");
}

}  // namespace
}  // namespace infrarsi::bench
