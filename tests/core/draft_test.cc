// `infrarsi draft`: specs drafted from real launch lines (Megatron-LM's
// example scripts, expanded as bash runs them; the tiny-gpt example), the
// checks on what a team or an LLM gives, and that every draft parses.
#include "core/draft.h"
#include "core/llm_patches.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/planner.h"
#include "core/spec.h"

namespace infrarsi {
namespace {

std::vector<std::string> Words(const std::string& line) {
  auto w = SplitCommandLine(line);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : std::vector<std::string>{};
}

// Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (commit
// 157006d6), its arrays expanded, with NUM_NODES=16 as its comment says to
// set for the 128 GPUs that tp 8 x pp 16 need, and its path arguments set.
const char kGpt3[] =
    "torchrun --nproc_per_node 8 --nnodes 16 --master_addr localhost --master_port 6000 "
    "examples/classes/pretrain_gpt.py --num-layers 96 --hidden-size 12288 --num-attention-heads 96 "
    "--seq-length 2048 --max-position-embeddings 2048 --attention-backend auto --micro-batch-size 1 "
    "--global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000 "
    "--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 "
    "--fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 "
    "--lr-decay-iters 430000 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 "
    "--data-path /data/gpt_text_document --vocab-file /data/gpt2-vocab.json "
    "--merge-file /data/gpt2-merges.txt --split 949,50,1 --log-interval 100 --save-interval 10000 "
    "--eval-interval 1000 --save /ckpt --load /ckpt --eval-iters 10 --tensorboard-dir /tb";

// Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh (commit 157006d6)
// with its defaults (one node of 8, mock data), arrays expanded.
const char kLlama3[] =
    "torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000 "
    "examples/classes/pretrain_gpt.py --use-mcore-models --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
    "--kv-channels 128 --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope "
    "--rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu "
    "--init-method-std 0.0134 --attention-backend fused --apply-layernorm-1p "
    "--untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
    "--global-batch-size 128 --train-samples 1953125000 --lr-decay-samples 1949218748 "
    "--lr-warmup-samples 3906252 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 "
    "--decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 "
    "--adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16 --cross-entropy-loss-fusion "
    "--calculate-per-token-loss --manual-gc --empty-unused-memory-level 1 --exit-duration-in-mins 235 "
    "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --fp8-format hybrid "
    "--fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather "
    "--tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel --mock-data "
    "--tokenizer-type NullTokenizer --vocab-size 128256 --data-cache-path /cache --tiktoken-pattern v2 "
    "--split 99,1,0 --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 "
    "--log-interval 1 --eval-iters 32 --eval-interval 100 --save-interval 1000 --log-throughput "
    "--ckpt-format torch_dist --distributed-timeout-minutes 60 --save /ckpt --load /ckpt "
    "--tensorboard-dir /tb";

const char kTinyGpt[] =
    "python3 train.py --micro-batch 1 --threads 1 --recompute true --attn matmul --optimizer adamw";

std::string ReadSource(const std::string& rel) {
  std::ifstream in(std::string(INFRARSI_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const DraftKnob* KnobOf(const Draft& d, const std::string& name) {
  for (const DraftKnob& k : d.knobs) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

using Values = std::vector<std::string>;

// The YAML reads back as a spec with the same knobs and baseline.
void ExpectParses(const Draft& d) {
  const std::string yaml = DraftYaml(d);
  SpecParseOptions o;
  o.spec_dir = "/specs";
  o.may_name_urls = true;  // as on an open loopback server or for an admin
  std::map<std::string, std::string> files;
  for (const std::string& p : d.protected_files) files["contract.protected[" + p + "]"] = "x";
  o.files = &files;
  auto spec = ParseSpec(yaml, o);
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << yaml;
  ASSERT_EQ(spec->knobs.size(), d.knobs.size());
  for (const DraftKnob& k : d.knobs) {
    const Knob* s = spec->FindKnob(k.name);
    ASSERT_NE(s, nullptr) << k.name;
    EXPECT_EQ(s->values, k.values) << k.name;
    EXPECT_EQ(spec->baseline.at(k.name), k.baseline) << k.name;
  }
  // The baseline's command is the command as given.
  EXPECT_EQ(spec->global_batch, d.global_batch);
  EXPECT_EQ(spec->seq_len, d.seq_len);
}

TEST(DraftTest, Gpt3On128GpusFromMegatronsExample) {
  DraftInput in;
  in.argv = Words(kGpt3);
  in.gpu = "A100-80GB";
  in.intent = "faster without changing what it computes";
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->gpus, 128);
  EXPECT_EQ(d->nodes, 16);
  EXPECT_EQ(d->gpus_per_node, 8);
  EXPECT_EQ(d->global_batch, 1536);
  EXPECT_EQ(d->seq_len, 2048);
  EXPECT_EQ(d->precision, Values{"fp16"});
  ASSERT_NE(KnobOf(*d, "tensor_model_parallel_size"), nullptr);
  // Within a node, dividing the 96 heads.
  EXPECT_EQ(KnobOf(*d, "tensor_model_parallel_size")->values, (Values{"1", "2", "4", "8"}));
  EXPECT_EQ(KnobOf(*d, "tensor_model_parallel_size")->baseline, "8");
  // Dividing the 96 layers and the 128 GPUs.
  EXPECT_EQ(KnobOf(*d, "pipeline_model_parallel_size")->values, (Values{"1", "2", "4", "8", "16"}));
  // dp = 128 / (8 x 16) = 1: the micro-batch divides the 1536 sequences.
  EXPECT_EQ(KnobOf(*d, "micro_batch_size")->values, (Values{"1", "2", "4", "8", "16"}));
  EXPECT_EQ(KnobOf(*d, "attention_backend")->values, (Values{"auto", "flash", "fused", "unfused"}));
  // What it computes is never a knob.
  for (const char* fixed : {"lr", "global_batch_size", "seq_length", "fp16", "train_iters", "num_layers"}) {
    EXPECT_EQ(KnobOf(*d, fixed), nullptr) << fixed;
  }
  const std::string yaml = DraftYaml(*d);
  // Sixteen nodes: a Slurm job per trial, which gives torchrun its rendezvous.
  EXPECT_NE(yaml.find("slurm: {gpus_per_node: 8}"), std::string::npos) << yaml;
  const std::string command = yaml.substr(yaml.find("    command:"));
  EXPECT_EQ(command.substr(0, command.find('\n')).find("--master_addr"), std::string::npos);
  EXPECT_NE(yaml.find("# left out --master_addr localhost: each Slurm job gives torchrun its rendezvous"),
            std::string::npos);
  EXPECT_NE(yaml.find("\"--rampup-batch-size\", \"16\", \"16\", \"5859375\""), std::string::npos)
      << "flags it does not know stay as written";
  EXPECT_NE(yaml.find("\"--tensor-model-parallel-size\", \"{tensor_model_parallel_size}\""), std::string::npos);
  EXPECT_NE(yaml.find("# Intent: faster without changing what it computes"), std::string::npos);
  ExpectParses(*d);
  // Deterministic.
  EXPECT_EQ(DraftYaml(*DraftSpec(in)), yaml);
}

// A dense model whose widths the command states, on a GPU the simulator
// knows, is drafted with its shape (workload.shape): the search then gets
// the textbook estimates, Megatron's parallel and memory flags' knobs read
// as the simulator's.
TEST(DraftTest, ADenseModelsShapeIsDraftedForTheSearchsEstimates) {
  DraftInput in;
  in.argv = Words(kLlama3);
  in.gpu = "H100";
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->shape.has_value());
  EXPECT_EQ(d->shape->layers, 32);
  EXPECT_EQ(d->shape->kv_heads, 8);
  EXPECT_EQ(d->shape->ffn, 14336);
  EXPECT_EQ(d->shape->vocab, 128256);
  EXPECT_TRUE(d->shape->swiglu);
  ExpectParses(*d);
  SpecParseOptions o;
  o.spec_dir = "/specs";
  auto spec = ParseSpec(DraftYaml(*d), o);
  ASSERT_TRUE(spec.ok()) << spec.status() << DraftYaml(*d);
  ASSERT_TRUE(spec->shape.has_value()) << DraftYaml(*d);
  EXPECT_EQ(spec->shape->model.hidden, 4096);
  EXPECT_EQ(spec->shape->cluster.world(), 8);
  EXPECT_EQ(spec->shape->fixed.at("flash_attn"), "true");  // --attention-backend fused
  EXPECT_FALSE(spec->shape->launch_rules);
  for (const auto& [knob, sim] : std::map<std::string, std::string>{
           {"tensor_model_parallel_size", "tp"}, {"context_parallel_size", "cp"},
           {"micro_batch_size", "micro_batch"}, {"use_distributed_optimizer", "dist_opt"},
           {"sequence_parallel", "seq_par"}, {"overlap_grad_reduce", "overlap_grad_reduce"},
           {"grad_reduce_in_bf16", "grad_reduce_bf16"}, {"manual_gc", ""}}) {
    EXPECT_EQ(spec->shape->SimKnobOf(knob), sim) << knob;
  }
  const Planner planner = PlannerFor(*spec);
  ASSERT_TRUE(planner.memory_estimate_gib && planner.time_estimate_s);
  Config tp8 = spec->baseline;
  tp8["tensor_model_parallel_size"] = "8";
  EXPECT_LT(planner.memory_estimate_gib(tp8), planner.memory_estimate_gib(spec->baseline));  // tp 1 -> 8

  // GPT-3's example: a GPT-2 vocabulary file, GeLU's 4h MLP.
  in.argv = Words(kGpt3);
  in.gpu = "A100-80GB";
  auto gpt3 = DraftSpec(in);
  ASSERT_TRUE(gpt3.ok()) << gpt3.status();
  ASSERT_TRUE(gpt3->shape.has_value());
  EXPECT_EQ(gpt3->shape->vocab, 50257);
  EXPECT_EQ(gpt3->shape->ffn, 4 * 12288);
  EXPECT_FALSE(gpt3->shape->swiglu);
  ExpectParses(*gpt3);
  // Not all of it known, or no GPU the simulator knows: no shape.
  in.argv = Words(absl::StrReplaceAll(kLlama3, {{"--vocab-size 128256 ", ""}}));
  in.gpu = "H100";
  auto no_vocab = DraftSpec(in);
  ASSERT_TRUE(no_vocab.ok()) << no_vocab.status();
  EXPECT_FALSE(no_vocab->shape.has_value());
  EXPECT_EQ(DraftYaml(*no_vocab).find("shape:"), std::string::npos);
  in.argv = Words(kLlama3);
  in.gpu = "TPUv5";
  auto other_gpu = DraftSpec(in);
  ASSERT_TRUE(other_gpu.ok()) << other_gpu.status();
  EXPECT_FALSE(other_gpu->shape.has_value());
}

TEST(DraftTest, Llama3Fp8OnOneNodeWithItsSwitches) {
  DraftInput in;
  in.argv = Words(kLlama3);
  in.gpu = "H100";
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->gpus, 8);
  EXPECT_EQ(d->nodes, 1);
  EXPECT_EQ(d->precision, (Values{"bf16", "fp8"}));
  // Heads 32 and query groups 8.
  EXPECT_EQ(KnobOf(*d, "tensor_model_parallel_size")->values, (Values{"1", "2", "4", "8"}));
  // 8192 tokens, at least 1k a rank.
  EXPECT_EQ(KnobOf(*d, "context_parallel_size")->values, (Values{"1", "2", "4", "8"}));
  // dp 8: 16 sequences per replica.
  EXPECT_EQ(KnobOf(*d, "micro_batch_size")->values, (Values{"1", "2", "4", "8", "16"}));
  for (const char* s : {"use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather",
                        "sequence_parallel", "cross_entropy_loss_fusion", "grad_reduce_in_bf16", "manual_gc"}) {
    const DraftKnob* k = KnobOf(*d, s);
    ASSERT_NE(k, nullptr) << s;
    EXPECT_EQ(k->form, DraftKnob::Form::kSwitch);
    EXPECT_EQ(k->values, (Values{"false", "true"}));
    EXPECT_EQ(k->baseline, "true");
  }
  const std::string yaml = DraftYaml(*d);
  EXPECT_NE(yaml.find("\"{sequence_parallel?--sequence-parallel}\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\"--master_addr\", \"localhost\""), std::string::npos) << "one node keeps its rendezvous";
  EXPECT_NE(yaml.find("params: 7"), std::string::npos) << "about 7.5e9 dense weights";
  ExpectParses(*d);
  // The baseline's command is the command as given.
  std::map<std::string, std::string> base;
  for (const DraftKnob& k : d->knobs) base[k.name] = k.baseline;
  EXPECT_EQ(SubstituteCommand(d->command, base), Words(kLlama3));
}

// Found by fuzz_llm: a word of the team's command that already looks like a
// placeholder ("{name}", "{name?TEXT}") was copied into the drafted command,
// which then did not parse ("placeholder ... is not a knob"). It is refused,
// naming the word.
TEST(DraftTest, AWordThatLooksLikeAPlaceholderIsRefusedNamingIt) {
  DraftInput in;
  in.argv = {"torchrun", "train.py", "--micro-batch-size", "2", "--name={run?x}"};
  in.gpu = "H100";
  in.global_batch = 64;
  in.seq_len = 2048;
  auto d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(d.status()));
  EXPECT_NE(d.status().message().find("word 5 ('--name={run?x}') holds {run?...}"), std::string::npos)
      << d.status();
  in.argv.back() = "--name=run{1";  // a brace alone is text, not a placeholder
  EXPECT_TRUE(DraftSpec(in).ok()) << DraftSpec(in).status();
  // A flag given twice with different values is refused: which one the job
  // reads is not the draft's guess to make.
  in.argv = {"torchrun", "train.py", "--micro-batch-size", "2", "--micro-batch-size", "4"};
  d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--micro-batch-size is given twice ('2' and '4')"),
            std::string::npos)
      << d.status();
  // The recorded fuzz input: a bare accumulation flag, which a tie to the
  // micro-batch would have placed as a switch of a derived value.
  in.argv = {"torchrun", "train.py", "--gradient-accumulation-steps", "--micro-batch-size", "2",
             "--tensor-model-parallel-size", "2"};
  d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--gradient-accumulation-steps has no value"), std::string::npos)
      << d.status();
}

TEST(DraftTest, TinyGptFromTheScriptsOwnChoices) {
  const std::string script = ReadSource("deploy/examples/tiny-gpt/train.py");
  DraftInput in;
  in.argv = Words(kTinyGpt);
  in.gpu = "cpu";
  in.global_batch = 8;
  in.seq_len = 64;
  in.data_seed = 1234;
  in.script_choices = ScriptChoices(script);
  in.watches_optimizer = true;
  in.files = {"data.py", "infrarsi_harness.py", "model.py", "train.py"};
  in.repository_url = "repo";
  ASSERT_EQ(in.script_choices.at("--attn"), (Values{"matmul", "einsum"}));
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(KnobOf(*d, "micro_batch")->values, (Values{"1", "2", "4", "8"}));
  EXPECT_EQ(KnobOf(*d, "threads")->values, (Values{"1", "2"}));
  EXPECT_EQ(KnobOf(*d, "recompute")->values, (Values{"false", "true"}));
  EXPECT_EQ(KnobOf(*d, "attn")->values, (Values{"matmul", "einsum"}));
  EXPECT_EQ(KnobOf(*d, "attn")->source, "script");
  EXPECT_EQ(KnobOf(*d, "optimizer")->values, (Values{"adamw", "adamw_foreach"}));
  EXPECT_EQ(d->editable, (Values{"model.py", "train.py"}));
  EXPECT_EQ(d->protected_files, (Values{"data.py", "infrarsi_harness.py"}));
  EXPECT_EQ(d->precision, Values{"fp32"});
  const std::string yaml = DraftYaml(*d);
  EXPECT_NE(yaml.find("data_seed: 1234"), std::string::npos);
  EXPECT_NE(yaml.find("  optimizer_in_window: true"), std::string::npos);
  EXPECT_NE(yaml.find("repository: {url: repo, base: HEAD}"), std::string::npos);
  ExpectParses(*d);
}

// The scripts teams run, unmodified: each framework's flags, its reader
// chosen from what it prints, a line every step, micro-batch and
// accumulation tied, and every draft parses.
TEST(DraftTest, EachFrameworksCommandDraftsWithItsReader) {
  struct Case {
    std::string name, command, reader, micro_knob, derived, must_have;
    int64_t global_batch;
    std::string ds_config;
  };
  for (const Case& c : std::vector<Case>{
           {"megatron",
            "python3 framework_trainer.py megatron --micro-batch-size 2 --global-batch-size 32 "
            "--seq-length 128 --train-iters 6 --log-interval 100",
            "megatron", "micro_batch_size", "", "--log-interval\", \"1\"", 32, ""},
           {"torchtitan",
            "torchrun --nproc_per_node 1 framework_trainer.py torchtitan --training.local_batch_size=2 "
            "--training.global_batch_size=32 --training.seq_len=128 --training.steps=6",
            "torchtitan", "training_local_batch_size", "", "\"--metrics.log_freq=1\"", 32, ""},
           {"deepspeed",
            "deepspeed framework_trainer.py deepspeed --deepspeed_config ds.json --seq_length 128 --steps 6 "
            "--train_micro_batch_size_per_gpu 2",
            "deepspeed", "train_micro_batch_size_per_gpu", "", "ds.json", 32,
            R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1})"},
           {"hf_trainer",
            "python3 framework_trainer.py hf_trainer --per_device_train_batch_size 2 "
            "--gradient_accumulation_steps 16 --max_seq_length 128 --max_steps 6 --output_dir out",
            "hf_trainer", "per_device_train_batch_size", "32 / per_device_train_batch_size",
            "{gradient_accumulation_steps}", 32, ""},
           {"nanogpt",
            "python3 train.py --batch_size=4 --gradient_accumulation_steps=8 --block_size=64 "
            "--dtype=float32 --max_iters=6",
            "jsonl", "batch_size", "32 / batch_size", "--gradient_accumulation_steps={gradient_accumulation_steps}",
            32, ""},
       }) {
    SCOPED_TRACE(c.name);
    DraftInput in;
    in.argv = Words(c.command);
    in.gpu = "cpu";
    in.ds_config = c.ds_config;
    if (c.name == "nanogpt") in.reader = "jsonl";
    auto d = DraftSpec(in);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->reader, c.reader);
    EXPECT_EQ(d->global_batch, c.global_batch);
    const DraftKnob* micro = KnobOf(*d, c.micro_knob);
    ASSERT_NE(micro, nullptr) << DraftYaml(*d);
    EXPECT_EQ(micro->values, (Values{"1", "2", "4", "8", "16", "32"}));
    if (c.derived.empty()) {
      EXPECT_TRUE(d->derived.empty());
    } else {
      ASSERT_EQ(d->derived.size(), 1u);
      EXPECT_EQ(d->derived[0].second, c.derived);
    }
    const std::string yaml = DraftYaml(*d);
    EXPECT_NE(yaml.find(c.must_have), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("metrics: {reader: " + c.reader), std::string::npos) << yaml;
    ExpectParses(*d);
  }
}

