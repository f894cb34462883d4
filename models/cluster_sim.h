// An analytic performance and memory model of Megatron-style distributed
// training (TP/PP/CP/EP/DP, micro-batching, interleaving, recompute,
// distributed optimizer, overlap, bf16/fp8), used as a stand-in cluster.
//
// Simulate() is deterministic and noise-free: the "true" landscape, used to
// find optima. MeasureTrial() adds what a real run shows on top: run-to-run
// noise, stragglers, slow drift, per-step losses, start-up cost and
// launcher-style failures, all drawn from seeds so benchmarks repeat.
//
// Formulas and where they come from:
//  - model FLOPs per token: 6*N_active + 12*L*h*s + 6*h*V (Narayanan et al.
//    2021, eq. 3 without recompute; PaLM's MFU convention); MFU is measured
//    against the GPU's dense bf16 peak whatever the precision;
//  - activation memory per layer: Korthikanti et al. 2022 ("Reducing
//    Activation Recomputation"), generalised to GQA, SwiGLU and flash
//    attention: 34*s*b*h + 5*a*s^2*b bytes for GPT without parallelism;
//  - model state: Megatron's 18 bytes/param, or 6 + 12/d with the
//    distributed optimizer (ZeRO-1); ZeRO-2 shards the gradients too
//    (2 + 16/d) and ZeRO-3 / FSDP the weights as well (18/d), over the
//    whole data-parallel group or, with HSDP, a shard group of it;
//  - pipeline bubble (p-1)/(m*v) with 1F1B; stage i of p holds min(m, p-i)
//    micro-batches in flight (the first holds p), every stage's memory is
//    counted and the worst is the peak, so uneven stages balance it;
//  - ring collectives: all-reduce 2(n-1)/n * bytes / bw, all-gather and
//    reduce-scatter (n-1)/n * bytes / bw, plus per-step latency.
//
// Pure logic, standard library only. Thread-compatible (no shared state).
#ifndef INFRARSI_MODELS_CLUSTER_SIM_H_
#define INFRARSI_MODELS_CLUSTER_SIM_H_

#include <cstdint>
#include <map>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::models::sim {

struct GpuSpec {
  std::string name;
  double bf16_tflops = 0;  // dense peak
  double fp8_tflops = 0;   // dense peak; 0: fp8 unsupported
  double memory_gib = 0;   // usable device memory
  double hbm_tbps = 0;
  double gemm_efficiency = 0.8;  // best large-GEMM fraction of peak
  // The GPU-to-GPU fabric of its usual system, where the catalog states it
  // (0: not stated; a cluster's own defaults, 450 GB/s and one node, apply).
  double nvlink_gbps = 0;  // GB/s per GPU, one direction
  int nvlink_domain = 0;   // GPUs one NVLink fabric joins (GB200 NVL72: 72)
  const char* source = "";  // where the figures come from
  // Dense FP4 peak; > 0 marks a part with microscaling formats (Blackwell:
  // MXFP8 and NVFP4 GEMMs), 0 none.
  double fp4_tflops = 0;
  // The GPU's link to host memory, GB/s one direction (PCIe 4/5 x16: 32/64;
  // Grace's NVLink-C2C: 450); what activation offloading moves over.
  double host_gbps = 32;
};

// The catalog: A100-40GB, A100-80GB (alias A100), H100 (SXM, 80 GB),
// H100-96GB (HBM2e at 500 W), H800, H20, H200, B200, GB200, GB300, MI300X;
// each entry's `source` says where its figures come from.
// Null for an unknown name (compared case-insensitively).
const GpuSpec* FindGpu(std::string_view name);
std::vector<std::string> GpuNames();

