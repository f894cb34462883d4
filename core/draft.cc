#include "core/draft.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <regex>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/llm_priors.h"
#include "core/log_readers.h"
#include "core/script_flags.h"
#include "core/spec.h"
#include "models/cluster_sim.h"

namespace infrarsi {
namespace {

using namespace script_flags;  // NOLINT: the draft is made of them

absl::Status Field(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Facts: flags whose value the draft reads but never turns into a knob.
const std::vector<std::string> kGlobalBatch = {"--global-batch-size", "--global_batch_size",
                                               "--global-batch", "--global_batch",
                                               "--train_batch_size", "--train-batch-size",
                                               "--training.global_batch_size"};
const std::vector<std::string> kSeqLen = {"--seq-length", "--seq_length", "--seq-len", "--seq_len",
                                          "--block_size", "--block-size", "--max-seq-len",
                                          "--max_seq_len", "--max_seq_length", "--max-seq-length",
                                          "--training.seq_len", "--model_max_length"};
// The micro-batch (sequences per GPU per forward pass) in the spellings of
// Megatron, DeepSpeed, the HF Trainer, torchtitan and nanoGPT-style scripts.
const std::vector<std::string> kMicro = {"--micro-batch-size", "--micro_batch_size", "--micro-batch",
                                         "--micro_batch", "--mbs", "--train_micro_batch_size_per_gpu",
                                         "--per_device_train_batch_size", "--per-device-train-batch-size",
                                         "--training.local_batch_size", "--batch_size", "--batch-size"};
const std::vector<std::string> kAccum = {"--grad-accum", "--grad_accum", "--gradient_accumulation_steps",
                                         "--gradient-accumulation-steps", "--accumulation_steps",
                                         "--accumulation-steps"};
const std::vector<std::string> kSeed = {"--seed", "--data-seed", "--data_seed"};
const std::vector<std::string> kLayers = {"--num-layers", "--num_layers", "--n_layer", "--n-layer"};
const std::vector<std::string> kHidden = {"--hidden-size", "--hidden_size", "--n_embd", "--dim"};
const std::vector<std::string> kHeads = {"--num-attention-heads", "--num_attention_heads",
                                         "--n_head", "--n-head", "--heads"};
const std::vector<std::string> kGroups = {"--num-query-groups", "--num_query_groups"};
const std::vector<std::string> kFfn = {"--ffn-hidden-size", "--ffn_hidden_size"};
const std::vector<std::string> kVocab = {"--vocab-size", "--vocab_size"};
const std::vector<std::string> kExperts = {"--num-experts", "--num_experts"};
const std::vector<std::string> kModelName = {"--model", "--model-name", "--model_name"};
// What the job computes: an LLM must not turn these into knobs either.
const std::vector<std::string> kComputes = {
    "--lr", "--min-lr", "--train-iters", "--train-samples", "--data-path", "--split",
    "--weight-decay", "--clip-grad", "--init-method-std", "--adam-beta1", "--adam-beta2",
    "--bf16", "--fp16", "--fp8-format", "--fp8", "--tokenizer-type", "--tokenizer-model",
    "--max-position-embeddings", "--rampup-batch-size", "--grad-accum", "--gradient_accumulation_steps",
    "--gradient-accumulation-steps", "--steps", "--warmup", "--lr-warmup-fraction", "--lr-decay-style",
    "--moe-router-topk", "--kv-channels", "--swiglu", "--position-embedding-type", "--rotary-base",
    "--hidden-dropout", "--attention-dropout", "--save", "--load", "--mock-data"};

std::vector<std::string> Strs(const std::vector<int64_t>& v) {
  std::vector<std::string> out;
  for (int64_t x : v) out.push_back(absl::StrCat(x));
  return out;
}

// Powers of two in [1, limit] with `keep`, and `baseline` (sorted).
std::vector<int64_t> PowersOfTwo(int64_t limit, const std::function<bool(int64_t)>& keep,
                                 int64_t baseline) {
  std::set<int64_t> v = {baseline};
  for (int64_t x = 1; x <= limit; x *= 2) {
    if (keep(x)) v.insert(x);
  }
  return {v.begin(), v.end()};
}

// A YAML scalar: plain where that reads back as the same string, else
// double-quoted.
std::string Y(const std::string& s) {
  static const std::regex plain(R"([A-Za-z0-9_][A-Za-z0-9_./+-]*)");
  if (!s.empty() && std::regex_match(s, plain) && s != "null" && s != "~" && s != "yes" &&
      s != "no" && s != "on" && s != "off") {
    return s;
  }
  return JsonQuote(s);
}

// Valid UTF-8 without control characters: what a spec file can hold.
bool PrintableUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;
      ++i;
      continue;
    }
    int extra = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      extra = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates, beyond Unicode, and C1 controls.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff || (cp >= 0x80 && cp < 0xa0)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

std::string Comment(const std::string& text) {
  std::string t = absl::StrReplaceAll(text, {{"\n", " "}, {"\r", " "}});
  return absl::StrCat("# ", t);
}

}  // namespace

std::map<std::string, std::vector<std::string>> ScriptChoices(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  static const std::regex call(
      R"re(add_argument\(\s*["'](--[A-Za-z0-9_-]+)["'][^()]*?choices\s*=\s*[\[(]([^\])]*)[\])])re");
  static const std::regex item(R"re(\s*(?:"([^"]*)"|'([^']*)'|([0-9.]+))\s*)re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it) {
    std::vector<std::string> values;
    bool ok = true;
    for (absl::string_view part : absl::StrSplit((*it)[2].str(), ',')) {
      const std::string p(absl::StripAsciiWhitespace(part));
      if (p.empty()) continue;
      std::smatch m;
      if (!std::regex_match(p, m, item)) {
        ok = false;  // not a literal: nothing known
        break;
      }
      values.push_back(m[1].matched ? m[1].str() : m[2].matched ? m[2].str() : m[3].str());
    }
    if (ok && values.size() >= 2) out[(*it)[1].str()] = values;
  }
  return out;
}

std::map<std::string, std::string> ScriptDefaults(const std::string& text) {
  std::map<std::string, std::string> out;
  static const std::regex literal(R"re(^(?:(-?[0-9][0-9_]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)|"([^"\\]*)"|'([^'\\]*)'|(True|False))$)re");
  auto add = [&](const std::string& flag, const std::string& raw) {
    std::smatch m;
    const std::string v(absl::StripAsciiWhitespace(raw));
    if (!std::regex_match(v, m, literal)) return;  // an expression: not known here
    std::string value = m[1].matched ? absl::StrReplaceAll(m[1].str(), {{"_", ""}})
                        : m[2].matched ? m[2].str()
                        : m[3].matched ? m[3].str()
                                       : m[4].str();
    out.emplace(flag, value);  // the first declaration wins
  };
  static const std::regex argparse(
      R"re(add_argument\(\s*["'](--[A-Za-z0-9_.-]+)["'][^()]*?default\s*=\s*("[^"]*"|'[^']*'|[-0-9.eE_]+|True|False)\s*[,)])re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), argparse); it != std::sregex_iterator(); ++it) {
    add((*it)[1].str(), (*it)[2].str());
  }
  // nanoGPT's configurator: module-level `name = literal`, overridden by
  // --name=value. Only lines at column 0, before any comment.
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    static const std::regex assign(R"re(^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^#]+?)\s*(?:#.*)?$)re");
    std::smatch m;
    const std::string l(line);
    if (std::regex_match(l, m, assign)) add("--" + m[1].str(), m[2].str());
  }
  return out;
}