// nanoGPT's trainer as the issue met it: --key=value overrides of
// module-level defaults; float32 is fp32; accumulation from the script.
TEST(DraftTest, ScriptDefaultsFillWhatTheCommandLeavesOut) {
  const std::string script = R"(
batch_size = 12
gradient_accumulation_steps = 5 * 8  # an expression: not a literal
block_size = 1024
dtype = 'float32'
bias = False
parser.add_argument("--warmup", type=int, default=100)
parser.add_argument('--name', default="gpt")
)";
  const auto defaults = ScriptDefaults(script);
  EXPECT_EQ(defaults.at("--batch_size"), "12");
  EXPECT_EQ(defaults.count("--gradient_accumulation_steps"), 0u);
  EXPECT_EQ(defaults.at("--block_size"), "1024");
  EXPECT_EQ(defaults.at("--dtype"), "float32");
  EXPECT_EQ(defaults.at("--bias"), "False");
  EXPECT_EQ(defaults.at("--warmup"), "100");
  EXPECT_EQ(defaults.at("--name"), "gpt");
  DraftInput in;
  in.argv = Words("python3 train.py --batch_size=4 --gradient_accumulation_steps=8");
  in.gpu = "cpu";
  in.reader = "regex";
  in.reader_pattern = R"(iter (?P<step>\d+): loss (?P<loss>[0-9.]+))";
  in.script_defaults = defaults;
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->seq_len, 1024);  // the script's block_size
  EXPECT_EQ(d->global_batch, 32);
  EXPECT_EQ(d->precision, Values{"fp32"});
  ExpectParses(*d);
  // With neither accumulation nor a global batch, a micro-batch change
  // would change what the step computes: kept, and said.
  in.argv = Words("python3 train.py --batch_size=4 --threads 2");
  in.script_defaults.clear();
  in.global_batch = 0;
  d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--global-batch-size"), std::string::npos) << d.status();
  in.global_batch = 4;
  in.seq_len = 64;
  d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(DraftYaml(*d).find("on the word that the script accumulates"), std::string::npos);
  // A script the draft cannot read the lines of: told what to add.
  in.reader.clear();
  in.reader_pattern.clear();
  d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().rfind("reader: the draft cannot tell what this script prints", 0), 0u)
      << d.status();
  // DeepSpeed printing every tenth step cannot be read per step.
  in = DraftInput();
  in.argv = Words("deepspeed train.py --deepspeed_config ds.json --zero_stage 1");
  in.gpu = "cpu";
  in.seq_len = 64;
  in.ds_config = R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2})";
  d = DraftSpec(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("steps_per_print is 10"), std::string::npos) << d.status();
}

