// GitCommitter on real repositories made with libgit2.
#include "server/git_committer.h"

#include <git2.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/git_repo.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::server {
namespace {

namespace fs = std::filesystem;

std::string HeadOf(git_repository* repo, const char* ref) {
  git_oid oid;
  if (git_reference_name_to_id(&oid, repo, ref) != 0) return "";
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return buf;
}

class GitCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    git_libgit2_init();
    dir_ = testing::MakeTempDir("git");
    repo_path_ = dir_ + "/repo";
    ASSERT_EQ(git_repository_init(&repo_, repo_path_.c_str(), 0), 0);
    // One commit with train.py, made through the index like a user would.
    std::ofstream(repo_path_ + "/train.py") << "print('train')\n";
    git_index* index = nullptr;
    ASSERT_EQ(git_repository_index(&index, repo_), 0);
    ASSERT_EQ(git_index_add_bypath(index, "train.py"), 0);
    ASSERT_EQ(git_index_write(index), 0);
    git_oid tree_oid, commit_oid;
    ASSERT_EQ(git_index_write_tree(&tree_oid, index), 0);
    git_index_free(index);
    git_tree* tree = nullptr;
    ASSERT_EQ(git_tree_lookup(&tree, repo_, &tree_oid), 0);
    git_signature* sig = nullptr;
    ASSERT_EQ(git_signature_now(&sig, "Dev", "dev@example.com"), 0);
    ASSERT_EQ(git_commit_create(&commit_oid, repo_, "HEAD", sig, sig, "UTF-8", "init", tree, 0,
                                nullptr),
              0);
    git_signature_free(sig);
    git_tree_free(tree);
    base_ = HeadOf(repo_, "HEAD");
  }
  void TearDown() override {
    git_repository_free(repo_);
    git_libgit2_shutdown();
    fs::remove_all(dir_);
  }

  CommitRequest Request(const std::string& branch, bool dry_run = false) {
    CommitRequest r;
    r.repo_path = repo_path_;
    r.branch = branch;
    r.message = "infrarsi: promote\n\nSession: ses-1\n";
    r.files = {{"infrarsi/job.launch.yaml", "setting:\n  mbs: 8\n"}};
    r.dry_run = dry_run;
    r.author_name = "InfraRSI";
    r.author_email = "infrarsi@localhost";
    r.author_time_unix_s = 1700000000;
    return r;
  }

  // Commits `content` as `path` on top of HEAD, through the index.
  std::string CommitFile(const std::string& path, const std::string& content) {
    std::ofstream(repo_path_ + "/" + path) << content;
    git_index* index = nullptr;
    EXPECT_EQ(git_repository_index(&index, repo_), 0);
    EXPECT_EQ(git_index_add_bypath(index, path.c_str()), 0);
    EXPECT_EQ(git_index_write(index), 0);
    git_oid tree_oid, commit_oid, head_oid;
    EXPECT_EQ(git_index_write_tree(&tree_oid, index), 0);
    git_index_free(index);
    git_tree* tree = nullptr;
    EXPECT_EQ(git_tree_lookup(&tree, repo_, &tree_oid), 0);
    EXPECT_EQ(git_reference_name_to_id(&head_oid, repo_, "HEAD"), 0);
    git_commit* parent = nullptr;
    EXPECT_EQ(git_commit_lookup(&parent, repo_, &head_oid), 0);
    git_signature* sig = nullptr;
    EXPECT_EQ(git_signature_now(&sig, "Dev", "dev@example.com"), 0);
    const git_commit* parents[] = {parent};
    EXPECT_EQ(git_commit_create(&commit_oid, repo_, "HEAD", sig, sig, "UTF-8", "change", tree, 1,
                                parents),
              0);
    git_signature_free(sig);
    git_commit_free(parent);
    git_tree_free(tree);
    return HeadOf(repo_, "HEAD");
  }
  // Loose objects in the repository: what a check must not add to.
  size_t ObjectCount() const {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(repo_path_ + "/.git/objects")) {
      n += e.is_regular_file();
    }
    return n;
  }
  std::string BlobContent(const std::string& rev, const std::string& path) {
    return testing::FileAt(repo_, rev, path);
  }

  std::string dir_, repo_path_, base_;
  git_repository* repo_ = nullptr;
  GitCommitter committer_;
};

