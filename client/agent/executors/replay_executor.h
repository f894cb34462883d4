// Replays measured outcomes from a landscape file instead of training.
// Honest by construction: the measured step times, memory, losses and OOMs
// are reported as measured, with between-launch noise sampled from the
// landscape's own launch repeats; any extra noise or emulated capacity is
// stated in the outcome's note.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_REPLAY_EXECUTOR_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_REPLAY_EXECUTOR_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "client/agent/executors/executor.h"
#include "client/agent/executors/landscape.h"

namespace infrarsi::client {

// Thread-safe; landscapes are parsed once (per content, or per path for a
// session from before landscapes were sent) and cached, a few at a time.
class ReplayExecutor : public Executor {
 public:
  absl::StatusOr<v1::TrialOutcome> Run(const v1::TrialAssignment& trial,
                                       ProgressSink* sink) override;

 private:
  absl::StatusOr<std::shared_ptr<const Landscape>> Get(const v1::ReplaySpec& spec);
  struct Cached {
    // As sent: a digest finds the entry, the content proves it (the digest
    // is not collision-resistant, and tenants send landscapes).
    std::string content;
    std::shared_ptr<const Landscape> landscape;
  };
  static constexpr size_t kMaxCached = 16;
  std::mutex mu_;
  std::map<std::string, Cached> cache_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_REPLAY_EXECUTOR_H_