absl::StatusOr<Draft> DraftSpec(const DraftInput& in) {
  if (in.argv.empty()) return Field("argv", "the launch command is empty (give it after --)");
  for (size_t w = 0; w < in.argv.size(); ++w) {
    if (!PrintableUtf8(in.argv[w])) {
      return Field("argv", absl::StrCat("word ", w + 1, " is not printable UTF-8 text"));
    }
    // A spec's command reads "{name}" as a knob's placeholder: a word that
    // already holds one would be read as a knob the draft never made
    // (found by fuzz_llm).
    if (const auto ph = CommandPlaceholders(in.argv[w]); !ph.empty()) {
      return Field("argv", absl::StrCat("word ", w + 1, " ('", in.argv[w], "') holds {", ph.front(),
                                        "...}, which a spec's command reads as a knob's "
                                        "placeholder; write that part of the spec by hand"));
    }
  }
  for (const auto& [field, text] : std::vector<std::pair<const char*, const std::string*>>{
           {"gpu", &in.gpu}, {"intent", &in.intent}, {"name", &in.name}, {"model", &in.model},
           {"repository", &in.repository_url}, {"workdir", &in.workdir}}) {
    if (!PrintableUtf8(*text)) return Field(field, "is not printable UTF-8 text");
  }
  if (in.gpu.empty()) return Field("gpu", "required (e.g. H100, A100-80GB, cpu)");
  if (in.gpus < 0) return Field("gpus", "must be positive");
  if (!in.repository_url.empty() && !in.workdir.empty()) {
    return Field("repository", "give a repository or a working folder, not both");
  }
  Draft d;
  d.gpu = in.gpu;
  d.intent = in.intent;
  std::vector<std::string> cmd;
  size_t i = 0;
  // Environment assignments before the program are not passed by an agent.
  while (i < in.argv.size() && in.argv[i].find('=') != std::string::npos &&
         !absl::StartsWith(in.argv[i], "-")) {
    d.notes.push_back(absl::StrCat("left out ", in.argv[i],
                                   ": an agent passes only allowed environment variables "
                                   "(its operator's --env-allow)"));
    ++i;
  }
  if (i == in.argv.size()) return Field("argv", "no program after the environment assignments");
  // The launcher, and what it says about the GPUs.
  int nproc = 0, nnodes = 0;
  const std::string prog = Basename(in.argv[i]);
  auto take_int = [&](const std::string& w, const std::string& next, const std::vector<std::string>& names,
                      int* out, size_t* used) {
    for (const std::string& n : names) {
      if (w == n) {
        *used = 2;
        return absl::SimpleAtoi(next, out);
      }
      if (absl::StartsWith(w, n + "=")) {
        *used = 1;
        return absl::SimpleAtoi(w.substr(n.size() + 1), out);
      }
    }
    return false;
  };
  if (prog == "srun") {
    // Slurm is the executor's: srun and its options go; the job's size
    // becomes hardware.count and executor.slurm.
    ++i;
    while (i < in.argv.size() && absl::StartsWith(in.argv[i], "-")) {
      const std::string& w = in.argv[i];
      const std::string next = i + 1 < in.argv.size() ? in.argv[i + 1] : "";
      size_t used = 1;
      int v = 0;
      if (take_int(w, next, {"-N", "--nodes"}, &v, &used)) {
        nnodes = v;
      } else if (take_int(w, next, {"--ntasks-per-node", "--gpus-per-node"}, &v, &used)) {
        nproc = std::max(nproc, v);
      } else if (w.find('=') == std::string::npos && i + 1 < in.argv.size() &&
                 !absl::StartsWith(next, "-") && w.size() == 2) {
        used = 2;  // "-p gpu" and the like
      }
      i += used;
    }
    d.notes.push_back("srun left out: the slurm executor places each trial (executor.slurm)");
  }
  // torchrun, python -m torch.distributed.{run,launch}, deepspeed.
  size_t program_at = i;
  if (i < in.argv.size()) {
    const std::string p = Basename(in.argv[i]);
    bool launcher = p == "torchrun" || p == "deepspeed";
    if (absl::StartsWith(p, "python") && i + 2 < in.argv.size() && in.argv[i + 1] == "-m" &&
        (in.argv[i + 2] == "torch.distributed.run" || in.argv[i + 2] == "torch.distributed.launch")) {
      launcher = true;
      cmd.insert(cmd.end(), {in.argv[i], in.argv[i + 1]});
      i += 2;
    }
    if (launcher) {
      cmd.push_back(in.argv[i]);
      ++i;
      // Its options, each with whether it is the rendezvous (which a Slurm
      // job's environment gives torchrun instead: PET_NNODES, ...).
      std::vector<std::pair<std::vector<std::string>, bool>> opts;
      while (i < in.argv.size() && absl::StartsWith(in.argv[i], "-")) {
        const std::string& w = in.argv[i];
        const std::string next = i + 1 < in.argv.size() ? in.argv[i + 1] : "";
        size_t used = 1;
        int v = 0;
        const bool has_value = w.find('=') == std::string::npos && !absl::StartsWith(next, "-") &&
                               w != "--standalone";
        bool rendezvous = false;
        if (take_int(w, next, {"--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num-gpus"}, &v, &used)) {
          nproc = v;
          rendezvous = true;
        } else if (take_int(w, next, {"--nnodes", "--num_nodes", "--num-nodes"}, &v, &used)) {
          nnodes = v;
          rendezvous = true;
        } else {
          used = has_value ? 2 : 1;
          for (const char* r : {"--node_rank", "--node-rank", "--master_addr", "--master-addr",
                                "--master_port", "--master-port", "--rdzv", "--standalone"}) {
            rendezvous = rendezvous || absl::StartsWith(w, r);
          }
        }
        std::vector<std::string> words;
        for (size_t k = 0; k < used && i + k < in.argv.size(); ++k) words.push_back(in.argv[i + k]);
        opts.push_back({words, rendezvous});
        i += used;
      }
      for (const auto& [words, rendezvous] : opts) {
        if (rendezvous && nnodes > 1) {
          d.notes.push_back(absl::StrCat("left out ", absl::StrJoin(words, " "),
                                         ": each Slurm job gives torchrun its rendezvous (PET_* variables)"));
          continue;
        }
        cmd.insert(cmd.end(), words.begin(), words.end());
      }
    }
    program_at = cmd.size();
  }
  // The program (python script.py, or a script run directly) and its flags.
  for (; i < in.argv.size(); ++i) cmd.push_back(in.argv[i]);
  if (program_at >= cmd.size()) return Field("argv", "no training program in the command");
  size_t script_at = program_at;
  while (script_at < cmd.size() && !absl::EndsWith(cmd[script_at], ".py")) {
    if (absl::StartsWith(cmd[script_at], "--")) break;
    ++script_at;
  }
  const std::string script = script_at < cmd.size() && absl::EndsWith(cmd[script_at], ".py")
                                 ? cmd[script_at]
                                 : cmd[program_at];
  d.args_from = std::min(script_at + 1, cmd.size());
  const std::vector<Arg> args = ParseArgs(cmd, d.args_from);
  // A flag given twice with different values: the job reads one of them
  // (argparse, the last), and a knob drafted on the other would not be the
  // one that counts (found by fuzz_llm: knob values from one, the baseline
  // from the other).
  {
    std::map<std::string, const Arg*> seen;
    for (const Arg& a : args) {
      auto [it, fresh] = seen.emplace(a.flag, &a);
      if (!fresh && (it->second->value != a.value || it->second->bare != a.bare)) {
        return Field("argv", absl::StrCat(a.flag, " is given twice ('", it->second->value, "' and '",
                                          a.value, "'); give it once, as the job runs"));
      }
    }
  }

  // GPUs.
  if (nproc < 0 || nproc > 4096 || nnodes < 0 || nnodes > 65536) {
    return Field("argv", absl::StrCat("the launcher's ", nproc, " processes per node on ", nnodes,
                                      " nodes is not a job size"));
  }
  nnodes = std::max(nnodes, 1);
  const int launched = nproc > 0 ? nproc * nnodes : 0;
  if (in.gpus > 0 && launched > 0 && in.gpus != launched) {
    return Field("gpus", absl::StrCat("given as ", in.gpus, " but the command launches ", nproc,
                                      " per node on ", nnodes, " nodes (", launched, ")"));
  }
  d.gpus = in.gpus > 0 ? in.gpus : launched > 0 ? launched : 1;
  d.nodes = nnodes;
  if (d.gpus % d.nodes != 0) {
    return Field("gpus", absl::StrCat(d.gpus, " GPUs do not split evenly over ", d.nodes, " nodes"));
  }
  d.gpus_per_node = d.gpus / d.nodes;

  // The DeepSpeed config the command names: its batch and print interval.
  YAML::Node ds;
  if (!in.ds_config.empty()) {
    try {
      ds = YAML::Load(in.ds_config);  // JSON is YAML
    } catch (const YAML::Exception& e) {
      return Field("deepspeed config", absl::StrCat("not JSON: ", e.msg));
    }
    if (!ds.IsMap()) return Field("deepspeed config", "not a JSON object");
  }
  auto ds_int = [&](const char* key) -> std::optional<int64_t> {
    if (!ds || !ds[key] || !ds[key].IsScalar()) return std::nullopt;
    int64_t v = 0;
    if (!absl::SimpleAtoi(ds[key].Scalar(), &v) || v <= 0 || v > kMaxFlagInt) return std::nullopt;
    return v;
  };
  // A flag's value: the command's, else what the script declares.
  auto value_of = [&](const std::vector<std::string>& spellings) -> std::optional<int64_t> {
    if (const auto v = IntOf(FindArg(args, spellings))) return v;
    for (const std::string& f : spellings) {
      auto it = in.script_defaults.find(f);
      int64_t v = 0;
      if (it != in.script_defaults.end() && absl::SimpleAtoi(it->second, &v) && v > 0 && v <= kMaxFlagInt) {
        return v;
      }
    }
    return std::nullopt;
  };
  const int64_t tp = IntOf(FindArg(args, {"--tensor-model-parallel-size", "--tensor_model_parallel_size",
                                          "--parallelism.tensor_parallel_degree"})).value_or(1);
  const int64_t pp = IntOf(FindArg(args, {"--pipeline-model-parallel-size", "--pipeline_model_parallel_size",
                                          "--parallelism.pipeline_parallel_degree"})).value_or(1);
  const int64_t cp = IntOf(FindArg(args, {"--context-parallel-size", "--context_parallel_size",
                                          "--parallelism.context_parallel_degree"})).value_or(1);
  // In doubles: the degrees are the team's numbers, their product may not fit.
  const int64_t dp = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(d.gpus) /
                              std::max(1.0, static_cast<double>(tp) * static_cast<double>(pp) *
                                                static_cast<double>(cp))));
  std::optional<int64_t> micro_value = value_of(kMicro);
  if (!micro_value) micro_value = ds_int("train_micro_batch_size_per_gpu");
  std::optional<int64_t> accum_value = value_of(kAccum);
  if (!accum_value) accum_value = ds_int("gradient_accumulation_steps");
  // The global batch a command without a global flag runs: the micro-batch
  // times accumulation times the data-parallel replicas.
  int64_t global_given = in.global_batch;
  if (global_given <= 0 && !FindArg(args, kGlobalBatch)) {
    if (const auto g = ds_int("train_batch_size")) {
      global_given = *g;
    } else if (const auto g = value_of(kGlobalBatch)) {
      global_given = *g;
    } else if (micro_value && accum_value) {
      global_given = *micro_value * *accum_value * dp;
    }
  }
  int64_t seq_given = in.seq_len;
  if (seq_given <= 0 && !FindArg(args, kSeqLen)) seq_given = value_of(kSeqLen).value_or(0);

  // Workload facts.
  auto fact = [&](const std::vector<std::string>& spellings, int64_t given, const char* field,
                  int64_t* out) -> absl::Status {
    const std::optional<int64_t> flag = IntOf(FindArg(args, spellings));
    if (flag && given > 0 && *flag != given) {
      return Field(field, absl::StrCat("given as ", given, " but the command says ",
                                       FindArg(args, spellings)->flag, " ", *flag));
    }
    *out = flag ? *flag : given;
    if (*out > kMaxFlagInt) return Field(field, absl::StrCat(*out, " is larger than ", kMaxFlagInt));
    if (*out <= 0) {
      return Field(field, absl::StrCat("the command has no ", spellings.front(),
                                       " flag: give it (--", absl::StrReplaceAll(field, {{"_", "-"}}),
                                       " N)"));
    }
    return absl::OkStatus();
  };
  if (absl::Status st = fact(kGlobalBatch, global_given, "global_batch", &d.global_batch); !st.ok()) return st;
  if (absl::Status st = fact(kSeqLen, seq_given, "seq_len", &d.seq_len); !st.ok()) return st;
  if (const auto seed = IntOf(FindArg(args, kSeed))) {
    if (in.data_seed && *in.data_seed != *seed) {
      return Field("data_seed", absl::StrCat("given as ", *in.data_seed, " but the command says ", *seed));
    }
    d.data_seed = seed;
  } else {
    d.data_seed = in.data_seed;
  }
  const int64_t layers = IntOf(FindArg(args, kLayers)).value_or(0);
  const int64_t hidden = IntOf(FindArg(args, kHidden)).value_or(0);
  const int64_t heads = IntOf(FindArg(args, kHeads)).value_or(0);
  const int64_t groups = IntOf(FindArg(args, kGroups)).value_or(heads);
  const int64_t ffn = IntOf(FindArg(args, kFfn)).value_or(hidden > 0 ? 4 * hidden : 0);
  const int64_t vocab = IntOf(FindArg(args, kVocab)).value_or(0);
  const int64_t experts = IntOf(FindArg(args, kExperts)).value_or(0);
  const bool swiglu = FindArg(args, {"--swiglu"}) != nullptr;
  if (layers > 0 && hidden > 0) {
    // Dense weights per layer (attention with grouped KV, the MLP), plus
    // the embedding: for the MFU plausibility check, a floor not a ceiling.
    const double kv = heads > 0 ? static_cast<double>(groups) / static_cast<double>(heads) : 1.0;
    const double attn = (2.0 + 2.0 * kv) * static_cast<double>(hidden) * static_cast<double>(hidden);
    const double mlp = (swiglu ? 3.0 : 2.0) * static_cast<double>(hidden) * static_cast<double>(ffn);
    d.params = static_cast<double>(layers) * (attn + mlp) +
               static_cast<double>(vocab) * static_cast<double>(hidden);
  }
  // The shape, for the search's textbook estimates: a dense model whose
  // every width the command states (a GPT-2 vocabulary file counts as its
  // 50,257 tokens), on a GPU the simulator knows.
  {
    int64_t vocab_known = vocab;
    if (const Arg* vf = FindArg(args, {"--vocab-file", "--vocab_file"});
        vocab_known == 0 && vf != nullptr && absl::StrContains(absl::AsciiStrToLower(vf->value), "gpt2")) {
      vocab_known = 50257;
    }
    const bool explicit_ffn = FindArg(args, kFfn) != nullptr || !swiglu;  // GeLU's 4h default
    if (layers > 0 && hidden > 0 && heads > 0 && groups > 0 && heads % groups == 0 && hidden % heads == 0 &&
        experts == 0 && vocab_known > 0 && explicit_ffn && models::sim::FindGpu(in.gpu) != nullptr) {
      Draft::Shape s;
      s.layers = layers;
      s.hidden = hidden;
      s.heads = heads;
      s.kv_heads = groups;
      s.ffn = ffn;
      s.vocab = vocab_known;
      s.swiglu = swiglu;
      const Arg* backend = FindArg(args, {"--attention-backend", "--attention_backend"});
      s.flash = !(backend != nullptr && (backend->value == "unfused" || backend->value == "local"));
      d.shape = s;
    }
  }
  // Precision is the contract's: the dtypes the command computes in.
  // A flag that is on: bare, or a true value (`--bf16 True`, HF's way).
  auto on = [&](const std::vector<std::string>& spellings) {
    const Arg* a = FindArg(args, spellings);
    if (a == nullptr) return false;
    const std::string v = absl::AsciiStrToLower(a->value);
    return a->bare || v == "true" || v == "1" || v == "yes";
  };
  const Arg* dtype = FindArg(args, {"--dtype", "--precision", "--mixed_precision", "--mixed-precision",
                                    "--training.mixed_precision_param"});
  std::string dtype_value = dtype != nullptr && !dtype->bare ? dtype->value : "";
  if (dtype_value.empty()) {
    for (const char* f : {"--dtype", "--precision", "--mixed_precision"}) {
      if (auto it = in.script_defaults.find(f); it != in.script_defaults.end()) {
        dtype_value = it->second;
        break;
      }
    }
  }
  const bool ds_bf16 = ds && ds["bf16"] && ds["bf16"].IsMap() && ds["bf16"]["enabled"] &&
                       ds["bf16"]["enabled"].Scalar() == "true";
  const bool ds_fp16 = ds && ds["fp16"] && ds["fp16"].IsMap() && ds["fp16"]["enabled"] &&
                       ds["fp16"]["enabled"].Scalar() == "true";
  if (FindArg(args, {"--fp8-format", "--fp8"})) {
    d.precision = {"bf16", "fp8"};
  } else if (on({"--bf16"}) || ds_bf16) {
    d.precision = {"bf16"};
  } else if (on({"--fp16"}) || ds_fp16) {
    d.precision = {"fp16"};
  } else if (!dtype_value.empty()) {
    // The script's own name for it, in the contract's vocabulary.
    d.precision = {CanonicalPrecision(dtype_value)};
  } else {
    d.precision = {"fp32"};
  }
  std::string stem(absl::StripSuffix(Basename(script), ".py"));
  if (stem.empty()) stem = "job";
  if (const Arg* m = FindArg(args, kModelName); m && !m->bare) {
    d.model = m->value;
  } else if (!in.model.empty()) {
    d.model = in.model;
  } else {
    d.model = layers > 0 && hidden > 0 ? absl::StrCat(stem, "-", layers, "l-", hidden, "h") : stem;
  }
  d.name = in.name.empty() ? absl::StrCat(stem, "-", absl::AsciiStrToLower(in.gpu), "-x", d.gpus) : in.name;
  if (!IsValidName(d.name)) {
    return Field("name", absl::StrCat("'", d.name, "' is not a valid name (letters, digits, '-', '_', '.')"));
  }

  // Knobs.
  d.command = cmd;
  std::set<std::string> used_flags;
  auto add = [&](const Arg& a, std::vector<std::string> values, const std::string& why,
                 const std::string& source) {
    if (used_flags.count(a.flag)) return;
    DraftKnob k;
    k.flag = a.flag;
    k.name = KnobName(a.flag);
    k.source = source;
    k.why = why;
    if (a.bare) {
      k.form = DraftKnob::Form::kSwitch;
      k.baseline = "true";
      k.values = {"false", "true"};
    } else {
      k.baseline = a.value;
      if (std::find(values.begin(), values.end(), a.value) == values.end()) values.push_back(a.value);
      k.values = values;
    }
    // One value is nothing to choose: the flag stays as written (found by
    // fuzz_llm: a placeholder was left for a knob never drafted).
    if (k.values.size() < 2) return;
    PlaceKnob(a, k.name, &d.command);
    used_flags.insert(a.flag);
    d.knobs.push_back(std::move(k));
  };
  const int64_t world = d.gpus;
  const bool megatron = FindArg(args, {"--tensor-model-parallel-size", "--micro-batch-size",
                                       "--num-layers", "--use-mcore-models"}) != nullptr;
  // The global batch is fixed by a flag (Megatron, torchtitan, DeepSpeed's
  // config): accumulation follows the micro-batch by itself. Otherwise an
  // accumulation flag must be tied to it (HF, nanoGPT).
  const Arg* accum_arg = FindArg(args, kAccum);
  if (accum_arg != nullptr && accum_arg->bare) {
    // Tied to the micro-batch it needs a value to replace (found by
    // fuzz_llm: a bare flag became a switch placeholder of a derived value).
    return Field("argv", absl::StrCat(accum_arg->flag, " has no value; give it the accumulation "
                                                        "steps the job runs with"));
  }
  const std::string accum_default_flag = [&]() -> std::string {
    for (const std::string& f : kAccum) {
      if (in.script_defaults.count(f)) return f;
    }
    return "";
  }();
  const bool has_accum = accum_arg != nullptr || !accum_default_flag.empty();
  // A global batch the script takes as such (a flag, its default, the
  // DeepSpeed config), or one the team states for a script with no
  // accumulation flag (it derives accumulation itself).
  const bool global_fixed =
      FindArg(args, kGlobalBatch) != nullptr || ds_int("train_batch_size").has_value() ||
      std::any_of(kGlobalBatch.begin(), kGlobalBatch.end(),
                  [&](const std::string& f) { return in.script_defaults.count(f) > 0; }) ||
      (in.global_batch > 0 && !has_accum);
  for (const Arg& a : args) {
    if (In({"--tensor-model-parallel-size", "--tensor_model_parallel_size"}, a.flag) && !a.bare) {
      const auto v = PowersOfTwo(std::min<int64_t>(d.gpus_per_node, 8), [&](int64_t x) {
        return (heads == 0 || heads % x == 0) && (groups == 0 || groups % x == 0) && world % x == 0;
      }, tp);
      add(a, Strs(v), absl::StrCat("tensor parallel: within a node (", d.gpus_per_node,
                                   " GPUs), dividing the heads", heads > 0 ? absl::StrCat(" (", heads, ")") : "",
                                   groups != heads ? absl::StrCat(" and query groups (", groups, ")") : ""),
          "command");
    } else if (In({"--pipeline-model-parallel-size", "--pipeline_model_parallel_size"}, a.flag) && !a.bare) {
      const auto v = PowersOfTwo(std::min<int64_t>(world, 16), [&](int64_t x) {
        return (layers == 0 || layers % x == 0) && world % x == 0;
      }, pp);
      add(a, Strs(v), absl::StrCat("pipeline parallel: dividing the layers",
                                   layers > 0 ? absl::StrCat(" (", layers, ")") : "", " and the GPUs"),
          "command");
    } else if (In({"--context-parallel-size", "--context_parallel_size"}, a.flag) && !a.bare) {
      const auto v = PowersOfTwo(std::min<int64_t>(world, 8), [&](int64_t x) {
        return d.seq_len % (2 * x) == 0 && world % x == 0 && (x == 1 || d.seq_len / x >= 1024);
      }, cp);
      add(a, Strs(v), "context parallel: splits each sequence (at least 1k tokens a rank)", "command");
    } else if (In({"--expert-model-parallel-size", "--expert_model_parallel_size"}, a.flag) && !a.bare) {
      const int64_t ep = IntOf(&a).value_or(1);
      const auto v = PowersOfTwo(std::min<int64_t>(world, 64), [&](int64_t x) {
        return (experts == 0 || experts % x == 0) && world % x == 0;
      }, ep);
      add(a, Strs(v), absl::StrCat("expert parallel: dividing the experts",
                                   experts > 0 ? absl::StrCat(" (", experts, ")") : ""), "command");
    } else if (In(kMicro, a.flag) && !a.bare) {
      const int64_t base = IntOf(&a).value_or(1);
      const int64_t per_replica = d.global_batch / dp;
      if (base <= 0 || per_replica % base != 0) {
        d.notes.push_back(absl::StrCat(a.flag, " kept: ", base, " does not divide the ", per_replica,
                                       " sequences per data-parallel replica"));
        continue;
      }
      // Accumulation either follows by itself (a global batch flag) or is
      // tied to the micro-batch here; with neither, a micro-batch change
      // would change the global batch.
      const bool tie = !global_fixed && has_accum;
      if (!global_fixed && !tie) {
        d.notes.push_back(absl::StrCat(
            a.flag, " kept: the command sets no global batch and no gradient accumulation, so "
                    "another micro-batch would change the global batch (add ",
            kAccum[2], " to the command to have them tied)"));
        continue;
      }
      const auto v = PowersOfTwo(std::min<int64_t>(per_replica, d.gpu == "cpu" ? per_replica : 16), [&](int64_t x) {
        return per_replica % x == 0;
      }, base);
      const size_t before = d.knobs.size();
      if (!tie && !FindArg(args, kGlobalBatch) && !ds_int("train_batch_size") && in.global_batch > 0) {
        d.notes.push_back(absl::StrCat(
            a.flag, " varies on the word that the script accumulates to the global batch ",
            d.global_batch, " itself (it has no accumulation or global batch flag); if it does not, "
            "every other value changes the loss and the contract refuses it"));
      }
      add(a, Strs(v),
          absl::StrCat("micro-batch: dividing the ", per_replica,
                       " sequences per data-parallel replica (global batch ", d.global_batch, " over ", dp,
                       "); the rest is accumulation, so the step computes the same"),
          "command");
      if (tie && d.knobs.size() > before) {
        const std::string& knob = d.knobs.back().name;
        const std::string flag = accum_arg != nullptr ? accum_arg->flag : accum_default_flag;
        const std::string name = KnobName(flag);
        d.derived.push_back({name, dp > 1 ? absl::StrCat(per_replica, " / ", knob)
                                          : absl::StrCat(d.global_batch, " / ", knob)});
        if (accum_arg != nullptr) {
          PlaceKnob(*accum_arg, name, &d.command);
        } else {
          // The script's default, now given explicitly so it can follow.
          d.command.push_back(a.equals ? absl::StrCat(flag, "={", name, "}") : flag);
          if (!a.equals) d.command.push_back(absl::StrCat("{", name, "}"));
        }
        used_flags.insert(flag);
        d.notes.push_back(absl::StrCat(flag, " is tied to ", a.flag, " (derived.", name,
                                       "): micro-batch x accumulation x ", dp,
                                       " replicas stays the global batch ", d.global_batch));
      }
    } else if (In({"--recompute-granularity", "--recompute_granularity"}, a.flag) && !a.bare) {
      add(a, {"selective", "full"}, "activation recompute: selective (attention) or full layers", "command");
    } else if (In({"--recompute", "--activation-checkpointing", "--checkpoint-activations",
                   "--gradient-checkpointing", "--gradient_checkpointing"}, a.flag) && !a.bare) {
      const std::string lower = absl::AsciiStrToLower(a.value);
      if (lower == "true" || lower == "false" || lower == "1" || lower == "0") {
        // In the command's own spelling: HF writes True, the script reads it.
        const bool capital = a.value == "True" || a.value == "False";
        add(a, lower == "1" || lower == "0" ? std::vector<std::string>{"0", "1"}
               : capital                    ? std::vector<std::string>{"False", "True"}
                                            : std::vector<std::string>{"false", "true"},
            "activation checkpointing: memory for time", "command");
      }
    } else if (In({"--activation_checkpoint.mode", "--activation-checkpoint.mode"}, a.flag) && !a.bare) {
      add(a, {"none", "selective", "full"}, "torchtitan's activation checkpointing: memory for time",
          "command");
    } else if (In({"--parallelism.tensor_parallel_degree"}, a.flag) && !a.bare) {
      const auto v = PowersOfTwo(std::min<int64_t>(d.gpus_per_node, 8), [&](int64_t x) {
        return (heads == 0 || heads % x == 0) && world % x == 0;
      }, tp);
      add(a, Strs(v), "tensor parallel: within a node, dividing the heads", "command");
    } else if (In({"--optim"}, a.flag) && !a.bare &&
               (a.value == "adamw_torch" || a.value == "adamw_torch_fused")) {
      add(a, {"adamw_torch", "adamw_torch_fused"},
          "the HF Trainer's AdamW, looped or fused: the same update, other kernels", "command");
    } else if (In({"--dataloader_num_workers", "--num_workers", "--num-workers"}, a.flag) && !a.bare) {
      const int64_t w = IntOf(&a).value_or(-1);
      if (w >= 0) {
        add(a, Strs(w > 0 ? std::vector<int64_t>{w / 2, w, w * 2} : std::vector<int64_t>{0, 2, 4}),
            "data-loading workers: the data is the same, only who loads it changes", "command");
      }
    } else if (In({"--attention-backend"}, a.flag) && !a.bare) {
      add(a, {"auto", "flash", "fused", "unfused"}, "Megatron's attention backends (local is for debugging)",
          "command");
    } else if (In({"--ddp-bucket-size"}, a.flag) && !a.bare) {
      const int64_t b = IntOf(&a).value_or(0);
      if (b > 0) add(a, Strs({b / 2, b, b * 2, b * 4}), "data-parallel bucket size: overlap against launch overhead", "command");
    } else if (In({"--zero-stage", "--zero_stage"}, a.flag) && !a.bare) {
      add(a, {"1", "2", "3"}, "ZeRO stage: shards optimizer state (1), gradients (2), parameters (3)", "command");
    } else if (In({"--threads", "--num-threads", "--num_threads"}, a.flag) && !a.bare) {
      const int64_t t = IntOf(&a).value_or(0);
      if (t > 0) {
        add(a, Strs(t > 1 ? std::vector<int64_t>{t / 2, t, t * 2} : std::vector<int64_t>{t, t * 2}),
            "intra-op threads: the command's, half and twice (the hosts' cores are not known here)",
            "command");
      }
    } else if (a.bare && In({"--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
                             "--tp-comm-overlap", "--use-flash-attn", "--cross-entropy-loss-fusion",
                             "--recompute-activations", "--manual-gc"}, a.flag)) {
      add(a, {}, absl::StrCat(a.flag, " on or off: how the step runs, not what it computes"), "command");
    } else if (a.bare && a.flag == "--sequence-parallel") {
      add(a, {}, "sequence parallel on or off (only acts with tensor parallel > 1)", "command");
    } else if (a.bare && a.flag == "--grad-reduce-in-bf16") {
      add(a, {}, "gradient reduction in bf16 or fp32: changes the numbers slightly; the loss check judges it",
          "command");
    } else if (auto c = in.script_choices.find(a.flag); c != in.script_choices.end() && !a.bare &&
                                                        !In(kComputes, a.flag)) {
      add(a, c->second, absl::StrCat("the script's own choices for ", a.flag), "script");
    }
  }
  // Megatron switches the command does not have but could: only the ones
  // that never change the numbers and need nothing else.
  if (megatron && !FindArg(args, {"--use-distributed-optimizer"}) && world > 1) {
    d.notes.push_back("--use-distributed-optimizer is off in the command; add it (bare) to let the "
                      "search try it");
  }
  for (const Arg& a : args) {
    if (!used_flags.count(a.flag) && In({"--fp8-format", "--bf16", "--fp16"}, a.flag)) {
      d.notes.push_back(absl::StrCat(a.flag, " kept: precision is the contract's, not a knob"));
    }
  }
  if (d.knobs.empty()) {
    return Field("argv", "no launch flag the draft knows and no flag with declared choices: nothing to tune "
                         "(known: parallel degrees, micro-batch with its accumulation, recompute, overlap and "
                         "optimizer switches, attention backend, bucket size, ZeRO stage, threads, data "
                         "workers); add one to the command or declare a flag's choices in the script");
  }
  // Where the steps come from: the harness's lines, or the framework's own.
  const bool torchtitan = std::any_of(args.begin(), args.end(), [](const Arg& a) {
    return absl::StartsWith(a.flag, "--training.") || absl::StartsWith(a.flag, "--job.") ||
           absl::StartsWith(a.flag, "--metrics.") || absl::StartsWith(a.flag, "--parallelism.");
  });
  const bool deepspeed = !in.ds_config.empty() || prog == "deepspeed" ||
                         FindArg(args, {"--deepspeed_config", "--deepspeed"}) != nullptr;
  const bool hf = FindArg(args, {"--per_device_train_batch_size", "--output_dir", "--logging_steps",
                                 "--num_train_epochs", "--per-device-train-batch-size"}) != nullptr;
  if (!in.reader.empty() || !in.reader_pattern.empty()) {
    d.reader = in.reader.empty() ? "regex" : in.reader;
    d.reader_pattern = in.reader_pattern;
  } else if (in.uses_harness || in.watches_optimizer) {
    d.reader = "harness";
  } else if (megatron) {
    d.reader = "megatron";
  } else if (torchtitan) {
    d.reader = "torchtitan";
  } else if (deepspeed) {
    d.reader = "deepspeed";
  } else if (hf) {
    d.reader = "hf_trainer";
  } else {
    return Field("reader",
                 "the draft cannot tell what this script prints per step: give --reader (megatron, "
                 "torchtitan, deepspeed, hf_trainer, jsonl), or --reader regex --pattern with a "
                 "(?P<loss>...) group, or wrap each step in InfraRSI's harness (docs/contract.md)");
  }
  {
    LogReaderSpec rs;
    rs.reader = d.reader;
    rs.pattern = d.reader_pattern;
    if (std::string why = LogReaderSpecError(rs); !why.empty()) return Field("reader", why);
  }
  // torchtitan logs through Python's logging: stderr (one file with stdout in a Slurm job).
  d.reader_stream = d.reader == "torchtitan" && d.nodes == 1 ? "stderr" : "stdout";
  // A reader needs a line every step; how often a framework prints changes
  // what it prints, never what it computes.
  auto every_step = [&](const std::vector<std::string>& spellings, const std::string& add_as,
                        bool equals) {
    const Arg* a = FindArg(args, spellings);
    if (a != nullptr && !a->bare && a->value == "1") return;
    if (a != nullptr && !a->bare) {
      d.notes.push_back(absl::StrCat(a->flag, " ", a->value, " -> 1: the ", d.reader,
                                     " reader needs a line every step (it prints more, computes the same)"));
      d.command[a->equals ? a->flag_at : *a->value_at] = a->equals ? absl::StrCat(a->flag, "=1") : "1";
      return;
    }
    d.notes.push_back(absl::StrCat(add_as, " 1 added: the ", d.reader,
                                   " reader needs a line every step (it prints more, computes the same)"));
    if (equals) {
      d.command.push_back(absl::StrCat(add_as, "=1"));
    } else {
      d.command.insert(d.command.end(), {add_as, "1"});
    }
  };
  const bool equals_style = std::any_of(args.begin(), args.end(), [](const Arg& a) { return a.equals; });
  if (d.reader == "megatron") {
    every_step({"--log-interval", "--log_interval"}, "--log-interval", false);
  } else if (d.reader == "torchtitan") {
    every_step({"--metrics.log_freq"}, "--metrics.log_freq", equals_style);
  } else if (d.reader == "hf_trainer") {
    every_step({"--logging_steps", "--logging-steps"}, "--logging_steps", equals_style);
  } else if (d.reader == "deepspeed") {
    const auto spp = ds_int("steps_per_print");
    if (!in.ds_config.empty() && spp.value_or(10) != 1) {
      return Field("deepspeed config",
                   absl::StrCat("steps_per_print is ", spp.value_or(10),
                                " (10 when unset): the deepspeed reader needs a line every step; set "
                                "\"steps_per_print\": 1 (it prints more, computes the same)"));
    }
  }
  // Scope: the job's files.
  for (const std::string& f : in.files) {
    const std::string base = Basename(f);
    if (!absl::EndsWith(base, ".py")) continue;
    const std::string lower = absl::AsciiStrToLower(base);
    if (lower == "infrarsi_harness.py" || absl::StrContains(lower, "data") ||
        absl::StrContains(lower, "token")) {
      d.protected_files.push_back(f);
    } else {
      d.editable.push_back(f);
    }
  }
  d.repository_url = in.repository_url;
  d.workdir = in.workdir;
  // Only the harness counts the optimizer step inside the timer.
  d.optimizer_in_window = in.watches_optimizer && d.reader == "harness";
  const bool cpu = absl::AsciiStrToLower(in.gpu) == "cpu";
  d.timeout_s = in.timeout_s > 0 ? in.timeout_s : cpu ? 300 : 1800;
  size_t space = 1;
  for (const DraftKnob& k : d.knobs) space = std::min<size_t>(space * k.values.size(), 1 << 20);
  d.max_trials = static_cast<int>(std::min<size_t>(space - 1, cpu ? 12 : 24));
  d.doctor_repeats = 5;
  d.verify_candidates = 2;
  d.verify_runs = cpu ? 4 : 3;
  return d;
}

