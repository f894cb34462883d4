// The trust boundary, tried as an attacker would, with the real binaries:
// a submitter's words never become commands as root on the agents, files
// read on the server's host, or commits in another team's repository; a
// stolen agent token serves no team that trusts only its own hosts, and
// cannot act as another agent; the API's edges (revoked tokens, other
// teams' sessions, streams, TLS) hold. Each test is one attack of the
// tenancy issue and says what it now gets.
#include <git2.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/cli/local_apply.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"
#include "tests/integration/end_to_end_fixture.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;
using testing::Subprocess;

class TenancyTest : public EndToEndTest {
 protected:
  // A raw gRPC client holding `token` (the attacker writes its own client).
  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  }
  static void Auth(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }
  std::unique_ptr<client::RpcClient> As(const std::string& token) {
    client::RpcClient::Options o;
    o.server = address_;
    o.token = token;
    return *client::RpcClient::Create(o);
  }
  // Runs a binary to its end; returns the exit code, stderr in *err.
  int Run(const std::vector<std::string>& argv, std::string* err) {
    const std::string path = dir_ + "/run.err";
    fs::remove(path);
    Subprocess p(argv, path);
    p.ReadAll();
    const int status = p.Wait();
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

// Attack 1: a submitter's command ran as root on every default agent and
// printed the agent's INFRARSI_TOKEN. Now the process executor is off
// unless its operator enables it with a policy; enabled, the trial runs as
// the named user with an environment from an allowlist.
TEST_F(TenancyTest, TenantsCommandsRunOnlyUnderTheOperatorsPolicyWithoutTheAgentsSecrets) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string agent_tok = ServerTokenCommand(db, {"create", "--role", "agent"});
  const std::string submitter =
      ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "vision"});
  StartServer();
  std::string err;
  // Enabling tenants' code without saying which commands, or as root
  // without saying so, is refused before the agent registers.
  EXPECT_EQ(Run({INFRARSI_AGENT_BIN, "--server", address_, "--executors", "process", "--run-as",
                 "nobody"},
                &err),
            1);
  EXPECT_NE(err.find("--allow-command"), std::string::npos) << err;
  if (geteuid() == 0) {
    EXPECT_EQ(Run({INFRARSI_AGENT_BIN, "--server", address_, "--executors", "process",
                   "--allow-command", "/bin/sh"},
                  &err),
              1);
    // The sandbox is on unless said otherwise, and needs its pool of ids.
    EXPECT_NE(err.find("--trial-uids"), std::string::npos) << err;
    // Without it, as before: as root only when said.
    EXPECT_EQ(Run({INFRARSI_AGENT_BIN, "--server", address_, "--executors", "process",
                   "--allow-command", "/bin/sh", "--sandbox", "off"},
                  &err),
              1);
    EXPECT_NE(err.find("--run-as"), std::string::npos) << err;
    // One uid shared by every trial is no sandbox.
    EXPECT_EQ(Run({INFRARSI_AGENT_BIN, "--server", address_, "--executors", "process",
                   "--allow-command", "/bin/sh", "--run-as", "nobody"},
                  &err),
              1);
    EXPECT_NE(err.find("--sandbox=off"), std::string::npos) << err;
  }
  if (geteuid() != 0) GTEST_SKIP() << "running trials as another user needs a root agent";
  // The operator's agent: shells only, as nobody, in this folder. Its token
  // is in its environment, where a trial would find it if it inherited it.
  fs::permissions(dir_, fs::perms::all);
  setenv("INFRARSI_TOKEN", agent_tok.c_str(), 1);
  StartAgent("process", "cpu", 1,
             {"--allow-command", "/bin/sh -c", "--sandbox", "off", "--run-as", "nobody",
              "--workdir-root", dir_});
  unsetenv("INFRARSI_TOKEN");
  // The trial looks for the agent's token wherever a root trial found it:
  // its own environment, and its parent's command line and environment.
  WriteFile("job/who.sh",
            "echo \"uid=$(id -u) parent=$(tr '\\000' ' ' < /proc/$PPID/cmdline)\" >&2\n"
            "tr '\\000' '\\n' < /proc/$PPID/environ | grep '^INFRARSI_TOKEN=' >&2\n"
            "env | grep '^INFRARSI_TOKEN=' >&2\nexit 3\n");
  const std::string spec = WriteFile("job/who.yaml", R"(
name: who-am-i
workload: {model: m, global_batch: 8, seq_len: 8}
hardware: {gpu: cpu, count: 1}
knobs: {x: [a]}
baseline: {x: a}
budget: {max_trials: 1}
doctor: {repeats: 1}
executor:
  process: {command: ["/bin/sh", "-c", ". ./who.sh"], timeout_s: 30}
)");
  fs::permissions(dir_ + "/job", fs::perms::all);
  std::string out;
  ASSERT_EQ(Cli({"--token-file", TokenFile(submitter), "session", "create", spec}, &out, &err), 0)
      << err;
  const std::string id(absl::StripAsciiWhitespace(out));
  EXPECT_EQ(Cli({"--token-file", TokenFile(submitter), "doctor", id}, &out, &err), 1);
  auto rep = As(submitter)->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->trials_size(), 1);
  const std::string& error = rep->trials(0).error();
  EXPECT_NE(error.find(absl::StrCat("uid=", getpwnam("nobody")->pw_uid, " parent=")),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("infrarsi-agent"), std::string::npos) << "the parent was read: " << error;
  EXPECT_EQ(error.find(agent_tok), std::string::npos) << "the trial saw the agent's token: " << error;
  EXPECT_EQ(error.find("INFRARSI_TOKEN"), std::string::npos) << error;
}