struct ModelShape {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // 0: = heads (multi-head attention)
  int ffn = 0;       // dense MLP width
  int64_t vocab = 0;
  bool swiglu = true;    // gated MLP (3 matrices) vs GeLU (2)
  bool dropout = false;  // dropout masks stored (GPT-3 style)
  bool tied_embeddings = false;
  int experts = 0;  // MoE when > 0: every layer's MLP is a mixture
  int topk = 0;
  int expert_ffn = 0;
  // Attention per head: 0 means hidden / heads. Qwen3 and GPT-OSS use a
  // head dimension of their own (queries heads x head_dim wide).
  int head_dim = 0;
  // Multi-head latent attention (DeepSeek-V2/V3) when kv_lora_rank > 0:
  // keys and values come from a kv_lora_rank-wide latent (plus a
  // rope_head_dim-wide shared RoPE key), queries from a q_lora_rank-wide
  // one (0: not compressed); query/key heads are head_dim + rope_head_dim
  // wide, value heads v_head_dim (0: head_dim).
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int rope_head_dim = 0;
  int v_head_dim = 0;
  // MoE extras: always-active shared experts (their total width; DeepSeek's
  // one shared expert is 2048 wide) and leading layers with a dense MLP of
  // width `ffn` (DeepSeek-V3: the first 3 of 61).
  int shared_expert_ffn = 0;
  int dense_layers = 0;
  // Sliding-window attention: a query sees the last `window` tokens (0:
  // every layer attends globally); with global_every = n, every n-th layer
  // attends globally (GPT-OSS alternates: 2; Gemma 3: 6; 0: none does).
  int window = 0;
  int global_every = 0;
  int seq_len = 0;
  int64_t global_batch = 0;  // sequences per optimizer step
};

struct ClusterShape {
  GpuSpec gpu;
  int gpus_per_node = 8;
  int nodes = 1;
  // GPUs one NVLink fabric joins (0: a node's). A GB200 NVL72 rack joins 72
  // GPUs across 18 trays of 4: a collective within it never touches the NIC.
  int nvlink_domain = 0;
  double nvlink_gbps = 450;  // GB/s per GPU, one direction
  double net_gbps = 50;      // GB/s per GPU across nodes (400 Gb/s NIC)
  double nvlink_latency_us = 5;
  double net_latency_us = 15;
  // Noise, applied by MeasureTrial only.
  double noise_cv = 0.01;            // run-to-run (launch) variation
  double straggler_prob = 0.02;      // per step: some GPU is slow
  double straggler_slowdown = 0.25;  // how much slower that step is
  double drift_pct = 1.0;            // slow-down per 100 trials on this cluster
  uint64_t seed = 1;
  int world() const { return gpus_per_node * nodes; }
  int domain() const { return nvlink_domain > gpus_per_node ? nvlink_domain : gpus_per_node; }
};

// Activation recompute. selective: Megatron's, the attention core only;
// full: every layer from its input; op: torchtitan's op-level selective
// checkpointing (a layer keeps its input, the attention kernel's outputs
// and every second plain matmul's output, fp8 ones included: the policy
// sees aten.mm before torchao's fp8 tensors turn it into a scaled GEMM;
// everything else, grouped expert GEMMs too, is rerun in backward);
// modules: Megatron-Core's --recompute-modules layernorm mla_up_proj
// moe_act, as DeepSeek-V3's report and the published MLA/MoE recipes run
// it (norm outputs, MLA's query/key/value up-projections and the routed
// experts' activation output are rebuilt in backward; the attention core
// is kept).
enum class Recompute { kNone, kSelective, kFull, kOp, kModules };
// The fused attention kernel. kFused: Transformer Engine / cuDNN or
// FlashAttention-3 class (what flash_attn is calibrated on); kFa2:
// FlashAttention-2 class (PyTorch SDPA's flash backend), which on GPUs with
// fp8 tensor cores (Hopper and later) does not use their asynchronous
// instructions: FlashAttention-3's authors measure theirs 1.5-2.0x faster,
// so it runs at 1/1.75 of the fused rate there; on Ampere it is the fused
// kernel. Ignored without flash_attn.
enum class AttnKernel { kFused, kFa2 };
// GEMM precision. fp8: Transformer Engine's delayed or current scaling
// (Hopper and later); mxfp8: block-scaled fp8 at fp8's peak, Blackwell only;
// nvfp4: 4-bit GEMMs at the FP4 peak (Blackwell only), inputs kept at 4.5
// bits, its losses drifting more than fp8's.
enum class Precision { kBf16, kFp8, kMxfp8, kNvfp4 };
// How model state is sharded across data-parallel ranks: ZeRO stages as
// DeepSpeed names them. Megatron's distributed optimizer is ZeRO-1
// (`dist_opt` true raises kNone to it); FSDP/FSDP2 is ZeRO-3 (its knob
// value `fsdp` is an alias of `zero3`).
enum class Sharding { kNone = 0, kZero1 = 1, kZero2 = 2, kZero3 = 3 };

