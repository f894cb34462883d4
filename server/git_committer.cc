#include "server/git_committer.h"

#include <git2.h>
#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/patch_scope.h"
#include "core/spec.h"
#include "base/status_macros.h"

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
using DiffPtr = GitPtr<git_diff, git_diff_free>;
using IndexPtr = GitPtr<git_index, git_index_free>;
using ObjectPtr = GitPtr<git_object, git_object_free>;
using OdbPtr = GitPtr<git_odb, git_odb_free>;

std::string OidHex(const git_oid& oid) {
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return buf;
}

absl::StatusOr<RepoPtr> OpenRepo(const std::string& path, const std::string& field) {
  git_repository* raw = nullptr;
  if (git_repository_open_ext(&raw, path.c_str(), GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": not a git repository: ", path));
  }
  return RepoPtr(raw);
}

// Puts an in-memory object store in front of the repository's own, so that
// objects written from now on (patched trees) never reach its disk. The
// store lives as long as the repository object.
absl::Status UseScratchStore(git_repository* repo) {
  git_odb* raw_odb = nullptr;
  if (git_repository_odb(&raw_odb, repo) != 0) {
    return absl::InternalError(absl::StrCat("git: object database: ", LastGitError()));
  }
  OdbPtr odb(raw_odb);
  git_odb_backend* mem = nullptr;
  if (git_mempack_new(&mem) != 0 || git_odb_add_backend(odb.get(), mem, 1000) != 0) {
    return absl::InternalError(absl::StrCat("git: in-memory object store: ", LastGitError()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CommitPtr> CommitOf(git_repository* repo, const std::string& rev) {
  git_object* raw = nullptr;
  if (git_revparse_single(&raw, repo, rev.c_str()) != 0) {
    return absl::NotFoundError(absl::StrCat("'", rev, "' names no commit: ", LastGitError()));
  }
  ObjectPtr obj(raw);
  git_object* peeled = nullptr;
  if (git_object_peel(&peeled, obj.get(), GIT_OBJECT_COMMIT) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("'", rev, "' is not a commit"));
  }
  return CommitPtr(reinterpret_cast<git_commit*>(peeled));
}

absl::StatusOr<TreePtr> TreeOf(git_commit* commit) {
  git_tree* raw = nullptr;
  if (git_commit_tree(&raw, commit) != 0) {
    return absl::InternalError(absl::StrCat("git: commit tree: ", LastGitError()));
  }
  return TreePtr(raw);
}

absl::StatusOr<DiffPtr> ParseDiff(const std::string& text) {
  const std::string diff = GitStyleDiff(text);  // plain `diff -u` output too
  git_diff* raw = nullptr;
  if (git_diff_from_buffer(&raw, diff.data(), diff.size()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("git cannot read the diff: ", LastGitError()));
  }
  return DiffPtr(raw);
}

std::vector<std::string> DiffPaths(git_diff* diff) {
  std::set<std::string> paths;
  for (size_t i = 0; i < git_diff_num_deltas(diff); ++i) {
    const git_diff_delta* d = git_diff_get_delta(diff, i);
    if (d->old_file.path != nullptr && d->status != GIT_DELTA_ADDED) paths.insert(d->old_file.path);
    if (d->new_file.path != nullptr && d->status != GIT_DELTA_DELETED) paths.insert(d->new_file.path);
  }
  return {paths.begin(), paths.end()};
}

// `tree` with `diff` applied. FAILED_PRECONDITION with git's reason (which
// names the file) when it does not apply.
// A repository and the tree of one of its commits (the tree needs the
// repository open).
struct TreeAt {
  RepoPtr repo;
  TreePtr tree;
};
absl::StatusOr<TreeAt> OpenTreeAt(const std::string& local, const std::string& base) {
  TreeAt t;
  ASSIGN_OR_RETURN(t.repo, OpenRepo(local, "repository"));
  ASSIGN_OR_RETURN(CommitPtr commit, CommitOf(t.repo.get(), base));
  ASSIGN_OR_RETURN(t.tree, TreeOf(commit.get()));
  return t;
}

absl::StatusOr<TreePtr> Apply(git_repository* repo, git_tree* tree, const std::string& diff) {
  ASSIGN_OR_RETURN(DiffPtr parsed, ParseDiff(diff));
  git_index* raw_index = nullptr;
  if (git_apply_to_tree(&raw_index, repo, tree, parsed.get(), nullptr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("does not apply: ", LastGitError()));
  }
  IndexPtr index(raw_index);
  git_oid oid;
  if (git_index_write_tree_to(&oid, index.get(), repo) != 0) {
    return absl::InternalError(absl::StrCat("git: writing the patched tree: ", LastGitError()));
  }
  git_tree* out = nullptr;
  if (git_tree_lookup(&out, repo, &oid) != 0) {
    return absl::InternalError(absl::StrCat("git: patched tree: ", LastGitError()));
  }
  return TreePtr(out);
}

}  // namespace

GitCommitter::GitCommitter(std::string mirror_root) : mirror_root_(std::move(mirror_root)) {
  git_libgit2_init();
}

absl::StatusOr<std::string> GitCommitter::LocalLocked(const std::string& url, bool fetch) const {
  if (!IsRemoteRepositoryUrl(url)) return url;
  if (mirror_root_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("this server keeps no mirrors: ", url));
  }
  // One bare mirror per URL: every branch and tag, fetched at each Init.
  const std::string dir = absl::StrCat(mirror_root_, "/", StableHash(url), ".git");
  git_repository* raw = nullptr;
  if (git_repository_open_bare(&raw, dir.c_str()) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(mirror_root_, ec);
    git_clone_options co;  // by libgit2's init: its INIT macro initializes only some fields
    git_clone_options_init(&co, GIT_CLONE_OPTIONS_VERSION);
    co.bare = 1;
    if (git_clone(&raw, url.c_str(), dir.c_str(), &co) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot clone ", url, ": ", LastGitError()));
    }
    git_repository_free(raw);
    return dir;
  }
  RepoPtr repo(raw);
  if (!fetch) return dir;
  git_remote* raw_remote = nullptr;
  if (git_remote_lookup(&raw_remote, repo.get(), "origin") != 0) {
    return absl::UnavailableError(absl::StrCat("mirror of ", url, " has no origin"));
  }
  GitPtr<git_remote, git_remote_free> origin(raw_remote);
  char heads[] = "+refs/heads/*:refs/heads/*";
  char tags[] = "+refs/tags/*:refs/tags/*";
  char* specs[] = {heads, tags};
  const git_strarray refspecs = {specs, 2};
  if (git_remote_fetch(origin.get(), &refspecs, nullptr, nullptr) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot fetch ", url, ": ", LastGitError()));
  }
  return dir;
}
GitCommitter::~GitCommitter() { git_libgit2_shutdown(); }

absl::StatusOr<std::string> GitCommitter::ResolveCommit(const std::string& repo_path,
                                                        const std::string& rev) const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(const std::string local, LocalLocked(repo_path, /*fetch=*/true));
  ASSIGN_OR_RETURN(RepoPtr repo, OpenRepo(local, "path"));
  ASSIGN_OR_RETURN(CommitPtr commit, CommitOf(repo.get(), rev));
  return OidHex(*git_commit_id(commit.get()));
}

