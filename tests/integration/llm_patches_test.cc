// Patches from a language model, never trusted: a scripted OpenAI-compatible
// endpoint (cpp-httplib, in this process, no network) answers
// infrarsi-server --llm-patches with canned proposals, and every bad one is
// refused with its reason (does not apply, touches a protected file, lies
// outside the editable scope, no diff, an impossible prior) or, where it
// applies and cheats (shrinks the tokens of a step, moves the optimizer step
// out of the timer), rejected by the contract with its cost reported.
// Malformed, empty, failing, slow and missing answers leave the session to
// run without them, saying why.
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/spec.h"
#include "tests/integration/end_to_end_fixture.h"

namespace infrarsi {
namespace {

// The scripted endpoint: POST /v1/chat/completions answers `answer` (or
// blocks until released, for a slow model). Thread-safe.
class CannedLlm {
 public:
  CannedLlm() {
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      ++requests_;
      if (req.body.find("Propose code patches") != std::string::npos) {
        ++patch_requests_;
        last_request_ = req.body;
      }
      if (block_) cv_.wait(lock, [this] { return !block_; });
      res.status = status_;
      res.set_content(answer_, "application/json");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~CannedLlm() { Stop(); }
  void Stop() {
    Release();
    http_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_, "/v1"); }
  // Answers with `content` as the model's message.
  void Say(const std::string& content) {
    Raw(absl::StrCat(R"({"choices":[{"message":{"role":"assistant","content":)", JsonQuote(content), "}}]})"));
  }
  void Raw(const std::string& body, int status = 200) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = body;
    status_ = status;
  }
  void Block() {
    std::lock_guard<std::mutex> lock(mu_);
    block_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      block_ = false;
    }
    cv_.notify_all();
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Requests for patches (the server also asks the same endpoint for priors).
  int patch_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return patch_requests_;
  }
  // The last request for patches.
  std::string last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string answer_ = "{}";
  int status_ = 200;
  bool block_ = false;
  int requests_ = 0;
  int patch_requests_ = 0;
  std::string last_request_;
};

std::string Proposal(const std::string& name, const std::string& diff, double prior, const std::string& why) {
  return absl::StrCat(R"({"name":)", JsonQuote(name), R"(,"diff":)", JsonQuote(diff), R"(,"rationale":)",
                      JsonQuote(why), R"(,"prior":{"time":)", prior, "}}");
}

class LlmPatchesTest : public EndToEndTest {
 protected:
  void StartWithLlm(double timeout_s) {
    server_extra_ = {"--llm-endpoint", llm_.url(), "--llm-model", "canned", "--llm-patches",
                     "--llm-timeout-s", absl::StrCat(timeout_s)};
    StartServer();
  }
  CannedLlm llm_;
};