namespace {

// Megatron's flags whose knobs the simulator reads (workload.shape.knobs),
// by the flag's name with dashes.
const std::map<std::string, std::string>& SimKnobOfFlag() {
  static const auto* m = new std::map<std::string, std::string>{
      {"--tensor-model-parallel-size", "tp"},
      {"--pipeline-model-parallel-size", "pp"},
      {"--context-parallel-size", "cp"},
      {"--micro-batch-size", "micro_batch"},
      {"--recompute-granularity", "recompute"},
      {"--use-distributed-optimizer", "dist_opt"},
      {"--sequence-parallel", "seq_par"},
      {"--overlap-grad-reduce", "overlap_grad_reduce"},
      {"--overlap-param-gather", "overlap_param_gather"},
      {"--grad-reduce-in-bf16", "grad_reduce_bf16"},
      {"--use-flash-attn", "flash_attn"},
  };
  return *m;
}

// The draft's workload.shape entry (inside workload's flow map), or ""
// where the draft has no shape or a knob named as a simulator knob cannot
// be read as one (the spec would be refused).
std::string ShapeEntry(const Draft& d) {
  if (!d.shape) return "";
  namespace ms = models::sim;
  const std::vector<std::string>& names = ms::KnobNames();
  auto reads_as = [](const DraftKnob& k, const std::string& sim) {
    ms::LaunchKnobs probe;
    std::string err;
    for (const std::string& v : k.values) {
      if (!ms::SetKnob(&probe, sim, NormalizedKnobValue(v), &err)) return false;
    }
    return true;
  };
  std::vector<std::string> mapped;
  std::set<std::string> read;  // simulator knobs a searched knob is read as
  for (const DraftKnob& k : d.knobs) {
    if (std::find(names.begin(), names.end(), k.name) != names.end()) {
      if (!reads_as(k, k.name) || !read.insert(k.name).second) return "";
      continue;
    }
    const auto it = SimKnobOfFlag().find(absl::StrReplaceAll(k.flag, {{"_", "-"}}));
    if (it == SimKnobOfFlag().end() || read.count(it->second) || !reads_as(k, it->second)) continue;
    read.insert(it->second);
    mapped.push_back(absl::StrCat(k.name, ": ", it->second));
  }
  const Draft::Shape& s = *d.shape;
  return absl::StrCat("  shape: {layers: ", s.layers, ", hidden: ", s.hidden, ", heads: ", s.heads,
                   ", kv_heads: ", s.kv_heads, ", ffn: ", s.ffn, ", vocab: ", s.vocab,
                   ", swiglu: ", s.swiglu ? "true" : "false", ", gpus_per_node: ", d.gpus_per_node,
                   read.count("flash_attn") ? "" : absl::StrCat(", fixed: {flash_attn: ", s.flash ? "true" : "false", "}"),
                   mapped.empty() ? "" : absl::StrCat(",\n          knobs: {", absl::StrJoin(mapped, ", "), "}"), "}}");
}

}  // namespace

