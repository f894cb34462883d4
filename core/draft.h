// `infrarsi draft`: a session spec drafted from the command a team already
// runs. Pure: the CLI reads the files (the script's own argparse choices,
// the job folder's file list) and the LLM's answer, and hands them here.
//
// The draft recognises launch flags it knows, in Megatron-LM's spelling and
// in common scripts' (parallel degrees, micro-batch and global batch,
// recompute, distributed optimizer, sequence parallel, overlap flags, bucket
// size, attention backend, fused kernels, ZeRO stage, threads), and flags
// whose values the script itself declares (`choices=`). Each becomes a knob
// with values that make sense for the hardware and the model (divisibility
// by the GPUs, heads, layers, experts, the batch), the command's value as
// the baseline. The workload facts (global batch, sequence length, seed,
// precision) go to the contract, never to a knob: a knob may change how
// the job runs, never what it computes. Everything else in the command is
// kept as written. The result is deterministic: the same input drafts the
// same YAML, with a comment on every choice.
//
// An LLM may add knobs (MergeLlmDraftAnswer): only flags the command has or
// the script declares, values that pass the same checks, the command's own
// value kept as the baseline; each marked as the LLM's in the YAML, and
// each refusal said in a comment.
//
// Thread safety: free functions over their arguments.
#ifndef INFRARSI_CORE_DRAFT_H_
#define INFRARSI_CORE_DRAFT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

struct DraftInput {
  // The launch command, one word per element (torchrun / python / srun /
  // deepspeed ... script.py --flags). Required.
  std::vector<std::string> argv;
  std::string gpu;  // hardware.gpu, e.g. "H100" or "cpu". Required.
  int gpus = 0;     // total GPUs; 0: from the launcher (nproc x nodes), else 1
  std::string intent;  // the team's sentence, kept as a comment
  std::string name;    // the session's name; "": from the script
  std::string model;   // workload.model; "": from the script and sizes
  // Workload facts for commands that do not carry them as flags (a flag in
  // the command that disagrees is an error naming both).
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  std::optional<int64_t> data_seed;
  // The script's argparse choices, flag -> values (read from the script by
  // the caller; empty when it has none or could not be read).
  std::map<std::string, std::vector<std::string>> script_choices;
  // Module-level literal assignments and argparse defaults the script
  // declares, flag -> value ("--batch_size" -> "12"): what a flag the
  // command leaves out is (ScriptDefaults).
  std::map<std::string, std::string> script_defaults;
  // The DeepSpeed config the command names (--deepspeed_config or
  // --deepspeed), as JSON text; "" when none or unreadable.
  std::string ds_config;
  // The script counts its optimizer steps through InfraRSI's harness
  // (harness.watch_optimizer): the contract then requires one per timed step.
  bool watches_optimizer = false;
  // The script imports InfraRSI's harness (its metrics lines are the source).
  bool uses_harness = false;
  // Where the steps come from, when the team says so: a reader's name
  // (core/log_readers.h) and, for "regex", the pattern; "": chosen from
  // what the command's framework prints.
  std::string reader;
  std::string reader_pattern;
  // Files of the job's folder or repository (relative paths), for the
  // editable and protected scope; empty: no scope is drafted.
  std::vector<std::string> files;
  // Where trials run: a repository URL (relative to the spec's folder) or
  // a working folder; at most one.
  std::string repository_url;
  std::string workdir;
  int timeout_s = 0;  // 0: 1800 on GPUs, 300 on CPU
};

// A knob the draft proposes.
struct DraftKnob {
  std::string name;
  std::string flag;  // as the command spells it
  std::vector<std::string> values;
  std::string baseline;
  enum class Form { kValue, kSwitch } form = Form::kValue;  // "--f {k}" or "{k?--f}"
  std::string why;     // the comment
  std::string source;  // "command", "script", or "llm"
};

struct Draft {
  std::string name, model, intent;
  int64_t global_batch = 0, seq_len = 0;
  double params = 0;  // 0: not estimated
  std::string gpu;
  int gpus = 1, nodes = 1, gpus_per_node = 1;
  std::vector<DraftKnob> knobs;
  // Values tied to the knobs (name, expression): accumulation that keeps
  // the global batch as the micro-batch changes.
  std::vector<std::pair<std::string, std::string>> derived;
  std::vector<std::string> command;  // with {knob} and {knob?flag} in place
  // executor.process.metrics: the reader and its stream ("harness": the
  // metrics lines of InfraRSI's harness).
  std::string reader = "harness";
  std::string reader_stream = "stdout";
  std::string reader_pattern;
  size_t args_from = 0;  // where the script's own flags start in `command`
  std::optional<int64_t> data_seed;
  bool optimizer_in_window = false;
  std::vector<std::string> precision;
  std::vector<std::string> editable, protected_files;
  std::string repository_url, workdir;
  int timeout_s = 0;
  int max_trials = 0, doctor_repeats = 0, verify_candidates = 0, verify_runs = 0;
  std::vector<std::string> notes;  // what was kept fixed and why; refusals
  // The model's shape from its flags (a dense model whose layers, width,
  // heads, MLP width and vocabulary the command states, on a GPU of the
  // simulator's catalog): written as workload.shape, so the search gets
  // the textbook estimates; knobs of Megatron's parallel and memory flags
  // are read as the simulator's (DraftYaml). Empty: not all of it known.
  struct Shape {
    int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
    bool swiglu = false;
    bool flash = true;  // a fused/flash attention kernel (the frameworks' default)
  };
  std::optional<Shape> shape;
};

// INVALID_ARGUMENT naming the field (argv, gpu, gpus, global_batch,
// seq_len, ...) when the command or the facts are unusable.
absl::StatusOr<Draft> DraftSpec(const DraftInput& in);

// The spec as YAML, a comment on every choice; ParseSpec reads it.
std::string DraftYaml(const Draft& draft);

// What a script declares a flag's value to be when the command leaves it
// out: argparse's default=LITERAL, and module-level `name = LITERAL` lines
// (nanoGPT-style scripts whose --name=value overrides them). Literals only:
// numbers, quoted strings, True/False.
std::map<std::string, std::string> ScriptDefaults(const std::string& script_text);

// argparse choices declared in a Python script's text: for each
// add_argument("--flag", ..., choices=[...]) with literal strings or
// numbers, flag -> values. Anything else is ignored.
std::map<std::string, std::vector<std::string>> ScriptChoices(const std::string& script_text);

// The /chat/completions request asking an LLM for more knobs.
std::string DraftLlmRequestJson(const Draft& draft, const DraftInput& in, const std::string& model);
// Reads the LLM's answer ({"knobs": [{"flag", "values", "rationale"}]}):
// each proposal that passes is added to `draft` (source "llm"), each that
// does not is noted with its reason. INVALID_ARGUMENT when the answer is
// unreadable as a whole (the draft is then unchanged).
absl::Status MergeLlmDraftAnswer(const std::string& response_body, const DraftInput& in,
                                 const std::string& llm_model, Draft* draft);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_DRAFT_H_
