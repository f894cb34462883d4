// One conformance suite for every Storage implementation: each backend is a
// parameter. Today: SQLite on a file (WAL) and SQLite in memory.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "base/status_macros.h"
#include "storage/sqlite_storage.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::storage {
namespace {

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Storage>(const std::string& dir)> make;
};

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

class StorageConformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("storage");
    db_ = GetParam().make(dir_);
    ASSERT_NE(db_, nullptr);
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }
  SessionRecord Session(const std::string& id) {
    SessionRecord s;
    s.id = id;
    s.name = "n-" + id;
    s.spec_yaml = "name: x";
    s.spec_dir = "/tmp";
    s.stage = "initialized";
    s.contract_hash = "abc";
    s.workload_signature = "gpt/gb16/seq2048";
    s.gpu_model = "H200";
    s.created_ms = 1000;
    return s;
  }
  TrialRecord Trial(const std::string& session, const std::string& status) {
    TrialRecord t;
    t.session_id = session;
    t.purpose = "search";
    t.config = R"({"a":"1"})";
    t.status = status;
    t.created_ms = 5;
    return t;
  }
  std::string dir_;
  std::unique_ptr<Storage> db_;
};

TEST_P(StorageConformance, SessionRoundTrip) {
  SessionRecord s = Session("s1");
  s.baseline_step_time_s = 1.25;
  s.best_trial_id = 7;
  ASSERT_TRUE(db_->InsertSession(s).ok());
  auto got = db_->GetSession("s1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->name, "n-s1");
  EXPECT_DOUBLE_EQ(got->baseline_step_time_s, 1.25);
  EXPECT_EQ(got->best_trial_id, 7);

  got->stage = "doctoring";
  got->error = "none";
  ASSERT_TRUE(db_->UpdateSession(*got).ok());
  EXPECT_EQ(db_->GetSession("s1")->stage, "doctoring");

  // A duplicate id is refused; unknown ids are NOT_FOUND.
  EXPECT_FALSE(db_->InsertSession(s).ok());
  EXPECT_TRUE(absl::IsNotFound(db_->GetSession("nope").status()));
  EXPECT_TRUE(absl::IsNotFound(db_->UpdateSession(Session("nope"))));
}

TEST_P(StorageConformance, SessionTeamAndSharing) {
  SessionRecord s = Session("s1");
  s.team = "vision";
  s.share_bank = true;
  ASSERT_TRUE(db_->InsertSession(s).ok());
  EXPECT_EQ(db_->GetSession("s1")->team, "vision");
  EXPECT_TRUE(db_->GetSession("s1")->share_bank);
  s.share_bank = false;
  s.landscape = "{\"meta\": {}}\n";
  ASSERT_TRUE(db_->UpdateSession(s).ok());
  EXPECT_FALSE(db_->ListSessions()->at(0).share_bank);
  EXPECT_EQ(db_->GetSession("s1")->landscape, s.landscape);
}

TEST_P(StorageConformance, RepositoriesByName) {
  RepositoryRecord r{"tiny-gpt", "https://git.example/tiny.git", "vision", 5};
  ASSERT_TRUE(db_->AddRepository(r).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(db_->AddRepository(r)));
  auto got = db_->GetRepository("tiny-gpt");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->url, r.url);
  EXPECT_EQ(got->team, "vision");
  ASSERT_TRUE(db_->AddRepository({"audio-lm", "/srv/audio.git", "audio", 6}).ok());
  auto all = db_->ListRepositories();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "audio-lm");  // by name
  ASSERT_TRUE(db_->RemoveRepository("audio-lm").ok());
  EXPECT_TRUE(absl::IsNotFound(db_->RemoveRepository("audio-lm")));
  EXPECT_TRUE(absl::IsNotFound(db_->GetRepository("audio-lm").status()));
}

TEST_P(StorageConformance, TokensByHashListAndRevoke) {
  TokenRecord t;
  t.id = "tok-1";
  t.hash = std::string(64, 'a');
  t.name = "ci";
  t.role = "submitter";
  t.team = "vision";
  t.created_ms = 5;
  ASSERT_TRUE(db_->AddToken(t).ok());
  TokenRecord dup = t;
  dup.id = "tok-2";  // same hash
  EXPECT_TRUE(absl::IsAlreadyExists(db_->AddToken(dup)));
  auto got = db_->GetTokenByHash(std::string(64, 'a'));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->role, "submitter");
  EXPECT_EQ(got->team, "vision");
  EXPECT_EQ(got->revoked_ms, 0);
  EXPECT_TRUE(absl::IsNotFound(db_->GetTokenByHash(std::string(64, 'b')).status()));
  ASSERT_TRUE(db_->RevokeToken("tok-1", 9).ok());
  EXPECT_EQ(db_->GetTokenByHash(t.hash)->revoked_ms, 9);
  EXPECT_TRUE(db_->RevokeToken("tok-1", 10).ok());  // again: no change, no error
  EXPECT_EQ(db_->ListTokens()->at(0).revoked_ms, 9);
  EXPECT_TRUE(absl::IsNotFound(db_->RevokeToken("tok-9", 1)));
}

TEST_P(StorageConformance, ListSessionsOldestFirst) {
  SessionRecord a = Session("a"), b = Session("b");
  a.created_ms = 20;
  b.created_ms = 10;
  ASSERT_TRUE(db_->InsertSession(a).ok());
  ASSERT_TRUE(db_->InsertSession(b).ok());
  auto all = db_->ListSessions();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "b");
  EXPECT_EQ((*all)[1].id, "a");
}

