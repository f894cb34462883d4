// Report assembly from a snapshot: what it audits and counts.
#include "core/report.h"

#include <gtest/gtest.h>

#include "core/optimizer.h"

namespace infrarsi {
namespace {

// The source audit is of the promoted setting, also when the fastest search
// trial (another setting, with other patches) was not the one promoted: the
// audit must describe what apply will commit. (TinyGptTunedForReal found
// 2 audited paths for 1 promoted patch when candidate 2 was promoted.)
TEST(ReportTest, TheSourceAuditIsOfThePromotedCandidate) {
  ReportInputs in;
  in.rec.id = "ses-1";
  in.spec.knobs = {{"patch_a", {"off", "on"}}, {"patch_b", {"off", "on"}}};
  in.spec.baseline = {{"patch_a", "off"}, {"patch_b", "off"}};
  in.spec.contract.editable = {"model.py", "kernels/*.py"};
  PatchSpec a;
  a.name = "a";
  a.knob = "patch_a";
  a.paths = {"model.py"};
  PatchSpec b;
  b.name = "b";
  b.knob = "patch_b";
  b.paths = {"kernels/attn.py", "kernels/mlp.py"};
  in.spec.patches = {a, b};
  // The fastest search trial had patch b; candidate 2 (patch a) was promoted.
  in.best_trial_id = 7;
  in.best_config = {{"patch_a", "off"}, {"patch_b", "on"}};
  auto* c1 = in.verification.add_candidates();
  c1->set_rank(1);
  c1->set_trial_id(7);
  (*c1->mutable_config())["patch_a"] = "off";
  (*c1->mutable_config())["patch_b"] = "on";
  auto* c2 = in.verification.add_candidates();
  c2->set_rank(2);
  c2->set_trial_id(9);
  (*c2->mutable_config())["patch_a"] = "on";
  (*c2->mutable_config())["patch_b"] = "off";
  in.verification.set_promoted_rank(2);
  RandomOptimizer optimizer;
  auto rep = BuildReport(in, {}, optimizer);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->source_audit_size(), 1);
  EXPECT_EQ(rep->source_audit(0).path(), "model.py");
  EXPECT_EQ(rep->source_audit(0).patch(), "a");
  EXPECT_EQ(rep->source_audit(0).editable_glob(), "model.py");
}

TEST(ReportTest, CountsFailuresAndTheirCost) {
  ReportInputs in;
  in.spec.knobs = {{"mbs", {"1", "2"}}};
  in.spec.baseline = {{"mbs", "1"}};
  storage::TrialRecord ok, oom, bad;
  ok.id = 1;
  ok.purpose = "search";
  ok.config = R"({"mbs":"1"})";
  ok.status = "ok";
  ok.cost_s = 10;
  oom = ok;
  oom.id = 2;
  oom.config = R"({"mbs":"2"})";
  oom.status = "oom";
  oom.cost_s = 3;
  bad = ok;
  bad.id = 3;
  bad.status = "violation";
  bad.violation = "tokens_per_step";
  bad.cost_s = 4;
  RandomOptimizer optimizer;
  auto rep = BuildReport(in, {ok, oom, bad}, optimizer);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->trials_size(), 3);
  EXPECT_DOUBLE_EQ(rep->total_cost_s(), 17);
  EXPECT_EQ(rep->failed_trials().count(), 2);
  EXPECT_DOUBLE_EQ(rep->failed_trials().cost_s(), 7);
  EXPECT_EQ(rep->violations_by_kind().at("tokens_per_step"), 1);
  EXPECT_EQ(rep->search().strategy(), optimizer.Name());
}

}  // namespace
}  // namespace infrarsi
