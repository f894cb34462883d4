// The agent's executors by name: every name core accepts has a factory, and
// a trial's assignment finds the one that runs it.
#include "client/agent/executor_factory.h"

#include <gtest/gtest.h>

#include "core/agent_policy.h"
#include "core/spec.h"

namespace infrarsi::client {
namespace {

TEST(ExecutorFactoryTest, EveryRegisteredNameIsOneCoreAcceptsAndBuilds) {
  std::vector<std::string> names;
  for (const RegisteredExecutor& r : RegisteredExecutors()) names.push_back(r.name);
  EXPECT_TRUE(CheckExecutorNames(names).ok());
  EXPECT_EQ(names.size(), 4u);
  Agent::Options o;
  for (const char* name : {"replay", "sim"}) {
    auto ex = MakeExecutor(name, o);
    ASSERT_TRUE(ex.ok()) << name << ": " << ex.status();
    EXPECT_NE(*ex, nullptr);
  }
  auto none = MakeExecutor("docker", o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no executor 'docker'"), std::string::npos);
}

TEST(ExecutorFactoryTest, AnAssignmentNamesItsExecutor) {
  v1::TrialAssignment t;
  EXPECT_EQ(ExecutorNameOf(t), "");
  t.mutable_executor()->mutable_replay();
  EXPECT_EQ(ExecutorNameOf(t), "replay");
  t.mutable_executor()->mutable_process();
  EXPECT_EQ(ExecutorNameOf(t), "process");
  t.mutable_executor()->mutable_slurm();
  EXPECT_EQ(ExecutorNameOf(t), "slurm") << "a process placed by Slurm runs as a Slurm job";
  t.Clear();
  t.mutable_executor()->mutable_sim();
  EXPECT_EQ(ExecutorNameOf(t), "sim");
}

TEST(ExecutorFactoryTest, EveryExecutorKindHasItsTraits) {
  using K = SessionSpec::ExecutorKind;
  for (K k : {K::kReplay, K::kProcess, K::kSim}) {
    EXPECT_EQ(ExecutorTraitsOf(k).kind, k);
  }
  EXPECT_TRUE(ExecutorTraitsOf(K::kProcess).runs_code);
  EXPECT_TRUE(ExecutorTraitsOf(K::kProcess).agent_clock);
  EXPECT_TRUE(ExecutorTraitsOf(K::kSim).simulated);
  EXPECT_FALSE(ExecutorTraitsOf(K::kReplay).runs_code);
}

}  // namespace
}  // namespace infrarsi::client