TEST(DraftTest, BadInputIsNamed) {
  DraftInput in;
  in.gpu = "H100";
  EXPECT_EQ(DraftSpec(in).status().message(), "argv: the launch command is empty (give it after --)");
  in.argv = Words(kTinyGpt);
  in.seq_len = 64;
  EXPECT_EQ(DraftSpec(in).status().message(),
            "global_batch: the command has no --global-batch-size flag: give it (--global-batch N)");
  in.argv = Words(kLlama3);
  in.gpus = 16;
  EXPECT_EQ(DraftSpec(in).status().message(),
            "gpus: given as 16 but the command launches 8 per node on 1 nodes (8)");
  in.gpus = 0;
  in.global_batch = 256;
  EXPECT_EQ(DraftSpec(in).status().message(),
            "global_batch: given as 256 but the command says --global-batch-size 128");
  in = DraftInput();
  in.gpu = "cpu";
  in.global_batch = 8;
  in.seq_len = 64;
  in.argv = Words("python3 train.py --lr 0.1 --steps 10");
  EXPECT_TRUE(absl::StartsWith(DraftSpec(in).status().message(), "argv: no launch flag the draft knows"));
  in.argv = Words(kTinyGpt);
  in.gpu = "";
  EXPECT_EQ(DraftSpec(in).status().message(), "gpu: required (e.g. H100, A100-80GB, cpu)");
}

