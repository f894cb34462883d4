// The generated suite is what issue 33's targets are judged on: its
// workloads must be valid sessions whose baselines run, its draw must repeat,
// and its split must not move when the suite grows.
#include "tests/bench/workload_suite.h"

#include <set>

#include <gtest/gtest.h>

#include "core/optimizer.h"
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

}  // namespace
}  // namespace infrarsi::bench
