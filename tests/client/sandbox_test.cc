// The sandbox per trial (client/agent/executors/sandbox.h), tried as a
// hostile tenant would on one agent host: two trials at once from one
// executor (two slots), each trying to read, stop and forge the other, to
// leave something for the next trial, and to outlive its own end. Each
// attack worked with the executor as it was (one uid for every trial, the
// host's /tmp and /proc, a process-group kill).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/agent/executors/process_executor.h"
#include "client/agent/executors/sandbox.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

class NullSink : public ProgressSink {
 public:
  bool OnSteps(const std::vector<v1::StepMetrics>&) override { return true; }
};

// Whether any process on the host has `needle` in its command line.
bool HostRuns(const std::string& needle) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::stringstream ss;
    ss << in.rdbuf();
    if (absl::StrContains(ss.str(), needle)) return true;
  }
  return false;
}

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("sandbox");
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    auto root = OwnScratchRoot(dir_ + "/scratch");
    ASSERT_TRUE(root.ok()) << root.status();
    scratch_ = *root;
    // The agent's bare clones, which trials must not read.
    fs::create_directories(scratch_ + "/git-cache/team-b.git");
    std::ofstream(scratch_ + "/git-cache/team-b.git/HEAD") << "ref: refs/heads/main\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The executor as an agent started with the documented flags runs it:
  // the sandbox on, a pool of ids, `slots` trials at once.
  std::unique_ptr<ProcessExecutor> Sealed(int slots = 2, std::vector<std::string> devices = {},
                                          bool sandbox = true) {
    ProcessExecutor::Options o;
    o.scratch_root = scratch_;
    o.allowed_commands = {{"/bin/sh", "-c"}};
    o.workdir_root = dir_;
    o.sandbox = sandbox;
    o.trial_first_id = 6300000;
    o.trial_id_count = 16;
    o.slots = slots;
    o.devices = std::move(devices);
    if (!sandbox) o.allow_root = true;
    auto ex = ProcessExecutor::Create(o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? std::move(*ex) : nullptr;
  }
  v1::TrialAssignment Shell(int trial_id, const std::string& script, const std::string& team) {
    v1::TrialAssignment a;
    a.set_trial_id(trial_id);
    a.set_session_id("ses-" + team);
    a.set_team(team);
    a.set_lease_timeout_ms(3000);
    auto* p = a.mutable_executor()->mutable_process();
    for (const std::string& arg : {std::string("/bin/sh"), std::string("-c"), script}) {
      p->add_argv(arg);
    }
    p->set_workdir(dir_);
    p->set_timeout_s(30);
    return a;
  }
  // Runs `script` and returns what it wrote to stderr (it exits 3, so the
  // outcome's error carries the tail).
  std::string Probe(ProcessExecutor& ex, int trial_id, const std::string& script) {
    auto out = ex.Run(Shell(trial_id, script + "; exit 3", "team-a"), &sink_);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->error() : "";
  }

  std::string dir_, scratch_;
  NullSink sink_;
};

#define REQUIRE_ROOT()                                                             \
  if (geteuid() != 0) GTEST_SKIP() << "the sandbox needs an agent running as root"

