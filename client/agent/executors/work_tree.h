// Clean work trees of a session's repository for the process executor: the
// base commit with the trial's patches applied, made with libgit2 from a
// bare clone the agent keeps per repository (the team's repository is only
// read, by cloning and fetching). Nothing of one trial's tree survives into
// the next.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_WORK_TREE_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_WORK_TREE_H_

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

class WorkTrees {
 public:
  struct Options {
    // Folder for the bare clones, one per repository. Required.
    std::string cache_root;
  };
  explicit WorkTrees(Options options);
  ~WorkTrees();
  WorkTrees(const WorkTrees&) = delete;
  WorkTrees& operator=(const WorkTrees&) = delete;

  // Replaces `dir` with a checkout of source.base_commit with source's
  // patches applied in order. FAILED_PRECONDITION naming the patch when one
  // does not apply; UNAVAILABLE when the repository cannot be read.
  // Thread-safe (calls are serialised per agent).
  absl::Status Make(const v1::SourceSpec& source, const std::string& dir);

 private:
  Options options_;
  std::mutex mu_;
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_WORK_TREE_H_
