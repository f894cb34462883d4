// Read access to a team's git repository, for checking a session's patches
// at Init. An interface so that core stays free of libgit2 (the server
// implements it) and spec parsing can be tested without a repository.
#ifndef INFRARSI_CORE_SOURCE_REPO_H_
#define INFRARSI_CORE_SOURCE_REPO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

// Implementations are thread-safe. `repo` is a local path to a repository
// (work tree or bare); nothing here writes to it.
class SourceRepo {
 public:
  virtual ~SourceRepo() = default;
  // The full SHA-1 of the commit `rev` names ("HEAD", a branch, a SHA).
  // NOT_FOUND or FAILED_PRECONDITION with the reason otherwise.
  virtual absl::StatusOr<std::string> ResolveCommit(const std::string& repo,
                                                    const std::string& rev) const = 0;
  // The files a unified diff changes, as git parses it, after checking that
  // the diffs in `earlier` followed by `diff` apply cleanly to `base`.
  // INVALID_ARGUMENT when git cannot parse it; FAILED_PRECONDITION naming
  // the file when it does not apply.
  virtual absl::StatusOr<std::vector<std::string>> CheckPatch(
      const std::string& repo, const std::string& base, const std::vector<std::string>& earlier,
      const std::string& diff) const = 0;
  // The git blob SHA-1 of `path` in commit `base`; NOT_FOUND when absent.
  virtual absl::StatusOr<std::string> BlobAt(const std::string& repo, const std::string& base,
                                             const std::string& path) const = 0;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SOURCE_REPO_H_