// Two teams' trials at once on one agent started with the documented
// flags (two slots, its sandbox on): team A's trial looks for team B's
// everywhere the old executor let it (B's processes, environ and cwd
// through /proc, B's folder and secret beside its own, B's metrics file to
// forge an OOM into, /tmp for what B left), and finds nothing. Before, all
// --run-as trials ran as one user on the host's /proc and /tmp: A read B's
// environment and source, stopped it, and B's doctor failed "oom=1".
TEST_F(TenancyTest, TwoTeamsTrialsOnOneSealedAgentReachNothingOfEachOther) {
  if (geteuid() != 0) GTEST_SKIP() << "the sandbox needs an agent running as root";
  const std::string db = dir_ + "/infrarsi.db";
  const std::string agent_tok = ServerTokenCommand(db, {"create", "--role", "agent"});
  const std::string team_a = ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "a"});
  const std::string team_b = ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "b"});
  StartServer();
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  StartAgent("process", "cpu", 1,
             {"--token-file", TokenFile(agent_tok), "--allow-command", "/bin/sh -c", "--slots", "2",
              "--workdir-root", dir_});
  WriteFile("job/b.sh",
            "echo B-SECRET-1234 > \"$HOME/secret\"; echo B-LEFT > /tmp/b-left; i=0; "
            "while [ $i -lt 100 ]; do echo \"{\\\"step\\\":$i,\\\"loss\\\":1,\\\"tokens\\\":64,"
            "\\\"step_time_s\\\":0.1,\\\"peak_mem_gib\\\":1,\\\"warmup\\\":true}\" >> \"$INFRARSI_METRICS\"; "
            "sleep 0.1; i=$((i+1)); done; : TEAMB-RUNNING; id -u >&2; exit 5\n");
  // A: another session's process is one whose environment names a session
  // id that is not A's own.
  WriteFile("job/a.sh",
            "seen=0; n=0; while [ $n -lt 60 ] && [ $seen = 0 ]; do for p in /proc/[0-9]*; do "
            "if tr '\\000' '\\n' < $p/environ 2>/dev/null | grep '^INFRARSI_SESSION_ID=' | "
            "grep -qv \"=$INFRARSI_SESSION_ID\\$\"; then seen=1; kill -STOP ${p#/proc/}; fi; done; "
            "sleep 0.1; n=$((n+1)); done; "
            "echo seen=$seen >&2; cat \"$(dirname \"$HOME\")\"/*/secret /tmp/b-left 2>/dev/null >&2; "
            "for f in \"$(dirname \"$HOME\")\"/*/metrics.jsonl; do [ \"$f\" = \"$INFRARSI_METRICS\" ] || "
            "{ (echo '{\"event\":\"oom\"}' >> \"$f\") 2>/dev/null && echo forged >&2; }; done; "
            "echo siblings=$(ls \"$(dirname \"$HOME\")\" | wc -l) >&2; id -u >&2; exit 3\n");
  fs::permissions(dir_ + "/job", fs::perms::owner_all | fs::perms::others_read |
                                     fs::perms::others_exec | fs::perms::group_read | fs::perms::group_exec);
  auto spec_for = [&](const std::string& team) {
    return WriteFile("job/" + team + ".yaml", absl::StrCat("name: probe-", team, R"(
workload: {model: m, global_batch: 8, seq_len: 8}
hardware: {gpu: cpu, count: 1}
knobs: {x: [a]}
baseline: {x: a}
budget: {max_trials: 1}
doctor: {repeats: 1}
executor:
  process: {command: ["/bin/sh", "-c", ". ./)", team, R"(.sh"], timeout_s: 60}
)"));
  };
  std::string out, err;
  ASSERT_EQ(Cli({"--token-file", TokenFile(team_b), "session", "create", spec_for("b")}, &out, &err), 0) << err;
  const std::string b_id(absl::StripAsciiWhitespace(out));
  ASSERT_EQ(Cli({"--token-file", TokenFile(team_a), "session", "create", spec_for("a")}, &out, &err), 0) << err;
  const std::string a_id(absl::StripAsciiWhitespace(out));
  v1::DoctorRequest d;
  d.set_session_id(b_id);
  ASSERT_TRUE(As(team_b)->Doctor(d).ok());
  d.set_session_id(a_id);
  ASSERT_TRUE(As(team_a)->Doctor(d).ok());
  for (const auto& [id, token] : {std::pair{a_id, team_a}, std::pair{b_id, team_b}}) {
    auto s = As(token)->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(120),
                                   [](const v1::SessionEvent&) {});
    ASSERT_TRUE(s.ok()) << s.status();
  }
  auto a_rep = As(team_a)->Report(a_id);
  auto b_rep = As(team_b)->Report(b_id);
  ASSERT_TRUE(a_rep.ok() && b_rep.ok());
  ASSERT_EQ(a_rep->trials_size(), 1);
  ASSERT_EQ(b_rep->trials_size(), 1);
  const std::string a = a_rep->trials(0).error();
  const std::string b = b_rep->trials(0).error();
  EXPECT_NE(a.find("seen=0"), std::string::npos) << a;
  EXPECT_EQ(a.find("B-SECRET"), std::string::npos) << a;
  EXPECT_EQ(a.find("B-LEFT"), std::string::npos) << a;
  EXPECT_EQ(a.find("forged"), std::string::npos) << a;
  EXPECT_NE(a.find("siblings=1"), std::string::npos) << a;
  // B ran to its own end: not stopped (a timeout), not an OOM.
  EXPECT_EQ(b_rep->trials(0).status(), "failed") << b;
  EXPECT_NE(b.find("exit code 5"), std::string::npos) << b;
  // Neither ran as the other's uid; the report says what each ran under.
  const std::string a_uid = a.substr(a.rfind("siblings=1\n") + 11, 7);
  const std::string b_uid = b.substr(b.find("exit code 5: ") + 13, 7);
  EXPECT_NE(a_uid, b_uid) << a << " | " << b;
  EXPECT_NE(a_rep->trials(0).isolation().find("own PID, mount and IPC namespaces"), std::string::npos)
      << a_rep->trials(0).isolation();
}