struct LaunchKnobs {
  int tp = 1, pp = 1, cp = 1, ep = 1;
  int micro_batch = 1;
  int vpp = 1;  // virtual pipeline stages per rank (interleaving)
  Recompute recompute = Recompute::kNone;
  bool dist_opt = false;  // optimizer-state sharding across DP
  // Gradients kept and reduced in bf16 (Megatron-Core's DDP with
  // grad_reduce_in_fp32 off, NeMo's recipes) instead of fp32 main
  // gradients: 2 bytes a parameter instead of 4, and the optimizer keeps an
  // fp32 copy of its (sharded) gradients: Megatron's table, 20 bytes a
  // parameter, or 4 + 16/d with the distributed optimizer.
  bool grad_reduce_bf16 = false;
  bool seq_par = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  double bucket_mb = 40;
  Precision precision = Precision::kBf16;
  bool fused_kernels = false;  // fused norms/activations/optimizer, TP overlap
  bool flash_attn = false;
  AttnKernel attn_kernel = AttnKernel::kFused;
  // Activations of this many layers (per micro-batch, the first layers of
  // the model) moved to host memory after their forward and back before
  // their backward (Megatron-Core's --cpu-offloading-num-layers); 0: none.
  // The copies overlap other layers' compute over the GPU's host link.
  int offload_layers = 0;
  Sharding sharding = Sharding::kNone;
  // HSDP: shard within groups of this many data-parallel ranks (x CP, as
  // FSDP's mesh counts them) and replicate across groups; 0: one group.
  int shard_group = 0;
  // Uneven pipeline stages (Megatron's --decoder-first/last-pipeline-num-
  // layers): layers on the first and last stage; 0: an even split. The
  // rest split evenly over the stages between.
  int pp_first_layers = 0;
  int pp_last_layers = 0;
  // MoE token dropping: an expert takes at most capacity_factor x its fair
  // share of tokens, padded to it (0: dropless). Dropping tokens changes
  // what is computed, so the losses change with it.
  double capacity_factor = 0;
  // The expert all-to-all of one micro-batch under another's compute
  // (Megatron-Core's overlap_moe_expert_parallel_comm); needs EP > 1.
  bool overlap_moe_comm = false;
  // DeepSeek-V3's DualPipe schedule (needs an even PP >= 2, no
  // interleaving, at least 2 x PP micro-batches): rank r holds stages r and
  // PP-1-r (two copies of every stage's weights and gradients, the
  // optimizer shards spread over both copies' ranks) and feeds micro-batches
  // from both ends; a forward chunk overlaps a backward chunk, which hides
  // the expert all-to-all and the pipeline sends behind compute. In flight:
  // PP + 1 chunks' activations on every rank; bubble (PP/2 - 1) x (F&B +
  // B - 3W) (the DualPipe paper's table).
  bool dualpipe = false;
  // The MLP activation's input (SwiGLU's gate and up, GeLU's input) kept
  // in fp8 for backward (Megatron-Core's activation_func_fp8_input_store,
  // DeepSeek-V3's cached SwiGLU inputs): 1 byte a value instead of 2.
  bool act_fp8_store = false;
  // The loss's fused cross entropy writes its gradient into the bf16
  // logits it saved (Transformer Engine's Triton kernel, which Megatron-
  // Core runs with cross_entropy_fusion_impl "te", as Megatron-Bridge's
  // recipes set it): the logits cost 2 bytes a value, not the 4 of a
  // fused loss that keeps a gradient beside them (or the 10 of an unfused
  // one's fp32 copies).
  bool loss_in_place = false;
  // A contract-breaking edit: sequences per step actually processed (0: the
  // workload's). Changes the numbers, which a contract must catch.
  int64_t global_batch_override = 0;
};

// Knob names MeasureTrial understands, for specs and error messages.
const std::vector<std::string>& KnobNames();
// Sets one knob from its text ("4", "true", "selective", "fp8"). False with
// *error set on an unknown name or a bad value.
bool SetKnob(LaunchKnobs* knobs, const std::string& name, const std::string& value,
             std::string* error);