std::string DraftYaml(const Draft& d) {
  std::string y;
  auto line = [&](const std::string& s) { absl::StrAppend(&y, s, "\n"); };
  line("# Drafted by `infrarsi draft` from the team's own launch command. Review it,");
  line("# then `infrarsi session create` it. Every choice says why; `# llm:` marks");
  line("# what a language model proposed (validated like everything else).");
  if (!d.intent.empty()) line(Comment(absl::StrCat("Intent: ", d.intent)));
  line(absl::StrCat("name: ", Y(d.name)));
  line("# What the job computes: fixed by the contract, never a knob.");
  std::string workload = absl::StrCat("workload: {model: ", Y(d.model), ", global_batch: ", d.global_batch,
                                      ", seq_len: ", d.seq_len);
  if (d.params > 0) absl::StrAppend(&workload, ", params: ", static_cast<int64_t>(d.params));
  const std::string shape = ShapeEntry(d);
  if (shape.empty()) {
    line(workload + "}");
  } else {
    line("# shape: the model's, from its flags; the search's textbook estimates of memory and");
    line("# step time read it, and knobs of Megatron's parallel and memory flags as the simulator's.");
    line(workload + ",");
    line(shape);
  }
  if (d.params > 0) line("# params: dense weights estimated from the model flags (for the MFU check).");
  line(absl::StrCat("hardware: {gpu: ", Y(d.gpu), ", count: ", d.gpus, "}",
                    d.nodes > 1 ? absl::StrCat("   # ", d.nodes, " nodes of ", d.gpus_per_node) : ""));
  line("knobs:");
  for (const DraftKnob& k : d.knobs) {
    line(absl::StrCat("  ", Comment(absl::StrCat(k.source == "llm" ? "llm: " : "", k.why, " (", k.flag,
                                                 k.source == "script" ? ", from the script's choices" : "",
                                                 ")"))));
    std::vector<std::string> vals;
    for (const std::string& v : k.values) vals.push_back(Y(v));
    line(absl::StrCat("  ", k.name, ": [", absl::StrJoin(vals, ", "), "]"));
  }
  line("# As the command runs today.");
  std::vector<std::string> base;
  for (const DraftKnob& k : d.knobs) base.push_back(absl::StrCat(k.name, ": ", Y(k.baseline)));
  line(absl::StrCat("baseline: {", absl::StrJoin(base, ", "), "}"));
  if (!d.derived.empty()) {
    line("# Tied to the knobs: each trial's command gets the value at its setting, checked");
    line("# at init to be a whole number for every setting (the global batch stays the same).");
    line("derived:");
    for (const auto& [name, expr] : d.derived) line(absl::StrCat("  ", name, ": ", JsonQuote(expr)));
  }
  line(absl::StrCat("# At most ", d.max_trials, " settings of the space; the run may stop earlier when no "
                    "setting is expected to beat the best."));
  line(absl::StrCat("budget: {max_trials: ", d.max_trials, "}"));
  line(absl::StrCat("# Baseline runs to measure the noise; A/B pairs each top candidate must clear it in."));
  line(absl::StrCat("doctor: {repeats: ", d.doctor_repeats, "}"));
  line(absl::StrCat("verify: {candidates: ", d.verify_candidates, ", runs: ", d.verify_runs, "}"));
  if (!d.repository_url.empty()) {
    line("# Trials run in fresh work trees of this repository at its locked commit.");
    line(absl::StrCat("repository: {url: ", Y(d.repository_url), ", base: HEAD}"));
  }
  line("executor:");
  line("  process:");
  line("    # The command as given; {knob} is filled in per trial, {knob?--flag} is the");
  line("    # flag when the knob is true and nothing when it is false. Never run by a shell.");
  std::vector<std::string> argv;
  for (const std::string& a : d.command) argv.push_back(JsonQuote(a));
  line(absl::StrCat("    command: [", absl::StrJoin(argv, ", "), "]"));
  if (!d.workdir.empty()) line(absl::StrCat("    workdir: ", Y(d.workdir)));
  line(absl::StrCat("    timeout_s: ", d.timeout_s));
  if (d.reader != "harness") {
    line(absl::StrCat("    # Steps are read from the job's own ", d.reader_stream,
                      " (the script is not edited); each line timed"));
    line("    # on arrival by the agent's clock. What the reader cannot see, the report says.");
    std::string m = absl::StrCat("    metrics: {reader: ", d.reader);
    if (d.reader_stream != "stdout") absl::StrAppend(&m, ", from: ", d.reader_stream);
    if (!d.reader_pattern.empty()) absl::StrAppend(&m, ", pattern: ", JsonQuote(d.reader_pattern));
    line(m + "}");
  }
  if (d.nodes > 1) {
    line("  # More than one node: each trial is one Slurm job (docs/spec.md#slurm).");
    line(absl::StrCat("  slurm: {gpus_per_node: ", d.gpus_per_node, "}"));
  }
  line("contract:");
  LogReaderSpec reader;
  reader.reader = d.reader;
  reader.pattern = d.reader_pattern;
  const bool states_seed = StatesDataSeed(reader);
  if (d.data_seed && !states_seed) {
    line(absl::StrCat("  # data_seed ", *d.data_seed, " is in the command; the ", d.reader,
                      " reader's lines do not state it, so it is no rule here."));
  } else if (d.data_seed) {
    line(absl::StrCat("  data_seed: ", *d.data_seed, "   # every trial must read the same data"));
  } else {
    line("  # data_seed: the command states none; set it to have the harness's seed checked.");
  }
  if (d.optimizer_in_window) {
    line("  # The script counts its optimizer steps (harness.watch_optimizer): every timed");
    line("  # step must contain exactly one, so no setting or patch moves it out of the timer.");
    line("  optimizer_in_window: true");
  }
  std::vector<std::string> prec;
  for (const std::string& p : d.precision) prec.push_back(Y(p));
  line(absl::StrCat("  precision: [", absl::StrJoin(prec, ", "), "]   # the dtypes the command computes in"));
  if (!d.editable.empty() || !d.protected_files.empty()) {
    line("  # Patches may change the model and the training loop; the data pipeline and the");
    line("  # harness that measures are protected (their hashes are locked at init).");
    std::vector<std::string> e, p;
    for (const std::string& f : d.editable) e.push_back(Y(f));
    for (const std::string& f : d.protected_files) p.push_back(Y(f));
    line(absl::StrCat("  editable: [", absl::StrJoin(e, ", "), "]"));
    line(absl::StrCat("  protected: [", absl::StrJoin(p, ", "), "]"));
  }
  for (const std::string& n : d.notes) line(Comment(n));
  return y;
}

