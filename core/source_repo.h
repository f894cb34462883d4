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
  // What an LLM asked for patches is shown: every file path of commit
  // `base`, and one file's text (FAILED_PRECONDITION when larger than
  // `max_bytes`). Optional: UNIMPLEMENTED by default.
  virtual absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& repo,
                                                             const std::string& base) const {
    (void)repo;
    (void)base;
    return absl::UnimplementedError("this repository reader lists no files");
  }
  virtual absl::StatusOr<std::string> ReadFile(const std::string& repo, const std::string& base,
                                               const std::string& path, size_t max_bytes) const {
    (void)repo;
    (void)base;
    (void)path;
    (void)max_bytes;
    return absl::UnimplementedError("this repository reader reads no files");
  }
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SOURCE_REPO_H_
