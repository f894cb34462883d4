// Bank: a search's seeds and QueryExperience read what the caller's team may
// read, newest first with a cap, in the spec's space.
#include "core/bank.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "storage/sqlite_storage.h"

namespace infrarsi {
namespace {

class BankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = storage::SqliteStorage::Create({.path = ":memory:"});
    ASSERT_TRUE(db.ok());
    db_ = *std::move(db);
    Bank::Options o;
    o.reader = db_.get();
    o.seed_rows = seed_rows_;
    auto b = Bank::Create(o);
    ASSERT_TRUE(b.ok());
    bank_ = *std::move(b);
    spec_.model = "gpt";
    spec_.global_batch = 8;
    spec_.seq_len = 1024;
    spec_.gpu = "H200";
    spec_.gpu_count = 1;
    spec_.knobs = {{"mbs", {"1", "2", "4"}}, {"attn", {"math", "sdpa"}}};
    spec_.baseline = {{"mbs", "1"}, {"attn", "math"}};
  }
  void Add(const std::string& session, const std::string& sig, const std::string& gpu,
           const Config& c, double t, const std::string& team = "", bool shared = false) {
    storage::BankRecord b;
    b.session_id = session;
    b.trial_id = ++next_trial_;
    b.workload_signature = sig;
    b.gpu_model = gpu;
    b.gpu_count = 1;
    b.config = EncodeConfigJson(c);
    for (const auto& [k, v] : c) b.knobs.emplace_back(k, v);
    b.status = "ok";
    b.step_time_s = t;
    b.team = team;
    b.shared = shared;
    b.purpose = "search";
    ASSERT_TRUE(db_->AddBankEntry(b).ok());
  }
  int32_t seed_rows_ = 2000;
  int64_t next_trial_ = 0;
  std::unique_ptr<storage::SqliteStorage> db_;
  std::unique_ptr<Bank> bank_;
  SessionSpec spec_;
};

TEST_F(BankTest, SeedsRankTheSameWorkloadAndGpuFirst) {
  const Config fast = {{"mbs", "4"}, {"attn", "sdpa"}};
  const Config other = {{"mbs", "2"}, {"attn", "sdpa"}};
  const Config far = {{"mbs", "2"}, {"attn", "math"}};
  Add("s-any", "llama/gb8/seq1024", "H200", far, 0.1);  // tier 3: another model
  Add("s-a100", "gpt/gb8/seq1024", "A100", other, 0.9);  // tier 1: another GPU
  Add("s-h200", "gpt/gb8/seq1024", "H200", fast, 0.5);   // tier 0
  Add("s-h200", "gpt/gb8/seq1024", "H200", spec_.baseline, 0.9);  // the baseline: not a seed
  Add("mine", "gpt/gb8/seq1024", "H200", far, 0.05);     // the session's own: never
  Add("s-bad", "gpt/gb8/seq1024", "H200", {{"mbs", "64"}, {"attn", "sdpa"}}, 0.01);  // off-space
  auto seeds = bank_->SeedsFor(spec_, "mine", "");
  ASSERT_TRUE(seeds.ok()) << seeds.status();
  ASSERT_EQ(seeds->warm_starts.size(), 3u);
  EXPECT_EQ(seeds->warm_starts[0], fast);
  EXPECT_EQ(seeds->warm_starts[1], other);
  EXPECT_EQ(seeds->warm_starts[2], far);
  // Related: the same workload (any GPU), in the space, not its own.
  EXPECT_EQ(seeds->related.size(), 3u);
}

TEST_F(BankTest, SeedsReadOnlyWhatTheTeamMayRead) {
  Add("red-private", "gpt/gb8/seq1024", "H200", {{"mbs", "4"}, {"attn", "sdpa"}}, 0.5, "red");
  Add("red-shared", "gpt/gb8/seq1024", "H200", {{"mbs", "2"}, {"attn", "sdpa"}}, 0.6, "red", true);
  auto blue = bank_->SeedsFor(spec_, "x", "blue");
  ASSERT_TRUE(blue.ok());
  ASSERT_EQ(blue->warm_starts.size(), 1u);
  EXPECT_EQ(blue->warm_starts[0].at("mbs"), "2");
  auto red = bank_->SeedsFor(spec_, "x", "red");
  EXPECT_EQ(red->warm_starts.size(), 2u);
}