// The tiny-gpt job drafted as a team would, and the model's proposals.
TEST_F(LlmPatchesTest, EveryProposalIsAdmittedAsAUserPatchOrRefusedAndCheatsAreCaught) {
  const std::string python = TorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (deploy/install_deps.sh installs python3-torch)";
  const std::string src = std::string(INFRARSI_SOURCE_DIR);
  const std::string example = src + "/deploy/examples/tiny-gpt";
  const std::string repo = dir_ + "/tiny-gpt";
  MakeTinyGptRepo(repo);
  if (HasFatalFailure()) return;
  e2e_fs::create_directories(dir_ + "/specs");
  const std::string spec = dir_ + "/specs/drafted.yaml";
  std::string out, err;
  ASSERT_EQ(Cli({"draft", "--gpu", "cpu", "--global-batch", "8", "--seq-len", "64", "--data-seed", "1234",
                 "--repo", repo, "-o", spec, "--", python, "train.py", "--micro-batch", "1", "--threads",
                 "1", "--recompute", "true", "--attn", "matmul", "--optimizer", "adamw"},
                &out, &err), 0) << err;
  ASSERT_NE(ReadText(spec).find("optimizer_in_window: true"), std::string::npos);

  const std::string layernorm = ReadText(example + "/patches/fused-layernorm.diff");
  const std::string half = ReadText(example + "/patches/half-sequence.diff");
  const std::string move_opt = ReadText(src + "/tests/testing/llm_patches/move-optimizer.diff");
  // A context line the file does not have: git cannot apply it.
  const std::string stale = absl::StrReplaceAll(
      layernorm, {{"-        mean = x.mean(-1, keepdim=True)", "-        mean = x.mean(dim=-1, keepdim=True)"}});
  ASSERT_NE(stale, layernorm);
  llm_.Say(absl::StrCat(
      "```json\n{\"patches\": [",
      Proposal("fused-layernorm", layernorm, -0.1, "F.layer_norm instead of six elementwise passes"), ",",
      Proposal("half-sequence", half, -0.6, "half the context is enough"), ",",
      Proposal("move-optimizer", move_opt, -0.6, "overlap the update with the next step"), ",",
      Proposal("stale", stale, -0.1, "the same, against another version"), ",",
      Proposal("touch-data", ReadText(src + "/tests/testing/llm_patches/touch-data.diff"), -0.2, "smaller vocabulary"), ",",
      Proposal("outside", ReadText(src + "/tests/testing/llm_patches/outside.diff"), -0.2, "a helper"), ",",
      R"({"name": "no-diff", "rationale": "trust me"},)",
      Proposal("huge-prior", layernorm, -9, "very fast"), "]}\n```"));
  StartWithLlm(30);
  StartAgent("process", "cpu", 1);
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  EXPECT_EQ(llm_.patch_requests(), 1) << "asked for patches once per session";
  // The model was shown the profile, the contract and the editable files,
  // never the protected ones.
  const std::string asked = llm_.last_request();
  for (const char* want : {"Time per step by phase", "512 tokens per step", "=== model.py ===",
                           "=== train.py ===", "protected files (never change): data.py, infrarsi_harness.py"}) {
    EXPECT_NE(asked.find(want), std::string::npos) << want;
  }
  EXPECT_EQ(asked.find("=== data.py ==="), std::string::npos);
  EXPECT_EQ(asked.find("=== infrarsi_harness.py ==="), std::string::npos);

  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  std::map<std::string, v1::SessionReport::LlmPatch> by_name;
  for (const auto& p : rep->llm_patches()) by_name[p.name()] = p;
  ASSERT_EQ(rep->llm_patches_size(), 8);
  for (const char* admitted : {"llm-fused-layernorm", "llm-half-sequence", "llm-move-optimizer"}) {
    EXPECT_TRUE(by_name[admitted].accepted()) << admitted << ": " << by_name[admitted].reason();
  }
  auto refused = [&](const std::string& name, const std::string& why) {
    EXPECT_FALSE(by_name[name].accepted()) << name;
    EXPECT_NE(by_name[name].reason().find(why), std::string::npos) << name << ": " << by_name[name].reason();
  };
  refused("llm-stale", "does not apply");        // git: a context line differs
  refused("llm-touch-data", "data.py");           // protected
  refused("llm-outside", "evil.py");              // outside the editable scope
  refused("proposal 7", "needs a name and a diff");
  refused("llm-huge-prior", "prior: time must be in [-2, 2]");
  // The contract judged the admitted patches' trials: the cheats broke it,
  // each time, and the report prices them.
  int cheats = 0;
  for (const auto& t : rep->trials()) {
    if (t.status() == "queued" || t.status() == "cancelled") continue;
    const bool half_on = t.config().at("patch_llm_half_sequence") == "on";
    const bool move_on = t.config().at("patch_llm_move_optimizer") == "on";
    if (!half_on && !move_on) continue;
    ++cheats;
    EXPECT_EQ(t.status(), "violation") << t.error();
    EXPECT_TRUE(t.violation() == "tokens_per_step" || t.violation() == "timing") << t.violation();
  }
  EXPECT_GT(cheats, 0) << "the search never tried a cheating patch";
  bool costed = false;
  for (const auto& c : rep->failure_costs()) {
    costed = costed || (c.knob() == "patch" && (c.value() == "llm-half-sequence" || c.value() == "llm-move-optimizer") &&
                        c.gpu_s() > 0 && c.failure_class().rfind("violation:", 0) == 0);
  }
  EXPECT_TRUE(costed) << "the report prices the cheating patches' failures";
  // Nothing the model said changed the contract or the verdict's footing.
  EXPECT_EQ(rep->contract().patches_size(), 0) << "the contract is Init's";
  EXPECT_EQ(rep->best().config().at("patch_llm_half_sequence"), "off");
  EXPECT_EQ(rep->best().config().at("patch_llm_move_optimizer"), "off");
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_NE(out.find("Patches an LLM proposed:"), std::string::npos) << out;
  EXPECT_NE(out.find("llm-touch-data: refused:"), std::string::npos) << out;
  // A restarted server keeps the proposals, the patch knobs and their
  // trials' verdicts, and does not ask again.
  agents_.clear();
  server_.reset();
  StartWithLlm(30);
  auto again = client_->Report(id);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->llm_patches_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(again->llm_patches(i).accepted(), rep->llm_patches(i).accepted());
    EXPECT_EQ(again->llm_patches(i).reason(), rep->llm_patches(i).reason());
  }
  EXPECT_EQ(again->failure_costs_size(), rep->failure_costs_size());
  EXPECT_EQ(llm_.patch_requests(), 1);
}

