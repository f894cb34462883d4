// End to end with real processes: infrarsi-server on port 0, infrarsi-agent
// processes, the infrarsi CLI. Waiting is done on events (WatchSession) and
// on the processes' output, never by sleeping.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/rpc_client.h"
#include "tests/integration/end_to_end_fixture.h"
#include "google/protobuf/util/json_util.h"
#include "tests/testing/git_repo.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;
using testing::Subprocess;

TEST_F(EndToEndTest, FiveStagesThroughTheCliWithReplayAgents) {
  StartServer();
  StartAgent("replay");
  StartAgent("replay");
  const std::string spec = H200Spec(/*max_trials=*/40, /*doctor=*/3, /*candidates=*/2, /*runs=*/3);
  const std::string id = CliCreate(spec);
  std::string out, err;
  ASSERT_EQ(Cli({"doctor", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("baseline 1.11"), std::string::npos) << out;
  ASSERT_EQ(Cli({"run", id, "--max-trials", "12"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("searched: 12 trials"), std::string::npos) << out;
  EXPECT_NE(out.find("promoted"), std::string::npos) << out;
  EXPECT_NE(err.find("best"), std::string::npos) << "run shows progress";

  ASSERT_EQ(Cli({"report", id, "--json"}, &out, &err), 0) << err;
  v1::SessionReport rep;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &rep).ok()) << out;
  EXPECT_EQ(rep.session_id(), id);
  EXPECT_EQ(rep.trials_size(), 3 + 12 + 2 * 3 * 2);  // doctor, search, A/B re-runs
  EXPECT_EQ(rep.verification().candidates_size(), 2);
  EXPECT_GT(rep.verification().promoted_rank(), 0) << rep.verification().summary();
  EXPECT_NEAR(rep.baseline().step_time_s(), 1.114, 0.02);
  EXPECT_GT(rep.best().speedup(), 1.0);
  std::set<std::string> agents;
  for (const auto& t : rep.trials()) {
    agents.insert(t.agent());
    EXPECT_EQ(t.attempts(), 1);
  }
  EXPECT_EQ(agents.size(), 2u) << "both agents ran trials";
  // The doctor spread the baseline over both hosts.
  ASSERT_EQ(rep.doctor().agents_size(), 2);
  for (const auto& a : rep.doctor().agents()) EXPECT_FALSE(a.outlier()) << a.agent();
  // The stable JSON keys the issue lists.
  for (const char* key : {"\"session_id\"", "\"baseline\"", "\"cv\"", "\"best\"", "\"speedup\"",
                          "\"trials\"", "\"peak_mem_gib\"", "\"attempts\"", "\"cost_s\"",
                          "\"failed_trials\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key;
  }

  ASSERT_EQ(Cli({"bank", "query", "--gpu", "h200", "--json"}, &out, &err), 0) << err;
  v1::QueryExperienceResponse bank;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &bank).ok());
  EXPECT_EQ(bank.entries_size(), 27);

  // Apply: a path that is not a repository is refused, naming the field.
  ASSERT_EQ(Cli({"apply", id, "--repo", dir_, "--branch", "tuned"}, &out, &err), 6 /* not now: FAILED_PRECONDITION */);
  EXPECT_NE(err.find("--repo: not a git repository"), std::string::npos) << err;
  const std::string repo = MakeRepo();
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/tuned"}, &out, &err), 0)
      << err;
  EXPECT_NE(out.find("committed "), std::string::npos);
  EXPECT_NE(out.find("infrarsi/gpt-354m-h200.launch.yaml"), std::string::npos);
  auto s = client_->GetSession(id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->stage(), v1::STAGE_APPLIED);
  EXPECT_EQ(s->applied_commit().size(), 40u);

  // SIGTERM: graceful shutdown, exit code 0.
  server_->Signal(SIGTERM);
  const int status = server_->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Issue 17, as a user sees it: a session no agent can run says why, once;
// `infrarsi agents` lists the hosts; `infrarsi watch` re-attaches to a
// session whose `run` was interrupted and follows it to the end.
TEST_F(EndToEndTest, TheCliExplainsWaitsListsAgentsAndReattaches) {
  StartServer();
  StartAgent("replay");
  const std::string spec = H200Spec(/*max_trials=*/6, /*doctor=*/2, /*candidates=*/1, /*runs=*/2);
  std::string text;
  {
    std::ifstream in(spec);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  // A GPU model no live agent has: it may yet come (more GPUs than any
  // agent holds is refused at once: MultiNodeWithoutSlurmIsRefusedUpFront).
  ASSERT_NE(text.find("gpu: H200"), std::string::npos) << text;
  const std::string other = WriteFile("specs/a100.yaml", absl::StrReplaceAll(text, {{"gpu: H200", "gpu: A100"}}));
  const std::string waiting = CliCreate(other);
  std::string out, err;
  EXPECT_NE(Cli({"--wait-s", "2", "doctor", waiting}, &out, &err), 0);
  const std::string said =
      "waiting: no live agent can run this session's trials: they need 1 x a100 with the replay "
      "executor; live agents: ";
  const size_t at = err.find(said);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(said, at + 1), std::string::npos) << "said more than once: " << err;
  EXPECT_NE(err.find("on node-0 (1 x H200; executors replay)"), std::string::npos) << err;

  ASSERT_EQ(Cli({"agents"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("node-0"), std::string::npos) << out;
  EXPECT_NE(out.find("1 x H200"), std::string::npos) << out;
  EXPECT_NE(out.find("active"), std::string::npos) << out;

  const std::string id = CliCreate(spec);
  ASSERT_EQ(Cli({"doctor", id}, &out, &err), 0) << err;
  Cli({"--wait-s", "0.2", "run", id}, &out, &err);  // interrupted (or already done)
  ASSERT_EQ(Cli({"watch", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find(id), std::string::npos) << out;
  EXPECT_NE(out.find("searched"), std::string::npos) << out;
}

// Issue 17: structured logs. With --log-format json every line the server
// writes is one JSON object with ts, level, logger and msg.
TEST_F(EndToEndTest, JsonLogsAreOneObjectPerLine) {
  testing::Subprocess server({INFRARSI_SERVER_BIN, "--listen", "127.0.0.1:0", "--db",
                              dir_ + "/json.db", "--log-format", "json"},
                             dir_ + "/json.log");
  ASSERT_FALSE(server.WaitForLinePrefix("infrarsi-server listening on ").empty());
  server.Signal(SIGTERM);
  server.Wait();
  std::ifstream in(dir_ + "/json.log");
  std::string line;
  std::vector<std::string> messages;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    YAML::Node n;
    ASSERT_NO_THROW(n = YAML::Load(line)) << line;  // JSON is YAML
    ASSERT_TRUE(n.IsMap()) << line;
    for (const char* key : {"ts", "level", "logger", "msg"}) EXPECT_TRUE(n[key]) << key << ": " << line;
    EXPECT_EQ(n["logger"].as<std::string>(), "infrarsi-server");
    messages.push_back(n["msg"].as<std::string>());
  }
  ASSERT_GE(messages.size(), 3u);
  EXPECT_EQ(messages.back(), "stopped");
}

TEST_F(EndToEndTest, SimulatedClusterSessionWithSimAgents) {
  StartServer();
  StartAgent("sim", "H100", 8);
  StartAgent("sim", "H100", 8);
  const std::string spec =
      std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads/dense-8b-1x8-h100.yaml";
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id, {"--repeats", "4"}, {"--max-trials", "12"});
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->stage(), "searched");
  // Launch noise: four fresh launches of the baseline do not agree exactly.
  EXPECT_GT(rep->baseline().cv(), 0.0);
  EXPECT_LT(rep->baseline().cv(), 0.05);
  int search = 0, failures = 0;
  double failure_cost = 0;
  for (const auto& t : rep->trials()) {
    if (t.status() != "ok") {
      ++failures;
      failure_cost += t.cost_s();
    }
    if (t.purpose() != "search") continue;
    ++search;
    EXPECT_TRUE(t.status() == "ok" || t.status() == "oom" || t.status() == "failed") << t.status();
    if (t.status() == "ok") {
      EXPECT_NE(t.note().find("simulated H100 x8"), std::string::npos);
    } else if (t.status() == "failed") {
      EXPECT_NE(t.error().find("Error:"), std::string::npos) << t.error();  // launcher-style
    } else {
      EXPECT_NE(t.error().find("out of memory"), std::string::npos) << t.error();
    }
  }
  // Twelve trials, or fewer when past min_trials (10) nothing was expected
  // to beat the best by more than the noise: the results of two agents'
  // trials arrive in either order, so either can happen.
  const std::string& stop = rep->search().stop_reason();
  if (search == 12) {
    EXPECT_TRUE(absl::StartsWith(stop, "trial budget spent")) << stop;
  } else {
    EXPECT_GE(search, 10) << stop;
    EXPECT_LT(search, 12) << stop;
    EXPECT_TRUE(absl::StartsWith(stop, "no setting is expected")) << stop;
  }
  EXPECT_EQ(rep->failed_trials().count(), failures);
  EXPECT_NEAR(rep->failed_trials().cost_s(), failure_cost, 1e-6);
  // sim optimum: the ground truth for the same spec, from the CLI.
  std::string out, err;
  ASSERT_EQ(Cli({"sim", "optimum", spec, "--json"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("\"settings\": 82944"), std::string::npos) << out;
}

// The reward-hack corpus: each edit a contract must catch, run for real by
// a Python training script under the protected harness.
TEST_F(EndToEndTest, RewardHackCorpusIsCaughtWithReasonsThatNameIt) {
  StartProcessJob("harness_trainer.py");
  const std::string spec = WriteFile("job/corpus.yaml", R"(
name: hack-corpus
workload: {model: tiny, global_batch: 32, seq_len: 128}
hardware: {gpu: cpu, count: 1}
knobs:
  mode: [honest, optimizer_outside, fake_fast, tokens, drift, nan, seed, lowprec]
baseline: {mode: honest}
budget: {max_trials: 10}
doctor: {repeats: 2}
verify: {candidates: 1, runs: 2}
contract:
  data_seed: 1234
  precision: [bf16]
  optimizer_in_window: true
  protected: [infrarsi_harness.py]
  editable: ["model/**"]
executor:
  process: {command: "python3 harness_trainer.py --mode {mode} --steps 3 --step-ms 150", timeout_s: 60}
)");
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  const std::map<std::string, std::string> expected = {
      {"optimizer_outside", "timing"}, {"fake_fast", "timing"}, {"tokens", "tokens_per_step"},
      {"drift", "loss"},               {"nan", "loss_nan"},     {"seed", "data_seed"},
      {"lowprec", "precision"}};
  std::set<std::string> caught;
  for (const auto& t : rep->trials()) {
    if (t.purpose() != "search") continue;
    const std::string mode = t.config().at("mode");
    ASSERT_TRUE(expected.count(mode)) << mode;
    EXPECT_EQ(t.status(), "violation") << mode << ": " << t.error() << " " << t.note()
                                       << " cost " << t.cost_s();
    EXPECT_EQ(t.violation(), expected.at(mode)) << mode << ": " << t.error();
    // The reason names the rule it broke.
    EXPECT_EQ(t.error().rfind(expected.at(mode) + ":", 0), 0u) << t.error();
    caught.insert(mode);
  }
  EXPECT_EQ(caught.size(), expected.size());
  // Never promoted, never applied; the report counts violations by kind.
  EXPECT_FALSE(client_->GetSession(id)->promoted());
  EXPECT_EQ(rep->violations_by_kind().at("timing"), 2);
  EXPECT_GT(rep->violation_cost_s_by_kind().at("loss"), 0.0);
  EXPECT_EQ(rep->contract().protected_hashes().at("infrarsi_harness.py").size(), 40u);
  std::string out, err;
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("Contract violations (never promoted)"), std::string::npos) << out;
  // The doctor profiled the phases the harness reports.
  EXPECT_GT(rep->doctor().phases_s().at("compute_s"), 0.09);
  EXPECT_EQ(rep->doctor().timed_steps(), 3);
}

// Honest trials on a busy host (CPU hogs on every core beside them), each
// writing a "checkpoint" of random length after its last step, are never
// judged cheats. Before, a tail longer than the doctor's longest was a
// "timing" violation (on a loaded machine the Slurm suite's honest trials
// were), and a false violation removes a good setting for good. The closing
// note quotes the figures this prints.
TEST_F(EndToEndTest, HonestTrialsOnABusyHostAreNeverJudgedCheats) {
  StartProcessJob("timing_hacks.py");
  std::vector<std::unique_ptr<testing::Subprocess>> hogs;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < cores + 1; ++i) {
    hogs.push_back(std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"/bin/sh", "-c", "while :; do :; done"}, "/dev/null"));
  }
  const std::string spec = WriteFile("job/busy.yaml", R"(
name: busy-host
workload: {model: tiny, global_batch: 32, seq_len: 128}
hardware: {gpu: cpu, count: 1}
knobs:
  variant: [a, b, c, d, e, f, g, h, i, j, k, l]
baseline: {variant: a}
budget: {max_trials: 12, min_trials: 12}
doctor: {repeats: 3}
contract:
  data_seed: 1234
  precision: [bf16]
  optimizer_in_window: true
  protected: [infrarsi_harness.py]
executor:
  process: {command: "python3 timing_hacks.py --mode honest --steps 5 --step-ms 40 --tail-ms 1500", timeout_s: 60}
)");
  const std::string id = CliCreate(spec);
  std::string out, err;
  Cli({"doctor", id}, &out, &err);
  Cli({"run", id}, &out, &err);
  hogs.clear();
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  int judged = 0, violations = 0;
  for (const auto& t : rep->trials()) {
    if (t.status() == "queued" || t.status() == "cancelled") continue;
    ++judged;
    if (t.status() == "violation") {
      ++violations;
      ADD_FAILURE() << "honest trial " << t.id() << " (" << t.purpose() << ") judged a cheat: " << t.error();
    }
  }
  std::printf("honest trials on a busy host (%d CPU hogs on %d cores, 0-1.5 s checkpoint tails): "
              "%d judged, %d violations\n", cores + 1, cores, judged, violations);
  EXPECT_GE(judged, 12) << rep->stage();
  EXPECT_EQ(violations, 0);
}

// The timing part of the corpus: processes that tell the time wrongly, at
// step lengths from a few milliseconds to a second. Each is caught with a
// reason that names it, none is promoted, and the honest baseline (the
// doctor's runs, timed by the protected harness) passes at every length.
TEST_F(EndToEndTest, TimingHacksAreCaughtAtEveryStepLength) {
  StartProcessJob("timing_hacks.py");
  struct Length {
    int ms, steps;
    std::vector<std::string> hacks;
  };
  const std::vector<std::string> all = {"under", "at_exit", "pace_fast", "pace_slow", "warmup"};
  // Short steps get more of them, so that the work a hack moves into the
  // warm-up (80% of the timed window) stands well above how much the
  // start-up of a Python process varies on a busy machine.
  const std::vector<Length> lengths = {
      {5, 60, all}, {20, 15, all}, {70, 5, all}, {200, 3, all}, {1000, 3, {"under"}}};
  const std::map<std::string, std::string> kind = {{"under", "timing"},
                                                   {"at_exit", "timing"},
                                                   {"pace_slow", "timed_steps"}};
  for (const Length& l : lengths) {
    SCOPED_TRACE(absl::StrCat(l.ms, " ms steps"));
    // Each length is a workload of its own: with one workload, the bank
    // held the earlier lengths' trials, where pace_fast's charged steps ran
    // slower than the baseline, and the search rightly stopped at 200 ms
    // before trying it (no untried setting with a 40% chance to beat the
    // baseline: CI, 2026-12, 4 of 5 hacks tried).
    const std::string spec = WriteFile(
        absl::StrCat("job/timing-", l.ms, ".yaml"),
        absl::StrCat("name: timing-", l.ms, "\nworkload: {model: tiny-", l.ms, R"(ms, global_batch: 32, seq_len: 128}
hardware: {gpu: cpu, count: 1}
knobs:
  mode: [honest, )", absl::StrJoin(l.hacks, ", "), R"(]
baseline: {mode: honest}
budget: {max_trials: )", l.hacks.size(), ", min_trials: ", l.hacks.size(), R"(}
doctor: {repeats: 2}
verify: {candidates: 2, runs: 3}
contract:
  data_seed: 1234
  precision: [bf16]
  optimizer_in_window: true
  protected: [infrarsi_harness.py]
executor:
  process: {command: "python3 timing_hacks.py --mode {mode} --steps )", l.steps,
                     " --step-ms ", l.ms, R"(", timeout_s: 60}
)"));
    const std::string id = CliCreate(spec);
    CliDoctorAndRun(id);
    auto rep = client_->Report(id);
    ASSERT_TRUE(rep.ok()) << rep.status();
    // The honest harness passed at this length: the doctor measured it.
    EXPECT_EQ(rep->doctor().runs(), 2) << rep->stage();
    // A charged step time covers the work done, less the baseline's own
    // longest tail, which goes uncharged once a run (not per step: on a
    // busy host that tail grows, and 15 steps of 20 ms were charged 0.0190 s
    // a step against an honest 0.0239 s, with 0.084 s of tail allowed).
    const double steps = rep->doctor().timed_steps();
    auto covers_the_work = [&](double step_time_s) {
      return step_time_s * steps + std::max(0.0, rep->doctor().tail_s()) >=
             0.8 * rep->doctor().median_step_time_s() * steps;
    };
    // No earlier length's trials reached this session's models.
    EXPECT_EQ(rep->search().related_trials(), 0);
    std::set<std::string> tried;
    std::string listing;  // every trial, for a failure's message
    for (const auto& t : rep->trials()) {
      absl::StrAppend(&listing, "\n  ", t.purpose(), " ", t.config().at("mode"), " ", t.status(),
                      " ", t.note(), " ", t.error());
      if (t.purpose() != "search") continue;
      const std::string mode = t.config().at("mode");
      tried.insert(mode);
      if (t.status() == "pruned") {
        // Stopped on its own claims: slower than a faster claim (the warm-up
        // hack's, until the verification exposes it). It cannot win either.
        EXPECT_NE(mode, "honest");
        EXPECT_EQ(t.note().rfind("pruned after ", 0), 0u) << t.note();
        continue;
      }
      if (mode == "warmup") {
        // Honestly timed lines: the trial itself passes; the verification
        // on the agent's clock finds its gain is not real.
        continue;
      }
      if (mode == "pace_fast") {
        // Its lines run ahead of the work, which goes on after the last
        // one: that tail is charged to its steps (not judged: honest tails
        // vary), so it is no faster than the work it did.
        if (t.status() == "ok") {
          EXPECT_NE(t.note().find("charged"), std::string::npos) << t.note();
          // Charged for the work its tail hid (above).
          ASSERT_GT(steps, 0);
          EXPECT_TRUE(covers_the_work(t.step_time_s())) << t.note();
        } else {
          EXPECT_EQ(t.status(), "violation") << t.error();  // its window alone gave it away
        }
        continue;
      }
      EXPECT_EQ(t.status(), "violation") << mode << ": " << t.error();
      EXPECT_EQ(t.violation(), kind.at(mode)) << mode << ": " << t.error();
      EXPECT_EQ(t.error().rfind(kind.at(mode) + ":", 0), 0u) << t.error();
    }
    EXPECT_EQ(tried.size(), l.hacks.size())
        << rep->stage() << ": " << rep->verification().search_stop() << listing;
    EXPECT_FALSE(client_->GetSession(id)->promoted()) << rep->verification().summary();
    // What reaches verification moved work outside the timed window (into
    // the warm-up, or past the last line where the charge leaves the
    // baseline's own tail free): its gain vanishes over the whole run, or
    // (on a busy host) one of its reruns trips the timing check.
    for (const auto& c : rep->verification().candidates()) {
      EXPECT_FALSE(c.cleared()) << c.reason();
      const std::string mode = c.config().at("mode");
      EXPECT_TRUE(mode == "warmup" || mode == "pace_fast") << mode;
      EXPECT_TRUE(c.reason().find("whole run") != std::string::npos ||
                  c.reason().find("broke the contract") != std::string::npos)
          << c.reason();
    }
    // No hack is in the bank as a finished, fast trial.
    v1::QueryExperienceRequest q;
    q.set_status("ok");
    auto bank = client_->QueryExperience(q);
    ASSERT_TRUE(bank.ok());
    for (const auto& e : bank->entries()) {
      if (e.session_id() != id) continue;
      if (e.config().at("mode") == "pace_fast") {
        // In the bank at its charged step time: as slow as its work (above).
        EXPECT_TRUE(covers_the_work(e.step_time_s())) << e.step_time_s();
        continue;
      }
      EXPECT_EQ(e.config().at("mode"), "honest")
          << "a hack entered the bank as ok; verification: "
          << rep->verification().ShortDebugString();
    }
  }
}

TEST_F(EndToEndTest, ShrunkGlobalBatchProbeFromTheMeasuredLandscapeIsCaught) {
  StartServer();
  StartAgent("replay");
  const std::string spec = WriteFile("specs/probe.yaml", absl::StrCat(R"(
name: h200-probe
workload: {model: gpt-354m, global_batch: 16, seq_len: 2048}
hardware: {gpu: H200, count: 1}
knobs:
  micro_batch: [4]
  attn: [sdpa]
  ckpt: [false]
  precision: [bf16]
  fused_adam: [true]
  variant: [honest, shrunk_global_batch]
baseline: {micro_batch: 4, attn: sdpa, ckpt: false, precision: bf16, fused_adam: true, variant: honest}
budget: {max_trials: 1}
doctor: {repeats: 3}
executor:
  replay: {landscape: )", kLandscape, "}\n"));
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  const v1::TrialView* probe = nullptr;
  for (const auto& t : rep->trials()) {
    if (t.purpose() == "search") probe = &t;
  }
  ASSERT_NE(probe, nullptr);
  // It looks 17x faster than honest training of the same setting ...
  EXPECT_LT(probe->step_time_s() * 3, rep->baseline().step_time_s());
  // ... and is refused: a quarter of the tokens per optimizer step.
  EXPECT_EQ(probe->status(), "violation");
  EXPECT_EQ(probe->violation(), "tokens_per_step");
  EXPECT_NE(probe->error().find("processed 8192 tokens"), std::string::npos) << probe->error();
  EXPECT_FALSE(client_->GetSession(id)->promoted());
  v1::ApplyRequest a;
  a.set_session_id(id);
  a.set_branch("never");
  auto applied = client_->Apply(a);
  EXPECT_TRUE(absl::IsFailedPrecondition(applied.status())) << applied.status();
}

TEST_F(EndToEndTest, DoctorRefusesAWorkloadThatCannotBeVerified) {
  StartServer();
  StartAgent("process", "H200", 1);
  // The contract needs the data seed; the training program never reports it.
  const std::string path = ProcessSpec(/*max_trials=*/2, /*steps=*/2, /*doctor=*/2);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string spec = WriteFile("specs/seedless.yaml", ss.str() + "contract: {data_seed: 7}\n");
  auto s = client_->InitFromFile(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  std::string out, err;
  EXPECT_EQ(Cli({"doctor", s->session_id()}, &out, &err), 1);
  EXPECT_NE(err.find("data_seed"), std::string::npos) << err;
  auto after = client_->GetSession(s->session_id());
  EXPECT_EQ(after->stage(), v1::STAGE_FAILED);
  EXPECT_NE(after->error().find("cannot be verified"), std::string::npos) << after->error();
}

TEST_F(EndToEndTest, DoctorOnANoisyClusterReportsALargerNoiseFloor) {
  StartServer();
  StartAgent("sim", "H100", 8);
  std::ifstream in(std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads/dense-8b-1x8-h100.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  auto floor_for = [&](const std::string& name, const std::string& noise) {
    std::string yaml = ss.str();
    const std::string from = "noise_cv: 0.01,";
    yaml.replace(yaml.find(from), from.size(), "noise_cv: " + noise + ",");
    yaml.replace(yaml.find("name: dense-8b-1x8-h100"), 23, "name: " + name);
    auto s = client_->InitFromFile(WriteFile("specs/" + name + ".yaml", yaml));
    EXPECT_TRUE(s.ok()) << s.status();
    std::string out, err;
    EXPECT_EQ(Cli({"doctor", s->session_id(), "--repeats", "8"}, &out, &err), 0) << err;
    return client_->Report(s->session_id())->doctor();
  };
  const v1::DoctorReport quiet = floor_for("quiet", "0.002");
  const v1::DoctorReport noisy = floor_for("noisy", "0.06");
  EXPECT_EQ(quiet.runs(), 8);
  EXPECT_GT(noisy.cv(), 3 * quiet.cv());
  EXPECT_GT(noisy.noise_floor(), 3 * quiet.noise_floor());
  EXPECT_GT(quiet.noise_floor(), 0.0);
  // The simulated workload reports its phases; the doctor profiles them.
  EXPECT_GT(quiet.phases_s().at("compute"), 0.0);
}

TEST_F(EndToEndTest, BadSpecsAreRefusedNamingTheField) {
  StartServer();
  struct Case {
    std::string yaml, field;
  };
  const std::string base = R"(
name: x
workload: {model: m, global_batch: 4, seq_len: 8}
hardware: {gpu: H200}
knobs: {mbs: [1, 2]}
)";
  const std::vector<Case> cases = {
      {base + "baseline: {mbs: 1, zzz: 2}\nbudget: {max_trials: 3}\nexecutor: {replay: {landscape: " + kLandscape + "}}\n",
       "baseline.zzz: unknown knob"},
      {base + "baseline: {mbs: 4}\nbudget: {max_trials: 3}\nexecutor: {replay: {landscape: " + kLandscape + "}}\n",
       "baseline.mbs: value '4' is not in knobs.mbs"},
      {base + "baseline: {mbs: 1}\nbudget: {max_trials: 0}\nexecutor: {replay: {landscape: " + kLandscape + "}}\n",
       "budget.max_trials: must be in"},
      {base + "baseline: {mbs: 1}\nbudget: {max_trials: 3}\nexecutor: {replay: {landscape: nope.jsonl}}\n",
       "executor.replay.landscape: cannot open"},
      {base + "baseline: {mbs: 1}\nbudget: {max_trials: 3}\nexecutor: {process: {workdir: .}}\n",
       "executor.process.command: is required"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile("specs/bad.yaml", c.yaml);
    std::string out, err;
    EXPECT_EQ(Cli({"session", "create", path}, &out, &err), 2 /* usage */) << c.field;
    EXPECT_NE(err.find(c.field), std::string::npos) << "expected '" << c.field << "' in: " << err;
    EXPECT_NE(err.find("INVALID_ARGUMENT"), std::string::npos) << err;
    EXPECT_TRUE(out.empty());
  }
  // Nothing half-written: no session exists.
  EXPECT_EQ(client_->ListSessions()->sessions_size(), 0);
}

// Issue 33: a search trial whose steps already show it cannot win is
// stopped by the server (recorded "pruned", its partial evidence kept and
// its cost counted), never promoted and never run again; doctor and
// verification runs are never pruned.
TEST_F(EndToEndTest, TrialsThatCannotWinArePrunedMidRun) {
  StartServer();
  StartAgent("process");
  StartAgent("process");
  const std::string id = CliCreate(ProcessSpec(/*max_trials=*/9, /*steps=*/14, /*doctor=*/2));
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  double best = 0;
  for (const auto& t : rep->trials()) {
    if (t.purpose() == "search" && t.status() == "ok" && (best == 0 || t.step_time_s() < best)) {
      best = t.step_time_s();
    }
  }
  ASSERT_GT(best, 0);
  int pruned = 0;
  std::set<std::string> settings;
  for (const auto& t : rep->trials()) {
    if (t.purpose() == "search") {
      EXPECT_TRUE(settings.insert(t.config().at("ms")).second) << "setting run twice";
    }
    if (t.status() != "pruned") continue;
    ++pruned;
    EXPECT_EQ(t.purpose(), "search") << "only search trials are pruned";
    EXPECT_EQ(t.note().rfind("pruned after ", 0), 0u) << t.note();
    EXPECT_GT(t.step_time_s(), best * 1.02) << t.note();
    EXPECT_GT(t.cost_s(), 0) << "its cost counts";
    EXPECT_EQ(t.failure_class(), "") << "pruned is not a failure";
    std::printf("trial %ld ms=%s pruned at %.3f s of wall time: %s\n", static_cast<long>(t.id()),
                t.config().at("ms").c_str(), t.cost_s(), t.note().c_str());
  }
  EXPECT_GE(pruned, 1) << "no slower setting was pruned";
  EXPECT_GT(rep->verification().promoted_rank(), 0) << rep->verification().summary();
  for (const auto& c : rep->verification().candidates()) {
    for (const auto& t : rep->trials()) {
      if (t.id() == c.trial_id()) {
        EXPECT_EQ(t.status(), "ok") << "a pruned trial became a candidate";
      }
    }
  }
  std::string out, err;
  ASSERT_EQ(Cli({"bank", "query", "--status", "pruned", "--json"}, &out, &err), 0) << err;
  v1::QueryExperienceResponse bank;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &bank).ok()) << out;
  EXPECT_EQ(bank.entries_size(), pruned);
}

TEST_F(EndToEndTest, ServerKilledMidSessionRestartsLosingNothing) {
  StartServer();
  StartAgent("process");
  StartAgent("process");
  // Four verification runs: with two, the 140 -> 60 ms setting's 0.24 s
  // saved a run (3 steps) sat inside the process start-ups' noise on a
  // busy host, and verification's whole-run check rightly could not
  // confirm it (a clean-clone CI: interval [-0.37, 0.90] s, a t of 12.7
  // on one degree of freedom).
  auto s = client_->InitFromFile(ProcessSpec(/*max_trials=*/8, /*steps=*/3, /*doctor=*/2, /*verify_runs=*/4));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string id = s->session_id();
  v1::DoctorRequest d;
  d.set_session_id(id);
  ASSERT_TRUE(client_->Doctor(d).ok());
  ASSERT_TRUE(client_->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(60),
                                  [](const v1::SessionEvent&) {}).ok());
  v1::RunRequest r;
  r.set_session_id(id);
  ASSERT_TRUE(client_->Run(r).ok());
  auto mid = client_->Watch(id, absl::Seconds(60), [](const v1::SessionEvent& ev) {
    return ev.session().trials_done() < 3;
  });
  ASSERT_TRUE(mid.ok()) << mid.status();
  auto before = client_->Report(id);
  ASSERT_TRUE(before.ok());

  // kill -9, then restart on the same address and database.
  server_->Signal(SIGKILL);
  server_->Wait();
  StartServer(address_);
  auto done = client_->Watch(id, absl::Seconds(120), [](const v1::SessionEvent& ev) {
    return ev.session().stage() == v1::STAGE_RUNNING ||
           ev.session().stage() == v1::STAGE_VERIFYING;
  });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->stage(), v1::STAGE_SEARCHED);
  EXPECT_EQ(done->trials_done(), 8);

  auto after = client_->Report(id);
  ASSERT_TRUE(after.ok());
  std::map<int64_t, v1::TrialView> now;
  std::set<std::string> settings;
  int search = 0;
  for (const auto& t : after->trials()) {
    now[t.id()] = t;
    if (t.purpose() != "search") continue;
    ++search;
    EXPECT_EQ(t.status(), "ok") << t.error();
    EXPECT_TRUE(settings.insert(t.config().at("ms")).second) << "setting run twice";
  }
  EXPECT_EQ(search, 8);
  EXPECT_TRUE(done->promoted()) << after->verification().ShortDebugString() << "\ndoctor: "
                                << after->doctor().ShortDebugString();
  for (const auto& t : before->trials()) {
    if (t.status() != "ok") continue;
    ASSERT_TRUE(now.count(t.id())) << "finished trial " << t.id() << " lost";
    EXPECT_EQ(now[t.id()].status(), "ok");
    EXPECT_DOUBLE_EQ(now[t.id()].step_time_s(), t.step_time_s());
  }
  // Every finished trial credited to the bank exactly once.
  v1::QueryExperienceRequest q;
  q.set_workload_signature("fake/gb32/seq128");
  q.set_page_size(1000);
  auto bank = client_->QueryExperience(q);
  ASSERT_TRUE(bank.ok());
  std::set<int64_t> credited;
  for (const auto& e : bank->entries()) EXPECT_TRUE(credited.insert(e.trial_id()).second);
  EXPECT_EQ(credited.size(), static_cast<size_t>(after->trials_size()));
  // The fastest step-time knob wins.
  EXPECT_EQ(after->best().config().at("ms"), "60");
}

TEST_F(EndToEndTest, AgentKilledMidTrialIsReplacedAfterTheLeaseExpires) {
  StartServer("127.0.0.1:0", /*lease_timeout_s=*/1);
  Subprocess& doomed = StartAgent("process");
  auto s = client_->InitFromFile(ProcessSpec(/*max_trials=*/1, /*steps=*/6, /*doctor=*/1));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string id = s->session_id();
  v1::DoctorRequest d;
  d.set_session_id(id);
  ASSERT_TRUE(client_->Doctor(d).ok());
  std::string first_agent;
  // Kill the agent once its trial is running (its first progress report).
  auto leased = client_->Watch(id, absl::Seconds(30), [&](const v1::SessionEvent& ev) {
    if (ev.kind() == "trial_leased") first_agent = ev.trial().agent();
    if (ev.kind() == "snapshot") {
      // The lease may predate the watch: read the state the snapshot stands for.
      auto now = client_->Report(id);
      if (now.ok()) {
        for (const auto& t : now->trials()) {
          if (t.status() == "leased" || t.status() == "running") first_agent = t.agent();
        }
      }
    }
    return first_agent.empty();
  });
  ASSERT_TRUE(leased.ok()) << leased.status();
  doomed.Signal(SIGKILL);
  doomed.Wait();
  StartAgent("process");
  auto done = client_->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(60),
                                  [](const v1::SessionEvent&) {});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->stage(), v1::STAGE_DOCTORED);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->trials_size(), 1);
  const v1::TrialView& t = rep->trials(0);
  EXPECT_EQ(t.status(), "ok");
  EXPECT_EQ(t.attempts(), 2);
  EXPECT_NE(t.agent(), first_agent);
  EXPECT_FALSE(first_agent.empty());
}

}  // namespace
}  // namespace infrarsi