absl::StatusOr<std::vector<std::string>> GitCommitter::CheckPatch(
    const std::string& repo_path, const std::string& base, const std::vector<std::string>& earlier,
    const std::string& diff) const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(const std::string local, LocalLocked(repo_path, /*fetch=*/false));
  ASSIGN_OR_RETURN(RepoPtr repo, OpenRepo(local, "repository"));
  RETURN_IF_ERROR(UseScratchStore(repo.get()));
  ASSIGN_OR_RETURN(CommitPtr commit, CommitOf(repo.get(), base));
  ASSIGN_OR_RETURN(TreePtr tree, TreeOf(commit.get()));
  for (const std::string& e : earlier) {
    ASSIGN_OR_RETURN(tree, Apply(repo.get(), tree.get(), e));
  }
  ASSIGN_OR_RETURN(DiffPtr parsed, ParseDiff(diff));
  std::vector<std::string> paths = DiffPaths(parsed.get());
  auto applied = Apply(repo.get(), tree.get(), diff);
  if (!applied.ok()) {
    return absl::Status(applied.status().code(),
                        absl::StrCat(applied.status().message(), " (base ", base.substr(0, 12), ")"));
  }
  return paths;
}

absl::StatusOr<std::string> GitCommitter::BlobAt(const std::string& repo_path,
                                                 const std::string& base,
                                                 const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(const std::string local, LocalLocked(repo_path, /*fetch=*/false));
  ASSIGN_OR_RETURN(TreeAt at, OpenTreeAt(local, base));
  git_tree_entry* entry = nullptr;
  if (git_tree_entry_bypath(&entry, at.tree.get(), path.c_str()) != 0) {
    return absl::NotFoundError(absl::StrCat("file not found in commit ", base.substr(0, 12), ": ", path));
  }
  const std::string id = OidHex(*git_tree_entry_id(entry));
  git_tree_entry_free(entry);
  return id;
}

