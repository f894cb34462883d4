// The libgit2 side of a session's repository: checks patches against the
// base commit at Init (SourceRepo, on the server: the repository an admin
// registered, read at its URL, or through a mirror the server keeps for a
// remote URL) and builds the promoted commit (Committer, in the CLI: into
// the caller's own clone). Both work in the object database only: the
// index, the work tree and HEAD are never touched, and trees built while
// checking patches live in an in-memory object store dropped afterwards.
#ifndef INFRARSI_SERVER_GIT_COMMITTER_H_
#define INFRARSI_SERVER_GIT_COMMITTER_H_

#include <mutex>

#include "core/committer.h"
#include "core/source_repo.h"

namespace infrarsi::server {

// Thread-safe.
class GitCommitter : public Committer, public SourceRepo {
 public:
  // `mirror_root`: where bare mirrors of remote URLs are kept (a local path
  // is read in place). Empty: remote URLs are refused.
  explicit GitCommitter(std::string mirror_root = "");
  ~GitCommitter() override;
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request) override;

  // `repo` is a URL (or local path) for these three; ResolveCommit fetches
  // a remote one first.
  absl::StatusOr<std::string> ResolveCommit(const std::string& repo,
                                            const std::string& rev) const override;
  absl::StatusOr<std::vector<std::string>> CheckPatch(const std::string& repo,
                                                      const std::string& base,
                                                      const std::vector<std::string>& earlier,
                                                      const std::string& diff) const override;
  absl::StatusOr<std::string> BlobAt(const std::string& repo, const std::string& base,
                                     const std::string& path) const override;
  absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& repo,
                                                     const std::string& base) const override;
  absl::StatusOr<std::string> ReadFile(const std::string& repo, const std::string& base,
                                       const std::string& path, size_t max_bytes) const override;

 private:
  // The local repository for `url`: itself when local, else its mirror
  // (cloned, or fetched when `fetch`).
  absl::StatusOr<std::string> LocalLocked(const std::string& url, bool fetch) const;

  const std::string mirror_root_;
  mutable std::mutex mu_;  // libgit2 objects are per call; this keeps commits ordered
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_GIT_COMMITTER_H_
