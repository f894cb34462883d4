// Committer backed by libgit2: builds the commit from HEAD's tree plus the
// given files, entirely in the object database, and points a new branch at
// it. The index, the work tree and HEAD are never touched.
#ifndef INFRARSI_SERVER_GIT_COMMITTER_H_
#define INFRARSI_SERVER_GIT_COMMITTER_H_

#include <mutex>

#include "core/committer.h"

namespace infrarsi::server {

class GitCommitter : public Committer {
 public:
  GitCommitter();
  ~GitCommitter() override;
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request) override;

 private:
  std::mutex mu_;  // libgit2 objects are per call; this keeps commits ordered
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_GIT_COMMITTER_H_
