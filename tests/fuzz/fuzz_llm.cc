// What a language model answers and what a team pastes as a launch command
// are untrusted: the readers must refuse with an error, never crash, and
// never turn them into a spec that does not parse. First byte: which reader.
//   0  the model's extra knobs for a draft (MergeLlmDraftAnswer)
//   1  the model's patches for a session (AdmitLlmPatches), stored and restored
//   2  a script's argparse choices (ScriptChoices)
//   3  a launch command to draft (DraftSpec), the YAML read back
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/draft.h"
#include "core/llm_patches.h"
#include "core/spec.h"

namespace {

infrarsi::SpecParseOptions Options() {
  infrarsi::SpecParseOptions o;
  o.spec_dir = "/specs";
  o.stored = true;
  o.may_name_urls = true;
  o.team_known = true;
  return o;
}

// A drafted spec must read back as a spec.
void MustParse(const infrarsi::Draft& d) {
  auto parsed = infrarsi::ParseSpec(infrarsi::DraftYaml(d), Options());
  if (!parsed.ok()) {
    fprintf(stderr, "UNPARSED: %s\n%s\n", std::string(parsed.status().message()).c_str(), infrarsi::DraftYaml(d).c_str());
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      infrarsi::DraftInput di;
      di.gpu = "H100";
      auto argv = infrarsi::SplitCommandLine(
          "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --num-attention-heads 32 "
          "--seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --num-workers 2 "
          "--use-distributed-optimizer --weird-flag x --bare-flag");
      di.argv = *argv;
      auto d = infrarsi::DraftSpec(di);
      if (!d.ok()) __builtin_trap();
      const std::string body =
          "{\"choices\":[{\"message\":{\"content\":" + infrarsi::JsonQuote(in) + "}}]}";
      for (const std::string& b : {in, body}) {
        infrarsi::Draft copy = *d;
        if (infrarsi::MergeLlmDraftAnswer(b, di, "m", &copy).ok()) MustParse(copy);
      }
      break;
    }
    case 1: {
      auto spec = infrarsi::ParseSpec(R"(
name: s
workload: {model: m, global_batch: 8, seq_len: 64}
hardware: {gpu: cpu, count: 1}
knobs: {mbs: [1, 2]}
baseline: {mbs: 1}
budget: {max_trials: 4}
repository: {url: /repo}
contract: {editable: ["*.py"], protected: [data.py]}
executor:
  process: {command: "python3 train.py --mbs {mbs}"}
)", Options());
      if (!spec.ok()) __builtin_trap();
      const std::string body =
          "{\"choices\":[{\"message\":{\"content\":" + infrarsi::JsonQuote(in) + "}}]}";
      for (const std::string& b : {in, body}) {
        infrarsi::SessionSpec s = *spec;
        auto round = infrarsi::AdmitLlmPatches(b, nullptr, &s);
        if (!round.ok()) continue;
        // Stored and restored, the same patches come back.
        infrarsi::SessionSpec restored = *spec;
        const auto back = infrarsi::DecodeLlmPatchRound(infrarsi::EncodeLlmPatchRound(*round));
        if (!infrarsi::RestoreLlmPatches(back, &restored).ok()) __builtin_trap();
        if (restored.patches.size() != s.patches.size()) __builtin_trap();
      }
      break;
    }
    case 2:
      (void)infrarsi::ScriptChoices(in);
      break;
    case 3: {
      auto argv = infrarsi::SplitCommandLine(in);
      if (!argv.ok()) break;
      infrarsi::DraftInput di;
      di.argv = *argv;
      di.gpu = "H100";
      di.global_batch = 64;
      di.seq_len = 2048;
      di.script_choices = {{"--attn", {"a", "b"}}, {"--odd.flag", {"x", "y"}}};
      auto d = infrarsi::DraftSpec(di);
      if (d.ok()) MustParse(*d);
      break;
    }
  }
  return 0;
}