// Found by fuzz_llm (tests/fuzz/crashes/llm/): each drafted a spec that did
// not parse.
TEST(DraftTest, WhatFuzzingFoundIsRefusedOrDraftedSoundly) {
  DraftInput in;
  in.gpu = "H100";
  in.global_batch = 64;
  in.seq_len = 2048;
  in.argv = {"tok\x01un", "train.py", "--micro-batch-size", "2"};
  EXPECT_EQ(DraftSpec(in).status().message(), "argv: word 1 is not printable UTF-8 text");
  in.argv = {"torchrun", "--nproc_per_\xa5\xa5node", "8", "train.py", "--micro-batch-size", "2"};
  EXPECT_EQ(DraftSpec(in).status().message(), "argv: word 2 is not printable UTF-8 text");
  in.argv = {"python3", "train.py", "--micro-batch-size", "2"};
  in.intent = "caf\xc3\xa9 \xe2\x9c\x93";  // UTF-8 is fine
  EXPECT_TRUE(DraftSpec(in).ok());
  // A flag with one sensible value stays as written, not a placeholder of
  // a knob that was never drafted (one GPU: tensor parallel 1 only).
  in.argv = Words("python3 train.py --micro-batch-size 2 --tensor-model-parallel-size 1");
  auto d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(KnobOf(*d, "tensor_model_parallel_size"), nullptr);
  EXPECT_NE(std::find(d->command.begin(), d->command.end(), "1"), d->command.end());
  ExpectParses(*d);
  // Sizes no job has are refused, not multiplied.
  in.argv = Words("torchrun --nproc_per_node 2000000000 --nnodes 2000000000 train.py --micro-batch-size 2");
  EXPECT_EQ(DraftSpec(in).status().message(),
            "argv: the launcher's 2000000000 processes per node on 2000000000 nodes is not a job size");
  in.argv = Words("python3 train.py --micro-batch-size 2");
  in.global_batch = int64_t{1} << 62;
  EXPECT_EQ(DraftSpec(in).status().message(), "global_batch: 4611686018427387904 is larger than 1099511627776");
  in.global_batch = 64;
  // A script called ".py" still names a model.
  in.argv = Words("python3 .py --micro-batch-size 2");
  d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->model, "job");
  ExpectParses(*d);
  // A dotted flag with declared choices (torchtitan's overrides look so)
  // drafts an identifier for its knob; "odd.flag" made the spec unparsable.
  in.argv = Words("python3 train.py --micro-batch-size 2 --odd.flag cr --9lives x");
  in.script_choices = {{"--odd.flag", {"x", "y", "cr"}}, {"--9lives", {"x", "y"}}};
  d = DraftSpec(in);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(KnobOf(*d, "odd_flag"), nullptr);
  EXPECT_NE(KnobOf(*d, "k_9lives"), nullptr);
  EXPECT_NE(std::find(d->command.begin(), d->command.end(), "{odd_flag}"), d->command.end());
  ExpectParses(*d);
}

