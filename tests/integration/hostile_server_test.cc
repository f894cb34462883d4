// `infrarsi apply` against a hostile server: a fake SessionService whose
// apply plan tries what a compromised or malicious server would. Before,
// the CLI committed each of these on a new branch of the caller's clone: a
// symbolic link ssh -> ~/.ssh, a .gitmodules with an ext:: URL, a path with
// a NUL (truncated to another name), and a message with terminal escapes.
// Now the plan is held to the rules patches face at Init before anything
// is written, and the message carries no control characters.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <git2.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/cli/local_apply.h"
#include "client/rpc_client.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"
#include "tests/testing/git_repo.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

class HostileSessions : public v1::SessionService::Service {
 public:
  v1::ApplyResponse plan;
  grpc::Status Apply(grpc::ServerContext*, const v1::ApplyRequest*,
                     v1::ApplyResponse* out) override {
    *out = plan;
    return grpc::Status::OK;
  }
};

class HostileServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("hostile");
    repo_ = dir_ + "/clone";
    base_ = testing::MakeGitRepo(repo_, {{"train.py", "print('train')\n"}});
    ASSERT_FALSE(base_.empty());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_GT(port, 0);
    client::RpcClient::Options o;
    o.server = absl::StrCat("127.0.0.1:", port);
    client_ = *client::RpcClient::Create(o);
  }
  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }
  // An honest-looking plan on the clone's base commit.
  v1::ApplyResponse Plan() {
    v1::ApplyResponse p;
    p.set_base_commit(base_);
    p.set_message("infrarsi: promote launch setting for s (1.50x)\n");
    p.set_author_name("InfraRSI");
    p.set_author_email("infrarsi@localhost");
    p.set_author_time_unix_s(1700000000);
    auto* f = p.add_new_files();
    f->set_path("infrarsi/s.launch.yaml");
    f->set_content("setting: {}\n");
    return p;
  }
  // Branches of the clone: the apply must have added none.
  size_t Branches() {
    git_repository* r = nullptr;
    if (git_repository_open(&r, repo_.c_str()) != 0) return 0;
    git_branch_iterator* it = nullptr;
    git_branch_iterator_new(&it, r, GIT_BRANCH_LOCAL);
    git_reference* ref = nullptr;
    git_branch_t type;
    size_t n = 0;
    while (git_branch_next(&ref, &type, it) == 0) {
      ++n;
      git_reference_free(ref);
    }
    git_branch_iterator_free(it);
    git_repository_free(r);
    return n;
  }
  absl::StatusOr<client::LocalApply> ApplyWith(const v1::ApplyResponse& plan) {
    service_.plan = plan;
    return client::ApplyLocally(*client_, "ses-x", repo_, "infrarsi/tuned", false, false);
  }

  std::string dir_, repo_, base_;
  HostileSessions service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<client::RpcClient> client_;
};

TEST_F(HostileServerTest, APlanOutsideThePatchRulesIsRefusedBeforeAnythingIsWritten) {
  git_libgit2_init();
  const size_t before = Branches();
  struct Case {
    std::string name, expect;
    v1::ApplyResponse plan;
  };
  std::vector<Case> cases;
  {
    Case c{"symlink", "is a symbolic link", Plan()};
    auto* p = c.plan.add_patches();
    p->set_name("ssh");
    p->set_diff("diff --git a/ssh b/ssh\nnew file mode 120000\n--- /dev/null\n+++ b/ssh\n@@ -0,0 +1 @@\n"
                "+/root/.ssh\n\\ No newline at end of file\n");
    cases.push_back(c);
  }
  {
    Case c{"gitmodules", "is one of git's own files", Plan()};
    auto* p = c.plan.add_patches();
    p->set_name("modules");
    p->set_diff("diff --git a/.gitmodules b/.gitmodules\nnew file mode 100644\n--- /dev/null\n"
                "+++ b/.gitmodules\n@@ -0,0 +1,3 @@\n+[submodule \"x\"]\n+\tpath = x\n"
                "+\turl = ext::sh -c touch% /tmp/pwned\n");
    cases.push_back(c);
  }
  {
    Case c{"nul path", "control character (byte 0)", Plan()};
    c.plan.mutable_new_files(0)->set_path(std::string("infrarsi/x.yaml\0../../.bashrc", 29));
    cases.push_back(c);
  }
  {
    Case c{"new file outside infrarsi/", "is not a plain path below infrarsi/", Plan()};
    c.plan.mutable_new_files(0)->set_path(".git/hooks/post-commit");
    cases.push_back(c);
  }
  {
    Case c{"gitlink", "is a gitlink", Plan()};
    auto* p = c.plan.add_patches();
    p->set_name("vendor");
    p->set_diff("diff --git a/vendor b/vendor\nnew file mode 160000\n--- /dev/null\n+++ b/vendor\n"
                "@@ -0,0 +1 @@\n+Subproject commit 1234567890123456789012345678901234567890\n");
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = ApplyWith(c.plan);
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(absl::IsPermissionDenied(got.status())) << got.status();
    EXPECT_NE(got.status().message().find("nothing was written"), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(c.expect), std::string::npos) << got.status();
    EXPECT_EQ(Branches(), before) << "a branch was written";
  }
  // An honest plan still commits; its message's escapes are shown, not
  // kept: no ESC or OSC sequence reaches the commit.
  v1::ApplyResponse honest = Plan();
  honest.set_message("infrarsi: promote\n\x1b[2K\x1b[1A\x1b]0;owned\x07reviewed by security\n");
  auto made = ApplyWith(honest);
  ASSERT_TRUE(made.ok()) << made.status();
  git_repository* r = nullptr;
  ASSERT_EQ(git_repository_open(&r, repo_.c_str()), 0);
  git_oid oid;
  ASSERT_EQ(git_oid_fromstr(&oid, made->commit.c_str()), 0);
  git_commit* commit = nullptr;
  ASSERT_EQ(git_commit_lookup(&commit, r, &oid), 0);
  const std::string message = git_commit_message(commit);
  git_commit_free(commit);
  git_repository_free(r);
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_EQ(message.find('\x07'), std::string::npos) << message;
  EXPECT_NE(message.find("\\x1b[2K"), std::string::npos) << message;
}

}  // namespace
}  // namespace infrarsi