TEST_P(StorageConformance, TrialsByIdAndStatus) {
  ASSERT_TRUE(db_->InsertSession(Session("s")).ok());
  auto id1 = db_->InsertTrial(Trial("s", "queued"));
  auto id2 = db_->InsertTrial(Trial("s", "ok"));
  auto id3 = db_->InsertTrial(Trial("s", "queued"));
  ASSERT_TRUE(id1.ok() && id2.ok() && id3.ok());
  EXPECT_LT(*id1, *id2);
  EXPECT_LT(*id2, *id3);

  auto queued = db_->ListTrialsByStatus("queued", 10);
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 2u);
  EXPECT_EQ((*queued)[0].id, *id1);
  EXPECT_EQ(db_->ListTrialsByStatus("queued", 1)->size(), 1u);

  TrialRecord t = *db_->GetTrial(*id1);
  t.status = "leased";
  t.lease_token = "tok";
  t.attempts = 2;
  t.leased_ms = 1234;
  t.observed_window_s = 0.75;
  t.observed_steps = 3;
  t.clock_slack_s = 0.001;
  t.wall_resolution_s = 0.25;
  ASSERT_TRUE(db_->UpdateTrial(t).ok());
  auto back = db_->GetTrial(*id1);
  EXPECT_EQ(back->status, "leased");
  EXPECT_EQ(back->lease_token, "tok");
  EXPECT_EQ(back->attempts, 2);
  EXPECT_EQ(back->leased_ms, 1234);
  EXPECT_DOUBLE_EQ(back->observed_window_s, 0.75);
  EXPECT_EQ(back->observed_steps, 3);
  EXPECT_DOUBLE_EQ(back->clock_slack_s, 0.001);
  EXPECT_DOUBLE_EQ(back->wall_resolution_s, 0.25);
  t.lease_token_id = "tok-agent";
  t.refused_by = "agt-1,agt-2";
  t.slurm = R"({"job_id":"42","state":"RUNNING"})";
  t.lost_s = 12.5;
  t.isolation = "sandbox: own PID, mount and IPC namespaces; uid 62001";
  ASSERT_TRUE(db_->UpdateTrial(t).ok());
  back = db_->GetTrial(*id1);
  EXPECT_EQ(back->lease_token_id, "tok-agent");
  EXPECT_EQ(back->refused_by, "agt-1,agt-2");
  EXPECT_EQ(back->slurm, R"({"job_id":"42","state":"RUNNING"})");
  EXPECT_DOUBLE_EQ(back->lost_s, 12.5);
  EXPECT_EQ(back->isolation, "sandbox: own PID, mount and IPC namespaces; uid 62001");
  EXPECT_EQ(db_->ListTrials("s")->size(), 3u);
  EXPECT_TRUE(absl::IsNotFound(db_->GetTrial(999).status()));
}

// What the search's reader of a session's trials relies on: each write of
// a trial gives it a rev above all its session's, and ListTrialsChangedSince
// reads exactly the trials written after a rev (by id), one session's only.
TEST_P(StorageConformance, TrialRevsRiseWithEveryWriteOfTheSession) {
  ASSERT_TRUE(db_->InsertSession(Session("s")).ok());
  ASSERT_TRUE(db_->InsertSession(Session("other")).ok());
  TrialRecord forged = Trial("s", "queued");
  forged.rev = 1000;  // what a caller passes is not what is stored
  const int64_t a = *db_->InsertTrial(forged);
  const int64_t b = *db_->InsertTrial(Trial("s", "queued"));
  const int64_t elsewhere = *db_->InsertTrial(Trial("other", "queued"));
  const int64_t rev_a = db_->GetTrial(a)->rev, rev_b = db_->GetTrial(b)->rev;
  EXPECT_GT(rev_a, 0);
  EXPECT_LT(rev_a, 1000);
  EXPECT_GT(rev_b, rev_a);

  auto all = db_->ListTrialsChangedSince("s", 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, a);
  EXPECT_EQ((*all)[0].rev, rev_a);
  EXPECT_EQ((*all)[1].id, b);
  EXPECT_TRUE(db_->ListTrialsChangedSince("s", rev_b)->empty());

  // Rewriting the older trial moves it past the newer one; the other
  // session's writes are not this session's changes.
  TrialRecord t = *db_->GetTrial(a);
  t.status = "ok";
  ASSERT_TRUE(db_->UpdateTrial(t).ok());
  TrialRecord o = *db_->GetTrial(elsewhere);
  o.status = "ok";
  ASSERT_TRUE(db_->UpdateTrial(o).ok());
  auto changed = db_->ListTrialsChangedSince("s", rev_b);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_EQ(changed->size(), 1u);
  EXPECT_EQ((*changed)[0].id, a);
  EXPECT_EQ((*changed)[0].status, "ok");
  EXPECT_GT((*changed)[0].rev, rev_b);
  EXPECT_EQ(db_->ListTrials("s")->at(0).rev, (*changed)[0].rev);
  // An unchanged write is a write: the reader sees it again.
  ASSERT_TRUE(db_->UpdateTrial(*db_->GetTrial(b)).ok());
  auto again = db_->ListTrialsChangedSince("s", (*changed)[0].rev);
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].id, b);
  EXPECT_TRUE(db_->ListTrialsChangedSince("none", 0)->empty());
}

TEST_P(StorageConformance, StepsReplaceByStep) {
  ASSERT_TRUE(db_->InsertSession(Session("s")).ok());
  const int64_t id = *db_->InsertTrial(Trial("s", "running"));
  StepRecord s0{id, 0, 10.0, 4096, 0.5, 3.0, true, "{}"};
  StepRecord s1{id, 1, 9.0, 4096, 0.4, 3.0, false, R"({"fwd_bwd_s":0.3})"};
  ASSERT_TRUE(db_->PutSteps({s0, s1}).ok());
  s1.loss = 8.5;  // a resent step replaces, not duplicates
  ASSERT_TRUE(db_->PutSteps({s1}).ok());
  auto steps = db_->ListSteps(id);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_DOUBLE_EQ((*steps)[1].loss, 8.5);
  EXPECT_TRUE((*steps)[0].warmup);
  EXPECT_EQ((*steps)[1].phases, R"({"fwd_bwd_s":0.3})");
  // A diverged run's loss is kept as it was, not lost or zeroed.
  StepRecord diverged{id, 2, std::nan(""), 4096, 0.4, 3.0, false, "{}"};
  StepRecord blown{id, 3, -INFINITY, 4096, 0.4, 3.0, false, "{}"};
  ASSERT_TRUE(db_->PutSteps({diverged, blown}).ok());
  steps = db_->ListSteps(id);
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_TRUE(std::isnan((*steps)[2].loss));
  EXPECT_EQ((*steps)[3].loss, -INFINITY);
  ASSERT_TRUE(db_->DeleteSteps(id).ok());
  EXPECT_TRUE(db_->ListSteps(id)->empty());
}