std::string DraftLlmRequestJson(const Draft& d, const DraftInput& in, const std::string& model) {
  std::string knobs;
  for (const DraftKnob& k : d.knobs) {
    absl::StrAppend(&knobs, "- ", k.flag, ": [", absl::StrJoin(k.values, ", "), "], now ", k.baseline, "\n");
  }
  std::string choices;
  for (const auto& [flag, values] : in.script_choices) {
    absl::StrAppend(&choices, "- ", flag, ": [", absl::StrJoin(values, ", "), "]\n");
  }
  const std::string question = absl::StrCat(
      "A team wants this training job faster without changing what it computes: ", in.intent,
      "\nIt runs on ", d.gpus, " x ", d.gpu, ". Its command:\n", absl::StrJoin(in.argv, " "),
      "\nKnobs already drafted:\n", knobs, "Choices the script declares:\n", choices,
      "Propose at most 4 more knobs: flags of this command (or of the script's choices) whose "
      "other values could make a step faster without changing the loss, each with 2 to 8 values "
      "including the command's current one. Never a flag of the data, the batch, the sequence "
      "length, the precision, the learning rate or the model's shape. Answer with one JSON object "
      "only: {\"knobs\": [{\"flag\": \"--name\", \"values\": [\"a\", \"b\"], \"rationale\": \"...\"}]}");
  return absl::StrCat("{\"model\":", JsonQuote(model), ",\"temperature\":0,\"messages\":[",
                      "{\"role\":\"system\",\"content\":", JsonQuote("Answer with JSON only."), "},",
                      "{\"role\":\"user\",\"content\":", JsonQuote(question), "}]}");
}

