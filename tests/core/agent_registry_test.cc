// AgentRegistry: ids bound to tokens, what an agent fits, who is live.
#include "core/agent_registry.h"

#include <gtest/gtest.h>

#include "tests/core/requirement_testing.h"

namespace infrarsi {
namespace {

storage::AgentRecord Agent(const std::string& id, const std::string& gpu, int count,
                           const std::string& executors, const std::string& token = "tok-1") {
  storage::AgentRecord a;
  a.id = id;
  a.gpu_model = gpu;
  a.gpu_count = count;
  a.executors = executors;
  a.token_id = token;
  a.last_heartbeat_ms = 1000;
  return a;
}

using ::infrarsi::testing::Req;

TEST(AgentRegistryTest, IdsAreBoundToTheirToken) {
  AgentRegistry reg(absl::Seconds(90), /*started_ms=*/0);
  reg.Put(Agent("agt-1", "H200", 8, "replay"));
  Principal mine;
  mine.token_id = "tok-1";
  Principal other;
  other.token_id = "tok-2";
  EXPECT_TRUE(reg.Bound("agt-1", mine).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(reg.Bound("agt-1", other).status()));
  EXPECT_TRUE(absl::IsNotFound(reg.Bound("agt-9", mine).status()));
}

TEST(AgentRegistryTest, FitsHardwareExecutorAndTenancy) {
  AgentRegistry reg(absl::Seconds(90), /*started_ms=*/0);
  reg.Put(Agent("agt-1", "H200", 8, "replay,sim"));
  storage::AgentRecord red = Agent("agt-2", "H200", 8, "replay");
  red.team = "red";  // a team-scoped token: red's work only
  reg.Put(red);
  const storage::AgentRecord& shared = *reg.Find("agt-1");
  EXPECT_TRUE(reg.Fits(shared, Req("h200", 8, "replay")));  // case-insensitive
  EXPECT_TRUE(reg.Fits(shared, Req("h200", 4, "sim")));
  EXPECT_FALSE(reg.Fits(shared, Req("h200", 16, "replay")));
  EXPECT_FALSE(reg.Fits(shared, Req("a100", 1, "replay")));
  EXPECT_FALSE(reg.Fits(shared, Req("h200", 1, "process")));
  TrialQueue::Requirement blue = Req("h200", 1, "replay");
  blue.team = "blue";
  EXPECT_FALSE(reg.Fits(*reg.Find("agt-2"), blue));
  blue.team = "red";
  EXPECT_TRUE(reg.Fits(*reg.Find("agt-2"), blue));
}

TEST(AgentRegistryTest, RefusalsCommandPoliciesAndLiveness) {
  AgentRegistry reg(absl::Seconds(90), /*started_ms=*/0);
  storage::AgentRecord a = Agent("agt-1", "H200", 1, "process");
  a.commands = EncodeStringList({"python3 train.py"});
  reg.Put(a);
  reg.Put(Agent("agt-2", "H200", 1, "process"));
  SessionSpec spec;
  spec.executor_kind = SessionSpec::ExecutorKind::kProcess;
  spec.process.argv = {"bash", "-c", "rm -rf /"};
  storage::TrialRecord t;
  t.config = "{}";
  const auto req = Req("h200", 1, "process");
  EXPECT_FALSE(reg.MayRun(*reg.Find("agt-1"), req, spec, &t));  // its policy says no
  EXPECT_TRUE(reg.MayRun(*reg.Find("agt-2"), req, spec, &t));
  t.refused_by = "agt-2";
  EXPECT_FALSE(reg.MayRun(*reg.Find("agt-2"), req, spec, &t));
  EXPECT_FALSE(reg.AnotherMayRun(req, spec, t, 1000));
  EXPECT_EQ(reg.LiveFitting(req, 1000).size(), 2u);
  EXPECT_TRUE(reg.Live("agt-1", 1000 + 90000));
  EXPECT_FALSE(reg.Live("agt-1", 1000 + 90001));
  EXPECT_TRUE(reg.LiveFitting(req, 1000 + 90001).empty());
}

TEST(AgentRegistryTest, RegistrationsAreValidatedNamingTheField) {
  v1::RegisterAgentRequest r;
  r.set_host("h");
  r.set_gpu_model("H200");
  r.add_executors("replay");
  EXPECT_TRUE(AgentRegistry::Validate(r).ok());
  r.set_gpu_count(-1);
  EXPECT_EQ(AgentRegistry::Validate(r).message().rfind("gpu_count:", 0), 0u);
  r.set_gpu_count(1);
  r.add_executors("teleport");
  EXPECT_FALSE(AgentRegistry::Validate(r).ok());
}

}  // namespace
}  // namespace infrarsi