// A report is checked against the steps it may resend and the last one,
// not the whole trial.
TEST_P(StorageConformance, StepTailFromAStep) {
  ASSERT_TRUE(db_->InsertSession(Session("s")).ok());
  const int64_t id = *db_->InsertTrial(Trial("s", "running"));
  auto none = db_->ListStepTail(id, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->count, 0);
  EXPECT_TRUE(none->steps.empty());
  std::vector<StepRecord> steps;
  for (int64_t k = 0; k < 10; ++k) steps.push_back({id, k, 5.0, 4096, 0.5, 3.0, k == 0, "{}"});
  ASSERT_TRUE(db_->PutSteps(steps).ok());
  auto from7 = db_->ListStepTail(id, 7);
  ASSERT_TRUE(from7.ok());
  EXPECT_EQ(from7->count, 10);
  ASSERT_EQ(from7->steps.size(), 3u);
  EXPECT_EQ(from7->steps.front().step, 7);
  EXPECT_EQ(from7->steps.back().step, 9);
  // Past the last step: the last one still comes, to order what follows.
  auto after = db_->ListStepTail(id, 12);
  ASSERT_EQ(after->steps.size(), 1u);
  EXPECT_EQ(after->steps[0].step, 9);
  EXPECT_EQ(after->count, 10);
  // From the first: everything, as ListSteps gives it.
  EXPECT_EQ(db_->ListStepTail(id, 0)->steps.size(), db_->ListSteps(id)->size());
}

TEST_P(StorageConformance, AgentsUpsert) {
  AgentRecord a;
  a.id = "agt-1";
  a.host = "host";
  a.gpu_model = "H200";
  a.gpu_count = 8;
  a.memory_per_gpu_gib = 139.8;
  a.executors = "replay,process";
  a.registered_ms = 1;
  a.last_heartbeat_ms = 2;
  a.token_id = "tok-9";
  a.team = "vision";
  a.serves = R"(["vision"])";
  a.commands = R"(["python3 train.py"])";
  ASSERT_TRUE(db_->PutAgent(a).ok());
  a.last_heartbeat_ms = 99;
  ASSERT_TRUE(db_->PutAgent(a).ok());
  EXPECT_EQ(db_->GetAgent("agt-1")->last_heartbeat_ms, 99);
  EXPECT_EQ(db_->GetAgent("agt-1")->token_id, "tok-9");
  EXPECT_EQ(db_->GetAgent("agt-1")->team, "vision");
  EXPECT_EQ(db_->GetAgent("agt-1")->serves, a.serves);
  EXPECT_EQ(db_->GetAgent("agt-1")->commands, a.commands);
  EXPECT_EQ(db_->ListAgents()->size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(db_->GetAgent("x").status()));
  EXPECT_EQ(db_->GetAgent("agt-1")->state, "active");
  a.state = "quarantined";
  a.state_reason = "2 trials failed here that succeeded elsewhere";
  ASSERT_TRUE(db_->PutAgent(a).ok());
  EXPECT_EQ(db_->GetAgent("agt-1")->state, "quarantined");
  EXPECT_EQ(db_->GetAgent("agt-1")->state_reason, a.state_reason);
}

TEST_P(StorageConformance, TrialsAreCountedPerAgent) {
  storage::SessionRecord s;
  s.id = "ses-1";
  s.stage = "running";
  ASSERT_TRUE(db_->InsertSession(s).ok());
  for (const char* status : {"ok", "ok", "failed", "queued"}) {
    storage::TrialRecord t;
    t.session_id = "ses-1";
    t.status = status;
    t.agent = std::string(status) == "queued" ? "" : "agt-1";
    t.executor = "process";
    ASSERT_TRUE(db_->InsertTrial(t).ok());
  }
  auto counts = db_->CountAgentTrials("agt-1");
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::map<std::string, int64_t>{{"failed", 1}, {"ok", 2}}));
  EXPECT_TRUE(db_->CountAgentTrials("agt-2")->empty());
  using Key = std::pair<std::string, std::string>;
  EXPECT_EQ(*db_->CountTrialsByStatus(),
            (std::map<Key, int64_t>{{{"failed", "process"}, 1}, {{"ok", "process"}, 2},
                                    {{"queued", "process"}, 1}}));
  EXPECT_EQ(*db_->CountSessionsByStage(), (std::map<std::string, int64_t>{{"running", 1}}));
}