TEST(DraftTest, ScriptChoicesReadsLiteralListsOnly) {
  const auto c = ScriptChoices(R"(
p.add_argument("--attn", default="a", choices=["a", "b"])
p.add_argument('--n', type=int, choices=(1, 2, 4))
p.add_argument("--x", choices=CHOICES)
p.add_argument("--one", choices=["only"])
)");
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.at("--attn"), (Values{"a", "b"}));
  EXPECT_EQ(c.at("--n"), (Values{"1", "2", "4"}));
}

// An OpenAI-compatible answer whose message content is `content`.
std::string Answer(const std::string& content) {
  return "{\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": " + JsonQuote(content) + "}}]}";
}

TEST(DraftTest, AnLlmMayAddOnlyValidatedKnobsAndEveryRefusalIsSaid) {
  DraftInput in;
  in.argv = Words(kLlama3);
  in.gpu = "H100";
  auto base = DraftSpec(in);
  ASSERT_TRUE(base.ok());
  // Unreadable answers leave the draft as it was.
  for (const std::string& body : {std::string("not json at all {"), std::string("{\"choices\": []}"),
                                  Answer("sure! here are knobs"), Answer("{\"knobs\": 3}")}) {
    Draft d = *base;
    EXPECT_FALSE(MergeLlmDraftAnswer(body, in, "m", &d).ok()) << body;
    EXPECT_EQ(DraftYaml(d), DraftYaml(*base));
  }
  Draft d = *base;
  const std::string content = R"J({"knobs": [
    {"flag": "--empty-unused-memory-level", "values": ["0", "1", "2"], "rationale": "less allocator churn"},
    {"flag": "--global-batch-size", "values": ["64", "128"], "rationale": "smaller batch is faster"},
    {"flag": "--lr", "values": ["0.00015", "0.0003"]},
    {"flag": "--fp8-amax-history-len", "values": ["16", "32"], "rationale": "misses the current value"},
    {"flag": "--not-in-the-command", "values": ["1", "2"]},
    {"flag": "--log-throughput", "values": ["on", "off"]},
    {"flag": "--micro-batch-size", "values": ["1", "2"]},
    {"flag": "--exit-duration-in-mins", "values": ["235", "$(rm -rf /)"]},
    {"flag": "--calculate-per-token-loss", "values": ["true", "false"], "rationale": "a switch"}
  ]})J";
  ASSERT_TRUE(MergeLlmDraftAnswer(Answer("```json\n" + std::string(content) + "\n```"), in, "m", &d).ok());
  const DraftKnob* k = KnobOf(d, "empty_unused_memory_level");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->source, "llm");
  EXPECT_EQ(k->baseline, "1");
  ASSERT_NE(KnobOf(d, "calculate_per_token_loss"), nullptr) << DraftYaml(d);
  EXPECT_EQ(d.knobs.size(), base->knobs.size() + 2);
  const std::string yaml = DraftYaml(d);
  EXPECT_NE(yaml.find("# llm: proposed by m: less allocator churn"), std::string::npos) << yaml;
  for (const char* why : {
           "--global-batch-size: refused: it sets what the job computes",
           "--lr: refused: it sets what the job computes",
           "--fp8-amax-history-len: refused: values must include the command's own, 1024",
           "--not-in-the-command: refused: not a flag of the command",
           "--log-throughput: refused: a bare flag is on or off",
           "--micro-batch-size: refused: already a knob",
           "--exit-duration-in-mins: refused: values: each must be"}) {
    EXPECT_NE(yaml.find(why), std::string::npos) << why << "\n" << yaml;
  }
  ExpectParses(d);
  // A flood of proposals: read as far as the cap, the rest one note.
  std::string flood = R"({"knobs": [)";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&flood, i ? "," : "", R"({"flag": "--f)", i, R"("})");
  absl::StrAppend(&flood, "]}");
  Draft flooded = *base;
  ASSERT_TRUE(MergeLlmDraftAnswer(Answer(flood), in, "m", &flooded).ok());
  EXPECT_EQ(flooded.notes.size(), base->notes.size() + 17);
  EXPECT_EQ(flooded.notes[base->notes.size()], "llm (m) proposed 4984 more knobs: not read (at most 16 are)");
}

}  // namespace
}  // namespace infrarsi

