// The search's models and the model-based strategy.
#include "core/model_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "core/priors.h"
#include "models/bayes_linear.h"

namespace infrarsi {
namespace {

TEST(BayesLinearTest, RecoversWeightsAndNarrowsWithData) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0, 0.05);
  const Eigen::Vector3d truth(1.0, -0.5, 0.25);
  auto fit = [&](int n) {
    Eigen::MatrixXd x(n, 3);
    Eigen::VectorXd y(n);
    for (int i = 0; i < n; ++i) {
      x.row(i) << 1.0, (i % 2), ((i / 2) % 2);
      y[i] = x.row(i).dot(truth) + noise(rng);
    }
    models::BayesLinear m;
    m.Fit(x, y, Eigen::Vector3d::Zero(), Eigen::Vector3d::Constant(10.0), 0.05 * 0.05);
    return m;
  };
  const models::BayesLinear few = fit(4), many = fit(200);
  EXPECT_NEAR(many.weights()[1], -0.5, 0.03);
  EXPECT_NEAR(many.weights()[2], 0.25, 0.03);
  const Eigen::Vector3d x(1, 1, 1);
  EXPECT_LT(many.Variance(x), few.Variance(x));
  EXPECT_GT(many.Variance(x), 0.05 * 0.05);  // never below the noise
}

TEST(BayesLogisticTest, LearnsWhichFeatureFails) {
  // Feature 1 set: always fails; otherwise runs (20 observations of each).
  Eigen::MatrixXd x(40, 2);
  Eigen::VectorXd y(40);
  for (int i = 0; i < 40; ++i) {
    x.row(i) << 1.0, (i < 20 ? 1.0 : 0.0);
    y[i] = i < 20 ? 0.0 : 1.0;
  }
  models::BayesLogistic m;
  m.Fit(x, y, Eigen::Vector2d::Zero(), Eigen::Vector2d::Constant(4.0));
  EXPECT_LT(m.Probability(Eigen::Vector2d(1, 1)), 0.2);
  EXPECT_GT(m.Probability(Eigen::Vector2d(1, 0)), 0.8);
}

// A toy landscape with an interaction and an out-of-memory corner: larger
// micro-batches and flash attention are faster, mbs 8 without checkpointing
// runs out of memory, and fused kernels help only with flash.
SessionSpec ToySpec() {
  SessionSpec s;
  s.knobs = {{"mbs", {"1", "2", "4", "8"}},
             {"flash", {"false", "true"}},
             {"ckpt", {"false", "true"}},
             {"fused", {"false", "true"}},
             {"bucket", {"10", "40", "160"}}};
  s.baseline = {{"mbs", "1"}, {"flash", "false"}, {"ckpt", "false"}, {"fused", "false"},
                {"bucket", "40"}};
  return s;
}

Observation Measure(const Config& c) {
  int mbs = 1;
  (void)absl::SimpleAtoi(c.at("mbs"), &mbs);
  Observation o;
  o.config = c;
  if (mbs == 8 && c.at("ckpt") == "false") {
    o.status = "oom";
    return o;
  }
  double t = 1.0 / (1.0 + 0.3 * mbs);
  if (c.at("flash") == "true") t *= c.at("fused") == "true" ? 0.5 : 0.7;
  if (c.at("ckpt") == "true") t *= 1.25;
  if (c.at("bucket") == "10") t *= 1.03;
  o.status = "ok";
  o.step_time_s = t;
  return o;
}

int TrialsToBest(Optimizer& opt, uint64_t seed, int* ooms) {
  const SessionSpec spec = ToySpec();
  double best = 1e9;
  for (int64_t i = 0; i < spec.SpaceSize(); ++i) {
    const Observation o = Measure(ConfigAt(spec, i));
    if (o.status == "ok") best = std::min(best, o.step_time_s);
  }
  std::vector<Observation> history = {Measure(spec.baseline)};
  *ooms = 0;
  for (int n = 1; n <= spec.SpaceSize(); ++n) {
    auto next = opt.Propose(spec, history, 1, seed * 1000 + n);
    if (next.empty()) return n;
    history.push_back(Measure(next[0]));
    *ooms += history.back().status == "oom";
    if (history.back().status == "ok" && history.back().step_time_s <= 1.02 * best) return n;
  }
  return static_cast<int>(spec.SpaceSize());
}

TEST(ModelOptimizerTest, FindsTheBestInFewerTrialsThanRandom) {
  ModelOptimizer model;
  RandomOptimizer random;
  double model_sum = 0, random_sum = 0;
  int model_ooms = 0, random_ooms = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    int o = 0;
    model_sum += TrialsToBest(model, seed, &o);
    model_ooms += o;
    random_sum += TrialsToBest(random, seed, &o);
    random_ooms += o;
  }
  // 96 settings, 12 of them OOM: random needs ~1/3 of the space on average.
  EXPECT_LT(model_sum, 0.5 * random_sum) << model_sum / 20 << " vs " << random_sum / 20;
  EXPECT_LE(model_ooms, random_ooms);
}