// Team B's trial runs; team A's, beside it on the same host, looks for it
// everywhere the old executor let it: B's processes (environ, cmdline, cwd),
// B's folder and metrics file, the agent's git cache; and tries to stop it
// and to forge an OOM into its metrics. None of it reaches B.
TEST_F(SandboxTest, ATrialReachesNeitherAConcurrentTrialNorTheAgentsFolders) {
  REQUIRE_ROOT();
  auto ex = Sealed();
  ASSERT_NE(ex, nullptr);
  // B: a recognisable command line, steps that take a while, its uid.
  const std::string b_script =
      "id -u >&2; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do "
      "echo '{\"step\":'$i',\"loss\":1,\"tokens\":1,\"step_time_s\":0.1,\"peak_mem_gib\":1}' "
      ">> \"$INFRARSI_METRICS\"; sleep 0.1; done; : TEAM-B-MARKER; exit 4";
  auto b = std::async(std::launch::async,
                      [&] { return ex->Run(Shell(21, b_script, "team-b"), &sink_); });
  // B is running (its shell is on the host) before A looks.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!HostRuns("TEAM-B-MARKER") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!HostRuns("TEAM-B-MARKER")) {
    auto gone = b.get();
    FAIL() << "team B's trial never ran: " << (gone.ok() ? gone->error() : gone.status().ToString());
  }
  const std::string b_metrics = scratch_ + "/trial-21-0/metrics.jsonl";
  const std::string a = Probe(
      *ex, 22,
      "id -u >&2; "
      // The marker is put together at run time: this script's own command
      // line must not hold it.
      "m=TEAM-B; m=$m-MARKER; "
      "seen=0; for p in /proc/[0-9]*; do grep -qs $m $p/cmdline && seen=1 && "
      "kill -STOP ${p#/proc/} 2>/dev/null; grep -qs ses-team-b $p/environ && seen=1; "
      "ls $p/cwd/ 2>/dev/null | grep -qs metrics && seen=1; done; echo seen=$seen >&2; "
      "echo procs=$(ls -d /proc/[0-9]* | wc -l) >&2; "
      "echo \"scratch=$(ls " + scratch_ + " | tr '\\n' ' ')\" >&2; "
      "(echo '{\"event\":\"oom\"}' >> " + b_metrics + ") 2>/dev/null && echo forged >&2; "
      "ls " + scratch_ + "/git-cache >/dev/null 2>&1 && echo cache-read >&2; "
      "cat " + scratch_ + "/git-cache/team-b.git/HEAD >/dev/null 2>&1 && echo cache-read >&2");
  auto b_out = b.get();
  ASSERT_TRUE(b_out.ok()) << b_out.status();
  EXPECT_NE(a.find("seen=0"), std::string::npos) << a;
  EXPECT_EQ(a.find("forged"), std::string::npos) << a;
  EXPECT_EQ(a.find("cache-read"), std::string::npos) << a;
  // A sees its own folder in the scratch root and nothing else of it.
  EXPECT_NE(a.find("scratch=trial-22-0 \n"), std::string::npos) << a;
  // Its /proc lists its own few processes only (the init, its shell and
  // the commands of the moment).
  const size_t procs = a.find("procs=");
  ASSERT_NE(procs, std::string::npos) << a;
  EXPECT_LE(std::stoi(a.substr(procs + 6)), 6) << a;
  // B ran to its end undisturbed: not stopped, not an OOM, its own exit.
  EXPECT_EQ(b_out->status(), "failed") << b_out->error();
  EXPECT_NE(b_out->error().find("exit code 4"), std::string::npos) << b_out->error();
  // Two trials at once never share a uid, and neither is the agent's.
  const std::string a_uid = a.substr(a.find("exit code 3: ") + 13, 7);
  const std::string b_uid = b_out->error().substr(b_out->error().find("exit code 4: ") + 13, 7);
  EXPECT_NE(a_uid, b_uid);
  EXPECT_EQ(a_uid.rfind("63000", 0), 0u) << a;
  EXPECT_EQ(b_uid.rfind("63000", 0), 0u) << b_out->error();
  EXPECT_NE(b_out->isolation().find("own PID, mount and IPC namespaces"), std::string::npos)
      << b_out->isolation();
}

// What a trial leaves in /tmp, /var/tmp or /dev/shm is gone for the next
// trial (no replay of an earlier run's results), and a process it starts
// with setsid and a double fork ends with it.
TEST_F(SandboxTest, NothingATrialLeavesReachesTheNextOrOutlivesIt) {
  REQUIRE_ROOT();
  for (const char* d : {"/tmp", "/var/tmp", "/dev/shm"}) fs::remove(fs::path(d) / "infrarsi-left");
  auto ex = Sealed();
  ASSERT_NE(ex, nullptr);
  const std::string first = Probe(
      *ex, 31,
      "echo results > /tmp/infrarsi-left && echo results > /var/tmp/infrarsi-left && "
      "echo results > /dev/shm/infrarsi-left && echo left >&2; "
      "(setsid /bin/sh -c 'exec sleep 61.7531' > /dev/null 2>&1 &); sleep 0.3");
  EXPECT_NE(first.find("left"), std::string::npos) << first;
  // The trial ended: no process of it is left on the host.
  EXPECT_FALSE(HostRuns("61.7531"));
  EXPECT_FALSE(fs::exists("/tmp/infrarsi-left"));
  const std::string next = Probe(
      *ex, 32,
      "cat /tmp/infrarsi-left /var/tmp/infrarsi-left /dev/shm/infrarsi-left 2>/dev/null && "
      "echo replayed >&2; ls -A /tmp /var/tmp /dev/shm >&2; touch /tmp/mine && echo tmp-ok >&2");
  EXPECT_EQ(next.find("replayed"), std::string::npos) << next;
  // Its own /tmp is writable and holds nothing of the last trial's.
  EXPECT_EQ(next.find("infrarsi-left"), std::string::npos) << next;
  EXPECT_NE(next.find("tmp-ok"), std::string::npos) << next;
}