namespace infrarsi {
namespace {

// The LLM's patches as stored with a session and read back after a restart:
// the same patch knobs, the same refusals, and nothing asked again.
TEST(LlmPatchesTest, AdmittedPatchesSurviveARestartAndRefusalsKeepTheirReasons) {
  SpecParseOptions o;
  o.spec_dir = "/specs";
  o.may_name_urls = true;
  auto parsed = ParseSpec(R"(
name: s
workload: {model: m, global_batch: 8, seq_len: 64}
hardware: {gpu: cpu, count: 1}
knobs: {mbs: [1, 2]}
baseline: {mbs: 1}
budget: {max_trials: 4}
repository: {url: /repo}
contract: {editable: [model.py], protected: [data.py]}
executor:
  process: {command: "python3 train.py --mbs {mbs}"}
)", o);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const SessionSpec original = *parsed;
  const std::string good =
      "diff --git a/model.py b/model.py\n--- a/model.py\n+++ b/model.py\n@@ -1,1 +1,1 @@\n-a\n+b\n";
  const std::string bad =
      "diff --git a/data.py b/data.py\n--- a/data.py\n+++ b/data.py\n@@ -1,1 +1,1 @@\n-a\n+b\n";
  const std::string content = absl::StrCat(R"({"patches": [{"name": "fast", "diff": )", JsonQuote(good),
                                           R"(, "rationale": "r", "prior": {"time": -0.2}},)",
                                           R"({"name": "data", "diff": )", JsonQuote(bad), "}]}");
  const std::string body = absl::StrCat(R"({"choices":[{"message":{"content":)", JsonQuote(content), "}}]})");
  SessionSpec spec = original;
  auto round = AdmitLlmPatches(body, nullptr, &spec);
  ASSERT_TRUE(round.ok()) << round.status();
  ASSERT_EQ(round->outcomes.size(), 2u);
  EXPECT_TRUE(round->outcomes[0].accepted);
  EXPECT_FALSE(round->outcomes[1].accepted);
  EXPECT_NE(round->outcomes[1].reason.find("data.py"), std::string::npos) << round->outcomes[1].reason;
  ASSERT_NE(spec.FindKnob("patch_llm_fast"), nullptr);
  EXPECT_EQ(spec.baseline.at("patch_llm_fast"), "off");
  // Stored and restored onto the spec as Init parsed it.
  const LlmPatchRound back = DecodeLlmPatchRound(EncodeLlmPatchRound(*round));
  EXPECT_TRUE(back.asked);
  ASSERT_EQ(back.outcomes.size(), 2u);
  EXPECT_EQ(back.outcomes[1].reason, round->outcomes[1].reason);
  SessionSpec restored = original;
  ASSERT_TRUE(RestoreLlmPatches(back, &restored).ok());
  ASSERT_EQ(restored.patches.size(), 1u);
  EXPECT_EQ(restored.patches[0].diff, good);
  EXPECT_TRUE(restored.patches[0].has_prior);
  EXPECT_DOUBLE_EQ(restored.patches[0].prior_time, -0.2);
  EXPECT_EQ(restored.knobs.size(), spec.knobs.size());
  // A doctor trial recorded before the knob existed reads as its baseline.
  Config old = {{"mbs", "2"}};
  FillKnobDefaults(restored, &old);
  EXPECT_EQ(old.at("patch_llm_fast"), "off");
  // A flood of proposals is read only as far as the cap: the rest are one
  // line in the round (which is stored with the session), not thousands.
  std::string flood = R"({"patches": [)";
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&flood, i ? "," : "", R"({"name": "p)", i, R"("})");
  absl::StrAppend(&flood, "]}");
  SessionSpec flooded = original;
  auto many = AdmitLlmPatches(
      absl::StrCat(R"({"choices":[{"message":{"content":)", JsonQuote(flood), "}}]})"), nullptr, &flooded);
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->outcomes.size(), static_cast<size_t>(kMaxLlmProposals) + 1);
  EXPECT_EQ(many->outcomes.back().reason, "4992 more proposals not read (at most 8 are)");
  // An unreadable answer changes nothing.
  SessionSpec untouched = original;
  EXPECT_FALSE(AdmitLlmPatches("{\"choices\": [{\"message\": {\"content\": \"no\"}}]}", nullptr, &untouched).ok());
  EXPECT_EQ(untouched.knobs.size(), original.knobs.size());
}

}  // namespace
}  // namespace infrarsi