TEST_P(StorageConformance, BankFiltersAndPages) {
  auto add = [&](int64_t trial, const std::string& gpu,
                 std::vector<std::pair<std::string, std::string>> knobs,
                 const std::string& status) {
    BankRecord b;
    b.session_id = "s";
    b.trial_id = trial;
    b.workload_signature = trial < 4 ? "w1" : "w2";
    b.gpu_model = gpu;
    b.gpu_count = 1;
    b.config = "{}";
    b.knobs = std::move(knobs);
    b.status = status;
    b.purpose = trial == 1 ? "doctor" : "search";
    b.team = trial == 3 ? "red" : "blue";
    b.shared = trial == 2;
    return db_->AddBankEntry(b);
  };
  ASSERT_TRUE(add(1, "H200", {{"mb", "1"}, {"attn", "math"}}, "ok").ok());
  ASSERT_TRUE(add(2, "H200", {{"mb", "16"}, {"attn", "sdpa"}}, "oom").ok());
  ASSERT_TRUE(add(3, "A100", {{"mb", "16"}, {"attn", "math"}}, "ok").ok());
  ASSERT_TRUE(add(4, "h200", {{"mb", "1"}, {"attn", "sdpa"}}, "ok").ok());
  // One entry per trial: the bank never credits a trial twice, and a
  // refused entry leaves none of its knob rows behind.
  EXPECT_FALSE(add(4, "h200", {{"mb", "99"}}, "ok").ok());
  BankFilter f;
  f.knobs = {{"mb", "99"}};
  EXPECT_EQ(db_->QueryBank(f)->size(), 0u);
  EXPECT_EQ(*db_->CountBank(), 4);

  f = BankFilter();
  f.gpu_model = "H200";  // case-insensitive
  EXPECT_EQ(db_->QueryBank(f)->size(), 3u);
  f.workload_signature = "w1";
  EXPECT_EQ(db_->QueryBank(f)->size(), 2u);
  f = BankFilter();
  f.knobs = {{"mb", "1"}};  // must not match "16"
  auto rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].trial_id, 4);  // newest first
  EXPECT_EQ((*rows)[1].trial_id, 1);
  f.knobs = {{"mb", "1"}, {"attn", "sdpa"}};  // every pair must match
  rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].trial_id, 4);
  f = BankFilter();
  f.status = "oom";
  EXPECT_EQ(db_->QueryBank(f)->size(), 1u);
  f = BankFilter();
  f.purpose = "doctor";
  rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].trial_id, 1);
  EXPECT_EQ((*rows)[0].purpose, "doctor");
  // Who may read: the team's own entries and shared ones.
  f = BankFilter();
  f.visible_to_team = "blue";
  rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 3u);
  for (const auto& b : *rows) EXPECT_NE(b.trial_id, 3);
  f.visible_to_team = "red";
  rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 2u);  // its own (3) and the shared one (2)
  EXPECT_EQ((*rows)[0].trial_id, 3);
  EXPECT_EQ((*rows)[1].trial_id, 2);
  EXPECT_TRUE((*rows)[1].shared);
  // Pages newest first, and oldest first when asked.
  f = BankFilter();
  f.limit = 2;
  auto page1 = *db_->QueryBank(f);
  ASSERT_EQ(page1.size(), 2u);
  EXPECT_EQ(page1[0].trial_id, 4);
  f.cursor = page1.back().id;
  auto page2 = *db_->QueryBank(f);
  ASSERT_EQ(page2.size(), 2u);
  EXPECT_EQ(page2[0].trial_id, 2);
  EXPECT_EQ(page2[1].trial_id, 1);
  f = BankFilter();
  f.oldest_first = true;
  f.limit = 3;
  page1 = *db_->QueryBank(f);
  ASSERT_EQ(page1.size(), 3u);
  EXPECT_EQ(page1[0].trial_id, 1);
  f.cursor = page1.back().id;
  page2 = *db_->QueryBank(f);
  ASSERT_EQ(page2.size(), 1u);
  EXPECT_EQ(page2[0].trial_id, 4);
  // A verdict revised later changes the entry's status, and only its.
  ASSERT_TRUE(db_->SetBankStatus(4, "violation").ok());
  f = BankFilter();
  f.status = "violation";
  rows = db_->QueryBank(f);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].trial_id, 4);
  EXPECT_TRUE(absl::IsNotFound(db_->SetBankStatus(99, "ok")));
}

// Issue 17: the bank ranks its fastest ok entries first, pages included
// (ties by id, so a page boundary inside a tie loses nothing).
TEST_P(StorageConformance, BankFastestFirstPages) {
  const std::vector<std::pair<double, std::string>> entries = {
      {0.5, "ok"}, {0.3, "ok"}, {0.3, "ok"}, {0.9, "ok"}, {0.0, "oom"}};
  for (size_t i = 0; i < entries.size(); ++i) {
    BankRecord b;
    b.session_id = "s";
    b.trial_id = static_cast<int64_t>(i) + 1;
    // Not a literal assignment: GCC 12 at -O3 reports a false
    // maybe-uninitialized read of the short string (a Release build failed).
    b.config.assign("{}", 2);
    b.step_time_s = entries[i].first;
    b.status = entries[i].second;
    ASSERT_TRUE(db_->AddBankEntry(b).ok());
  }
  BankFilter f;
  f.fastest = true;
  f.status = "ok";
  f.limit = 2;
  auto page1 = db_->QueryBank(f);
  ASSERT_TRUE(page1.ok()) << page1.status();
  ASSERT_EQ(page1->size(), 2u);
  EXPECT_EQ((*page1)[0].trial_id, 2);
  EXPECT_EQ((*page1)[1].trial_id, 3);
  f.cursor = page1->back().id;
  auto page2 = db_->QueryBank(f);
  ASSERT_EQ(page2->size(), 2u);
  EXPECT_EQ((*page2)[0].trial_id, 1);
  EXPECT_EQ((*page2)[1].trial_id, 4);
  f.cursor = page2->back().id;
  EXPECT_TRUE(db_->QueryBank(f)->empty());
}

TEST_P(StorageConformance, SessionPagesNewestFirstByTeamAndStage) {
  for (int i = 0; i < 5; ++i) {
    SessionRecord s = Session(absl::StrCat("s", i));
    s.team = i % 2 ? "red" : "blue";
    s.stage = i == 3 ? "running" : "searched";
    ASSERT_TRUE(db_->InsertSession(s).ok());
  }
  SessionQuery q;
  q.limit = 2;
  auto page = *db_->ListSessionsPage(q);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "s4");
  EXPECT_EQ(page[1].id, "s3");
  q.before_seq = page[1].seq;
  page = *db_->ListSessionsPage(q);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "s2");
  q = SessionQuery();
  q.any_team = false;
  q.team = "red";
  page = *db_->ListSessionsPage(q);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, "s3");
  EXPECT_EQ(page[1].id, "s1");
  q = SessionQuery();
  q.stages = {"running", "doctoring"};
  page = *db_->ListSessionsPage(q);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, "s3");
  EXPECT_EQ(page[0].team, "red");  // the whole record
}

TEST_P(StorageConformance, PruneStepsOfOldFinishedSessionsOnly) {
  SessionRecord old_done = Session("old");
  old_done.stage = "searched";
  old_done.updated_ms = 1000;
  SessionRecord new_done = Session("new");
  new_done.stage = "searched";
  new_done.updated_ms = 9000;
  SessionRecord old_active = Session("active");
  old_active.stage = "running";
  old_active.updated_ms = 1000;
  for (const auto& s : {old_done, new_done, old_active}) ASSERT_TRUE(db_->InsertSession(s).ok());
  std::map<std::string, int64_t> trial;
  for (const char* sid : {"old", "new", "active"}) {
    trial[sid] = *db_->InsertTrial(Trial(sid, "ok"));
    std::vector<StepRecord> steps;
    for (int i = 0; i < 5; ++i) {
      StepRecord r;
      r.trial_id = trial[sid];
      r.step = i;
      r.phases = "{}";
      steps.push_back(r);
    }
    ASSERT_TRUE(db_->PutSteps(steps).ok());
  }
  // Short writes: at most `limit` rows each.
  EXPECT_EQ(*db_->PruneSteps({"searched", "failed"}, 5000, 3), 3);
  EXPECT_EQ(*db_->PruneSteps({"searched", "failed"}, 5000, 3), 2);
  EXPECT_EQ(*db_->PruneSteps({"searched", "failed"}, 5000, 3), 0);
  EXPECT_EQ(db_->ListSteps(trial["old"])->size(), 0u);
  EXPECT_EQ(db_->ListSteps(trial["new"])->size(), 5u);     // finished recently
  EXPECT_EQ(db_->ListSteps(trial["active"])->size(), 5u);  // still running
  EXPECT_TRUE(db_->GetTrial(trial["old"]).ok());           // the summary stays
}

