#include "client/agent/executors/work_tree.h"

#include <sys/stat.h>

#include <git2.h>
#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/patch_scope.h"
#include "core/spec.h"
#include "base/status_macros.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

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
using DiffPtr = GitPtr<git_diff, git_diff_free>;
using IndexPtr = GitPtr<git_index, git_index_free>;
using OdbPtr = GitPtr<git_odb, git_odb_free>;
using RemotePtr = GitPtr<git_remote, git_remote_free>;

// The agent's bare clone of `url`, fetched again when `base` is missing.
absl::StatusOr<RepoPtr> CachedClone(const fs::path& cache, const std::string& url,
                                    const git_oid& base) {
  git_repository* raw = nullptr;
  if (fs::exists(cache) && git_repository_open_bare(&raw, cache.c_str()) != 0) {
    std::error_code ec;
    fs::remove_all(cache, ec);  // a broken cache is rebuilt, not trusted
    raw = nullptr;
  }
  if (raw == nullptr) {
    std::error_code ec;
    fs::create_directories(cache.parent_path(), ec);
    // The agent's alone: a bare clone holds every file of the repository,
    // protected ones too, and on a Slurm agent it sits on a shared
    // filesystem other users of the cluster can reach.
    chmod(cache.parent_path().c_str(), 0700);
    git_clone_options co;  // by libgit2's init: its INIT macro initializes only some fields
    git_clone_options_init(&co, GIT_CLONE_OPTIONS_VERSION);
    co.bare = 1;
    if (git_clone(&raw, url.c_str(), cache.c_str(), &co) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot clone ", url, ": ", LastGitError()));
    }
  }
  RepoPtr repo(raw);
  if (git_odb* odb = nullptr; git_repository_odb(&odb, repo.get()) == 0) {
    const bool present = git_odb_exists(odb, &base) != 0;
    git_odb_free(odb);
    if (present) return repo;
  }
  git_remote* raw_remote = nullptr;
  if (git_remote_lookup(&raw_remote, repo.get(), "origin") != 0) {
    return absl::UnavailableError(absl::StrCat("cache of ", url, " has no origin: ", LastGitError()));
  }
  RemotePtr remote(raw_remote);
  if (git_remote_fetch(remote.get(), nullptr, nullptr, nullptr) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot fetch ", url, ": ", LastGitError()));
  }
  return repo;
}

}  // namespace

WorkTrees::WorkTrees(Options options) : options_(std::move(options)) { git_libgit2_init(); }
WorkTrees::~WorkTrees() { git_libgit2_shutdown(); }

absl::Status WorkTrees::Make(const v1::SourceSpec& source, const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  git_oid base;
  if (git_oid_fromstr(&base, source.base_commit().c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("source.base_commit: not a full SHA-1: '", source.base_commit(), "'"));
  }
  const fs::path cache =
      fs::path(options_.cache_root) / absl::StrCat(StableHash(source.repository()), ".git");
  ASSIGN_OR_RETURN(RepoPtr repo, CachedClone(cache, source.repository(), base));
  git_commit* raw_commit = nullptr;
  if (git_commit_lookup(&raw_commit, repo.get(), &base) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "base commit ", source.base_commit(), " is not in ", source.repository()));
  }
  CommitPtr commit(raw_commit);
  // Patched trees go to an in-memory store, not into the cache.
  {
    git_odb* raw_odb = nullptr;
    if (git_repository_odb(&raw_odb, repo.get()) != 0) {
      return absl::InternalError(absl::StrCat("git: object database: ", LastGitError()));
    }
    OdbPtr odb(raw_odb);
    git_odb_backend* mem = nullptr;
    if (git_mempack_new(&mem) != 0 || git_odb_add_backend(odb.get(), mem, 1000) != 0) {
      return absl::InternalError(absl::StrCat("git: in-memory object store: ", LastGitError()));
    }
  }
  git_tree* raw_tree = nullptr;
  if (git_commit_tree(&raw_tree, commit.get()) != 0) {
    return absl::InternalError(absl::StrCat("git: base tree: ", LastGitError()));
  }
  TreePtr tree(raw_tree);
  for (const v1::SourceSpec::Patch& p : source.patches()) {
    // Regular files only, whatever the server sent: no link or gitlink is
    // written into a trial's tree.
    auto files = ParsePatchedFiles(p.diff());
    if (!files.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("patch ", p.name(), ": ", files.status().message()));
    }
    if (absl::Status st = CheckPatchFileKinds(p.name(), *files); !st.ok()) {
      return absl::FailedPreconditionError(st.message());
    }
    const std::string text = GitStyleDiff(p.diff());  // plain `diff -u` output too
    git_diff* raw_diff = nullptr;
    if (git_diff_from_buffer(&raw_diff, text.data(), text.size()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("patch ", p.name(), ": git cannot read it: ", LastGitError()));
    }
    DiffPtr diff(raw_diff);
    git_index* raw_index = nullptr;
    if (git_apply_to_tree(&raw_index, repo.get(), tree.get(), diff.get(), nullptr) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("patch ", p.name(), " does not apply: ", LastGitError()));
    }
    IndexPtr index(raw_index);
    git_oid oid;
    git_tree* next = nullptr;
    if (git_index_write_tree_to(&oid, index.get(), repo.get()) != 0 ||
        git_tree_lookup(&next, repo.get(), &oid) != 0) {
      return absl::InternalError(absl::StrCat("git: patched tree: ", LastGitError()));
    }
    tree.reset(next);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("work tree ", dir, ": ", ec.message()));
  git_checkout_options co;
  git_checkout_options_init(&co, GIT_CHECKOUT_OPTIONS_VERSION);
  co.checkout_strategy = GIT_CHECKOUT_FORCE | GIT_CHECKOUT_DONT_UPDATE_INDEX;
  co.target_directory = dir.c_str();
  if (git_checkout_tree(repo.get(), reinterpret_cast<const git_object*>(tree.get()), &co) != 0) {
    return absl::InternalError(absl::StrCat("git: checkout into ", dir, ": ", LastGitError()));
  }
  return absl::OkStatus();
}

}  // namespace infrarsi::client