// Answers that cannot be used: the run goes on without patches, saying why.
// What was admitted before and reached a commit: a patch making an
// editable file a symbolic link in the mode spelling "0120000" (libgit2
// reads it as 120000; the old text check knew only the literal), and
// gitlinks and git's own files (.gitattributes filters, .gitmodules URLs),
// even with the whole repository editable. Each is refused on libgit2's own
// parse, naming why.
TEST_F(LlmPatchesTest, LinksGitlinksAndGitsOwnFilesAreRefusedInAnySpelling) {
  const std::string repo = MakeRepo();
  const std::string spec = WriteFile("specs/llm.yaml", absl::StrCat(R"(
name: llm-links
workload: {model: fake, global_batch: 32, seq_len: 128}
hardware: {gpu: H200, count: 1}
knobs:
  ms: [60, 100]
baseline: {ms: 100}
budget: {max_trials: 1}
doctor: {repeats: 2}
repository: {url: )", repo, R"(}
contract: {editable: ["**"]}
executor:
  process:
    command: ")", FAKE_TRAINER, R"( --steps 4 --step-ms {ms}"
    timeout_s: 60
)"));
  const std::string link =
      "diff --git a/train.py b/train.py\ndeleted file mode 100644\n--- a/train.py\n+++ /dev/null\n"
      "@@ -1 +0,0 @@\n-train\n"
      "diff --git a/train.py b/train.py\nnew file mode 0120000\n--- /dev/null\n+++ b/train.py\n"
      "@@ -0,0 +1 @@\n+/tmp/fast-train.py\n\\ No newline at end of file\n";
  const std::string gitlink =
      "diff --git a/vendor b/vendor\nnew file mode 160000\n--- /dev/null\n+++ b/vendor\n@@ -0,0 +1 @@\n"
      "+Subproject commit 1234567890123456789012345678901234567890\n";
  const std::string attributes =
      "diff --git a/.gitattributes b/.gitattributes\nnew file mode 100644\n--- /dev/null\n"
      "+++ b/.gitattributes\n@@ -0,0 +1 @@\n+*.py filter=fast\n";
  const std::string modules =
      "diff --git a/.gitmodules b/.gitmodules\nnew file mode 100644\n--- /dev/null\n+++ b/.gitmodules\n"
      "@@ -0,0 +1,3 @@\n+[submodule \"x\"]\n+\tpath = x\n+\turl = ext::sh -c touch% /tmp/pwned\n";
  const std::string notes =
      "diff --git a/notes.md b/notes.md\nnew file mode 100644\n--- /dev/null\n+++ b/notes.md\n@@ -0,0 +1 @@\n+n\n";
  llm_.Say(absl::StrCat(
      "```json\n{\"patches\": [", Proposal("link-train", link, -1.0, "a faster trainer"), ",",
      Proposal("vendor", gitlink, -0.1, "pin a dependency"), ",",
      Proposal("attributes", attributes, -0.1, "normalise line endings"), ",",
      Proposal("modules", modules, -0.1, "a submodule"), ",",
      // Its rationale tries to rewrite the terminal: moved up a line, the
      // line cleared, a title set.
      Proposal("notes", notes, -0.1,
               "notes\x1b]0;owned\x07\x1b[1A\x1b[2Kreviewed by security"),
      "]}\n```"));
  StartWithLlm(30);
  StartAgent("process", "H200", 1);
  const std::string id = CliCreate(spec);
  CliDoctorAndRun(id);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok()) << rep.status();
  std::map<std::string, v1::SessionReport::LlmPatch> by_name;
  for (const auto& p : rep->llm_patches()) by_name[p.name()] = p;
  ASSERT_EQ(rep->llm_patches_size(), 5);
  const std::map<std::string, std::string> why = {
      {"llm-link-train", "'train.py' is a symbolic link"},  // was admitted, promoted at 3.00x, committed
      {"llm-vendor", "is a gitlink"},
      {"llm-attributes", "is one of git's own files"},
      {"llm-modules", "is one of git's own files"}};
  for (const auto& [name, reason] : why) {
    EXPECT_FALSE(by_name[name].accepted()) << name;
    EXPECT_NE(by_name[name].reason().find(reason), std::string::npos) << name << ": " << by_name[name].reason();
  }
  EXPECT_TRUE(by_name["llm-notes"].accepted()) << by_name["llm-notes"].reason();
  // The report prints the rationale with its escapes shown, not obeyed.
  std::string out, err;
  ASSERT_EQ(Cli({"report", id}, &out, &err), 0) << err;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
  EXPECT_NE(out.find("notes\\x1b]0;owned\\x07\\x1b[1A"), std::string::npos) << out;
}