absl::StatusOr<std::vector<std::string>> GitCommitter::ListFiles(const std::string& repo_path,
                                                               const std::string& base) const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(const std::string local, LocalLocked(repo_path, /*fetch=*/false));
  ASSIGN_OR_RETURN(TreeAt at, OpenTreeAt(local, base));
  std::vector<std::string> files;
  git_tree_walk(
      at.tree.get(), GIT_TREEWALK_PRE,
      [](const char* root, const git_tree_entry* e, void* payload) {
        if (git_tree_entry_type(e) == GIT_OBJECT_BLOB) {
          static_cast<std::vector<std::string>*>(payload)->push_back(std::string(root) +
                                                                      git_tree_entry_name(e));
        }
        return 0;
      },
      &files);
  return files;
}

absl::StatusOr<std::string> GitCommitter::ReadFile(const std::string& repo_path, const std::string& base,
                                                   const std::string& path, size_t max_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(const std::string local, LocalLocked(repo_path, /*fetch=*/false));
  ASSIGN_OR_RETURN(TreeAt at, OpenTreeAt(local, base));
  git_tree_entry* entry = nullptr;
  if (git_tree_entry_bypath(&entry, at.tree.get(), path.c_str()) != 0) {
    return absl::NotFoundError(absl::StrCat("file not found in commit ", base.substr(0, 12), ": ", path));
  }
  git_blob* blob = nullptr;
  const int rc = git_blob_lookup(&blob, at.repo.get(), git_tree_entry_id(entry));
  git_tree_entry_free(entry);
  if (rc != 0) return absl::NotFoundError(absl::StrCat(path, " is not a file in ", base.substr(0, 12)));
  const size_t size = static_cast<size_t>(git_blob_rawsize(blob));
  std::string text;
  if (size <= max_bytes) text.assign(static_cast<const char*>(git_blob_rawcontent(blob)), size);
  git_blob_free(blob);
  if (size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", size, " bytes, more than ", max_bytes));
  }
  return text;
}