TEST_F(GitCommitterTest, CommitsOnANewBranchOnly) {
  auto res = committer_.Commit(Request("infrarsi/tuned"));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->base_commit, base_);
  EXPECT_EQ(HeadOf(repo_, "refs/heads/infrarsi/tuned"), res->commit);
  // The checked-out branch and the work tree are untouched.
  EXPECT_EQ(HeadOf(repo_, "HEAD"), base_);
  EXPECT_FALSE(fs::exists(repo_path_ + "/infrarsi"));
  git_status_list* status = nullptr;
  ASSERT_EQ(git_status_list_new(&status, repo_, nullptr), 0);
  EXPECT_EQ(git_status_list_entrycount(status), 0u);
  git_status_list_free(status);

  // The commit: parent is the base, tree is base + the launch file, message kept.
  git_oid oid;
  ASSERT_EQ(git_oid_fromstr(&oid, res->commit.c_str()), 0);
  git_commit* commit = nullptr;
  ASSERT_EQ(git_commit_lookup(&commit, repo_, &oid), 0);
  EXPECT_EQ(git_commit_parentcount(commit), 1u);
  char parent[GIT_OID_HEXSZ + 1];
  git_oid_tostr(parent, sizeof(parent), git_commit_parent_id(commit, 0));
  EXPECT_EQ(parent, base_);
  EXPECT_STREQ(git_commit_message(commit), "infrarsi: promote\n\nSession: ses-1\n");
  git_tree* tree = nullptr;
  ASSERT_EQ(git_commit_tree(&tree, commit), 0);
  git_tree_entry* entry = nullptr;
  ASSERT_EQ(git_tree_entry_bypath(&entry, tree, "infrarsi/job.launch.yaml"), 0);
  git_blob* blob = nullptr;
  ASSERT_EQ(git_blob_lookup(&blob, repo_, git_tree_entry_id(entry)), 0);
  EXPECT_EQ(std::string(static_cast<const char*>(git_blob_rawcontent(blob)),
                        static_cast<size_t>(git_blob_rawsize(blob))),
            "setting:\n  mbs: 8\n");
  git_tree_entry* kept = nullptr;
  EXPECT_EQ(git_tree_entry_bypath(&kept, tree, "train.py"), 0);
  git_tree_entry_free(kept);
  git_blob_free(blob);
  git_tree_entry_free(entry);
  git_tree_free(tree);
  git_commit_free(commit);
}