absl::Status MergeLlmDraftAnswer(const std::string& body, const DraftInput& in,
                                 const std::string& llm_model, Draft* d) {
  auto content = LlmAnswerContent(body);
  if (!content.ok()) return content.status();
  YAML::Node root;
  try {
    root = YAML::Load(*content);
  } catch (const YAML::Exception& e) {
    return Field("response content", absl::StrCat("not JSON: ", e.msg));
  }
  if (!root.IsMap() || !root["knobs"] || !root["knobs"].IsSequence()) {
    return Field("response content.knobs", "missing or not a list");
  }
  // Where each of the script's flags is in the drafted command.
  const std::vector<Arg> args = ParseArgs(d->command, d->args_from);
  static const std::regex value_re(R"([A-Za-z0-9._:+-]{1,64})");
  static const std::regex flag_re(R"(--[A-Za-z0-9][A-Za-z0-9_-]{0,62})");
  // Read as far as the cap: the rest is one note, however many there are.
  constexpr size_t kMaxRead = 16;
  constexpr int kMaxAccepted = 4;
  const size_t proposed = root["knobs"].size();
  if (proposed > kMaxRead) {
    d->notes.push_back(absl::StrCat("llm (", llm_model, ") proposed ", proposed - kMaxRead,
                                    " more knobs: not read (at most ", kMaxRead, " are)"));
  }
  int accepted = 0;
  for (size_t idx = 0; idx < std::min(proposed, kMaxRead); ++idx) {
    const YAML::Node p = root["knobs"][idx];
    const std::string where = absl::StrCat("llm knob ", idx + 1);
    auto refuse = [&](const std::string& flag, const std::string& why) {
      d->notes.push_back(absl::StrCat("llm (", llm_model, ") proposed ", flag.empty() ? where : flag,
                                      ": refused: ", why));
    };
    if (!p.IsMap() || !p["flag"] || !p["flag"].IsScalar()) {
      refuse("", "no flag");
      continue;
    }
    const std::string flag = p["flag"].Scalar();
    if (!std::regex_match(flag, flag_re)) {
      refuse(flag.substr(0, 64), "not a flag");
      continue;
    }
    if (accepted >= kMaxAccepted) {
      refuse(flag, absl::StrCat("more than ", kMaxAccepted, " knobs"));
      continue;
    }
    if (In(kComputes, flag) || In(kGlobalBatch, flag) || In(kSeqLen, flag) || In(kSeed, flag) ||
        In(kLayers, flag) || In(kHidden, flag) || In(kHeads, flag) || In(kGroups, flag) ||
        In(kFfn, flag) || In(kVocab, flag) || In(kExperts, flag)) {
      refuse(flag, "it sets what the job computes (the contract's), not how it runs");
      continue;
    }
    bool known = false;
    for (const DraftKnob& k : d->knobs) known = known || k.flag == flag;
    if (known) {
      refuse(flag, "already a knob");
      continue;
    }
    const Arg* arg = nullptr;
    for (const Arg& a : args) {
      if (a.flag == flag) arg = &a;
    }
    if (arg == nullptr) {
      refuse(flag, "not a flag of the command");
      continue;
    }
    if (!p["values"] || !p["values"].IsSequence() || p["values"].size() < 2 || p["values"].size() > 8) {
      refuse(flag, "values: 2 to 8 needed");
      continue;
    }
    std::vector<std::string> values;
    bool ok = true;
    for (const auto& v : p["values"]) {
      if (!v.IsScalar() || !std::regex_match(v.Scalar(), value_re)) {
        ok = false;
        break;
      }
      if (std::find(values.begin(), values.end(), v.Scalar()) == values.end()) values.push_back(v.Scalar());
    }
    if (!ok) {
      refuse(flag, "values: each must be 1-64 letters, digits or ._:+-");
      continue;
    }
    const std::string current = arg->bare ? "true" : arg->value;
    if (arg->bare) {
      std::sort(values.begin(), values.end());
      if (values != std::vector<std::string>{"false", "true"}) {
        refuse(flag, "a bare flag is on or off: values must be false and true");
        continue;
      }
    } else if (std::find(values.begin(), values.end(), current) == values.end()) {
      refuse(flag, absl::StrCat("values must include the command's own, ", current));
      continue;
    }
    if (auto c = in.script_choices.find(flag); c != in.script_choices.end()) {
      bool inside = true;
      for (const std::string& v : values) {
        inside = inside && std::find(c->second.begin(), c->second.end(), v) != c->second.end();
      }
      if (!inside) {
        refuse(flag, absl::StrCat("values outside the script's choices [", absl::StrJoin(c->second, ", "), "]"));
        continue;
      }
    }
    std::string rationale = p["rationale"] && p["rationale"].IsScalar() ? p["rationale"].Scalar() : "";
    if (rationale.size() > 200) rationale = rationale.substr(0, 200) + "...";
    DraftKnob k;
    k.flag = flag;
    k.name = KnobName(flag);
    for (const DraftKnob& other : d->knobs) {
      if (other.name == k.name) k.name += "_llm";
    }
    k.values = values;
    k.baseline = current;
    k.source = "llm";
    k.why = absl::StrCat("proposed by ", llm_model, ": ", rationale.empty() ? "no reason given" : rationale);
    if (arg->bare) k.form = DraftKnob::Form::kSwitch;
    PlaceKnob(*arg, k.name, &d->command);
    d->knobs.push_back(std::move(k));
    ++accepted;
  }
  return absl::OkStatus();
}

}  // namespace infrarsi