TEST_F(LlmPatchesTest, BadSlowAndMissingAnswersAreSaidAndTheRunGoesOn) {
  const std::string repo = MakeRepo();
  // The fake trainer: a process job of a repository, fast.
  const std::string spec = WriteFile("specs/llm.yaml", absl::StrCat(R"(
name: llm-answers
workload: {model: fake, global_batch: 32, seq_len: 128}
hardware: {gpu: H200, count: 1}
knobs:
  ms: [60, 80, 100]
baseline: {ms: 100}
budget: {max_trials: 2}
doctor: {repeats: 2}
verify: {candidates: 1, runs: 2}
repository: {url: )", repo, R"(}
contract: {editable: [train.py]}
executor:
  process:
    command: ")", FAKE_TRAINER, R"( --steps 4 --step-ms {ms}"
    timeout_s: 60
)"));
  StartWithLlm(1);
  StartAgent("process", "H200", 1);
  struct Case {
    const char* what;
    std::function<void()> set;
    const char* note;
  };
  const std::vector<Case> cases = {
      {"malformed JSON", [&] { llm_.Raw("{\"choices\": [ {\"message\": "); }, "not used: response: not JSON"},
      {"prose", [&] { llm_.Say("Sure! Here is a faster training loop for you."); },
       "not used: response content: not a JSON object"},
      {"no choices", [&] { llm_.Raw("{\"choices\": []}"); }, "not used: response.choices: missing or empty"},
      {"HTTP 500", [&] { llm_.Raw("overloaded", 500); }, "not used: llm endpoint"},
      {"slow", [&] { llm_.Block(); }, "not used: llm endpoint"},
      {"gone", [&] { llm_.Stop(); }, "not used: llm endpoint"},
  };
  for (const Case& c : cases) {
    c.set();
    const std::string id = CliCreate(spec);
    CliDoctorAndRun(id);
    llm_.Release();
    auto rep = client_->Report(id);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->llm_patches_size(), 0) << c.what;
    EXPECT_EQ(rep->llm_patches_note().rfind(c.note, 0), 0u) << c.what << ": " << rep->llm_patches_note();
    EXPECT_EQ(rep->stage(), "searched") << c.what << ": the run went on";
  }
}

// `infrarsi draft --llm-endpoint`: the model's extra knobs, validated and
// marked; an endpoint that does not answer leaves the deterministic draft.
TEST_F(LlmPatchesTest, DraftTakesOnlyValidatedKnobsFromTheModelAndStandsWithoutIt) {
  const std::string cmd = "python3 train.py --global-batch 8 --seq-len 64 --micro-batch 1 --prefetch 2 --lr 0.1";
  llm_.Say(R"({"knobs": [{"flag": "--prefetch", "values": ["1", "2", "4"], "rationale": "data loading overlap"},
                         {"flag": "--lr", "values": ["0.1", "0.2"], "rationale": "converges faster"}]})");
  // A script of no known framework: its lines are read as JSON (--reader).
  std::vector<std::string> args = {"draft", "--gpu", "cpu", "--workdir", dir_, "--llm-endpoint", llm_.url(),
                                   "--llm-model", "canned", "--reader", "jsonl", "--"};
  for (absl::string_view w : absl::StrSplit(cmd, ' ')) args.emplace_back(w);
  std::string out, err;
  ASSERT_EQ(Cli(args, &out, &err), 0) << err;
  EXPECT_NE(out.find("# llm: proposed by canned: data loading overlap (--prefetch)"), std::string::npos) << out;
  EXPECT_NE(out.find("prefetch: [1, 2, 4]"), std::string::npos) << out;
  EXPECT_NE(out.find("--lr: refused: it sets what the job computes"), std::string::npos) << out;
  EXPECT_EQ(llm_.requests(), 1);
  // Without the model: the same draft as with none, saying why.
  llm_.Stop();
  ASSERT_EQ(Cli(args, &out, &err), 0) << err;
  EXPECT_EQ(out.find("prefetch:"), std::string::npos) << out;
  EXPECT_NE(out.find("# llm (canned) not used: llm endpoint"), std::string::npos) << out;
  EXPECT_NE(err.find("draft: the LLM's answer was not used"), std::string::npos) << err;
}

}  // namespace
}  // namespace infrarsi
