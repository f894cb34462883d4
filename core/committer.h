// Writing a promoted change into a team's git repository. An interface so
// that core stays free of libgit2 and tests can observe what Apply asks for.
#ifndef INFRARSI_CORE_COMMITTER_H_
#define INFRARSI_CORE_COMMITTER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

struct CommitRequest {
  std::string repo_path;
  // Must not exist yet, or already point at the very commit this request
  // makes (a retry: the same commit is returned, no second one is made).
  std::string branch;
  std::string message;
  // The commit the session ran on (empty: HEAD). The new commit's parent is
  // always HEAD: when HEAD has moved past base_commit, the patches are
  // re-applied onto HEAD if they apply cleanly (CommitResult::note says so),
  // else FAILED_PRECONDITION names the patch that no longer applies.
  std::string base_commit;
  // (name, unified diff), applied in order to the parent's tree.
  std::vector<std::pair<std::string, std::string>> patches;
  // (path inside the repository, content) added on top of the patched tree.
  std::vector<std::pair<std::string, std::string>> files;
  bool dry_run = false;
  // Author and committer, fixed so that the same request makes the same
  // commit (time 0: now, the repository's configured identity).
  std::string author_name;
  std::string author_email;
  int64_t author_time_unix_s = 0;
};

struct CommitResult {
  std::string commit;  // empty on a dry run
  bool existed = false;  // the branch already held this very commit (a retry)
  std::string base_commit;  // the parent: HEAD
  std::string note;         // set when the patches were re-applied onto a moved HEAD
  std::string message;      // the commit message: the request's, plus the note
  // Every path the commit changes against its parent, sorted...
  std::vector<std::string> changed_paths;
  // ...and how, path by path: 'A' added, 'M' modified, 'D' deleted (git's
  // letters).
  std::map<std::string, char> change_kinds;
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
