// Real training end to end: deploy/examples/tiny-gpt, a PyTorch GPT trained
// on CPU, through infrarsi-server, a process agent and the CLI. Kept apart
// from e2e_test because its cost is real work: about 40 training processes
// (doctor, search, verification), 95-140 s on an idle 2-core machine and
// three times that beside other jobs; its ctest timeout
// (tests/CMakeLists.txt) is sized for a loaded host, not an idle one.
#include <git2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/rpc_client.h"
#include "tests/integration/end_to_end_fixture.h"
#include "tests/testing/git_repo.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;
using testing::FileAt;

// A fresh tiny-gpt repository (deploy/examples/tiny-gpt/make_repo.sh) at
// repo_, and a python3 with torch to train it (the test is skipped without).
class TinyGptTest : public EndToEndTest {
 protected:
  void SetUp() override {
    EndToEndTest::SetUp();
    python_ = TorchPython();
    if (python_.empty()) GTEST_SKIP() << "no python3 with torch (deploy/install_deps.sh installs python3-torch)";
    repo_ = dir_ + "/tiny-gpt";
    MakeTinyGptRepo(repo_);
  }

  // The session of `spec_path` through create, doctor and run on a server
  // with one process agent (on a small CI machine two trainings at once
  // would time each other's contention, not the code); its report.
  absl::StatusOr<v1::SessionReport> Tune(const std::string& spec_path, std::string* id) {
    StartServer();
    StartAgent("process", "cpu", 1);
    *id = CliCreate(spec_path);
    CliDoctorAndRun(*id);
    return client_->Report(*id);
  }

  std::string python_, repo_;
};