// The same request makes the same commit: a retry (after a crash between
// the commit and recording it) finds it on the branch and makes no second.
TEST_F(GitCommitterTest, ARetryFindsItsCommitAndAnotherCommitIsRefused) {
  auto first = committer_.Commit(Request("tuned"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->existed);
  auto again = committer_.Commit(Request("tuned"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->existed);
  EXPECT_EQ(again->commit, first->commit);
  CommitRequest other = Request("tuned");
  other.message += "something else\n";
  auto clash = committer_.Commit(other);
  ASSERT_FALSE(clash.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(clash.status()));
  EXPECT_EQ(clash.status().message().substr(0, 7), "branch:");
}

TEST_F(GitCommitterTest, DryRunMakesNoBranch) {
  auto res = committer_.Commit(Request("dry", /*dry_run=*/true));
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->commit.empty());
  EXPECT_EQ(res->base_commit, base_);
  EXPECT_EQ(HeadOf(repo_, "refs/heads/dry"), "");
}

TEST_F(GitCommitterTest, NotARepositoryIsRefused) {
  CommitRequest r = Request("x");
  r.repo_path = dir_;  // a folder, but not a repository
  auto res = committer_.Commit(r);
  ASSERT_FALSE(res.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(res.status()));
  EXPECT_EQ(res.status().message().substr(0, 10), "repo_path:");
}

TEST_F(GitCommitterTest, BadBranchNameIsRefused) {
  auto res = committer_.Commit(Request("bad..name"));
  ASSERT_FALSE(res.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(res.status()));
}

const char kPatch[] =
    "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-print('train')\n+print('train faster')\n";
const char kOtherPatch[] =
    "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-print('train')\n+print('train slower')\n";

TEST_F(GitCommitterTest, PatchesAreCheckedAgainstTheBaseWithoutWritingAnything) {
  auto head = committer_.ResolveCommit(repo_path_, "HEAD");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, base_);
  EXPECT_EQ(committer_.ResolveCommit(repo_path_, "no-such-branch").status().code(),
            absl::StatusCode::kNotFound);
  const size_t objects = ObjectCount();
  auto paths = committer_.CheckPatch(repo_path_, base_, {}, kPatch);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(*paths, std::vector<std::string>{"train.py"});
  // Two edits of the same line do not apply one after the other.
  auto both = committer_.CheckPatch(repo_path_, base_, {kPatch}, kOtherPatch);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(both.status())) << both.status();
  EXPECT_NE(both.status().message().find("does not apply"), std::string::npos) << both.status();
  auto stale = committer_.CheckPatch(
      repo_path_, base_, {}, "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-print('x')\n+y\n");
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_TRUE(absl::IsInvalidArgument(committer_.CheckPatch(repo_path_, base_, {}, "not a diff").status()));
  EXPECT_EQ(ObjectCount(), objects) << "checking patches wrote objects into the repository";

  auto blob = committer_.BlobAt(repo_path_, base_, "train.py");
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(blob->size(), 40u);
  EXPECT_TRUE(absl::IsNotFound(committer_.BlobAt(repo_path_, base_, "nope.py").status()));
}

TEST_F(GitCommitterTest, PatchesAreCommittedAndReappliedOntoAMovedHead) {
  CommitRequest r = Request("with-patch");
  r.base_commit = base_;
  r.patches = {{"faster", kPatch}};
  auto res = committer_.Commit(r);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(res->note.empty());
  EXPECT_EQ(BlobContent("with-patch", "train.py"), "print('train faster')\n");
  const std::vector<std::string> changed = {"infrarsi/job.launch.yaml", "train.py"};
  EXPECT_EQ(res->changed_paths, changed);
  EXPECT_EQ(BlobContent("HEAD", "train.py"), "print('train')\n");  // HEAD untouched

  // HEAD moves on without touching the patched lines: re-applied, said so.
  const std::string moved = CommitFile("README.md", "docs\n");
  r.branch = "onto-moved";
  auto again = committer_.Commit(r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->base_commit, moved);
  EXPECT_NE(again->note.find("HEAD moved from " + base_.substr(0, 12)), std::string::npos) << again->note;
  EXPECT_NE(again->message.find("Note: HEAD moved"), std::string::npos) << again->message;
  EXPECT_EQ(BlobContent("onto-moved", "train.py"), "print('train faster')\n");
  EXPECT_EQ(BlobContent("onto-moved", "README.md"), "docs\n");

  // HEAD changes the patched line: refused, naming the patch; no branch.
  CommitFile("train.py", "print('rewritten')\n");
  r.branch = "refused";
  auto refused = committer_.Commit(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status()));
  EXPECT_NE(refused.status().message().find("patch faster no longer applies"), std::string::npos)
      << refused.status();
  EXPECT_EQ(HeadOf(repo_, "refs/heads/refused"), "");
}

TEST_F(GitCommitterTest, DryRunWithPatchesWritesNoObjects) {
  const size_t objects = ObjectCount();
  CommitRequest r = Request("dry", /*dry_run=*/true);
  r.patches = {{"faster", kPatch}};
  auto res = committer_.Commit(r);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(res->commit.empty());
  EXPECT_EQ(res->changed_paths.size(), 2u);
  EXPECT_EQ(ObjectCount(), objects);
}

}  // namespace
}  // namespace infrarsi::server
