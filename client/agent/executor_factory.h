// The executors an agent can run, registered by name in one table: a new
// executor is one factory here (and its name in core's CheckExecutorNames
// and its ExecutorSpec kind in the API). Each factory builds its executor
// from the agent's options after Agent::Create checked them; the agent
// makes one per name its operator listed.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTOR_FACTORY_H_
#define INFRARSI_CLIENT_AGENT_EXECUTOR_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/agent/agent.h"
#include "client/agent/executors/executor.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

using ExecutorFactory =
    std::function<absl::StatusOr<std::unique_ptr<Executor>>(const Agent::Options&)>;

struct RegisteredExecutor {
  std::string name;
  ExecutorFactory make;
};

// Every executor this agent binary can run, by name.
const std::vector<RegisteredExecutor>& RegisteredExecutors();

// The executor `name` built from `options`; INVALID_ARGUMENT for a name no
// factory has, or naming the executor when its options are wrong.
absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const std::string& name,
                                                       const Agent::Options& options);

// The executor name an assignment asks for: "slurm" when Slurm places its
// process, else its kind's ("replay", "process", "sim"); "" for none.
std::string ExecutorNameOf(const v1::TrialAssignment& trial);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTOR_FACTORY_H_