// The same assignment parsed once, to apply many times: the search checks
// thousands of settings per proposal. Null with *error set where SetKnob
// would fail.
using KnobSetter = std::function<void(LaunchKnobs*)>;
KnobSetter CompileKnob(const std::string& name, const std::string& value, std::string* error);

enum class Status { kOk, kOom, kLauncherError };
const char* StatusName(Status s);

// Per GPU at the peak; the parts sum to total_gib. optimizer_step_gib is
// the fp32 gradient copy the optimizer makes at the step with bf16
// gradients: it exists only while no activations do, so it counts in the
// total (as part of buffers_gib) only when the step is the peak.
struct MemoryBreakdown {
  double weights_gib = 0, grads_gib = 0, optimizer_gib = 0, activations_gib = 0,
         logits_gib = 0, buffers_gib = 0, total_gib = 0;
  double optimizer_step_gib = 0;
};

struct SimResult {
  Status status = Status::kOk;
  std::string message;  // launcher error or OOM text
  double step_time_s = 0;
  double peak_mem_gib = 0;
  double mfu = 0;                // model FLOPs / (step time * world * bf16 peak)
  double model_tflops_per_gpu = 0;
  double hw_tflops_per_gpu = 0;  // executed FLOPs, recompute included
  double tokens_per_s = 0;
  int dp = 0;
  int64_t microbatches = 0;
  std::map<std::string, double> phases;  // seconds per step by phase
  MemoryBreakdown memory;
};

// Parameter counts of the model.
struct ParamCounts {
  double total = 0;
  double active = 0;           // per token (MoE: top-k experts)
  double embedding = 0;        // input embedding (+ output layer if untied)
  // Per layer, averaged over the layers (a MoE model's leading dense
  // layers included): what is not split by EP, and all experts.
  double per_layer_dense = 0;  // attention + norms + router + shared/dense MLP
  double per_layer_expert = 0; // routed experts
  double attention = 0;        // one layer's attention and norms
  double dense_mlp = 0;        // one dense MLP (width ffn)
  double moe_dense = 0;        // one MoE layer's router and shared experts
  double moe_experts = 0;      // one MoE layer's routed experts
  int moe_layers = 0;          // layers with a mixture (the rest dense)
};
// Whether layer i (from 0) has a mixture of experts, and whether it
// attends globally (not through a sliding window).
bool IsMoeLayer(const ModelShape& m, int layer);
bool IsGlobalLayer(const ModelShape& m, int layer);
// The layers of pipeline stage `stage` of `pp` as [first, first + count):
// the knobs' uneven split or an even one.
struct StageLayers {
  int first = 0, count = 0;
};
StageLayers LayersOfStage(const ModelShape& m, const LaunchKnobs& k, int stage);
ParamCounts CountParams(const ModelShape& m);
// Model FLOPs per token for training (see the header comment).
double ModelFlopsPerToken(const ModelShape& m);

// Activation bytes of one transformer layer for one micro-batch on one GPU,
// as Korthikanti et al. count them (exposed for tests): a MoE layer for a
// MoE model, unless `moe` says which.
double ActivationBytesPerLayer(const ModelShape& m, const LaunchKnobs& k);
double ActivationBytesPerLayer(const ModelShape& m, const LaunchKnobs& k, bool moe);

// Megatron's launch-time argument checks (divisibility of the world by the
// parallel sizes, heads and layers by TP and PP, the batch by micro-batches,
// ...): the error a launcher prints, or "" when the setting launches. These
// rules are public and known before any run, so a tuner may skip settings
// that cannot launch instead of paying for them.
std::string LaunchCheck(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k);
// LaunchCheck(m, c, k).empty(), without formatting a message (what a search
// asks of thousands of settings a proposal).
bool Launches(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k);

