#include "client/agent/executor_factory.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "client/agent/executors/process_executor.h"
#include "client/agent/executors/replay_executor.h"
#include "client/agent/executors/sandbox.h"
#include "client/agent/executors/sim_executor.h"
#include "client/agent/executors/slurm_executor.h"
#include "core/agent_policy.h"

namespace infrarsi::client {
namespace {

absl::StatusOr<std::unique_ptr<Executor>> MakeProcess(const Agent::Options& o) {
  // Tenants' code: only under the operator's policy.
  ProcessExecutor::Options po = o.process;
  po.scratch_root = o.scratch_root;
  po.slots = std::max(1, o.slots);
  if (po.devices.empty() && o.gpu_model != "cpu" && o.gpu_count > 0) {
    // The host's GPUs as this agent sees them; each slot gets its share.
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr && *v != '\0') {
      po.devices = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else {
      for (int i = 0; i < o.gpu_count; ++i) po.devices.push_back(absl::StrCat(i));
    }
  }
  ASSIGN_OR_RETURN(po.allowed_commands, ParseCommandPrefixes(o.allow_commands, "allow_commands"));
  auto process = ProcessExecutor::Create(std::move(po));
  if (!process.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("process executor: ", process.status().message()));
  }
  return std::unique_ptr<Executor>(*std::move(process));
}

absl::StatusOr<std::unique_ptr<Executor>> MakeSlurm(const Agent::Options& o) {
  // Tenants' code on the cluster: the same code policy as `process`.
  SlurmExecutor::Options so = o.slurm;
  if (so.scratch_root.empty()) so.scratch_root = o.scratch_root;
  // The shared folder's trial folders (0700) and git cache (0700) are the
  // agent's user's alone; the folder itself must be its own too.
  auto shared = OwnScratchRoot(so.scratch_root);
  if (!shared.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--slurm-shared-dir: ", shared.status().message()));
  }
  ASSIGN_OR_RETURN(so.allowed_commands, ParseCommandPrefixes(o.allow_commands, "allow_commands"));
  so.allow_any_command = o.process.allow_any_command;
  so.workdir_root = o.process.workdir_root;
  so.allow_root = o.process.allow_root;
  auto slurm = SlurmExecutor::Create(std::move(so));
  if (!slurm.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("slurm executor: ", slurm.status().message()));
  }
  return std::unique_ptr<Executor>(*std::move(slurm));
}

}  // namespace

const std::vector<RegisteredExecutor>& RegisteredExecutors() {
  static const auto* const kAll = new std::vector<RegisteredExecutor>{
      {"replay",
       [](const Agent::Options&) -> absl::StatusOr<std::unique_ptr<Executor>> {
         return std::unique_ptr<Executor>(std::make_unique<ReplayExecutor>());
       }},
      {"sim",
       [](const Agent::Options&) -> absl::StatusOr<std::unique_ptr<Executor>> {
         return std::unique_ptr<Executor>(std::make_unique<SimExecutor>());
       }},
      {"process", MakeProcess},
      {"slurm", MakeSlurm},
  };
  return *kAll;
}

absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const std::string& name,
                                                       const Agent::Options& options) {
  for (const RegisteredExecutor& r : RegisteredExecutors()) {
    if (r.name == name) return r.make(options);
  }
  return absl::InvalidArgumentError(absl::StrCat("executors: no executor '", name, "'"));
}

std::string ExecutorNameOf(const v1::TrialAssignment& trial) {
  // A process placed by Slurm runs only as a Slurm job.
  if (trial.executor().has_slurm()) return "slurm";
  switch (trial.executor().kind_case()) {
    case v1::ExecutorSpec::kReplay: return "replay";
    case v1::ExecutorSpec::kProcess: return "process";
    case v1::ExecutorSpec::kSim: return "sim";
    default: return "";
  }
}

}  // namespace infrarsi::client
