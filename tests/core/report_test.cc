// Report assembly from a snapshot: what it audits and counts.
#include "core/report.h"
#include "core/agent_health.h"
#include "core/slurm_job.h"

#include <gtest/gtest.h>

#include "core/optimizer.h"

namespace infrarsi {
namespace {

// The source audit is of the promoted setting, also when the fastest search
// trial (another setting, with other patches) was not the one promoted: the
// audit must describe what apply will commit. (TinyGptTest.TunedForReal found
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

// A node is noted when Slurm had it down in a failure, or when a setting
// failed on it and finished ok on nodes it was not among; a node the same
// setting finished ok on is not blamed.
TEST(FailingNodesTest, NodesThatFailWhatSucceedsElsewhere) {
  auto trial = [](int64_t id, const std::string& config, const std::string& status,
                  const std::string& nodes, const std::vector<std::string>& down = {}) {
    storage::TrialRecord t;
    t.id = id;
    t.config = config;
    t.status = status;
    t.error = status == "failed" ? "NCCL error: unhandled system error" : "";
    v1::SlurmJob j;
    j.set_job_id(absl::StrCat(id));
    j.set_nodes(nodes);
    for (const std::string& d : down) j.add_failed_nodes(d);
    t.slurm = EncodeSlurmJob(j);
    return t;
  };
  const std::vector<storage::TrialRecord> trials = {
      trial(1, "a", "ok", "node1,node2"),
      trial(2, "a", "failed", "node1,node3"),  // node3 never ran "a" ok
      trial(3, "b", "failed", "node4,node5"),  // "b" never ran ok: the setting's
      trial(4, "c", "ok", "node1,node2", {"node6"}),  // a re-run after node6 failed
      trial(5, "a", "timeout", "node3,node2"),
  };
  const std::vector<FailingNode> nodes = FindFailingNodes(trials);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node, "node3");
  EXPECT_EQ(nodes[0].trial_ids, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(nodes[0].first_error, "NCCL error: unhandled system error");
  EXPECT_EQ(nodes[1].node, "node6");
  EXPECT_EQ(nodes[1].trial_ids, (std::vector<int64_t>{4}));
}

// What the server keeps of reported jobs: the newest job, and every node
// that failed any attempt.
TEST(SlurmJobTest, MergingKeepsFailedNodesAcrossAttempts) {
  v1::SlurmJob first;
  first.set_job_id("10");
  first.set_state("NODE_FAIL");
  first.add_failed_nodes("node2");
  v1::SlurmJob second;
  second.set_job_id("11");
  second.set_state("COMPLETED");
  const v1::SlurmJob merged = DecodeSlurmJob(MergeSlurmJob(MergeSlurmJob("", first), second));
  EXPECT_EQ(merged.job_id(), "11");
  EXPECT_EQ(merged.state(), "COMPLETED");
  ASSERT_EQ(merged.failed_nodes_size(), 1);
  EXPECT_EQ(merged.failed_nodes(0), "node2");
  v1::SlurmJob bad;
  bad.set_queued_s(-1);
  EXPECT_EQ(ValidateSlurmJob(bad, "outcome.slurm").message(),
            "outcome.slurm.queued_s: a finite number of seconds in [0, 1 year]");
  bad.set_queued_s(0);
  bad.set_nodes("node1,../etc");
  EXPECT_EQ(ValidateSlurmJob(bad, "outcome.slurm").message(),
            "outcome.slurm.nodes: comma-separated node names");
}

}  // namespace
}  // namespace infrarsi