TEST(ModelOptimizerTest, BatchesAreDistinctUntriedAndSpreadOut) {
  const SessionSpec spec = ToySpec();
  std::vector<Observation> history = {Measure(spec.baseline)};
  ModelOptimizer model;
  for (int round = 0; round < 4; ++round) {
    auto batch = model.Propose(spec, history, 4, round);
    ASSERT_EQ(batch.size(), 4u);
    std::set<std::string> keys;
    for (const Config& c : batch) {
      EXPECT_TRUE(keys.insert(ConfigKey(c)).second) << "duplicate in a batch";
      for (const Observation& o : history) EXPECT_NE(ConfigKey(o.config), ConfigKey(c));
    }
    for (const Config& c : batch) history.push_back(Measure(c));
  }
  // The space runs out, then proposals stop.
  for (int i = 0; i < 200; ++i) {
    auto next = model.Propose(spec, history, 8, 100 + i);
    if (next.empty()) break;
    for (const Config& c : next) history.push_back(Measure(c));
  }
  EXPECT_EQ(static_cast<int64_t>(history.size()), spec.SpaceSize());
}

}  // namespace
}  // namespace infrarsi

namespace infrarsi {
namespace {

TEST(PriorsTest, ParsesTheShippedFileAndIsRelativeToTheBaseline) {
  std::ifstream in(std::string(INFRARSI_SOURCE_DIR) + "/deploy/priors.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  auto p = ParsePriors(ss.str());
  ASSERT_TRUE(p.ok()) << p.status();
  SessionSpec spec;
  spec.baseline = {{"precision", "tf32"}, {"micro_batch", "2"}, {"ckpt", "false"}};
  // bf16 vs a tf32 baseline: faster by the difference of both priors.
  const Effect bf16 = p->EffectOf(spec, "precision", "bf16");
  EXPECT_NEAR(bf16.time, -0.4 - 0.3, 1e-12);
  EXPECT_GT(bf16.time_sd, 0.4);
  // Numeric knobs scale with doublings from the baseline's value.
  EXPECT_NEAR(p->EffectOf(spec, "micro_batch", "8").time, 2 * -0.05, 1e-12);
  EXPECT_NEAR(p->EffectOf(spec, "micro_batch", "8").fit, 2 * -0.7, 1e-12);
  EXPECT_GT(p->EffectOf(spec, "ckpt", "true").fit, 0);  // checkpointing saves memory
  // An unknown knob has no prior: zero effect, wide uncertainty.
  EXPECT_EQ(p->EffectOf(spec, "ckpt", "false").time, 0);
}

TEST(PriorsTest, BadFilesNameTheField) {
  EXPECT_EQ(ParsePriors("knobs:\n  attn: {sdpa: {time: fast}}\n").status().message(),
            "knobs.attn.sdpa.time: must be a number");
  EXPECT_EQ(ParsePriors("knobs:\n  attn: {sdpa: {speed: 1}}\n").status().message(),
            "knobs.attn.sdpa.speed: unknown field");
  EXPECT_EQ(ParsePriors("knobz: {}\n").status().message(), "priors.knobz: unknown field");
  EXPECT_FALSE(ParsePriors("knobs:\n  a: {b: {time: 1, time_sd: 0}}\n").ok());
}

TEST(PriorsTest, RightPriorsSpeedTheSearchUp) {
  auto priors = ParsePriors(R"(
knobs:
  flash: {"true": {time: -0.3, time_sd: 0.2}}
  ckpt: {"true": {time: 0.2, time_sd: 0.1, fit: 2.0, fit_sd: 1.0}}
  fused: {"true": {time: -0.1, time_sd: 0.2}}
per_doubling:
  mbs: {time: -0.15, time_sd: 0.1, fit: -1.0, fit_sd: 1.0}
)");
  ASSERT_TRUE(priors.ok()) << priors.status();
  ModelOptimizer::Options o;
  o.priors = *priors;
  ModelOptimizer informed(o), cold;
  double informed_sum = 0, cold_sum = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    int ooms = 0;
    informed_sum += TrialsToBest(informed, seed, &ooms);
    cold_sum += TrialsToBest(cold, seed, &ooms);
  }
  EXPECT_LT(informed_sum, cold_sum) << informed_sum / 10 << " vs " << cold_sum / 10;
}

}  // namespace
}  // namespace infrarsi