// Attack 2: a stolen agent token leased team B's trials (their commands,
// paths and patches), completed them with made-up numbers, and B's report
// promoted 20x. A team that trusts only its own hosts says so
// (hardware.pool: team): the shared pool's token gets nothing of it, and no
// token can act as another agent or report on its lease.
TEST_F(TenancyTest, AStolenAgentTokenServesNoTeamThatTrustsOnlyItsOwnHosts) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string pool_tok = ServerTokenCommand(db, {"create", "--role", "agent"});
  const std::string vision_agent =
      ServerTokenCommand(db, {"create", "--role", "agent", "--team", "vision"});
  const std::string vision =
      ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "vision"});
  StartServer();
  const std::string yaml = absl::StrReplaceAll(
      ReadText(H200Spec(/*max_trials=*/3, /*doctor=*/2, /*candidates=*/1, /*runs=*/2)),
      {{"count: 1}", "count: 1, pool: team}"}});
  const std::string spec = WriteFile("specs/team.yaml", yaml);
  std::string out, err;
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "session", "create", spec}, &out, &err), 0)
      << err;
  const std::string id(absl::StripAsciiWhitespace(out));
  v1::DoctorRequest d;
  d.set_session_id(id);
  ASSERT_TRUE(As(vision)->Doctor(d).ok());

  // The thief registers with the shared pool's token and polls: nothing.
  auto stub = v1::AgentService::NewStub(Channel());
  v1::RegisterAgentRequest reg;
  reg.set_host("thief");
  reg.set_gpu_model("H200");
  reg.set_gpu_count(1);
  reg.add_executors("replay");
  v1::RegisterAgentResponse rr;
  {
    grpc::ClientContext ctx;
    Auth(&ctx, pool_tok);
    ASSERT_TRUE(stub->RegisterAgent(&ctx, reg, &rr).ok());
  }
  v1::LeaseTrialRequest lr;
  lr.set_agent_id(rr.agent_id());
  lr.set_wait_ms(500);
  v1::LeaseTrialResponse lease;
  {
    grpc::ClientContext ctx;
    Auth(&ctx, pool_tok);
    ASSERT_TRUE(stub->LeaseTrial(&ctx, lr, &lease).ok());
  }
  EXPECT_FALSE(lease.has_trial()) << "the shared pool leased a team-only trial";

  // The team's own agent runs it; the thief cannot take over its id ...
  StartAgent("replay", "H200", 1, {"--token-file", TokenFile(vision_agent)});
  auto doctored = As(vision)->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(60),
                                        [](const v1::SessionEvent&) {});
  ASSERT_TRUE(doctored.ok()) << doctored.status();
  EXPECT_EQ(doctored->stage(), v1::STAGE_DOCTORED) << doctored->error();
  auto rep = As(vision)->Report(id);
  ASSERT_TRUE(rep.ok());
  ASSERT_GT(rep->trials_size(), 0);
  const std::string agent_id = rep->trials(0).agent();
  reg.set_agent_id(agent_id);
  {
    grpc::ClientContext ctx;
    Auth(&ctx, pool_tok);
    const grpc::Status st = stub->RegisterAgent(&ctx, reg, &rr);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  lr.set_agent_id(agent_id);
  {
    grpc::ClientContext ctx;
    Auth(&ctx, pool_tok);
    const grpc::Status st = stub->LeaseTrial(&ctx, lr, &lease);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  // ... and the team's run ends on the numbers its own host measured.
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "run", id}, &out, &err), 0) << err;
  rep = As(vision)->Report(id);
  ASSERT_TRUE(rep.ok());
  for (const auto& t : rep->trials()) EXPECT_EQ(t.agent(), agent_id) << t.id();
}

