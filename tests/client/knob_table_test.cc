// The report's knob table against the truth: on the measured H200
// landscape (every setting of its five knobs was run), a knob value's
// effect is known exactly at any setting, from the paired trials that
// differ in that knob alone. The table's numbers must say what those pairs
// say.
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/agent/executors/landscape.h"
#include "core/model_optimizer.h"
#include "core/spec.h"
#include "gtest/gtest.h"

namespace infrarsi {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class KnobTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string root = INFRARSI_SOURCE_DIR;
    SpecParseOptions o;
    o.spec_dir = root + "/data/specs";
    o.stored = true;  // the landscape is read here, not through the spec
    auto spec = ParseSpec(Read(root + "/data/specs/demo-h200-gpt-354m.yaml"), o);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    auto land = client::Landscape::Load(root + "/data/landscapes/h200-gpt-354m-seq2048.jsonl");
    ASSERT_TRUE(land.ok()) << land.status();
    land_ = *land;
  }

  const client::LandscapeTrial* At(const Config& c) const {
    return land_.FindGrid(std::map<std::string, std::string>(c.begin(), c.end()));
  }
  Observation Observe(const Config& c) const {
    Observation o;
    o.config = c;
    const client::LandscapeTrial* t = At(c);
    o.status = t == nullptr ? "failed" : t->status;
    o.step_time_s = t == nullptr ? 0 : t->step_time_s;
    o.peak_mem_gib = t == nullptr ? 0 : t->peak_reserved_gib;
    return o;
  }
  // A session of the model search: the baseline, then `trials` proposals.
  std::vector<Observation> Session(int trials, uint64_t seed) const {
    std::vector<Observation> h = {Observe(spec_.baseline)};
    SearchContext ctx;
    ctx.spec = &spec_;
    ModelOptimizer model;
    for (int n = 0; n < trials; ++n) {
      const Proposal p = model.Propose(ctx, h, 1, seed * 1000 + static_cast<uint64_t>(n));
      if (p.configs.empty()) break;
      h.push_back(Observe(p.configs[0]));
    }
    return h;
  }
  // What the paired trials say: the mean log ratio of step time (or of
  // peak memory) with knob=value against knob=baseline's value, over the
  // distinct settings in `h` that ran where both versions ran on the
  // landscape, as a % change.
  double PairedPct(const std::vector<Observation>& h, const std::string& knob,
                   const std::string& value, bool memory, int* pairs) const {
    std::set<Config> seen;
    double sum = 0;
    *pairs = 0;
    for (const Observation& o : h) {
      if (o.status != "ok" || !seen.insert(o.config).second) continue;
      Config with = o.config, without = o.config;
      with[knob] = value;
      without[knob] = spec_.baseline.at(knob);
      const client::LandscapeTrial* a = At(with);
      const client::LandscapeTrial* b = At(without);
      if (a == nullptr || b == nullptr || a->status != "ok" || b->status != "ok") continue;
      sum += memory ? std::log(a->peak_reserved_gib / b->peak_reserved_gib)
                    : std::log(a->step_time_s / b->step_time_s);
      ++*pairs;
    }
    return *pairs == 0 ? 0 : 100.0 * std::expm1(sum / *pairs);
  }
  static double LogRatio(double pct) { return std::log1p(pct / 100.0); }

  SessionSpec spec_;
  client::Landscape land_;
};

// The defect: the table showed the raw main-effect coefficient, on a log
// scale at the baseline's other values (fused_adam=true "+0.381+-0.330",
// read as 46% slower), where the paired trials differ by about 1%. The
// table's numbers are now the whole model's prediction averaged over the
// settings the session ran: within 0.2 in log (about 20%) of the paired
// trials' mean, and the 95% interval holds it, for every knob value in
// every session.
TEST_F(KnobTableTest, EffectsInPercentAgreeWithPairedTrials) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<Observation> h = Session(24, seed);
    SearchContext ctx;
    ctx.spec = &spec_;
    const std::vector<KnobEffectEstimate> effects = ExplainKnobs(ctx, h, ModelOptimizer::Options());
    ASSERT_EQ(effects.size(), 8u);
    for (const KnobEffectEstimate& e : effects) {
      const std::string what = e.knob + "=" + e.value + " seed " + std::to_string(seed);
      int pairs = 0;
      const double truth = PairedPct(h, e.knob, e.value, /*memory=*/false, &pairs);
      ASSERT_GE(pairs, 15) << what;
      const PercentEffect& t = e.time_avg;
      ASSERT_TRUE(t.known) << what;
      // Averaged over the same settings, less those a version would not fit.
      EXPECT_GE(t.settings, pairs) << what;
      EXPECT_LT(std::fabs(LogRatio(t.pct) - LogRatio(truth)), 0.2)
          << what << ": table " << t.pct << "%, paired trials " << truth << "%";
      EXPECT_LE(t.low, truth) << what;
      EXPECT_GE(t.high, truth) << what;
      EXPECT_LT(t.low, t.pct) << what;
      EXPECT_GT(t.high, t.pct) << what;
      // Memory: the same comparison of peaks.
      const double mem_truth = PairedPct(h, e.knob, e.value, /*memory=*/true, &pairs);
      ASSERT_TRUE(e.mem_avg.known) << what;
      EXPECT_LT(std::fabs(LogRatio(e.mem_avg.pct) - LogRatio(mem_truth)), 0.2)
          << what << ": memory " << e.mem_avg.pct << "%, paired trials " << mem_truth << "%";
    }
  }
}

// At the fastest setting that ran: the effect there, against the pair of
// trials at that setting on the landscape.
TEST_F(KnobTableTest, EffectAtTheBestSettingAgreesWithItsPair) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<Observation> h = Session(24, seed);
    const Observation* best = nullptr;
    for (const Observation& o : h) {
      if (o.status == "ok" && (best == nullptr || o.step_time_s < best->step_time_s)) best = &o;
    }
    ASSERT_NE(best, nullptr);
    SearchContext ctx;
    ctx.spec = &spec_;
    int judged = 0;
    for (const KnobEffectEstimate& e : ExplainKnobs(ctx, h, ModelOptimizer::Options())) {
      const std::string what = e.knob + "=" + e.value + " seed " + std::to_string(seed);
      Config with = best->config, without = best->config;
      with[e.knob] = e.value;
      without[e.knob] = spec_.baseline.at(e.knob);
      const client::LandscapeTrial* a = At(with);
      const client::LandscapeTrial* b = At(without);
      if (!e.time_at_best.known || a == nullptr || b == nullptr || a->status != "ok" || b->status != "ok") {
        continue;
      }
      ++judged;
      const double truth = 100.0 * (a->step_time_s / b->step_time_s - 1.0);
      EXPECT_LT(std::fabs(LogRatio(e.time_at_best.pct) - LogRatio(truth)), 0.2)
          << what << ": at best " << e.time_at_best.pct << "%, its pair " << truth << "%";
    }
    EXPECT_GE(judged, 5) << "seed " << seed;
  }
}

}  // namespace
}  // namespace infrarsi