// What a trial printed, kept byte for byte (NULs and invalid UTF-8 too),
// replaced per stream, and pruned with the steps.
TEST_P(StorageConformance, TrialLogsKeepBytesAndGoWithTheSteps) {
  SessionRecord done = Session("logs");
  done.stage = "searched";
  done.updated_ms = 1000;
  ASSERT_TRUE(db_->InsertSession(done).ok());
  const int64_t id = *db_->InsertTrial(Trial("logs", "failed"));
  TrialLogRecord out;
  out.trial_id = id;
  out.stream = "stdout";
  out.content = std::string("line 1\n\0\xff\xfe tail\n", 18);
  out.dropped_bytes = 12345;
  ASSERT_TRUE(db_->PutTrialLog(out).ok());
  TrialLogRecord err = out;
  err.stream = "stderr";
  err.content = "Traceback ...\n";
  err.dropped_bytes = 0;
  ASSERT_TRUE(db_->PutTrialLog(err).ok());
  auto got = db_->GetTrialLog(id, "stdout");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->content, out.content);
  EXPECT_EQ(got->dropped_bytes, 12345);
  out.content = "again\n";
  ASSERT_TRUE(db_->PutTrialLog(out).ok());
  EXPECT_EQ(db_->GetTrialLog(id, "stdout")->content, "again\n");
  EXPECT_EQ(db_->GetTrialLog(id, "stderr")->content, "Traceback ...\n");
  EXPECT_TRUE(absl::IsNotFound(db_->GetTrialLog(id + 1, "stdout").status()));
  EXPECT_EQ(*db_->PruneSteps({"searched"}, 5000, 100), 2);
  EXPECT_TRUE(absl::IsNotFound(db_->GetTrialLog(id, "stderr").status()));
}

TEST_P(StorageConformance, TransactionRollsBackOnError) {
  ASSERT_TRUE(db_->InsertSession(Session("s")).ok());
  absl::Status st = db_->Transaction([&]() -> absl::Status {
    auto id = db_->InsertTrial(Trial("s", "queued"));
    if (!id.ok()) return id.status();
    return absl::AbortedError("changed my mind");
  });
  EXPECT_TRUE(absl::IsAborted(st));
  EXPECT_TRUE(db_->ListTrials("s")->empty());

  ASSERT_TRUE(db_->Transaction([&]() -> absl::Status {
                   return db_->InsertTrial(Trial("s", "queued")).status();
                 }).ok());
  EXPECT_EQ(db_->ListTrials("s")->size(), 1u);
  // Nested transactions are a programming error, reported, not deadlocked.
  st = db_->Transaction([&] { return db_->Transaction([] { return absl::OkStatus(); }); });
  EXPECT_FALSE(st.ok());
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StorageConformance,
    ::testing::Values(
        Backend{"SqliteFile",
                [](const std::string& dir) -> std::unique_ptr<Storage> {
                  SqliteStorage::Options o;
                  o.path = dir + "/test.db";
                  auto s = SqliteStorage::Create(o);
                  return s.ok() ? std::move(*s) : nullptr;
                }},
        Backend{"SqliteMemory",
                [](const std::string&) -> std::unique_ptr<Storage> {
                  SqliteStorage::Options o;
                  o.path = ":memory:";
                  auto s = SqliteStorage::Create(o);
                  return s.ok() ? std::move(*s) : nullptr;
                }}),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

// ---- SQLite specifics: WAL and migrations.

class SqliteSpecific : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("sqlite"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A database at `path` as a build of schema `version` left it, with
  // `rows` written by that build (raw SQL: its columns only).
  void MakeOldDatabase(const std::string& path, int version, const std::string& rows) {
    SqliteStorage::Options o;
    o.path = path;
    o.target_version = version;
    ASSERT_TRUE(SqliteStorage::Create(o).ok());
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(raw, rows.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
    sqlite3_close(raw);
  }
  // The database at `path` opened by this build (migrated to the newest).
  std::unique_ptr<SqliteStorage> OpenMigrated(const std::string& path) {
    SqliteStorage::Options o;
    o.path = path;
    auto s = SqliteStorage::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // A schema-`version` database holding session s1 and `trial_rows` (an
  // INSERT INTO trials), opened by this build into `*s`; s1's trials as
  // read after the migration (empty on any failure, which it records).
  std::vector<TrialRecord> MigratedTrials(int version, const std::string& trial_rows,
                                          std::unique_ptr<SqliteStorage>* s) {
    const std::string path = dir_ + "/v" + std::to_string(version) + ".db";
    MakeOldDatabase(path, version, std::string(kRunningSession) + trial_rows);
    if (HasFatalFailure()) return {};
    *s = OpenMigrated(path);
    if (*s == nullptr) return {};
    auto trials = (*s)->ListTrialsChangedSince("s1", 0);
    EXPECT_TRUE(trials.ok()) << trials.status();
    return trials.ok() ? *std::move(trials) : std::vector<TrialRecord>{};
  }
  // Session s1, running, in the columns every schema has.
  static constexpr char kRunningSession[] =
      "INSERT INTO sessions (id, name, spec_yaml, spec_dir, stage, contract_hash, "
      "workload_signature, gpu_model, created_ms, updated_ms) VALUES "
      "('s1', 'n', '', '', 'running', '', 'w', 'H200', 1, 1);";
  std::string dir_;
};

TEST_F(SqliteSpecific, FileDatabaseUsesWal) {
  SqliteStorage::Options o;
  o.path = dir_ + "/wal.db";
  auto s = SqliteStorage::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*(*s)->JournalMode(), "wal");
  EXPECT_EQ(*(*s)->SchemaVersion(), SqliteStorage::LatestSchemaVersion());
}

TEST_F(SqliteSpecific, OldSchemaMigratesForwardKeepingRows) {
  const std::string path = dir_ + "/old.db";
  {
    SqliteStorage::Options o;
    o.path = path;
    o.target_version = 1;  // as an older build left it: no bank table
    auto s = SqliteStorage::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*(*s)->SchemaVersion(), 1);
    EXPECT_FALSE((*s)->QueryBank(BankFilter()).ok());  // v1 has no bank
  }
  {
    // A row as the v1 build wrote it (its columns only).
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "INSERT INTO sessions (id, name, spec_yaml, spec_dir, stage, "
                           "contract_hash, workload_signature, gpu_model, created_ms, updated_ms) "
                           "VALUES ('kept', 'n', '', '', 'initialized', '', '', '', 1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  SqliteStorage::Options o;
  o.path = path;
  auto s = SqliteStorage::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*(*s)->SchemaVersion(), SqliteStorage::LatestSchemaVersion());
  auto kept = (*s)->GetSession("kept");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->name, "n");
  EXPECT_EQ(kept->doctor_report, "");  // v3 columns arrive with their defaults
  EXPECT_EQ(kept->team, "");           // v4 too
  EXPECT_FALSE(kept->share_bank);
  EXPECT_TRUE((*s)->QueryBank(BankFilter()).ok());
  EXPECT_TRUE((*s)->ListTokens().ok());
}