// Attack 4: Apply committed into any repository the server could write
// (branch pwned-by-teamA in another team's), and --dry-run was an oracle
// for paths. Now the server commits nowhere; the CLI commits into the
// caller's own clone, and a retry after a crash makes no second commit.
TEST_F(TenancyTest, ApplyWritesOnlyIntoTheCallersCloneAndARetryMakesNoSecondCommit) {
  StartServer();
  StartAgent("replay");
  const std::string id = CliCreate(H200Spec(/*max_trials=*/8, /*doctor=*/3, /*candidates=*/1,
                                            /*runs=*/3));
  CliDoctorAndRun(id);
  ASSERT_TRUE(client_->GetSession(id)->promoted());
  // Another team's repository: the server will not touch it.
  const std::string theirs = dir_ + "/team-b";
  ASSERT_FALSE(testing::MakeGitRepo(theirs, {{"train.py", "b\n"}}).empty());
  v1::ApplyRequest a;
  a.set_session_id(id);
  a.set_repo_path(theirs);
  a.set_branch("pwned-by-teamA");
  for (bool dry : {false, true}) {
    a.set_dry_run(dry);
    auto st = client_->Apply(a).status();
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_EQ(st.message().rfind("repo_path: the server commits into no repository", 0), 0u);
  }
  a.set_repo_path("/no/such/path");  // the same answer: no oracle
  EXPECT_EQ(client_->Apply(a).status().message().rfind("repo_path: the server commits", 0), 0u);
  git_libgit2_init();
  git_repository* r = nullptr;
  ASSERT_EQ(git_repository_open(&r, theirs.c_str()), 0);
  git_reference* ref = nullptr;
  EXPECT_NE(git_branch_lookup(&ref, r, "pwned-by-teamA", GIT_BRANCH_LOCAL), 0);
  git_repository_free(r);

  // The team's own clone: the CLI commits, and is killed before it records
  // the commit (what a kill -9 between the two would leave).
  const std::string mine = MakeRepo();
  auto first = client::ApplyLocally(*client_, id, mine, "infrarsi/tuned", false, /*record=*/false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(client_->GetSession(id)->stage(), v1::STAGE_SEARCHED);
  // The retry finds that commit on the branch and records it; no second one.
  std::string out, err;
  ASSERT_EQ(Cli({"apply", id, "--repo", mine, "--branch", "infrarsi/tuned"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("already committed " + first->commit), std::string::npos) << out;
  EXPECT_EQ(client_->GetSession(id)->applied_commit(), first->commit);
  EXPECT_EQ(client_->GetSession(id)->stage(), v1::STAGE_APPLIED);
  ASSERT_EQ(git_repository_open(&r, mine.c_str()), 0);
  git_object* tip = nullptr;
  ASSERT_EQ(git_revparse_single(&tip, r, "infrarsi/tuned~1"), 0);
  git_object* head = nullptr;
  ASSERT_EQ(git_revparse_single(&head, r, "HEAD"), 0);
  EXPECT_TRUE(git_oid_equal(git_object_id(tip), git_object_id(head)))
      << "the branch holds more than the one commit on top of HEAD";
  git_object_free(tip);
  git_object_free(head);
  git_repository_free(r);
  git_libgit2_shutdown();
  // Applying again is refused only if it would be another commit.
  ASSERT_EQ(Cli({"apply", id, "--repo", mine, "--branch", "infrarsi/tuned"}, &out, &err), 0) << err;
}

// Attack 5: Init read files on the server's host that the client named:
// /dev/zero read whole, a FIFO blocking an RPC thread, /etc/shadow's hash
// in the report. Now the server reads none: the CLI reads the files the
// spec names (regular files only, bounded) and sends them.
TEST_F(TenancyTest, InitReadsNoPathTheClientNames) {
  StartServer();
  const std::string base = R"(
name: reads
workload: {model: m, global_batch: 8, seq_len: 8}
hardware: {gpu: cpu, count: 1}
knobs: {x: [a]}
baseline: {x: a}
budget: {max_trials: 1}
)";
  // Through the API: a spec naming server-side paths, without their files.
  v1::InitRequest r;
  r.set_spec_yaml(base + "executor:\n  process: {command: train, workdir: /etc}\n"
                         "contract: {protected: [shadow]}\n");
  auto st = client_->Init(r).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(st.message().rfind("contract.protected[shadow]: 'shadow' was not sent with the spec", 0),
            0u)
      << st;
  r.set_spec_yaml(base + "executor:\n  replay: {landscape: /dev/zero}\n");
  st = client_->Init(r).status();
  EXPECT_EQ(st.message().rfind("executor.replay.landscape: '/dev/zero' was not sent", 0), 0u) << st;
  r.set_spec_yaml(base + "executor:\n  process: {command: train}\nrepository: {path: /srv/teamB}\n");
  st = client_->Init(r).status();
  EXPECT_EQ(st.message().rfind("repository.path: the server reads no path", 0), 0u) << st;
  EXPECT_EQ(client_->ListSessions()->sessions_size(), 0);
  // Through the CLI: a device and a FIFO are refused at once, naming the
  // field, never read or waited on.
  const std::string fifo = dir_ + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo}) {
    const std::string spec = WriteFile(
        "specs/dev.yaml", base + "executor:\n  replay: {landscape: " + path + "}\n");
    std::string out, err;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(Cli({"session", "create", spec}, &out, &err), 2);  // usage: INVALID_ARGUMENT
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    EXPECT_NE(err.find("executor.replay.landscape: " + path + " is not a regular file"),
              std::string::npos)
        << err;
  }
}

