// The libgit2 side of a session's repository: checks patches against the
// base commit at Init (SourceRepo) and builds the promoted commit at Apply
// (Committer). Both work in the object database only: the index, the work
// tree and HEAD are never touched, and trees built while checking patches
// live in an in-memory object store that is dropped afterwards.
#ifndef INFRARSI_SERVER_GIT_COMMITTER_H_
#define INFRARSI_SERVER_GIT_COMMITTER_H_

#include <mutex>

#include "core/committer.h"
#include "core/source_repo.h"

namespace infrarsi::server {

// Thread-safe.
class GitCommitter : public Committer, public SourceRepo {
 public:
  GitCommitter();
  ~GitCommitter() override;
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request) override;

  absl::StatusOr<std::string> ResolveCommit(const std::string& repo,
                                            const std::string& rev) const override;
  absl::StatusOr<std::vector<std::string>> CheckPatch(const std::string& repo,
                                                      const std::string& base,
                                                      const std::vector<std::string>& earlier,
                                                      const std::string& diff) const override;
  absl::StatusOr<std::string> BlobAt(const std::string& repo, const std::string& base,
                                     const std::string& path) const override;

 private:
  mutable std::mutex mu_;  // libgit2 objects are per call; this keeps commits ordered
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_GIT_COMMITTER_H_
