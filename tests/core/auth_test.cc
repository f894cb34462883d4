// Who may do what: roles, tokens, and the team boundary in the manager.
#include "core/auth.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "storage/sqlite_storage.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

Principal As(Role role, const std::string& team) {
  Principal p;
  p.token_id = "tok";
  p.role = role;
  p.team = team;
  return p;
}

TEST(AuthTest, RolesAllowWhatTheIssueSays) {
  struct Case {
    Role role;
    Action action;
    bool allowed;
  };
  const std::vector<Case> cases = {
      {Role::kAdmin, Action::kSubmit, true},     {Role::kAdmin, Action::kRead, true},
      {Role::kAdmin, Action::kAgent, true},      {Role::kSubmitter, Action::kSubmit, true},
      {Role::kSubmitter, Action::kRead, true},   {Role::kSubmitter, Action::kAgent, false},
      {Role::kReader, Action::kSubmit, false},   {Role::kReader, Action::kRead, true},
      {Role::kReader, Action::kAgent, false},    {Role::kAgent, Action::kSubmit, false},
      {Role::kAgent, Action::kRead, false},      {Role::kAgent, Action::kAgent, true},
  };
  for (const Case& c : cases) {
    const absl::Status st = Authorize(As(c.role, "t"), c.action);
    EXPECT_EQ(st.ok(), c.allowed) << RoleName(c.role) << " " << static_cast<int>(c.action);
    if (!st.ok()) {
      EXPECT_TRUE(absl::IsPermissionDenied(st));
      EXPECT_NE(st.message().find(RoleName(c.role)), std::string::npos) << st.message();
    }
  }
  EXPECT_TRUE(Authorize(Principal::Open(), Action::kAgent).ok());
  EXPECT_TRUE(As(Role::kSubmitter, "a").SeesTeam("a"));
  EXPECT_FALSE(As(Role::kSubmitter, "a").SeesTeam("b"));
  EXPECT_TRUE(As(Role::kAdmin, "").SeesTeam("b"));
  EXPECT_EQ(ParseRole("root").status().message(),
            "role: expected admin, submitter, reader or agent, got 'root'");
}

std::string Digest(const std::string& s) { return "d" + std::to_string(std::hash<std::string>{}(s)); }

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("auth");
    storage::SqliteStorage::Options so;
    so.path = dir_ + "/a.db";
    db_ = *storage::SqliteStorage::Create(so);
    Authenticator::Options o;
    o.storage = db_.get();
    o.hash = Digest;  // a stand-in for SHA-256
    auth_ = std::make_unique<Authenticator>(o);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Issue(const std::string& role, const std::string& team) {
    auto t = auth_->Issue(role, team, "n", std::string(64, 'f').replace(0, 6, role.substr(0, 6)), 1);
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(db_->AddToken(t->first).ok());
    EXPECT_EQ(t->first.hash, Digest(t->second));  // only the hash is stored
    return t->second;
  }
  std::string dir_;
  std::unique_ptr<storage::SqliteStorage> db_;
  std::unique_ptr<Authenticator> auth_;
};

TEST_F(AuthenticatorTest, OpenUntilTheFirstTokenThenEveryCallNeedsOne) {
  auto open = auth_->Authenticate("");
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(open->open);
  const std::string tok = Issue("submitter", "vision");
  auto missing = auth_->Authenticate("");
  EXPECT_TRUE(absl::IsUnauthenticated(missing.status())) << missing.status();
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->Authenticate("Basic abc").status()));
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->Authenticate("Bearer irt_nope").status()));
  auto who = auth_->Authenticate("Bearer " + tok);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_FALSE(who->open);
  EXPECT_EQ(who->role, Role::kSubmitter);
  EXPECT_EQ(who->team, "vision");
  ASSERT_TRUE(db_->RevokeToken(who->token_id, 2).ok());
  auto revoked = auth_->Authenticate("Bearer " + tok);
  EXPECT_EQ(revoked.status().message(), "invalid or revoked token");
}

TEST_F(AuthenticatorTest, IssueValidatesAndTheIdRevealsNothing) {
  EXPECT_EQ(auth_->Issue("root", "t", "", std::string(64, 'a'), 1).status().message(),
            "role: expected admin, submitter, reader or agent, got 'root'");
  EXPECT_EQ(auth_->Issue("reader", "", "", std::string(64, 'a'), 1).status().message(),
            "team: required for submitter and reader tokens");
  EXPECT_EQ(auth_->Issue("reader", "a b", "", std::string(64, 'a'), 1).status().message(),
            "team: use letters, digits, '-', '_' or '.'");
  auto t = auth_->Issue("agent", "", "", std::string(64, 'a'), 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->first.id.find("aaaa"), std::string::npos) << "the id shows the secret";
}

}  // namespace
}  // namespace infrarsi