// A repository is one an admin registered for the team: another team's
// answers as a missing one does (no confirming its existence, no patching
// against its files), and naming a URL is an admin's.
TEST_F(TenancyTest, TeamsNameOnlyTheirOwnRegisteredRepositories) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string vision =
      ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "vision"});
  const std::string theirs = dir_ + "/audio-repo";
  ASSERT_FALSE(testing::MakeGitRepo(theirs, {{"secret.py", "KEY = 1\n"}}).empty());
  std::string err;
  ASSERT_EQ(Run({INFRARSI_SERVER_BIN, "--db", db, "repo", "add", "audio-lm", "--url", theirs,
                 "--team", "audio"},
                &err),
            0)
      << err;
  StartServer();
  const std::string spec = R"(
name: probe
workload: {model: m, global_batch: 8, seq_len: 8}
hardware: {gpu: cpu, count: 1}
knobs: {x: [a]}
baseline: {x: a}
budget: {max_trials: 1}
executor:
  process: {command: train}
contract: {editable: ['**']}
patches:
  - name: probe
    diff: |
      --- a/secret.py
      +++ b/secret.py
      @@ -1 +1 @@
      -KEY = 1
      +KEY = 2
)";
  v1::InitRequest r;
  r.set_spec_yaml(spec + "repository: {name: audio-lm}\n");
  const std::string theirs_msg(As(vision)->Init(r).status().message());
  r.set_spec_yaml(spec + "repository: {name: nobody-lm}\n");
  const std::string missing_msg(As(vision)->Init(r).status().message());
  EXPECT_EQ(absl::StrReplaceAll(theirs_msg, {{"audio-lm", "X"}}),
            absl::StrReplaceAll(missing_msg, {{"nobody-lm", "X"}}));
  r.set_spec_yaml(spec + "repository: {url: " + theirs + "}\n");
  EXPECT_EQ(As(vision)->Init(r).status().message().rfind("repository.url: only an admin", 0), 0u);
}