// deploy/examples/tiny-gpt tuned for real: a PyTorch GPT trained on CPU by
// two process agents, its code patches searched with its launch knobs, the
// reward-hacking patch rejected by the contract, a verified speed-up
// promoted and committed to a new branch of the job's repository.
TEST_F(TinyGptTest, TunedForRealWithPatchesAndCommitted) {
  const std::string& python = python_;
  const std::string& repo = repo_;
  const std::string example = std::string(INFRARSI_SOURCE_DIR) + "/deploy/examples/tiny-gpt";
  const std::string model_before = ReadText(repo + "/model.py");
  // The example's spec, pointed at this repository and interpreter.
  fs::create_directories(dir_ + "/example");
  fs::copy(example + "/patches", dir_ + "/example/patches");
  std::string spec = ReadText(example + "/spec.yaml");
  spec = absl::StrReplaceAll(spec, {{"url: repo,", absl::StrCat("url: ", repo, ",")},
                                    {"\"python3 train.py", absl::StrCat("\"", python, " train.py")}});
  const std::string spec_path = WriteFile("example/spec.yaml", spec);

  std::string id;
  auto rep = Tune(spec_path, &id);
  ASSERT_TRUE(rep.ok()) << rep.status();

  // Every trial that switched the harmful patch on broke the contract, and
  // the search tried it.
  int harmful = 0;
  for (const auto& t : rep->trials()) {
    if (t.config().at("patch_half_sequence") != "on") continue;
    ++harmful;
    EXPECT_EQ(t.status(), "violation") << t.error();
    EXPECT_EQ(t.violation(), "tokens_per_step") << t.error();
  }
  EXPECT_GT(harmful, 0) << "the search never tried the harmful patch";
  bool costed = false;
  for (const auto& c : rep->failure_costs()) {
    costed = costed || (c.failure_class() == "violation:tokens_per_step" && c.knob() == "patch" &&
                        c.value() == "half-sequence" && c.gpu_s() > 0);
  }
  EXPECT_TRUE(costed) << "the report prices the harmful patch's failures";

  // A verified speed-up was promoted, without the harmful patch.
  const auto& v = rep->verification();
  if (v.promoted_rank() <= 0 || std::getenv("TINY_GPT_TRIALS") != nullptr) {
    std::printf("doctor: cv %.4f floor %.4f; search stop: %s; verification: %s\n", rep->doctor().cv(),
                rep->doctor().noise_floor(), rep->search().stop_reason().c_str(), v.summary().c_str());
    for (const auto& t : rep->trials()) {
      std::string cfg;
      for (const auto& [k, val] : t.config()) absl::StrAppend(&cfg, k, "=", val, " ");
      std::printf("trial %ld %s %s %.4f s %s| %s\n", static_cast<long>(t.id()), t.purpose().c_str(),
                  t.status().c_str(), t.step_time_s(), t.error().c_str(), cfg.c_str());
    }
  }
  if (const std::string loaded = NothingPromotedOnALoadedHost(*rep, id); !loaded.empty()) GTEST_SKIP() << loaded;
  ASSERT_GT(v.promoted_rank(), 0) << v.summary();
  const auto& promoted = v.candidates(v.promoted_rank() - 1);
  EXPECT_GT(promoted.ci_low(), 1.0);
  EXPECT_EQ(rep->best().config().at("patch_half_sequence"), "off");
  std::set<std::string> patches_on;
  for (const char* p : {"batched_heads", "fused_layernorm", "fused_gelu"}) {
    if (rep->best().config().at(absl::StrCat("patch_", p)) == "on") patches_on.insert(p);
  }
  // Every source path of the promoted patches is inside the editable scope.
  for (const auto& a : rep->source_audit()) {
    EXPECT_FALSE(a.editable_glob().empty()) << a.path();
    EXPECT_EQ(a.path(), "model.py");
  }
  EXPECT_EQ(rep->source_audit_size(), static_cast<int>(patches_on.size()));

  std::string out, err;
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("Failed-trial costs (GPU-seconds):"), std::string::npos) << out;
  EXPECT_NE(out.find("patch half-sequence"), std::string::npos) << out;
  if (!patches_on.empty()) {
    EXPECT_NE(out.find("model.py (patch "), std::string::npos) << out;
    EXPECT_NE(out.find("inside editable 'model.py'"), std::string::npos) << out;
  }
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/tuned", "--dry-run"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("dry run: would commit"), std::string::npos) << out;
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/tuned"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("committed "), std::string::npos) << out;

  // The commit: on the new branch only, with the patches and the setting.
  git_libgit2_init();
  git_repository* r = nullptr;
  ASSERT_EQ(git_repository_open(&r, repo.c_str()), 0);
  const std::string launch = FileAt(r, "infrarsi/tuned", "infrarsi/tiny-gpt-cpu.launch.yaml");
  EXPECT_NE(launch.find(absl::StrCat("micro_batch: ", rep->best().config().at("micro_batch"))),
            std::string::npos) << launch;
  EXPECT_NE(launch.find(absl::StrCat("session_id: \"", id, "\"")), std::string::npos) << launch;
  // The command the promoted trial ran, its knobs filled in.
  EXPECT_NE(launch.find(absl::StrCat("\"--micro-batch\", \"", rep->best().config().at("micro_batch"), "\"")),
            std::string::npos) << launch;
  const std::string model_after = FileAt(r, "infrarsi/tuned", "model.py");
  EXPECT_EQ(model_after.find("torch.stack") != std::string::npos, patches_on.count("batched_heads") > 0);
  EXPECT_EQ(model_after.find("F.layer_norm") != std::string::npos, patches_on.count("fused_layernorm") > 0);
  EXPECT_EQ(model_after.find("F.gelu") != std::string::npos, patches_on.count("fused_gelu") > 0);
  EXPECT_EQ(FileAt(r, "infrarsi/tuned", "train.py"), FileAt(r, "HEAD", "train.py"));
  git_object* tip = nullptr;
  ASSERT_EQ(git_revparse_single(&tip, r, "infrarsi/tuned"), 0);
  const std::string message = git_commit_message(reinterpret_cast<git_commit*>(tip));
  git_object_free(tip);
  for (const std::string& want :
       {absl::StrCat("Session: ", id), std::string("Speedup: "), std::string("95% interval"),
        std::string("checks passed: tokens/step 512"), std::string("Source paths changed: "),
        std::string("Tuned on: ")}) {
    EXPECT_NE(message.find(want), std::string::npos) << want << " in\n" << message;
  }
  if (!patches_on.empty()) {
    EXPECT_NE(message.find("model.py"), std::string::npos) << message;
  }
  // The user's branch and work tree are untouched.
  EXPECT_EQ(FileAt(r, "HEAD", "model.py"), model_before);
  EXPECT_EQ(ReadText(repo + "/model.py"), model_before);
  git_reference* head = nullptr;
  ASSERT_EQ(git_repository_head(&head, r), 0);
  EXPECT_STRNE(git_reference_shorthand(head), "infrarsi/tuned");
  git_reference_free(head);
  git_repository_free(r);
  git_libgit2_shutdown();
  std::printf("tiny-gpt: promoted %.2fx [%.2f, %.2f], patches on: %zu, harmful trials: %d\n",
              promoted.speedup(), promoted.ci_low(), promoted.ci_high(), patches_on.size(), harmful);
}