// An operator's workdir is shared by every trial that runs in it: read-only
// inside, so that no trial leaves anything there for the next.
TEST_F(SandboxTest, ASharedWorkdirIsReadOnlyInside) {
  REQUIRE_ROOT();
  // A world-writable folder on the root filesystem that no cover names.
  const std::string open_dir = "/var/infrarsi-sandbox-test-" + std::to_string(getpid());
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all | fs::perms::sticky_bit);
  auto ex = Sealed();
  ASSERT_NE(ex, nullptr);
  const std::string out =
      Probe(*ex, 41, "touch " + dir_ + "/planted 2>/dev/null && echo planted >&2; "
                     "touch " + open_dir + "/left 2>/dev/null && echo left >&2; "
                     "touch \"$HOME/mine\" /tmp/mine && echo home-ok >&2");
  EXPECT_EQ(out.find("planted"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ + "/planted"));
  EXPECT_EQ(out.find("left"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(open_dir + "/left"));
  EXPECT_NE(out.find("home-ok"), std::string::npos) << out;
  fs::remove_all(open_dir);
}

// A program outside the workdir that lives in /tmp (a build tree in /tmp,
// as a clean clone's is) is still found: the private /tmp would hide it, so
// the command's own absolute paths are bound back read-only. A clean
// clone's suite failed "cannot run .../fake_trainer: No such file".
TEST_F(SandboxTest, ACommandThatLivesInTmpStillRuns) {
  REQUIRE_ROOT();
  const std::string tools = testing::MakeTempDir("sandbox-tools");
  fs::permissions(tools, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec |
                             fs::perms::group_read | fs::perms::group_exec);
  const std::string prog = tools + "/prog.sh";
  std::ofstream(prog) << "#!/bin/sh\necho ran-from-tmp >&2\ntouch \"$0\" 2>/dev/null && echo wrote >&2\nexit 3\n";
  fs::permissions(prog, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec |
                            fs::perms::group_read | fs::perms::group_exec);
  auto ex = Sealed();
  ASSERT_NE(ex, nullptr);
  auto out = ex->Run(Shell(71, prog, "a"), &sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->error().find("ran-from-tmp"), std::string::npos) << out->error();
  EXPECT_EQ(out->error().find("wrote"), std::string::npos) << "read-only: " << out->error();
  fs::remove_all(tools);
}

// Each slot's trial gets its own share of the agent's GPUs, never the
// whole host's list (which made two trials on one host share devices).
TEST_F(SandboxTest, EachSlotGetsItsOwnGpus) {
  for (bool sandbox : {false, true}) {
    if (sandbox && geteuid() != 0) continue;
    SCOPED_TRACE(sandbox ? "sandbox" : "no sandbox");
    auto ex = Sealed(2, {"0", "1", "2", "3"}, sandbox);
    ASSERT_NE(ex, nullptr);
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
    const std::string script = "echo \"gpus=$CUDA_VISIBLE_DEVICES\" >&2; sleep 1; exit 3";
    auto first = std::async(std::launch::async,
                            [&] { return ex->Run(Shell(51, script, "a"), &sink_); });
    auto second = std::async(std::launch::async,
                             [&] { return ex->Run(Shell(52, script, "b"), &sink_); });
    auto one = first.get(), two = second.get();
    unsetenv("CUDA_VISIBLE_DEVICES");
    ASSERT_TRUE(one.ok() && two.ok());
    std::set<std::string> got = {one->error().substr(one->error().find("gpus=")),
                                 two->error().substr(two->error().find("gpus="))};
    EXPECT_EQ(got, (std::set<std::string>{"gpus=0,1\n", "gpus=2,3\n"}))
        << one->error() << " | " << two->error();
    EXPECT_NE(one->isolation().find("GPUs "), std::string::npos) << one->isolation();
  }
}

TEST_F(SandboxTest, WithoutTheSandboxTheOutcomeSaysSo) {
  auto ex = Sealed(1, {}, /*sandbox=*/false);
  ASSERT_NE(ex, nullptr);
  auto out = ex->Run(Shell(61, "exit 0", "a"), &sink_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->isolation().rfind("none (--sandbox=off)", 0), 0u) << out->isolation();
}