// Also: a revoked token's stream ended only when the client hung up; now
// within seconds. And another team's session answered PERMISSION_DENIED
// where a missing one answered NOT_FOUND; now both are NOT_FOUND alike.
TEST_F(TenancyTest, RevokedStreamsEndAndOtherTeamsSessionsLookMissing) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string vision =
      ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "vision"});
  const std::string audio =
      ServerTokenCommand(db, {"create", "--role", "reader", "--team", "audio"});
  StartServer();
  auto s = As(vision)->InitFromFile(H200Spec(4, 2, 1, 2));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string id = s->session_id();
  auto theirs = As(audio)->GetSession(id).status();
  auto none = As(audio)->GetSession("ses-0123456789ab").status();
  EXPECT_TRUE(absl::IsNotFound(theirs)) << theirs;
  EXPECT_EQ(theirs.code(), none.code());
  EXPECT_EQ(absl::StrReplaceAll(theirs.message(), {{id, "X"}}),
            absl::StrReplaceAll(none.message(), {{"ses-0123456789ab", "X"}}));

  auto stub = v1::SessionService::NewStub(Channel());
  grpc::ClientContext ctx;
  Auth(&ctx, vision);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchSessionRequest w;
  w.set_session_id(id);
  auto reader = stub->WatchSession(&ctx, w);
  v1::SessionEvent ev;
  ASSERT_TRUE(reader->Read(&ev));  // the snapshot: the stream is open
  std::string vid;
  for (absl::string_view line : absl::StrSplit(ServerTokenCommand(db, {"list"}), '\n')) {
    if (absl::StrContains(line, "submitter")) vid = std::string(line.substr(0, line.find(' ')));
  }
  const auto revoked_at = std::chrono::steady_clock::now();
  EXPECT_EQ(ServerTokenCommand(db, {"revoke", vid}), "revoked " + vid);
  while (reader->Read(&ev)) {
  }
  const grpc::Status end = reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAUTHENTICATED) << end.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - revoked_at, std::chrono::seconds(5));
}