// `infrarsi draft` from the tiny-gpt command, and the drafted spec, as
// written, through all five stages: create, doctor, run, report, apply.
TEST_F(TinyGptTest, DraftedSpecRunsAllFiveStagesUnchanged) {
  const std::string& python = python_;
  const std::string& repo = repo_;
  fs::create_directories(dir_ + "/specs");
  const std::string spec = dir_ + "/specs/drafted.yaml";
  std::string out, err;
  // The draft needs no server.
  // The log-reader path: the script's own per-step JSON line is read, the
  // harness it also carries is not the source (the README's walk-through).
  ASSERT_EQ(Cli({"draft", "--gpu", "cpu", "--global-batch", "8", "--seq-len", "64", "--data-seed", "1234",
                 "--repo", repo, "--intent", "faster without changing what it computes", "-o", spec,
                 "--reader", "jsonl", "--", python, "train.py", "--micro-batch", "1", "--threads", "1",
                 "--recompute", "true", "--attn", "matmul", "--optimizer", "adamw"},
                &out, &err), 0) << err;
  EXPECT_NE(err.find("wrote " + spec + " (5 knobs)"), std::string::npos) << err;
  const std::string yaml = ReadText(spec);
  EXPECT_NE(yaml.find("metrics: {reader: jsonl}"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("optimizer_in_window"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("data_seed: 1234"), std::string::npos) << yaml;  // the line states it
  EXPECT_NE(yaml.find("attn: [matmul, einsum]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("repository: {url: \"../tiny-gpt\", base: HEAD}"), std::string::npos) << yaml;
  // Drafting again over an existing file is refused: nothing is overwritten.
  EXPECT_EQ(Cli({"draft", "--gpu", "cpu", "--global-batch", "8", "--seq-len", "64", "-o", spec, "--",
                 python, "train.py", "--micro-batch", "1"}, &out, &err), 6);  // ALREADY_EXISTS: not now
  EXPECT_NE(err.find("--out: " + spec + " exists"), std::string::npos) << err;
  EXPECT_EQ(ReadText(spec), yaml);

  std::string id;
  auto rep = Tune(spec, &id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->contract().tokens_per_step(), 512);
  EXPECT_TRUE(rep->contract().data_seed_set());
  EXPECT_EQ(rep->contract().metrics_reader(), "jsonl");
  const auto& v = rep->verification();
  if (v.promoted_rank() <= 0) {
    for (const auto& t : rep->trials()) {
      std::printf("trial %ld %s %s %.4f s %s\n", static_cast<long>(t.id()), t.purpose().c_str(),
                  t.status().c_str(), t.step_time_s(), t.error().c_str());
    }
  }
  if (const std::string loaded = NothingPromotedOnALoadedHost(*rep, id); !loaded.empty()) GTEST_SKIP() << loaded;
  ASSERT_GT(v.promoted_rank(), 0) << v.summary();
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  ASSERT_EQ(Cli({"apply", id, "--repo", repo, "--branch", "infrarsi/drafted"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("committed "), std::string::npos) << out;
  auto s = client_->GetSession(id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->stage_name(), "applied");
}

}  // namespace
}  // namespace infrarsi
