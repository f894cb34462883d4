// Issue 32: the machinery around the durable core, as an operator meets it,
// with real processes: upgrades that are a step of their own, offline
// commands that migrate nothing, damaged files refused, agents that die,
// a server killed under a watching `run`, and the CLI's conventions.
#include <sqlite3.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "core/stage.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "storage/sqlite_storage.h"
#include "tests/integration/end_to_end_fixture.h"

namespace infrarsi {
namespace {

// A command's exit code, stdout and stderr.
struct Ran {
  int code = -1;
  std::string out, err;
};

class OperationsTest : public EndToEndTest {
 protected:
  using Env = std::vector<std::pair<std::string, std::string>>;
  // argv run through env(1) with `env` set (no shell).
  static std::vector<std::string> WithEnv(std::vector<std::string> argv, const Env& env) {
    if (env.empty()) return argv;
    std::vector<std::string> with = {"/usr/bin/env"};
    for (const auto& [k, v] : env) with.push_back(k + "=" + v);
    argv.insert(argv.begin(), with.begin(), with.end());
    return argv;
  }
  // An allocator that refuses glibc's settings: the preloaded mallopt, or
  // in a sanitizer build none (ASan's refuses them itself).
  static Env RefusingAllocator() {
    if (std::string(MALLOPT_REFUSES).empty()) return {};
    return {{"LD_PRELOAD", MALLOPT_REFUSES}};
  }
  Ran Run(std::vector<std::string> argv, const Env& env = {}) {
    argv = WithEnv(std::move(argv), env);
    const std::string err_path = dir_ + "/run.err";
    e2e_fs::remove(err_path);
    Ran r;
    {
      testing::Subprocess p(argv, err_path);
      r.out = p.ReadAll();
      const int status = p.Wait();
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    return r;
  }
  Ran Server(const std::string& db, std::vector<std::string> args) {
    args.insert(args.begin(), {INFRARSI_SERVER_BIN, "--db", db});
    return Run(args);
  }
  // A database as an older release (schema v6) left it, with a session.
  std::string OldDatabase() {
    const std::string db = dir_ + "/old.db";
    storage::SqliteStorage::Options o;
    o.path = db;
    o.target_version = 6;
    EXPECT_TRUE(storage::SqliteStorage::Create(o).ok());
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(raw,
                           "INSERT INTO sessions (id, name, spec_yaml, spec_dir, stage, "
                           "contract_hash, workload_signature, gpu_model, created_ms, updated_ms) "
                           "VALUES ('ses-old', 'n', '', '', 'searched', '', '', '', 1, 1);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
    return db;
  }
};

// `TOKEN=$(infrarsi-server token create ...)` reads stdout. Under an
// allocator that refuses glibc's settings (AddressSanitizer's, found in the
// sanitizer build) the server's warning about them went to stdout, before
// its token: spdlog's default logger writes there, and the server's own
// (stderr) was installed only after the admin commands had run.
TEST_F(OperationsTest, AdminCommandsPrintOnlyTheirResultOnStdoutWhateverIsLogged) {
  const std::string db = dir_ + "/tokens.db";
  const Env refusing = RefusingAllocator();
  Ran r = Run({INFRARSI_SERVER_BIN, "--db", db, "token", "create", "--role", "submitter", "--team", "vision"},
              refusing);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("allocator settings not applied"), std::string::npos)
      << "the preloaded allocator did not refuse: " << r.err;
  const std::string token(absl::StripAsciiWhitespace(r.out));
  EXPECT_TRUE(std::regex_match(token, std::regex("irt_[0-9a-f]+"))) << "stdout: " << r.out;
  r = Run({INFRARSI_SERVER_BIN, "--db", db, "token", "list"}, refusing);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("allocator"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("submitter"), std::string::npos) << r.out;
}

// The same warning, logged before --log-format json took effect, was the
// one plain line in a JSON log (found when the fix above moved it to stderr).
TEST_F(OperationsTest, AJsonLogHoldsOnlyJsonWhenTheFirstLineIsAWarning) {
  const std::string log = dir_ + "/json.log";
  {
    testing::Subprocess server(WithEnv({INFRARSI_SERVER_BIN, "--listen", "127.0.0.1:0", "--db",
                                        dir_ + "/json.db", "--log-format", "json"},
                                       RefusingAllocator()),
                               log);
    ASSERT_FALSE(server.WaitForLinePrefix("infrarsi-server listening on ").empty());
    server.Signal(SIGTERM);
    server.Wait();
  }
  std::ifstream in(log);
  std::string line;
  int lines = 0;
  bool warned = false;
  const std::regex object(R"(\{"ts":.*"msg":.*\})");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++lines;
    EXPECT_TRUE(std::regex_match(line, object)) << "not a JSON object: " << line;
    warned |= line.find("allocator settings not applied") != std::string::npos;
  }
  EXPECT_TRUE(warned) << "the preloaded allocator did not refuse";
  EXPECT_GE(lines, 3);
}

// Items 4 and 8, and the migrate step: `token list`, `repo list` and
// `backup` migrated the database in place, so a "pre-upgrade" backup was
// already upgraded and the old server refused it; the server upgraded any
// database it was given; a damaged file was served.
TEST_F(OperationsTest, UpgradesAreAStepOfTheirOwnAndOfflineCommandsMigrateNothing) {
  const std::string db = OldDatabase();
  Ran r = Server(db, {"token", "list"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("schema version 6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("migrate"), std::string::npos) << r.err;
  r = Server(db, {"repo", "list"});
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(db), 6) << "an offline command migrated it";
  // The pre-upgrade backup is the old schema.
  r = Server(db, {"backup", "--to", dir_ + "/pre.db"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("schema version 6"), std::string::npos) << r.out;
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(dir_ + "/pre.db"), 6);
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(db), 6);
  // The server refuses to upgrade unless told.
  r = Server(db, {"--listen", "127.0.0.1:0"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--migrate"), std::string::npos) << r.err;
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(db), 6);
  // migrate: the old file kept first, then upgraded, its rows kept.
  r = Server(db, {"migrate"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("from schema version 6"), std::string::npos) << r.out;
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(db + ".schema-v6.bak"), 6);
  EXPECT_EQ(*storage::SqliteStorage::FileSchemaVersion(db),
            storage::SqliteStorage::LatestSchemaVersion());
  r = Server(db, {"migrate"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("nothing to migrate"), std::string::npos) << r.out;
  r = Server(db, {"check"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sound"), std::string::npos) << r.out;
  {
    storage::SqliteStorage::Options o;
    o.path = db;
    auto s = storage::SqliteStorage::Create(o);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE((*s)->GetSession("ses-old").ok());
  }
  // A corrupted copy: refused at start and by `check` (exit 3), naming the
  // damage; never served.
  const std::string bad = dir_ + "/bad.db";
  e2e_fs::copy_file(db, bad);
  {
    storage::SqliteStorage::Options o;
    o.path = bad;
    auto s = storage::SqliteStorage::Create(o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 300; ++i) {
      storage::SessionRecord rec;
      rec.id = absl::StrCat("ses-", i);
      rec.stage = "searched";
      rec.spec_yaml = std::string(400, 'y');
      ASSERT_TRUE((*s)->InsertSession(rec).ok());
    }
  }
  ASSERT_GT(e2e_fs::file_size(bad), 40u * 4096u);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20 * 4096);
    const std::string junk(4 * 4096, '\xA5');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  r = Server(bad, {"check"});
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("damaged"), std::string::npos) << r.err;
  r = Server(bad, {"--listen", "127.0.0.1:0"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("is damaged"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << "a damaged database was served";
}

// Item 8: a garbled bank string reached the client as "No message returned
// for unary request [UNIMPLEMENTED]"; it is DATA_LOSS naming the row.
TEST_F(OperationsTest, AGarbledRowIsNamedToTheClient) {
  StartServer();
  StartAgent("replay");
  const std::string id = CliCreate(H200Spec(/*max_trials=*/3, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  CliDoctorAndRun(id);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ + "/infrarsi.db").c_str(), &raw), SQLITE_OK);
    sqlite3_busy_timeout(raw, 5000);
    ASSERT_EQ(sqlite3_exec(raw,
                           "UPDATE bank SET workload_signature = CAST(X'6770FF74' AS TEXT) WHERE "
                           "id = (SELECT MAX(id) FROM bank);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  std::string out, err;
  EXPECT_EQ(Cli({"bank", "query"}, &out, &err), 1);
  EXPECT_NE(err.find("DATA_LOSS"), std::string::npos) << err;
  EXPECT_NE(err.find("column workload_signature of table bank"), std::string::npos) << err;
  EXPECT_EQ(err.find("UNIMPLEMENTED"), std::string::npos) << err;
}

// Item 5: one dead agent stalled every new doctor for up to 90 s,
// silently. Now its pinned baseline run waits while it is late (said on
// the stream), and moves to the live agent once three heartbeats (15 s)
// were missed.
TEST_F(OperationsTest, ADeadAgentsPinnedDoctorRunMovesOnSayingWhy) {
  StartServer();
  testing::Subprocess& doomed = StartAgent("replay");
  StartAgent("replay");
  const std::string id = CliCreate(H200Spec(/*max_trials=*/3, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  doomed.Signal(SIGKILL);
  doomed.Wait();
  const auto start = std::chrono::steady_clock::now();
  v1::DoctorRequest d;
  d.set_session_id(id);
  auto started = client_->Doctor(d);
  ASSERT_TRUE(started.ok()) << started.status();
  bool said = false;
  auto done = client_->Watch(id, absl::Seconds(60), [&](const v1::SessionEvent& ev) {
    if (ev.kind() == "notice" && absl::StrContains(ev.session().notice(), "missed its heartbeat")) {
      said = true;
    }
    return ev.session().stage() == v1::STAGE_DOCTORING;
  }, started->last_event_seq());
  ASSERT_TRUE(done.ok()) << done.status() << " (a doctor stalled on a dead agent)";
  EXPECT_EQ(done->stage(), v1::STAGE_DOCTORED) << done->error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50));
  EXPECT_TRUE(said) << "the wait for the dead agent was never explained";
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  std::set<std::string> agents;
  for (const auto& t : rep->trials()) agents.insert(t.agent());
  EXPECT_EQ(agents.size(), 1u) << "both baseline runs ran on the live agent";
}

// Item 6: `run` and `watch` dropped events across a server restart (a
// watcher reconnecting with the old process's seq got no snapshot). A
// watching `run` survives five kill -9 restarts and prints every trial
// exactly once.
TEST_F(OperationsTest, AWatchingRunPrintsEveryTrialOnceAcrossFiveRestarts) {
  StartServer();
  StartAgent("process");
  StartAgent("process");
  const std::string id = CliCreate(ProcessSpec(/*max_trials=*/12, /*steps=*/6, /*doctor=*/2));
  std::string out, err;
  ASSERT_EQ(Cli({"doctor", id}, &out, &err), 0) << err;
  const std::string run_err = dir_ + "/run.stderr";
  testing::Subprocess run({INFRARSI_CLI_BIN, "--server", address_, "run", id}, run_err);
  int restarts = 0;
  for (int done_at = 2; restarts < 5; ++done_at) {
    auto mid = client_->Watch(id, absl::Seconds(60), [&](const v1::SessionEvent& ev) {
      return ev.session().trials_done() < done_at && !IsFinishedStage(ev.session().stage());
    });
    ASSERT_TRUE(mid.ok()) << mid.status();
    if (IsFinishedStage(mid->stage()) || mid->stage() == v1::STAGE_VERIFYING) break;
    server_->Signal(SIGKILL);
    server_->Wait();
    StartServer(address_);
    ++restarts;
  }
  EXPECT_EQ(restarts, 5);
  const std::string printed = run.ReadAll();
  const int status = run.Wait();
  std::ifstream in(run_err);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string lines = ss.str();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << lines;
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  std::map<int64_t, int> seen;
  const std::regex trial_line(R"((?:^|\n)  (?:verify: )?trial (\d+) )");
  for (std::sregex_iterator it(lines.begin(), lines.end(), trial_line), end; it != end; ++it) {
    int64_t n = 0;
    ASSERT_TRUE(absl::SimpleAtoi((*it)[1].str(), &n));
    ++seen[n];
  }
  int expected = 0;
  for (const auto& t : rep->trials()) {
    if (t.purpose() == "doctor" || t.status() == "cancelled") continue;
    ++expected;
    EXPECT_EQ(seen[t.id()], 1) << "trial " << t.id() << " (" << t.purpose() << ") printed "
                               << seen[t.id()] << " times\n" << lines;
  }
  EXPECT_EQ(static_cast<int>(seen.size()), expected) << lines;
  std::cerr << "restarts: " << restarts << ", trial lines: " << seen.size() << " of " << expected
            << "\n";
}

// Item 9: a full disk stalled `run` silently (errors in the server's log,
// nothing on the session or the CLI until --wait-s ran out). A database at
// its quota: the stalled session says why, on the stream and in `run`.
TEST_F(OperationsTest, AFullDatabaseStallsAloudOnTheSessionAndTheCli) {
  server_extra_ = {"--db-quota-mib", "2"};
  StartServer();
  StartAgent("process");
  // Each trial prints ~900 KB, kept as its log: the third fills the quota.
  // The job's folder (the spec's, its workdir) holds the script and a copy
  // of the trainer: a sealed trial sees its workdir, not where the build put
  // the trainer.
  WriteFile("chat/chatty.sh", "head -c 900000 /dev/zero | tr '\\0' x\necho\nexec ./fake_trainer \"$@\"\n");
  e2e_fs::copy_file(FAKE_TRAINER, dir_ + "/chat/fake_trainer");
  const std::string spec = WriteFile("chat/chatty.yaml", absl::StrCat(R"(
name: chatty
workload: {model: fake, global_batch: 32, seq_len: 128}
hardware: {gpu: H200, count: 1}
knobs:
  ms: [60, 70, 80, 90, 100]
baseline: {ms: 100}
budget: {max_trials: 8}
doctor: {repeats: 2}
executor:
  process:
    command: "/bin/sh chatty.sh --steps 3 --step-ms {ms}"
    timeout_s: 60
)"));
  const std::string id = CliCreate(spec);
  std::string out, err;
  const int code = Cli({"doctor", id, "--wait-s", "20"}, &out, &err);
  if (code == 0) {
    EXPECT_EQ(Cli({"run", id, "--wait-s", "10"}, &out, &err), 5) << err;
  } else {
    EXPECT_EQ(code, 5) << err;
  }
  EXPECT_NE(err.find("waiting: the server cannot write its database"), std::string::npos) << err;
  EXPECT_NE(err.find("disk full"), std::string::npos) << err;
  auto s = client_->GetSession(id);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->notice().find("free space on the volume of the server's --db"), std::string::npos)
      << s->notice();
}

// Item 11: Ctrl-C during `run` exited 130 printing nothing. It says the
// session goes on and how to re-attach.
TEST_F(OperationsTest, InterruptingRunSaysTheSessionGoesOnAndHowToReattach) {
  StartServer();  // no agent: the doctor waits
  const std::string id = CliCreate(H200Spec(/*max_trials=*/3, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  const std::string err_path = dir_ + "/doctor.err";
  testing::Subprocess doctor({INFRARSI_CLI_BIN, "--server", address_, "doctor", id}, err_path);
  // It follows once it printed why the doctor waits (no agent).
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (absl::StrContains(ss.str(), "waiting:")) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  doctor.Signal(SIGINT);
  const int status = doctor.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("goes on on the server"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("infrarsi watch " + id), std::string::npos) << ss.str();
  EXPECT_EQ(client_->GetSession(id)->stage(), v1::STAGE_DOCTORING);
}

// Item 14: `apply --dry-run` printed "would commit on top of  as new
// branch" (an empty base) and listed a new file as M; a replay session's
// commit message claimed "timing on the agent's clock".
TEST_F(OperationsTest, ApplyNamesItsBaseAndMarksAddedFiles) {
  StartServer();
  StartAgent("replay");
  StartAgent("replay");
  const std::string id = CliCreate(H200Spec(/*max_trials=*/6, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  CliDoctorAndRun(id);
  ASSERT_TRUE(client_->GetSession(id)->promoted());
  const std::string repo = MakeRepo();
  std::string out, err;
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/t", "--dry-run"}, &out, &err), 0)
      << err;
  EXPECT_TRUE(std::regex_search(out, std::regex("would commit on top of [0-9a-f]{40} as new branch")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\n  A infrarsi/[^ ]+\\.launch\\.yaml"))) << out;
  EXPECT_EQ(out.find("  M infrarsi/"), std::string::npos) << out;
  EXPECT_EQ(out.find("timing on the agent's clock"), std::string::npos) << out;
  EXPECT_NE(out.find("timing not checked (the replay executor runs no process to time)"),
            std::string::npos)
      << out;
}

// Item 7: upgraded reports claimed checks that never ran ("[ran] agent
// reports ..."), named today's strategy, and refitted memory figures. A
// finished session's report is the one made when it finished; one that
// finished before reports were kept says so and claims nothing.
TEST_F(OperationsTest, FinishedReportsAreFrozenAndOldOnesClaimNothing) {
  StartServer();
  StartAgent("replay");
  StartAgent("replay");
  const std::string frozen = CliCreate(H200Spec(/*max_trials=*/5, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  CliDoctorAndRun(frozen);
  const std::string old = CliCreate(H200Spec(/*max_trials=*/5, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  CliDoctorAndRun(old);
  auto before = client_->Report(frozen);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_NE(before->recorded().find("frozen when the session finished"), std::string::npos)
      << before->recorded();
  // What a later release would compute differently (here: the stored
  // trials themselves), and a session as an older release left it: no
  // frozen report.
  server_->Signal(SIGKILL);
  server_->Wait();
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ + "/infrarsi.db").c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           ("UPDATE trials SET step_time_s = step_time_s * 2 WHERE session_id = '" +
                            frozen + "'; DELETE FROM frozen_reports WHERE session_id = '" + old + "';")
                               .c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  StartServer(address_);
  auto after = client_->Report(frozen);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*after, *before))
      << "a finished report changed";
  auto legacy = client_->Report(old);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_NE(legacy->recorded().find("before reports were kept"), std::string::npos) << legacy->recorded();
  ASSERT_GT(legacy->integrity_size(), 0);
  for (const auto& c : legacy->integrity()) {
    EXPECT_FALSE(c.ran()) << c.name() << " claimed";
    EXPECT_NE(c.detail().find("not known to have run"), std::string::npos) << c.detail();
  }
  EXPECT_EQ(legacy->search().strategy().rfind("unknown", 0), 0u) << legacy->search().strategy();
  for (const auto& t : legacy->trials()) EXPECT_EQ(t.predicted_peak_mem_gib(), 0) << t.id();
  std::string out, err;
  ASSERT_EQ(Cli({"report", old}, &out, &err), 0) << err;
  EXPECT_EQ(out.find("[ran]"), std::string::npos) << out;
  EXPECT_NE(out.find("before reports were kept"), std::string::npos) << out;
}

// Item 14: the demo deleted the folder and commit it had just shown without
// a word (`--keep` existed, unmentioned) and said nothing of what to do
// next; it listed the new launch file as modified.
TEST_F(OperationsTest, TheDemoSaysWhatItRemovedAndWhatToTryNext) {
  Ran r = Run({INFRARSI_CLI_BIN, "demo"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n +A infrarsi/[^ ]+\\.launch\\.yaml\n"))) << r.out;
  EXPECT_NE(r.out.find("Removed the demo's temporary folder"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`infrarsi demo --keep` keeps it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Next: tune a job of your own"), std::string::npos) << r.out;
  const std::string kept = dir_ + "/demo";
  r = Run({INFRARSI_CLI_BIN, "demo", "--workdir", kept});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Kept the work folder: " + kept), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the commit: git -C "), std::string::npos) << r.out;
  EXPECT_TRUE(e2e_fs::exists(kept)) << "the folder asked for is kept";
}

// Items 11 and 13: `watch` on a session waiting for its user ends saying
// what to run; exit codes by class; global flags anywhere; INFRARSI_SERVER
// and the config file; --json on what prints; --detach.
TEST_F(OperationsTest, TheCliFollowsTheConventionsOfWellKeptTools) {
  StartServer();
  StartAgent("replay");
  const std::string id = CliCreate(H200Spec(/*max_trials=*/3, /*doctor=*/2, /*candidates=*/1, /*runs=*/2));
  // watch on an initialized session: it waits for `doctor`, so it ends.
  std::string out, err;
  ASSERT_EQ(Cli({"watch", id, "--wait-s", "20"}, &out, &err), 0) << err;
  EXPECT_NE(err.find("infrarsi doctor " + id), std::string::npos) << err;
  // --detach, a global flag after the command, JSON.
  ASSERT_EQ(Cli({"doctor", id, "--detach", "--json"}, &out, &err), 0) << err;
  v1::SessionSummary started;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &started).ok()) << out;
  EXPECT_EQ(started.session_id(), id);
  ASSERT_EQ(Cli({"watch", id}, &out, &err), 0) << err;
  EXPECT_NE(err.find("infrarsi run " + id), std::string::npos) << err;
  // Exit codes by class.
  EXPECT_EQ(Cli({"status", "ses-nope"}, &out, &err), 3) << err;
  EXPECT_EQ(Cli({"doctor", id}, &out, &err), 6) << err;  // not now: doctored
  EXPECT_EQ(Cli({"status"}, &out, &err), 2) << err;      // usage: no id
  EXPECT_EQ(Cli({"--no-such-flag", "sessions"}, &out, &err), 2) << err;
  EXPECT_EQ(Cli({"bank", "query", "--knob", "atn=sdpa"}, &out, &err), 2) << err;
  EXPECT_NE(err.find("knob named 'atn'"), std::string::npos) << err;
  // The address from the environment, then the config file; the flag first.
  const std::string cli = INFRARSI_CLI_BIN;
  Ran r = Run({cli, "status", id, "--json"}, {{"INFRARSI_SERVER", address_}, {"HOME", dir_}});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(id), std::string::npos) << r.out;
  const std::string conf = WriteFile("conf/cli", "# the team's server\nserver = " + address_ + "\n");
  r = Run({cli, "status", id}, {{"INFRARSI_CONFIG", conf}});
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({cli, "status", id, "--server", "127.0.0.1:1"}, {{"INFRARSI_CONFIG", conf}});
  EXPECT_EQ(r.code, 5) << r.err;  // unavailable, and the flag won
  EXPECT_NE(r.err.find("cannot reach infrarsi-server at 127.0.0.1:1"), std::string::npos) << r.err;
  const std::string typo = WriteFile("conf/typo", "sever = " + address_ + "\n");
  r = Run({cli, "status", id}, {{"INFRARSI_CONFIG", typo}});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown key 'sever'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace infrarsi
