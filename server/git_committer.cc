#include "server/git_committer.h"

#include <git2.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace infrarsi::server {
namespace {

std::string LastGitError() {
  const git_error* e = git_error_last();
  return e && e->message ? e->message : "unknown libgit2 error";
}

template <typename T, void (*Free)(T*)>
struct GitDeleter {
  void operator()(T* p) const { Free(p); }
};
template <typename T, void (*Free)(T*)>
using GitPtr = std::unique_ptr<T, GitDeleter<T, Free>>;

using RepoPtr = GitPtr<git_repository, git_repository_free>;
using CommitPtr = GitPtr<git_commit, git_commit_free>;
using TreePtr = GitPtr<git_tree, git_tree_free>;
using RefPtr = GitPtr<git_reference, git_reference_free>;
using SigPtr = GitPtr<git_signature, git_signature_free>;

std::string OidHex(const git_oid& oid) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return buf;
}

}  // namespace

GitCommitter::GitCommitter() { git_libgit2_init(); }
GitCommitter::~GitCommitter() { git_libgit2_shutdown(); }

absl::StatusOr<CommitResult> GitCommitter::Commit(const CommitRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  git_repository* raw_repo = nullptr;
  if (git_repository_open_ext(&raw_repo, req.repo_path.c_str(), GIT_REPOSITORY_OPEN_NO_SEARCH,
                              nullptr) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("repo_path: not a git repository: ", req.repo_path));
  }
  RepoPtr repo(raw_repo);
  const std::string ref_name = absl::StrCat("refs/heads/", req.branch);
  int valid = 0;
  if (git_reference_name_is_valid(&valid, ref_name.c_str()) != 0 || !valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch: '", req.branch, "' is not a valid branch name"));
  }
  git_reference* existing = nullptr;
  if (git_branch_lookup(&existing, repo.get(), req.branch.c_str(), GIT_BRANCH_LOCAL) == 0) {
    git_reference_free(existing);
    return absl::AlreadyExistsError(
        absl::StrCat("branch: '", req.branch, "' already exists in ", req.repo_path,
                     "; choose a new branch name"));
  }
  git_oid head_oid;
  if (git_reference_name_to_id(&head_oid, repo.get(), "HEAD") != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("repo_path: ", req.repo_path, " has no commit at HEAD to build on"));
  }
  git_commit* raw_head = nullptr;
  if (git_commit_lookup(&raw_head, repo.get(), &head_oid) != 0) {
    return absl::InternalError(absl::StrCat("git: HEAD commit: ", LastGitError()));
  }
  CommitPtr head(raw_head);
  git_tree* raw_tree = nullptr;
  if (git_commit_tree(&raw_tree, head.get()) != 0) {
    return absl::InternalError(absl::StrCat("git: HEAD tree: ", LastGitError()));
  }
  TreePtr base_tree(raw_tree);

  std::vector<git_tree_update> updates(req.files.size());
  for (size_t i = 0; i < req.files.size(); ++i) {
    const auto& [path, content] = req.files[i];
    git_oid blob;
    if (git_blob_create_from_buffer(&blob, repo.get(), content.data(), content.size()) != 0) {
      return absl::InternalError(absl::StrCat("git: writing ", path, ": ", LastGitError()));
    }
    updates[i].action = GIT_TREE_UPDATE_UPSERT;
    updates[i].id = blob;
    updates[i].filemode = GIT_FILEMODE_BLOB;
    updates[i].path = path.c_str();
  }
  git_oid tree_oid;
  if (git_tree_create_updated(&tree_oid, repo.get(), base_tree.get(), updates.size(),
                              updates.data()) != 0) {
    return absl::InternalError(absl::StrCat("git: building tree: ", LastGitError()));
  }
  CommitResult result;
  result.base_commit = OidHex(head_oid);
  if (req.dry_run) return result;

  git_tree* raw_new_tree = nullptr;
  if (git_tree_lookup(&raw_new_tree, repo.get(), &tree_oid) != 0) {
    return absl::InternalError(absl::StrCat("git: tree lookup: ", LastGitError()));
  }
  TreePtr new_tree(raw_new_tree);
  git_signature* raw_sig = nullptr;
  if (git_signature_default(&raw_sig, repo.get()) != 0 &&
      git_signature_now(&raw_sig, "InfraRSI", "infrarsi@localhost") != 0) {
    return absl::InternalError(absl::StrCat("git: signature: ", LastGitError()));
  }
  SigPtr sig(raw_sig);
  const git_commit* parents[] = {head.get()};
  git_oid commit_oid;
  // No update_ref: the branch is created below, refusing to overwrite.
  if (git_commit_create(&commit_oid, repo.get(), nullptr, sig.get(), sig.get(), "UTF-8",
                        req.message.c_str(), new_tree.get(), 1, parents) != 0) {
    return absl::InternalError(absl::StrCat("git: commit: ", LastGitError()));
  }
  git_commit* raw_commit = nullptr;
  if (git_commit_lookup(&raw_commit, repo.get(), &commit_oid) != 0) {
    return absl::InternalError(absl::StrCat("git: commit lookup: ", LastGitError()));
  }
  CommitPtr commit(raw_commit);
  git_reference* raw_branch = nullptr;
  const int rc = git_branch_create(&raw_branch, repo.get(), req.branch.c_str(), commit.get(), 0);
  if (rc == GIT_EEXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("branch: '", req.branch, "' already exists"));
  }
  if (rc != 0) return absl::InternalError(absl::StrCat("git: branch: ", LastGitError()));
  RefPtr branch(raw_branch);
  result.commit = OidHex(commit_oid);
  return result;
}

}  // namespace infrarsi::server
