// Runs a trial on the cluster simulator (models/cluster_sim.h): the outcome a
// Megatron-style job with this launch setting would show on the simulated
// cluster, noise, stragglers, OOMs and launcher errors included.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_SIM_EXECUTOR_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_SIM_EXECUTOR_H_

#include "client/agent/executors/executor.h"
#include "models/cluster_sim.h"

namespace infrarsi::client {

// Stateless and thread-safe.
class SimExecutor : public Executor {
 public:
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;
};

// The simulator's inputs from a trial's SimSpec and setting.
absl::Status SimInputs(const v1::TrialAssignment& trial, models::sim::ModelShape* model,
                       models::sim::ClusterShape* cluster, models::sim::LaunchKnobs* knobs);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_SIM_EXECUTOR_H_