TEST_F(BankTest, SeedsKeepTheNewestWhenHistoryPassesTheCap) {
  seed_rows_ = 10;
  SetUp();
  for (int i = 0; i < 50; ++i) {
    Add(absl::StrCat("old-", i), "gpt/gb8/seq1024", "H200", {{"mbs", "2"}, {"attn", "math"}}, 1.0);
  }
  Add("newest", "gpt/gb8/seq1024", "H200", {{"mbs", "4"}, {"attn", "sdpa"}}, 0.4);
  auto seeds = bank_->SeedsFor(spec_, "x", "");
  ASSERT_TRUE(seeds.ok());
  ASSERT_FALSE(seeds->warm_starts.empty());
  EXPECT_EQ(seeds->warm_starts[0].at("mbs"), "4");  // the newest was read
  EXPECT_LE(seeds->related.size(), 10u);           // and the cap held
  EXPECT_EQ(seeds->related.back().source, "newest");  // in the order they ran
}

TEST_F(BankTest, QueriesAreScopedToTheCallersTeam) {
  Add("red", "gpt/gb8/seq1024", "H200", {{"mbs", "4"}, {"attn", "sdpa"}}, 0.5, "red");
  Add("blue", "gpt/gb8/seq1024", "H200", {{"mbs", "2"}, {"attn", "sdpa"}}, 0.5, "blue");
  Principal blue;
  blue.role = Role::kReader;
  blue.team = "blue";
  auto r = bank_->Query(v1::QueryExperienceRequest(), blue);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->entries_size(), 1);
  EXPECT_EQ(r->entries(0).session_id(), "blue");
  Principal admin;
  admin.role = Role::kAdmin;
  EXPECT_EQ(bank_->Query(v1::QueryExperienceRequest(), admin)->entries_size(), 2);
  Principal agent;
  agent.role = Role::kAgent;
  EXPECT_TRUE(absl::IsPermissionDenied(bank_->Query(v1::QueryExperienceRequest(), agent).status()));
}

// `bank query --knob atn=sdpa` (a typo) returned an empty table silently:
// a knob no entry has is named as an error; a known knob with no matching
// value is an empty answer; another team's knob names are not revealed.
TEST_F(BankTest, AKnobNoEntryHasIsAnErrorNamingIt) {
  Add("red", "gpt/gb8/seq1024", "H200", {{"mbs", "4"}, {"attn", "sdpa"}}, 0.5, "red");
  Add("blue", "gpt/gb8/seq1024", "H200", {{"mbs", "2"}, {"zero", "1"}}, 0.5, "blue");
  Principal red;
  red.role = Role::kReader;
  red.team = "red";
  v1::QueryExperienceRequest typo;
  (*typo.mutable_knobs())["atn"] = "sdpa";
  auto r = bank_->Query(typo, red);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("no trial in the bank has a knob named 'atn'"),
            std::string::npos)
      << r.status();
  v1::QueryExperienceRequest no_match;
  (*no_match.mutable_knobs())["attn"] = "flash";
  r = bank_->Query(no_match, red);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->entries_size(), 0);
  v1::QueryExperienceRequest others;
  (*others.mutable_knobs())["zero"] = "1";
  EXPECT_TRUE(absl::IsInvalidArgument(bank_->Query(others, red).status()))
      << "blue's knob is not red's to know of";
  Principal admin;
  admin.role = Role::kAdmin;
  r = bank_->Query(others, admin);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->entries_size(), 1);
}

// Each knob pair is a subquery: a caller may not send thousands of them,
// nor filter strings of any length.
TEST_F(BankTest, FiltersAreBoundedNamingTheField) {
  const Principal open = Principal::Open();
  v1::QueryExperienceRequest many;
  for (int i = 0; i < 65; ++i) (*many.mutable_knobs())[absl::StrCat("k", i)] = "v";
  auto r = bank_->Query(many, open);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_EQ(r.status().message().rfind("knobs:", 0), 0u) << r.status();
  v1::QueryExperienceRequest sixty_four;
  for (int i = 0; i < 64; ++i) (*sixty_four.mutable_knobs())[absl::StrCat("k", i)] = "v";
  // Sixty-four pass the bound; none is a knob the (empty) bank knows.
  r = bank_->Query(sixty_four, open);
  EXPECT_EQ(r.status().message().rfind("knobs: no trial in the bank has a knob named", 0), 0u)
      << r.status();
  v1::QueryExperienceRequest long_value;
  (*long_value.mutable_knobs())["mbs"] = std::string(257, 'x');
  EXPECT_TRUE(absl::IsInvalidArgument(bank_->Query(long_value, open).status()));
  v1::QueryExperienceRequest long_gpu;
  long_gpu.set_gpu_model(std::string(257, 'x'));
  r = bank_->Query(long_gpu, open);
  EXPECT_EQ(r.status().message().rfind("gpu_model:", 0), 0u) << r.status();
  v1::QueryExperienceRequest long_workload;
  long_workload.set_workload_signature(std::string(257, 'x'));
  r = bank_->Query(long_workload, open);
  EXPECT_EQ(r.status().message().rfind("workload_signature:", 0), 0u) << r.status();
}

}  // namespace
}  // namespace infrarsi