// v16 -> v17: trials written before revs existed take their ids as revs,
// and writes after the upgrade rise above them.
TEST_F(SqliteSpecific, TrialRevMigrationOrdersOldTrialsByTheirIds) {
  std::unique_ptr<SqliteStorage> s;
  const std::vector<TrialRecord> old = MigratedTrials(
      16,
      "INSERT INTO trials (session_id, purpose, config, status, created_ms) VALUES "
      "('s1', 'search', '{}', 'ok', 1), ('s1', 'search', '{}', 'queued', 2);",
      &s);
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[0].rev, old[0].id);
  EXPECT_EQ(old[1].rev, old[1].id);
  TrialRecord t = old[0];
  t.status = "oom";
  ASSERT_TRUE(s->UpdateTrial(t).ok());
  auto changed = s->ListTrialsChangedSince("s1", old[1].rev);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_EQ(changed->size(), 1u);
  EXPECT_EQ((*changed)[0].status, "oom");
}

// v17 -> v18: trials from before the whole run's resolution was kept read
// as seen at once (what the verification assumed of them then).
TEST_F(SqliteSpecific, WallResolutionMigrationLeavesOldTrialsAtZero) {
  std::unique_ptr<SqliteStorage> s;
  const std::vector<TrialRecord> old = MigratedTrials(
      17,
      "INSERT INTO trials (session_id, purpose, config, status, created_ms, cost_s, rev) "
      "VALUES ('s1', 'verify', '{}', 'ok', 1, 12.5, 1);",
      &s);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_DOUBLE_EQ(old[0].cost_s, 12.5);
  EXPECT_EQ(old[0].wall_resolution_s, 0);
  TrialRecord t = old[0];
  t.wall_resolution_s = 0.4;
  ASSERT_TRUE(s->UpdateTrial(t).ok());
  EXPECT_DOUBLE_EQ(s->GetTrial(t.id)->wall_resolution_s, 0.4);
}

// v6 -> v7: bank entries learn who may read them, their trial's purpose and
// their knobs from the rows already there.
TEST_F(SqliteSpecific, BankMigrationBackfillsTeamsPurposesAndKnobs) {
  const std::string path = dir_ + "/v6.db";
  MakeOldDatabase(path, 6,
                  "INSERT INTO sessions (id, name, spec_yaml, spec_dir, stage, contract_hash, "
                  "workload_signature, gpu_model, created_ms, updated_ms, team, share_bank) VALUES "
                  "('s1', 'n', '', '', 'searched', '', 'w', 'H200', 1, 1, 'red', 1);"
                  "INSERT INTO trials (session_id, purpose, config, status, created_ms) VALUES "
                  "('s1', 'verify', '{\"mb\":\"2\",\"tp\":\"1\"}', 'ok', 1);"
                  "INSERT INTO bank (session_id, trial_id, workload_signature, gpu_model, "
                  "gpu_count, config, status, step_time_s, peak_mem_gib, cost_s, created_ms) "
                  "VALUES ('s1', 1, 'w', 'H200', 1, '{\"mb\":\"2\",\"tp\":\"1\"}', 'ok', "
                  "1, 1, 1, 1);");
  if (HasFatalFailure()) return;
  std::unique_ptr<SqliteStorage> s = OpenMigrated(path);
  ASSERT_NE(s, nullptr);
  BankFilter f;
  f.knobs = {{"mb", "2"}, {"tp", "1"}};
  f.visible_to_team = "blue";  // shared by red
  f.purpose = "verify";
  auto rows = s->QueryBank(f);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].team, "red");
  EXPECT_TRUE((*rows)[0].shared);
  EXPECT_EQ((*rows)[0].purpose, "verify");
  f.knobs = {{"mb", "1"}};
  EXPECT_EQ(s->QueryBank(f)->size(), 0u);
}

// Issue 17: `infrarsi-server backup --to FILE`: a consistent copy taken
// while another connection (a live server) holds a write transaction, which
// neither waits for the other nor lands in the copy; never over a file.
TEST_F(SqliteSpecific, BackupCopiesTheLastCommitWhileTheServerWrites) {
  SqliteStorage::Options o;
  o.path = dir_ + "/live.db";
  auto live = SqliteStorage::Create(o);
  ASSERT_TRUE(live.ok()) << live.status();
  storage::SessionRecord rec;
  rec.id = "ses-committed";
  rec.stage = "searched";
  ASSERT_TRUE((*live)->InsertSession(rec).ok());
  auto tool = SqliteStorage::Create(o);  // the backup command's own connection
  ASSERT_TRUE(tool.ok()) << tool.status();
  const std::string copy = dir_ + "/copy.db";
  absl::Status st = (*live)->Transaction([&]() -> absl::Status {
    storage::SessionRecord open = rec;
    open.id = "ses-uncommitted";
    RETURN_IF_ERROR((*live)->InsertSession(open));
    return (*tool)->BackupTo(copy);  // while the writer is inside its transaction
  });
  ASSERT_TRUE(st.ok()) << st;
  o.path = copy;
  auto restored = SqliteStorage::Create(o);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_TRUE((*restored)->GetSession("ses-committed").ok());
  EXPECT_TRUE(absl::IsNotFound((*restored)->GetSession("ses-uncommitted").status()));
  EXPECT_FALSE(std::filesystem::exists(copy + ".tmp"));
  EXPECT_TRUE(absl::IsAlreadyExists((*tool)->BackupTo(copy)));
}