// A textbook estimate of peak memory per GPU in GiB, what a planner computes
// before any run: Megatron's 18 (or 6 + 12/d) bytes per parameter over TP x
// PP (experts over EP too; d the data-parallel ranks with CP's, experts'
// less EP's), plus Korthikanti's activations per layer (Table 2: 34sbh/t
// with sequence parallelism, sbh(10 + 24/t) without, plus 5as^2b/t; 2sbh
// with full recompute, 2sbh/t with sequence parallelism, and one whole
// layer recomputed; no s^2 term kept with flash attention or selective
// recompute, though the layer being computed has it without flash, with
// the scores' fp32 copy for the softmax, 4as^2b/t), read at the model's
// config: without dropout no masks (8sbh of the 10 left, 2as^2b of the 5);
// the 24sbh TP splits at the model's widths (Q, and K and V at the KV
// heads'; the MLP's 4 bytes per element of its width, SwiGLU's 6; a MoE's
// top-k routed copies of each token with their dispatched input), for the
// first stage's PP in-flight micro-batches, or the last stage's one with
// the logits (4sbv/t), whichever is more, the first stage's activations
// scaled by Megatron's interleaving penalty 1 + (PP - 1) / (PP x VPP) (its
// theoretical memory formula has it). With bf16 gradients the optimizer's
// fp32 copy of its gradients is a peak of its own at the step, never beside
// the activations. Under low precision (fp8, MXFP8, NVFP4: Transformer
// Engine's recipes) GEMM inputs are kept in it (1 byte an element, NVFP4
// 0.5625) and each weight has a low-precision copy beside its bf16 one;
// `act_fp8_store` keeps the MLP activation's input in fp8 too.
// Deliberately simpler than Simulate (no buffers, MoE routing imbalance,
// MLA latents or the unfused loss's logit copies): the search's memory
// model learns how far off it is.
double TextbookMemoryGib(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k);

// The same estimate and the part of it that is activations (0 where the
// optimizer step's copy is the peak): the search learns how far off each
// part is.
struct TextbookMemoryParts {
  double total_gib = 0;
  double activation_gib = 0;
  double activation_share() const { return total_gib > 0 ? activation_gib / total_gib : 0.0; }
};
TextbookMemoryParts TextbookMemory(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k);

// A textbook estimate of step time in seconds, what a planner computes
// before any run (Narayanan et al. 2021): the model FLOPs of a step spread
// over all GPUs at the precision's peak times one GEMM efficiency, a third
// more with full recompute (the attention scores again with selective),
// stretched by the 1F1B bubble (1 + (p-1)/(m v)); plus TP's four ring
// all-reduces per layer and micro-batch, EP's four all-to-alls, the
// pipeline's point-to-point sends (2v per micro-batch and bubble slot), and the
// data-parallel gradient all-reduce unless it is overlapped (EP's, when
// overlapped with another micro-batch's compute, only what 0.8 of that
// compute cannot cover, at least a twentieth); a MoE's expert
// GEMMs at the efficiency their rows allow (rows / (rows + 128), the rows an
// expert gets growing with EP). Deliberately simpler than Simulate (no
// other kernel efficiencies by shape, no flash or fused
// kernels, no fp8 or CP overheads, no latencies): the search's step-time
// model uses its logarithm as one feature and learns how far off it is.
double TextbookStepTimeS(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k);

// Noise-free outcome of one setting.
SimResult Simulate(const ModelShape& model, const ClusterShape& cluster, const LaunchKnobs& k);

struct StepSample {
  int64_t step = 0;
  bool warmup = false;
  double step_time_s = 0;
  double loss = 0;
  int64_t tokens = 0;
  std::map<std::string, double> phases;
};

struct Measurement {
  Status status = Status::kOk;
  std::string message;
  std::vector<StepSample> steps;  // empty unless ok
  double peak_mem_gib = 0;
  double wall_s = 0;  // start-up included
  SimResult truth;    // the noise-free result behind it
};

// A trial's start-up before its first step (imports, NCCL init across the
// world, building the model), in seconds: MeasureTrial's, without noise.
double StartupS(const ModelShape& model, const ClusterShape& cluster);

// One trial as a real cluster would show it: `trial_seed` draws this
// launch's noise; `trial_index` (how many trials the cluster ran before)
// drives the slow drift. Losses depend only on the data (cluster seed), the
// tokens per step and the precision, so honest settings agree.
Measurement MeasureTrial(const ModelShape& model, const ClusterShape& cluster,
                         const LaunchKnobs& k, int warmup_steps, int timed_steps,
                         uint64_t trial_seed, int64_t trial_index);

}  // namespace infrarsi::models::sim

#endif  // INFRARSI_MODELS_CLUSTER_SIM_H_