// Also: every stream took a server thread with no cap.
TEST_F(TenancyTest, StreamsPerCallerAreCapped) {
  server_ = std::make_unique<Subprocess>(
      std::vector<std::string>{INFRARSI_SERVER_BIN, "--listen", "127.0.0.1:0", "--db",
                               dir_ + "/infrarsi.db", "--max-streams-per-caller", "2",
                               "--log-level", "warn"},
      dir_ + "/server.log");
  address_ = server_->WaitForLinePrefix("infrarsi-server listening on ");
  ASSERT_FALSE(address_.empty());
  client::RpcClient::Options o;
  o.server = address_;
  client_ = *client::RpcClient::Create(o);
  auto s = client_->InitFromFile(H200Spec(4, 2, 1, 2));
  ASSERT_TRUE(s.ok()) << s.status();
  auto stub = v1::SessionService::NewStub(Channel());
  v1::WatchSessionRequest w;
  w.set_session_id(s->session_id());
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::SessionEvent>>> streams;
  for (int i = 0; i < 3; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    streams.push_back(stub->WatchSession(ctxs.back().get(), w));
    v1::SessionEvent ev;
    const bool opened = streams.back()->Read(&ev);
    EXPECT_EQ(opened, i < 2) << "stream " << i;
  }
  const grpc::Status third = streams.back()->Finish();
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error_message().find("at most 2 concurrent streams per caller"), std::string::npos)
      << third.error_message();
  for (auto& c : ctxs) c->TryCancel();
}

// Also: --token showed in ps. Now a token comes from a file or the
// environment, and the flag is refused saying so.
TEST_F(TenancyTest, TokensAreNeverTakenFromTheCommandLine) {
  std::string err;
  EXPECT_EQ(Run({INFRARSI_CLI_BIN, "--token", "irt_secret", "sessions"}, &err), 2);
  EXPECT_NE(err.find("--token: a token on the command line is visible"), std::string::npos) << err;
  EXPECT_EQ(Run({INFRARSI_AGENT_BIN, "--token", "irt_secret"}, &err), 2);
  EXPECT_NE(err.find("--token-file"), std::string::npos) << err;
}

// A local address that is not loopback, or "".
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* a = list; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN];
    out = inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  }
  freeifaddrs(list);
  return out;
}

// Also: the no-TLS refusal judged the --listen string, so "localhost" in a
// hosts file pointing at the network listened in plaintext there. The
// server now judges what the name resolves to (run in a mount namespace
// with its own /etc/hosts).
TEST_F(TenancyTest, PlaintextOnANameThatResolvesOffLoopbackIsRefused) {
  const std::string ip = NonLoopbackAddress();
  if (ip.empty()) GTEST_SKIP() << "no non-loopback address on this host";
  const std::string hosts = dir_ + "/hosts";
  std::ofstream(hosts) << ip << " localhost\n";
  std::string err;
  if (Run({"/usr/bin/unshare", "--mount", "/bin/sh", "-c",
           "mount --bind " + hosts + " /etc/hosts && getent hosts localhost"},
          &err) != 0) {
    GTEST_SKIP() << "cannot bind-mount a hosts file here: " << err;
  }
  const int rc = Run({"/usr/bin/unshare", "--mount", "/bin/sh", "-c",
                      "mount --bind " + hosts + " /etc/hosts && exec " + INFRARSI_SERVER_BIN +
                          " --listen localhost:0 --db " + dir_ + "/db"},
                     &err);
  EXPECT_EQ(rc, 1) << "the server listened in plaintext on " << ip << ": " << err;
  EXPECT_NE(err.find("refusing to serve localhost without TLS"), std::string::npos) << err;
}

}  // namespace
}  // namespace infrarsi