// A second connection reads the last commit while the writer is inside a
// transaction: a bank reader never waits for the writer.
TEST_F(SqliteSpecific, ReaderReadsWhileTheWriterHoldsATransaction) {
  SqliteStorage::Options o;
  o.path = dir_ + "/rw.db";
  auto w = SqliteStorage::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  SessionRecord rec;
  rec.id = "before";
  rec.stage = "initialized";
  ASSERT_TRUE((*w)->InsertSession(rec).ok());
  auto r = (*w)->OpenReader();
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status st = (*w)->Transaction([&]() -> absl::Status {
    rec.id = "inside";
    RETURN_IF_ERROR((*w)->InsertSession(rec));
    // Same thread, other connection: a lock would fail it (busy), not hang.
    auto seen = (*r)->ListSessions();
    if (!seen.ok()) return seen.status();
    if (seen->size() != 1) return absl::InternalError("reader saw an uncommitted row");
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ((*r)->ListSessions()->size(), 2u);
  // A reader writes nothing.
  rec.id = "by-reader";
  EXPECT_FALSE((*r)->InsertSession(rec).ok());
  // An in-memory database has no second connection.
  o.path = ":memory:";
  auto mem = SqliteStorage::Create(o);
  ASSERT_TRUE(mem.ok());
  EXPECT_TRUE(absl::IsUnimplemented((*mem)->OpenReader().status()));
}

// The "disk" fills (a page quota): writes fail with a clear error, nothing
// is half-written, the file stays intact, and writing resumes once space
// returns.
TEST_F(SqliteSpecific, FullDiskFailsCleanlyAndRecovers) {
  const std::string path = dir_ + "/full.db";
  std::string pages;
  {
    SqliteStorage::Options o;
    o.path = path;
    ASSERT_TRUE(SqliteStorage::Create(o).ok());
  }
  SqliteStorage::Options o;
  o.path = path;
  o.max_page_count = 45;  // a little room above the empty schema (v17 added an index)
  auto s = SqliteStorage::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  SessionRecord rec;
  rec.name = "n";
  rec.stage = "initialized";
  rec.spec_yaml = std::string(20000, 'y');
  int written = 0;
  absl::Status last;
  for (int i = 0; i < 100 && last.ok(); ++i) {
    rec.id = "s" + std::to_string(i);
    // Two rows per transaction: both or neither.
    last = (*s)->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR((*s)->InsertSession(rec));
      SessionRecord twin = rec;
      twin.id += "-twin";
      return (*s)->InsertSession(twin);
    });
    if (last.ok()) ++written;
  }
  ASSERT_FALSE(last.ok()) << "the quota never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(last)) << last;
  EXPECT_NE(last.message().find("disk full"), std::string::npos) << last;
  ASSERT_GT(written, 0);
  auto all = (*s)->ListSessions();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), static_cast<size_t>(2 * written)) << "a failed transaction left rows";
  s->reset();
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check;", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  // Space returns: the same database takes writes again.
  o.max_page_count = 0;
  auto again = SqliteStorage::Create(o);
  ASSERT_TRUE(again.ok()) << again.status();
  rec.id = "after";
  EXPECT_TRUE((*again)->InsertSession(rec).ok());
  EXPECT_EQ((*again)->ListSessions()->size(), static_cast<size_t>(2 * written + 1));
}

TEST_F(SqliteSpecific, ReadOnlyDatabaseRefusesWritesAndKeepsReading) {
  const std::string path = dir_ + "/ro.db";
  SessionRecord rec;
  rec.id = "kept";
  rec.name = "n";
  rec.stage = "initialized";
  {
    SqliteStorage::Options o;
    o.path = path;
    ASSERT_TRUE((*SqliteStorage::Create(o))->InsertSession(rec).ok());
  }
  SqliteStorage::Options o;
  o.path = path;
  o.read_only = true;
  auto s = SqliteStorage::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->GetSession("kept").ok());
  rec.id = "new";
  const absl::Status st = (*s)->InsertSession(rec);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("readonly"), std::string::npos) << st;
  EXPECT_TRUE(absl::IsNotFound((*s)->GetSession("new").status()));
}

TEST_F(SqliteSpecific, NewerSchemaIsRefused) {
  const std::string path = dir_ + "/newer.db";
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version=999;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  SqliteStorage::Options o;
  o.path = path;
  auto s = SqliteStorage::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(s.status()));
  EXPECT_NE(s.status().message().find("newer"), std::string::npos);
}

// Issue 32 item 3: a backup under steady writes finished only once the
// writes stopped (copied in batches, every commit by the server restarted
// it). The copy must finish while another connection keeps committing.
TEST_F(SqliteSpecific, BackupFinishesWhileAnotherConnectionKeepsWriting) {
  SqliteStorage::Options o;
  o.path = dir_ + "/busy.db";
  auto live = SqliteStorage::Create(o);
  ASSERT_TRUE(live.ok()) << live.status();
  // ~12 MB: many batches of the old copy.
  for (int i = 1; i <= 12; ++i) {
    TrialLogRecord log;
    log.trial_id = i;
    log.stream = "stdout";
    log.content = std::string(1 << 20, static_cast<char>('a' + i));
    ASSERT_TRUE((*live)->PutTrialLog(log).ok());
  }
  std::atomic<bool> done{false};
  std::atomic<int> writes_after{0};
  std::atomic<bool> capped{false};
  // The writer: commits as fast as it can until the backup is done, or for
  // at most 60 s (the old copy finished only then).
  std::thread writer([&] {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t n = 1;; ++n) {
      if (done.load()) {
        if (writes_after.fetch_add(1) >= 3) return;  // still writing after the copy
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
        capped = true;
        return;
      }
      SessionRecord rec;
      rec.id = absl::StrCat("w-", n);
      rec.stage = "initialized";
      EXPECT_TRUE((*live)->InsertSession(rec).ok());
    }
  });
  auto tool = SqliteStorage::Create(o);  // the backup command's own connection
  ASSERT_TRUE(tool.ok()) << tool.status();
  const absl::Status st = (*tool)->BackupTo(dir_ + "/copy.db");
  done = true;
  writer.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(capped.load()) << "the backup finished only once the writes stopped";
  o.path = dir_ + "/copy.db";
  auto copy = SqliteStorage::Create(o);
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto log = (*copy)->GetTrialLog(12, "stdout");
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->content.size(), 1u << 20);
}