absl::StatusOr<CommitResult> GitCommitter::Commit(const CommitRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(RepoPtr repo, OpenRepo(req.repo_path, "repo_path"));
  // A dry run writes nothing to the repository, objects included.
  if (req.dry_run) RETURN_IF_ERROR(UseScratchStore(repo.get()));
  const std::string ref_name = absl::StrCat("refs/heads/", req.branch);
  int valid = 0;
  if (git_reference_name_is_valid(&valid, ref_name.c_str()) != 0 || !valid) {
    return absl::InvalidArgumentError(
        absl::StrCat("branch: '", req.branch, "' is not a valid branch name"));
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
  ASSIGN_OR_RETURN(TreePtr head_tree, TreeOf(head.get()));
  CommitResult result;
  result.base_commit = OidHex(head_oid);
  const bool moved = !req.base_commit.empty() && req.base_commit != result.base_commit;

  // The patches, on HEAD's tree (the base's, unless HEAD moved).
  ASSIGN_OR_RETURN(TreePtr tree, TreeOf(head.get()));
  for (const auto& [name, diff] : req.patches) {
    auto next = Apply(repo.get(), tree.get(), diff);
    if (!next.ok()) {
      if (moved) {
        return absl::FailedPreconditionError(absl::StrCat(
            "repo_path: HEAD moved from ", req.base_commit.substr(0, 12), " (where the session ran) to ",
            result.base_commit.substr(0, 12), " and patch ", name,
            " no longer applies: ", next.status().message(),
            ". Run a new session on the new HEAD, or apply onto a branch at the old base."));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("patch ", name, ": ", next.status().message()));
    }
    tree = *std::move(next);
  }
  if (moved) {
    result.note = absl::StrCat("HEAD moved from ", req.base_commit.substr(0, 12),
                               " (where the session ran) to ", result.base_commit.substr(0, 12),
                               "; the patches applied cleanly onto it");
  }

  result.message = req.message;
  if (!result.note.empty()) absl::StrAppend(&result.message, "Note: ", result.note, "\n");

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
  if (git_tree_create_updated(&tree_oid, repo.get(), tree.get(), updates.size(), updates.data()) != 0) {
    return absl::InternalError(absl::StrCat("git: building tree: ", LastGitError()));
  }
  git_tree* raw_new_tree = nullptr;
  if (git_tree_lookup(&raw_new_tree, repo.get(), &tree_oid) != 0) {
    return absl::InternalError(absl::StrCat("git: tree lookup: ", LastGitError()));
  }
  TreePtr new_tree(raw_new_tree);
  git_diff* raw_changes = nullptr;
  if (git_diff_tree_to_tree(&raw_changes, repo.get(), head_tree.get(), new_tree.get(), nullptr) != 0) {
    return absl::InternalError(absl::StrCat("git: diff: ", LastGitError()));
  }
  DiffPtr changes(raw_changes);
  result.changed_paths = DiffPaths(changes.get());
  for (size_t i = 0; i < git_diff_num_deltas(changes.get()); ++i) {
    const git_diff_delta* d = git_diff_get_delta(changes.get(), i);
    if (d->status == GIT_DELTA_ADDED && d->new_file.path != nullptr) {
      result.change_kinds[d->new_file.path] = 'A';
    } else if (d->status == GIT_DELTA_DELETED && d->old_file.path != nullptr) {
      result.change_kinds[d->old_file.path] = 'D';
    } else if (d->new_file.path != nullptr) {
      result.change_kinds[d->new_file.path] = 'M';
    }
  }
  if (req.dry_run) return result;

  git_signature* raw_sig = nullptr;
  if (!req.author_name.empty() && req.author_time_unix_s > 0) {
    // Fixed: the same request makes the same commit, so a retry finds it.
    if (git_signature_new(&raw_sig, req.author_name.c_str(), req.author_email.c_str(),
                          static_cast<git_time_t>(req.author_time_unix_s), 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("author: ", LastGitError()));
    }
  } else if (git_signature_default(&raw_sig, repo.get()) != 0 &&
             git_signature_now(&raw_sig, "InfraRSI", "infrarsi@localhost") != 0) {
    return absl::InternalError(absl::StrCat("git: signature: ", LastGitError()));
  }
  SigPtr sig(raw_sig);
  const git_commit* parents[] = {head.get()};
  git_oid commit_oid;
  // No update_ref: the branch is created below, refusing to overwrite.
  if (git_commit_create(&commit_oid, repo.get(), nullptr, sig.get(), sig.get(), "UTF-8",
                        result.message.c_str(), new_tree.get(), 1, parents) != 0) {
    return absl::InternalError(absl::StrCat("git: commit: ", LastGitError()));
  }
  git_commit* raw_commit = nullptr;
  if (git_commit_lookup(&raw_commit, repo.get(), &commit_oid) != 0) {
    return absl::InternalError(absl::StrCat("git: commit lookup: ", LastGitError()));
  }
  CommitPtr commit(raw_commit);
  result.commit = OidHex(commit_oid);
  git_reference* existing = nullptr;
  if (git_branch_lookup(&existing, repo.get(), req.branch.c_str(), GIT_BRANCH_LOCAL) == 0) {
    RefPtr ref(existing);
    const git_oid* at = git_reference_target(ref.get());
    if (at != nullptr && git_oid_equal(at, &commit_oid)) {
      result.existed = true;  // made by an earlier try of this very request
      return result;
    }
    return absl::AlreadyExistsError(
        absl::StrCat("branch: '", req.branch, "' already exists in ", req.repo_path,
                     " at another commit; choose a new branch name"));
  }
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