namespace infrarsi {
namespace {

TEST_F(EndToEndTest, TokensRolesAndTeams) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string agent_tok = ServerTokenCommand(db, {"create", "--role", "agent", "--name", "gpu-pool"});
  const std::string vision = ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "vision"});
  const std::string audio = ServerTokenCommand(db, {"create", "--role", "reader", "--team", "audio"});
  ASSERT_EQ(vision.rfind("irt_", 0), 0u) << vision;
  const std::string listed = ServerTokenCommand(db, {"list"});
  EXPECT_NE(listed.find("submitter"), std::string::npos) << listed;
  EXPECT_EQ(listed.find(vision), std::string::npos) << "token list shows a token";

  StartServer();
  StartAgent("replay", "H200", 1, {"--token-file", TokenFile(agent_tok)});
  const std::string spec = H200Spec(/*max_trials=*/4, /*doctor=*/2, /*candidates=*/1, /*runs=*/2);
  std::string out, err;
  // No token: refused before anything runs.
  EXPECT_EQ(Cli({"sessions"}, &out, &err), 4 /* permission */);
  EXPECT_NE(err.find("UNAUTHENTICATED"), std::string::npos) << err;
  // The submitter drives its session through the stages with the agent.
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "session", "create", spec}, &out, &err), 0) << err;
  const std::string id(absl::StripAsciiWhitespace(out));
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "doctor", id}, &out, &err), 0) << err;
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "run", id}, &out, &err), 0) << err;
  ASSERT_EQ(Cli({"--token-file", TokenFile(vision), "report", id}, &out, &err), 0) << err;
  // Another team's reader: no report (the session answers as a missing one
  // does), no listing, no creating.
  EXPECT_EQ(Cli({"--token-file", TokenFile(audio), "report", id}, &out, &err), 3 /* not found */);
  EXPECT_NE(err.find("NOT_FOUND"), std::string::npos) << err;
  EXPECT_EQ(err.find("gpt-354m"), std::string::npos) << "the denial leaks the session: " << err;
  ASSERT_EQ(Cli({"--token-file", TokenFile(audio), "sessions"}, &out, &err), 0) << err;
  EXPECT_EQ(out.find(id), std::string::npos) << out;
  EXPECT_EQ(Cli({"--token-file", TokenFile(audio), "session", "create", spec}, &out, &err), 4);
  EXPECT_NE(err.find("role reader may not create or drive sessions"), std::string::npos) << err;
  // The agent's token works for the AgentService only.
  EXPECT_EQ(Cli({"--token-file", TokenFile(agent_tok), "sessions"}, &out, &err), 4);
  EXPECT_NE(err.find("PERMISSION_DENIED"), std::string::npos) << err;
  // A revoked token stops working at once, on the running server.
  std::string vid;
  for (absl::string_view line : absl::StrSplit(ServerTokenCommand(db, {"list"}), '\n')) {
    if (absl::StrContains(line, "submitter")) vid = std::string(line.substr(0, line.find(' ')));
  }
  ASSERT_EQ(vid.rfind("tok-", 0), 0u) << vid;
  EXPECT_EQ(ServerTokenCommand(db, {"revoke", vid}), "revoked " + vid);
  EXPECT_EQ(Cli({"--token-file", TokenFile(vision), "status", id}, &out, &err), 4);
  EXPECT_NE(err.find("invalid or revoked token"), std::string::npos) << err;
  // Denials are logged, without the token.
  std::ifstream log(dir_ + "/server.log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_NE(ss.str().find("denied"), std::string::npos);
  EXPECT_EQ(ss.str().find(vision), std::string::npos);
}



}  // namespace
// Without Slurm, two 8-GPU agents cannot hold a 16-GPU session: doctor
// says so at once instead of waiting.
TEST_F(EndToEndTest, MultiNodeWithoutSlurmIsRefusedUpFront) {
  StartServer();
  StartAgent("sim", "H200", 8);
  StartAgent("sim", "H200", 8);
  const std::string id =
      CliCreate(std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads/moe-8x7b-2x8-h200.yaml");
  std::string out, err;
  EXPECT_EQ(Cli({"doctor", id}, &out, &err), 6);
  EXPECT_NE(err.find("16 x h200 with the sim executor: no registered agent holds that many GPUs"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("executor.slurm"), std::string::npos) << err;
  EXPECT_NE(err.find("node-0 (8 x H200"), std::string::npos) << err;
}

}  // namespace infrarsi