// Items 4 and the migrate step: an older release's database is refused
// unless migrating is asked for; opening it as it is writes nothing (a
// backup of it is the old schema, which an old server opens); migrating
// keeps a copy of the old file first.
TEST_F(SqliteSpecific, AnOlderSchemaIsMigratedOnlyWhenAskedAndBackedUpFirst) {
  const std::string path = dir_ + "/v6.db";
  {
    SqliteStorage::Options o;
    o.path = path;
    o.target_version = 6;
    ASSERT_TRUE(SqliteStorage::Create(o).ok());
  }
  SqliteStorage::Options o;
  o.path = path;
  o.upgrade = SqliteStorage::Options::Upgrade::kRefuse;
  auto refused = SqliteStorage::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status()));
  EXPECT_NE(refused.status().message().find("schema version 6"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("migrate"), std::string::npos) << refused.status();
  EXPECT_EQ(*SqliteStorage::FileSchemaVersion(path), 6);
  o.upgrade = SqliteStorage::Options::Upgrade::kAsIs;
  {
    auto as_is = SqliteStorage::Create(o);
    ASSERT_TRUE(as_is.ok()) << as_is.status();
    EXPECT_EQ(*(*as_is)->SchemaVersion(), 6);
    ASSERT_TRUE((*as_is)->BackupTo(dir_ + "/pre-upgrade.db").ok());
    EXPECT_FALSE((*as_is)->InsertSession(SessionRecord()).ok()) << "as is: nothing written";
  }
  EXPECT_EQ(*SqliteStorage::FileSchemaVersion(path), 6);
  EXPECT_EQ(*SqliteStorage::FileSchemaVersion(dir_ + "/pre-upgrade.db"), 6);
  o.upgrade = SqliteStorage::Options::Upgrade::kMigrate;
  o.backup_before_migration = true;
  auto migrated = SqliteStorage::Create(o);
  ASSERT_TRUE(migrated.ok()) << migrated.status();
  EXPECT_EQ(*(*migrated)->SchemaVersion(), SqliteStorage::LatestSchemaVersion());
  EXPECT_EQ((*migrated)->migration_backup(), path + ".schema-v6.bak");
  EXPECT_EQ(*SqliteStorage::FileSchemaVersion(path + ".schema-v6.bak"), 6);
  // A new, empty file is created at the newest version whatever the rule.
  SqliteStorage::Options fresh;
  fresh.path = dir_ + "/new.db";
  fresh.upgrade = SqliteStorage::Options::Upgrade::kRefuse;
  ASSERT_TRUE(SqliteStorage::Create(fresh).ok());
  EXPECT_EQ(*SqliteStorage::FileSchemaVersion(fresh.path), SqliteStorage::LatestSchemaVersion());
  EXPECT_TRUE(absl::IsNotFound(SqliteStorage::FileSchemaVersion(dir_ + "/none.db").status()));
}

// Item 8: a damaged file is refused at open with what is damaged; a row
// whose text is garbled is DATA_LOSS naming its table, row and column (it
// reached clients as "No message returned for unary request").
TEST_F(SqliteSpecific, DamageIsRefusedAtOpenAndGarbledRowsAreNamed) {
  const std::string path = dir_ + "/d.db";
  {
    SqliteStorage::Options o;
    o.path = path;
    auto s = SqliteStorage::Create(o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 400; ++i) {
      SessionRecord rec;
      rec.id = absl::StrCat("ses-", i);
      rec.stage = "searched";
      rec.spec_yaml = std::string(300, 'y');
      ASSERT_TRUE((*s)->InsertSession(rec).ok());
    }
    BankRecord b;
    b.session_id = "ses-1";
    b.trial_id = 77;
    b.config = "{}";
    b.status = "ok";
    ASSERT_TRUE((*s)->AddBankEntry(b).ok());
    ASSERT_EQ(*(*s)->CheckIntegrity(true), "");
  }
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "UPDATE bank SET config = CAST(X'7B22FF2D' AS TEXT) WHERE trial_id = 77;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  SqliteStorage::Options o;
  o.path = path;
  {
    auto s = SqliteStorage::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    auto rows = (*s)->QueryBank(BankFilter());
    ASSERT_FALSE(rows.ok());
    EXPECT_TRUE(absl::IsDataLoss(rows.status())) << rows.status();
    EXPECT_NE(rows.status().message().find("column config of table bank"), std::string::npos)
        << rows.status();
    EXPECT_NE(rows.status().message().find("id="), std::string::npos) << rows.status();
  }
  // Pages of the sessions' table overwritten in the middle of the file.
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 16u * 4096u);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(8 * 4096));
    const std::string junk(3 * 4096, '\xA5');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  o.check_integrity = true;
  auto damaged = SqliteStorage::Create(o);
  ASSERT_FALSE(damaged.ok());
  EXPECT_TRUE(absl::IsDataLoss(damaged.status())) << damaged.status();
  EXPECT_NE(damaged.status().message().find("is damaged"), std::string::npos) << damaged.status();
  // A file that is not a database at all.
  std::ofstream(dir_ + "/junk.db") << std::string(8192, 'j');
  o.path = dir_ + "/junk.db";
  o.check_integrity = false;
  auto junk = SqliteStorage::Create(o);
  ASSERT_FALSE(junk.ok());
  EXPECT_TRUE(absl::IsDataLoss(junk.status())) << junk.status();
}

TEST_F(SqliteSpecific, UnopenablePathNamesTheField) {
  SqliteStorage::Options o;
  o.path = dir_ + "/no/such/dir/x.db";
  auto s = SqliteStorage::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("db:"), std::string::npos);
}

}  // namespace
}  // namespace infrarsi::storage