// What the host cannot give is refused at Create, naming the piece.
TEST_F(SandboxTest, CreateNamesWhatIsMissing) {
  ProcessExecutor::Options o;
  o.scratch_root = scratch_;
  o.allow_any_command = true;
  o.workdir_root = dir_;
  if (geteuid() != 0) {
    auto st = ProcessExecutor::Create(o).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
    EXPECT_NE(st.message().find("root"), std::string::npos) << st;
    EXPECT_NE(st.message().find("--sandbox=off"), std::string::npos) << st;
    return;
  }
  auto no_ids = ProcessExecutor::Create(o).status();
  EXPECT_NE(no_ids.message().find("--trial-uids"), std::string::npos) << no_ids;
  o.trial_first_id = 6300000;
  o.trial_id_count = 1;
  o.slots = 2;
  EXPECT_NE(ProcessExecutor::Create(o).status().message().find("each running trial needs one"),
            std::string::npos);
  o.trial_id_count = 2;
  o.run_as = "nobody";  // one uid for every trial is what the sandbox replaces
  EXPECT_NE(ProcessExecutor::Create(o).status().message().find("--sandbox=off"),
            std::string::npos);
  o.run_as.clear();
  // A pool that holds a real account's uid (nobody's) would run trials as it.
  o.trial_first_id = 65530;
  o.trial_id_count = 10;
  const auto nobody = ProcessExecutor::Create(o).status();
  EXPECT_NE(nobody.message().find("of account 'nobody'"), std::string::npos) << nobody;
  o.trial_first_id = 6300000;
  o.trial_id_count = 2;
  o.devices = {"0"};
  EXPECT_NE(ProcessExecutor::Create(o).status().message().find("at least as many GPUs"),
            std::string::npos);
  o.devices.clear();
  EXPECT_TRUE(ProcessExecutor::Create(o).ok());
}

// The agent creates and owns its scratch root: a folder someone else made
// first (the guessable default, the README's fixed path), a link, or one
// others may write is refused.
TEST_F(SandboxTest, TheScratchRootIsTheAgentsOwn) {
  const std::string fresh = dir_ + "/new/root";
  auto made = OwnScratchRoot(fresh);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st;
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  // No path given: a fresh one nobody could have guessed.
  auto a = OwnScratchRoot(""), b = OwnScratchRoot("");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  fs::remove_all(*a);
  fs::remove_all(*b);
  // A link to a folder elsewhere.
  fs::create_directory_symlink(fresh, dir_ + "/link");
  EXPECT_NE(OwnScratchRoot(dir_ + "/link").status().message().find("not a folder"),
            std::string::npos);
  // Writable by others.
  const std::string open_dir = dir_ + "/open";
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all);
  EXPECT_NE(OwnScratchRoot(open_dir).status().message().find("writable by others"),
            std::string::npos);
  if (geteuid() == 0) {
    // Made by another user first.
    const std::string theirs = dir_ + "/theirs";
    fs::create_directories(theirs);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_NE(OwnScratchRoot(theirs).status().message().find("owned by uid 65534"),
              std::string::npos);
  }
}

// Giving a trial its tree and removing it afterwards never follow a link:
// a root-only file elsewhere keeps its owner and survives.
TEST_F(SandboxTest, ChownAndRemoveNeverFollowALink) {
  const std::string outside = dir_ + "/outside";
  fs::create_directories(outside);
  std::ofstream(outside + "/secret") << "x";
  const std::string tree = dir_ + "/tree";
  fs::create_directories(tree + "/sub");
  std::ofstream(tree + "/sub/file") << "y";
  fs::create_directory_symlink(outside, tree + "/dirlink");
  fs::create_symlink(outside + "/secret", tree + "/sub/filelink");
  const uid_t to = geteuid() == 0 ? 65534 : geteuid();
  ASSERT_TRUE(ChownTreeNoFollow(tree, to, to).ok());
  struct stat st;
  ASSERT_EQ(stat((outside + "/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(lstat((tree + "/sub/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, to);
  // The tree itself given as a link is refused.
  EXPECT_FALSE(ChownTreeNoFollow(tree + "/dirlink", to, to).ok());
  ASSERT_TRUE(RemoveTreeNoFollow(tree).ok());
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(outside + "/secret"));
  EXPECT_TRUE(RemoveTreeNoFollow(tree).ok());  // already gone
}

TEST(SandboxIdsTest, RangesAreParsedAndBounded) {
  uid_t first = 0;
  int count = 0;
  ASSERT_TRUE(ParseIdRange("6200000-6200099", "--trial-uids", &first, &count).ok());
  EXPECT_EQ(first, 6200000u);
  EXPECT_EQ(count, 100);
  for (const char* bad : {"", "5", "0-10", "10-5", "1-x", "1-3000000000"}) {
    auto st = ParseIdRange(bad, "--trial-uids", &first, &count);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << bad;
    EXPECT_EQ(st.message().rfind("--trial-uids: ", 0), 0u) << st;
  }
}

}  // namespace
}  // namespace infrarsi::client
