// Writing a promoted change into a team's git repository. An interface so
// that core stays free of libgit2 and tests can observe what Apply asks for.
#ifndef INFRARSI_CORE_COMMITTER_H_
#define INFRARSI_CORE_COMMITTER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

struct CommitRequest {
  std::string repo_path;
  std::string branch;  // must not exist yet
  std::string message;
  // (path inside the repository, content) added on top of HEAD's tree.
  std::vector<std::pair<std::string, std::string>> files;
  bool dry_run = false;
};

struct CommitResult {
  std::string commit;  // empty on a dry run
  std::string base_commit;
};

// Implementations must never touch the checked-out branch, the index or the
// work tree: the commit goes only to the new branch. Thread-safe.
class Committer {
 public:
  virtual ~Committer() = default;
  // INVALID_ARGUMENT/FAILED_PRECONDITION naming repo_path or branch when the
  // path is not a repository, the branch name is bad or already exists.
  virtual absl::StatusOr<CommitResult> Commit(const CommitRequest& request) = 0;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_COMMITTER_H_
