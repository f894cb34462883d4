// The simulator held against published training throughput it was not
// built on: FSDP jobs (torchtitan, Megatron-FSDP), MLA and shared-expert
// MoE (DeepSeek-V3), head_dim and sliding-window models (Qwen3, GPT-OSS),
// uneven pipelines (Llama 3.1 405B's 126 layers), and B200, GB200 and
// GB300 systems. Shared by the simulator's tests and sim_bench (which
// prints every row's error).
//
// A row is in the pass set when its source states the model, the GPUs,
// the global and micro batch, the sequence, every parallel degree and the
// precision; what the simulator needs beyond that is the recipe's
// documented default (listed per source below) or, where the layers do
// not split evenly over the pipeline, the remainder on the first and last
// stage (stated per row). Rows whose source leaves out what changes the
// answer (recompute, the schedule, an overlap the simulator cannot
// express) are listed with the reason and checked to fit only.
//
// Sources:
//  [MB] NVIDIA Megatron-Bridge, docs/performance-summary-archive.md, "25.11
//       NeMo Container" tables (repository NVIDIA-NeMo/Megatron-Bridge,
//       read at 067f987). Recipe defaults assumed as NeMo's performance
//       recipes run them (tests/models/nemo_perf.h): Transformer Engine
//       fused attention and kernels, the distributed optimizer with bf16
//       gradients, gradient reduce and parameter gather overlapped,
//       sequence parallel with TP, no recompute. FSDP > 0 is Megatron-FSDP
//       (ZeRO-3 over the data-parallel group). MoE rows "force-balance the
//       token distribution among experts": every expert takes its share,
//       modelled as a capacity factor of 1. FP8-CS runs as fp8, MXFP8 as
//       mxfp8 and NVFP4 as nvfp4 (the 26.06 table's Llama 3.1 405B rows).
//  [TT] torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (Meta's
//       Grand Teton: H100 96 GB HBM2e at 500 W, 400 Gb/s per GPU), with
//       torchtitan's llama3_8b.toml at the benchmark's commit: sequence
//       8192, selective activation checkpointing with option "op"
//       (recompute op: torchtitan's save list and every-second-matmul
//       policy, read from its parallelize_llama.py). FSDP2 with bf16
//       compute and fp32 gradient reduction, SDPA's flash backend
//       (FlashAttention-2 kernels: attn_kernel fa2); torch.compile is the
//       simulator's fused kernels. The long-context rows run full
//       checkpointing, as the benchmark states.
//  [TY] torchtitan, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md:
//       the same 8B recipe on 4 and 8 H200 nodes (400 Gb/s per GPU),
//       compile and Float8, local batch 2.
//  [ML] MLCommons, training_results_v5.1 (read at 441d65f), NVIDIA's
//       closed-division Llama 3.1 8B and 405B submissions on GB200 (tyche,
//       hsg; 400 Gb/s per GPU) and GB300 (theia; 800 Gb/s): every degree,
//       batch and precision from the submission's config_*.sh, the
//       throughput from its result logs (the median train_step_time over
//       every run, the first five steps of each left out). The 405B runs
//       count embedding and loss as a layer each on the pipeline
//       (ASYM_PP_EMBED/LOSS: 15 layers on the first and last stage). The
//       rest is Megatron's recipe as [MB] assumes it.
//  [L3] Llama Team, "The Llama 3 Herd of Models" (2024), Table 4 and
//       section 3.3: 405B on H100 80 GB, TP 8, PP 16, 8k or 128k context,
//       one layer fewer on the first and last stage, weights not resharded
//       after forward (ZeRO-2). Recompute and the interleaving depth are
//       not stated: fit only.
//  [DS] DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024): 2,048 H800,
//       PP 16 (DualPipe), EP 64, ZeRO-1, fp8, 180K GPU hours per trillion
//       tokens; sections 3.2.3 and 3.3.3 for memory: RMSNorm and MLA
//       up-projections recomputed, SwiGLU inputs cached in fp8 and its
//       output recomputed (the simulator's modules recompute with
//       act_fp8_store), DualPipe's two copies of the parameters and PP + 1
//       chunks in flight (its dualpipe schedule). The micro-batch size is
//       not stated (one sequence assumed) and the AdamW moments kept in
//       bf16 are counted at fp32 (12 bytes a parameter): fit only.
#ifndef INFRARSI_TESTS_MODELS_CALIBRATION_H_
#define INFRARSI_TESTS_MODELS_CALIBRATION_H_

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "models/cluster_sim.h"

namespace infrarsi::models::sim {

struct CalibrationRow {
  std::string name;
  std::string source;  // [MB], [TT], [TY], [L3], [DS] above
  ModelShape model;
  ClusterShape cluster;
  LaunchKnobs knobs;
  // The published figure: tokens per second per GPU, or (where a source
  // gives model TFLOP/s per GPU only) 0 with `tflops_per_gpu` set.
  double tokens_per_s_per_gpu = 0;
  double tflops_per_gpu = 0;
  bool pass_set = true;
  // Not in the pass set, but what the source states is all the simulator
  // needs to say whether it fits: it must (it ran).
  bool fit_only = false;
  std::string note;  // assumptions, or why the row is not in the pass set
  // A pass-set row the simulator misses by more than 10%: why, as far as
  // it is known. The test fails if such a row comes within 10% (so this
  // list stays true) or a row outside it misses.
  std::string miss;
};

inline void PrintTo(const CalibrationRow& r, std::ostream* os) { *os << r.name; }

namespace calibration {

inline ModelShape Llama3_8B() {
  ModelShape m;
  m.layers = 32, m.hidden = 4096, m.heads = 32, m.kv_heads = 8, m.ffn = 14336, m.vocab = 128256;
  return m;
}
inline ModelShape Llama3_70B() {
  ModelShape m;
  m.layers = 80, m.hidden = 8192, m.heads = 64, m.kv_heads = 8, m.ffn = 28672, m.vocab = 128256;
  return m;
}
inline ModelShape Llama31_405B() {
  ModelShape m;
  m.layers = 126, m.hidden = 16384, m.heads = 128, m.kv_heads = 8, m.ffn = 53248,
  m.vocab = 128256;
  return m;
}
// DeepSeek-V3 without its multi-token-prediction module (config.json).
inline ModelShape DeepSeekV3() {
  ModelShape m;
  m.layers = 61, m.hidden = 7168, m.heads = 128, m.vocab = 129280;
  m.head_dim = 128, m.q_lora_rank = 1536, m.kv_lora_rank = 512, m.rope_head_dim = 64,
  m.v_head_dim = 128;
  m.experts = 256, m.topk = 8, m.expert_ffn = 2048, m.shared_expert_ffn = 2048;
  m.dense_layers = 3, m.ffn = 18432;
  return m;
}
inline ModelShape Qwen3_30B_A3B() {
  ModelShape m;
  m.layers = 48, m.hidden = 2048, m.heads = 32, m.kv_heads = 4, m.head_dim = 128,
  m.vocab = 151936;
  m.experts = 128, m.topk = 8, m.expert_ffn = 768;
  return m;
}
inline ModelShape Qwen3_235B_A22B() {
  ModelShape m;
  m.layers = 94, m.hidden = 4096, m.heads = 64, m.kv_heads = 4, m.head_dim = 128,
  m.vocab = 151936;
  m.experts = 128, m.topk = 8, m.expert_ffn = 1536;
  return m;
}
// GPT-OSS-120B: alternating 128-token sliding-window and full layers.
inline ModelShape GptOss120B() {
  ModelShape m;
  m.layers = 36, m.hidden = 2880, m.heads = 64, m.kv_heads = 8, m.head_dim = 64,
  m.vocab = 201088;
  m.experts = 128, m.topk = 4, m.expert_ffn = 2880;
  m.window = 128, m.global_every = 2;
  return m;
}

// A DGX-style system: `per_node` GPUs a node (GB200/GB300: 4 a tray, the
// NVLink domain from the catalog), `net` GB/s per GPU across nodes.
inline ClusterShape System(const char* gpu, int gpus, int per_node, double net) {
  ClusterShape c;
  c.gpu = *FindGpu(gpu);
  c.gpus_per_node = per_node;
  c.nodes = gpus / per_node;
  if (c.gpu.nvlink_gbps > 0) c.nvlink_gbps = c.gpu.nvlink_gbps;
  if (c.gpu.nvlink_domain > per_node) c.nvlink_domain = c.gpu.nvlink_domain;
  c.net_gbps = net;
  return c;
}

// Megatron-Bridge's recipe defaults ([MB]).
inline LaunchKnobs MegatronRecipe(int tp, int pp, int cp, int vp, int ep, int mbs, bool fp8,
                                  bool fsdp) {
  LaunchKnobs k;
  k.tp = tp, k.pp = pp, k.cp = cp, k.vpp = vp, k.ep = ep, k.micro_batch = mbs;
  k.precision = fp8 ? Precision::kFp8 : Precision::kBf16;
  k.flash_attn = true;
  k.fused_kernels = true;
  k.grad_reduce_bf16 = true;
  k.overlap_grad_reduce = true;
  k.seq_par = tp > 1;
  // Megatron-Bridge's recipes run Transformer Engine's cross entropy
  // (cross_entropy_fusion_impl "te"), which works in place.
  k.loss_in_place = true;
  // The MoE recipes' common settings overlap the expert all-to-all.
  k.overlap_moe_comm = ep > 1;
  if (fsdp) {
    k.sharding = Sharding::kZero3;
  } else {
    k.dist_opt = true;
    k.overlap_param_gather = true;
  }
  return k;
}

// torchtitan's FSDP2 defaults ([TT], [TY]).
inline LaunchKnobs TorchtitanRecipe(int cp, int local_batch, bool compile, bool fp8,
                                    Recompute recompute) {
  LaunchKnobs k;
  k.cp = cp, k.micro_batch = local_batch;
  k.sharding = Sharding::kZero3;
  k.overlap_grad_reduce = true;
  k.flash_attn = true;
  k.attn_kernel = AttnKernel::kFa2;  // SDPA's flash backend
  k.fused_kernels = compile;
  k.precision = fp8 ? Precision::kFp8 : Precision::kBf16;
  k.recompute = recompute;
  return k;
}

inline CalibrationRow Row(std::string name, std::string source, ModelShape m, int seq,
                          int64_t gbs, ClusterShape c, LaunchKnobs k, double tokens,
                          std::string note = "") {
  CalibrationRow r;
  r.name = std::move(name);
  r.source = std::move(source);
  m.seq_len = seq;
  m.global_batch = gbs;
  r.model = m;
  r.cluster = c;
  r.knobs = k;
  r.tokens_per_s_per_gpu = tokens;
  r.note = std::move(note);
  return r;
}

inline LaunchKnobs Uneven(LaunchKnobs k, int first, int last) {
  k.pp_first_layers = first;
  k.pp_last_layers = last;
  return k;
}

inline LaunchKnobs With(LaunchKnobs k, Precision p) {
  k.precision = p;
  return k;
}

inline LaunchKnobs Balanced(LaunchKnobs k) {
  k.capacity_factor = 1.0;
  return k;
}

}  // namespace calibration

// Pass-set rows measured more than 10% off, with the reason as far as it
// is known (docs/simulator.md prints the table).
inline const std::vector<std::pair<std::string, std::string>>& KnownMisses() {
  static const auto* misses = new std::vector<std::pair<std::string, std::string>>{
      {"MB GB300 DeepSeek-V3 mxfp8",
       "GB300 is catalogued at GB200's dense peaks; in the source GB300 runs 4-19% faster than "
       "GB200 on the same model, which the catalog does not express"},
      {"MB GB300 Llama3.1-405B fp8",
       "GB300 is catalogued at GB200's dense peaks (see the GB300 DeepSeek-V3 row)"},
      {"MB GB200 GPT-OSS-120B mxfp8",
       "not established: narrow GEMMs (hidden and expert width 2880) and attention with sinks "
       "over 128-token windows, which the simulator runs faster than published"},
      {"MB GB300 GPT-OSS-120B mxfp8", "as the GB200 GPT-OSS row"},
      {"MB H100 Qwen3-30B-A3B fp8",
       "not established: EP 16 spans two nodes; the all-to-all overlap is modelled as on one "
       "NVLink domain"},
      {"MB GB200 Llama3-8B fp8", "not established (10.2%: at the edge)"},
      {"MB GB200 DeepSeek-V3 mxfp8",
       "not established (10.3%: at the edge); run with the recipe's recomputed modules, which "
       "keep the attention core: with the attention core recomputed too (the simulator's "
       "selective recompute) it lands at +6.2%"},
      {"MB GB200 Llama3.1-405B nvfp4",
       "not established: every 405B NVFP4 row of both sources runs 17-33% slower than the "
       "simulator's GEMMs at the FP4 peak plus fp8-like quantization passes (the MLPerf runs "
       "turn Hadamard transforms and stochastic rounding off, so those are not the cause); "
       "which layers the recipes keep in BF16 is not stated; the 8B NVFP4 rows land"},
      {"MB GB300 Llama3.1-405B nvfp4", "as the GB200 NVFP4 row"},
      {"ML GB200 Llama3.1-405B nvfp4 512", "as the MB GB200 NVFP4 row"},
      {"ML GB200 Llama3.1-405B nvfp4 2560", "as the MB GB200 NVFP4 row"},
      {"ML GB200 Llama3.1-405B nvfp4 5120", "as the MB GB200 NVFP4 row"},
      {"ML GB300 Llama3.1-405B nvfp4 512", "as the MB GB200 NVFP4 row"},
      {"ML GB200 Llama3.1-8B fp8 512 TP2 CP4",
       "not established: 8 GPUs a sample (TP 2 x CP 4 over 2,048-token chunks) and one "
       "micro-batch in an 89 ms step; the simulator is 12-17% fast"},
      {"ML GB300 Llama3.1-8B fp8 512 TP2 CP4", "as the GB200 row"},
      {"TT 8xH100 8B 128k FSDP2 CP4",
       "not established: PyTorch's experimental ring attention at CP 4 and 8 runs 17-21% "
       "slower than its attention kernels and ring exchange account for (CP 1 and 2 are "
       "within 10%)"},
      {"TT 8xH100 8B 256k CP8", "as the 128k torchtitan row"},
  };
  return *misses;
}

// Every row, the pass set first.
inline std::vector<CalibrationRow> CalibrationSet() {
  using namespace calibration;  // NOLINT: the rows read as the tables do
  std::vector<CalibrationRow> rows;
  const ClusterShape gb200_8 = System("GB200", 8, 4, 50), gb200_64 = System("GB200", 64, 4, 50),
                     gb200_256 = System("GB200", 256, 4, 50);
  const ClusterShape gb300_8 = System("GB300", 8, 4, 100), gb300_64 = System("GB300", 64, 4, 100),
                     gb300_256 = System("GB300", 256, 4, 100);
  const ClusterShape b200_8 = System("B200", 8, 8, 50);
  const ClusterShape h100_8 = System("H100", 8, 8, 50), h100_16 = System("H100", 16, 8, 50),
                     h100_1024 = System("H100", 1024, 8, 50);
  const char* mb = "[MB]";
  const std::string layout405 =
      "126 layers over PP 16: 7 on the first and last stage (embedding and loss counted as a "
      "layer each, as Llama 3 balanced them)";
  const std::string layout405_8 =
      "126 layers over PP 8: 15 on the first and last stage, 16 on the others";

  // ---- [MB] the 26.08 tables (the recipes at the commit read), the 26.06
  // Llama 3.1 405B and H100 Qwen3 rows, and the 25.11 Llama 3 8B rows whose
  // recipes are unchanged at that commit.
  const Recompute none = Recompute::kNone, light = Recompute::kModules;
  auto mr = [](int tp, int pp, int cp, int vp, int ep, int mbs, bool fp8, bool fsdp,
               Recompute rc) {
    LaunchKnobs k = MegatronRecipe(tp, pp, cp, vp, ep, mbs, fp8, fsdp);
    k.recompute = rc;
    return k;
  };
  const std::string ds_layout =
      "the recipe's layout puts 4 layers on each virtual stage and 1 (with the MTP module, not "
      "modelled) on the last";
  const std::string light_rc =
      "the recipe recomputes modules (MLA up-projection, norms, MoE activation): the simulator's "
      "modules recompute";
  rows.push_back(Row("MB GB200 DeepSeek-V3 mxfp8", mb, DeepSeekV3(), 4096, 4096, gb200_256,
                     With(Balanced(Uneven(mr(1, 4, 1, 4, 64, 1, true, false, light), 0, 13)), Precision::kMxfp8), 4912,
                     ds_layout + "; " + light_rc));
  rows.push_back(Row("MB GB300 DeepSeek-V3 mxfp8", mb, DeepSeekV3(), 4096, 4096, gb300_256,
                     With(Balanced(Uneven(mr(1, 2, 1, 8, 32, 1, true, false, none), 32, 29)), Precision::kMxfp8), 6288,
                     ds_layout));
  rows.push_back(Row("MB GB200 GPT-OSS-120B mxfp8", mb, GptOss120B(), 4096, 1280, gb200_64,
                     With(Balanced(mr(1, 1, 1, 1, 64, 4, true, false, light)), Precision::kMxfp8), 28672, light_rc));
  rows.push_back(Row("MB GB300 GPT-OSS-120B mxfp8", mb, GptOss120B(), 4096, 1280, gb300_64,
                     With(Balanced(mr(1, 1, 1, 1, 16, 4, true, false, none)), Precision::kMxfp8), 33024));
  rows.push_back(Row("MB GB200 Qwen3-30B-A3B mxfp8", mb, Qwen3_30B_A3B(), 4096, 512, gb200_8,
                     With(Balanced(mr(1, 1, 1, 1, 8, 4, true, false, none)), Precision::kMxfp8), 39936));
  rows.push_back(Row("MB GB300 Qwen3-30B-A3B mxfp8", mb, Qwen3_30B_A3B(), 4096, 512, gb300_8,
                     With(Balanced(mr(1, 1, 1, 1, 8, 8, true, false, none)), Precision::kMxfp8), 44544));
  rows.push_back(Row("MB GB200 Qwen3-235B-A22B mxfp8", mb, Qwen3_235B_A22B(), 4096, 8192,
                     gb200_256, With(Balanced(Uneven(mr(1, 8, 1, 3, 32, 1, true, false, none), 11, 11)), Precision::kMxfp8),
                     7280, "94 layers over PP 8: 11 on the first and last stage, 12 on the others"));
  rows.push_back(Row("MB GB300 Qwen3-235B-A22B mxfp8", mb, Qwen3_235B_A22B(), 4096, 8192,
                     gb300_256, With(Balanced(Uneven(mr(1, 4, 1, 12, 32, 2, true, false, none), 23, 23)), Precision::kMxfp8),
                     8816, "94 layers over PP 4: 23 on the first and last stage, 24 on the others"));
  rows.push_back(Row("MB H100 Qwen3-30B-A3B fp8", mb, Qwen3_30B_A3B(), 4096, 1024, h100_16,
                     Balanced(mr(1, 1, 1, 1, 16, 1, true, false, none)), 8826));
  rows.push_back(Row("MB GB200 Llama3.1-405B fp8", mb, Llama31_405B(), 8192, 1536, gb200_256,
                     Uneven(mr(4, 16, 1, 4, 1, 1, true, false, none), 7, 7), 843, layout405));
  rows.push_back(Row("MB GB300 Llama3.1-405B fp8", mb, Llama31_405B(), 8192, 1536, gb300_256,
                     Uneven(mr(4, 8, 1, 4, 1, 1, true, false, none), 15, 15), 1048, layout405_8));
  rows.push_back(Row("MB GB200 Llama3.1-405B nvfp4", mb, Llama31_405B(), 8192, 1536, gb200_256,
                     With(Uneven(mr(4, 16, 1, 8, 1, 1, true, false, none), 7, 7),
                          Precision::kNvfp4),
                     1166, layout405));
  rows.push_back(Row("MB GB300 Llama3.1-405B nvfp4", mb, Llama31_405B(), 8192, 1536, gb300_256,
                     With(Uneven(mr(4, 8, 1, 4, 1, 1, true, false, none), 15, 15),
                          Precision::kNvfp4),
                     1413, layout405_8));
  rows.push_back(Row("MB H100 Llama3.1-405B fp8", mb, Llama31_405B(), 8192, 1536, h100_1024,
                     Uneven(mr(8, 8, 2, 8, 1, 1, true, false, none), 15, 15), 326, layout405_8));
  rows.push_back(Row("MB GB200 Llama3-8B fp8", mb, Llama3_8B(), 8192, 128, gb200_8,
                     mr(1, 1, 1, 1, 1, 2, true, false, none), 31508));
  rows.push_back(Row("MB GB300 Llama3-8B fp8", mb, Llama3_8B(), 8192, 128, gb300_8,
                     mr(1, 1, 1, 1, 1, 2, true, false, none), 37556,
                     "GB300 at GB200's dense peaks (Blackwell Ultra's gain is in FP4)"));
  rows.push_back(Row("MB B200 Llama3-8B fp8", mb, Llama3_8B(), 8192, 128, b200_8,
                     mr(1, 1, 1, 1, 1, 2, true, false, none), 30624));

  // ---- [ML] MLPerf Training v5.1: tokens/s/GPU from the median step time.
  auto mlperf = [&](const char* name, ModelShape m, int64_t gbs, const ClusterShape& c,
                    LaunchKnobs k, double step_s, std::string note = "") {
    k.loss_in_place = false;  // the loss kernel these configurations run is not read here
    rows.push_back(Row(name, "[ML]", m, 8192, gbs, c, k,
                       static_cast<double>(gbs) * 8192 / (step_s * c.world()), std::move(note)));
  };
  const ClusterShape ml_gb200_8 = System("GB200", 8, 4, 50), ml_gb200_72 = System("GB200", 72, 4, 50),
                     ml_gb200_512 = System("GB200", 512, 4, 50),
                     ml_gb200_2560 = System("GB200", 2560, 4, 50),
                     ml_gb200_5120 = System("GB200", 5120, 4, 50);
  const ClusterShape ml_gb300_8 = System("GB300", 8, 4, 100), ml_gb300_72 = System("GB300", 72, 4, 100),
                     ml_gb300_512 = System("GB300", 512, 4, 100);
  // The 8B runs' BUCKET_SIZE: 768M parameters a bucket (bf16 gradients).
  auto ml8 = [&](LaunchKnobs k) {
    k.bucket_mb = 768e6 * 2.0 / (1024.0 * 1024.0);
    return k;
  };
  const LaunchKnobs ml8_fp4 = ml8(With(mr(1, 1, 1, 1, 1, 2, true, false, none), Precision::kNvfp4)),
                    ml8_cp2 = ml8(mr(1, 1, 2, 1, 1, 1, true, false, none)),
                    ml8_tp2cp4 = ml8(mr(2, 1, 4, 1, 1, 1, true, false, none));
  mlperf("ML GB200 Llama3.1-8B nvfp4 8", Llama3_8B(), 16, ml_gb200_8, ml8_fp4, 0.40576);
  mlperf("ML GB200 Llama3.1-8B fp8 72 CP2", Llama3_8B(), 36, ml_gb200_72, ml8_cp2, 0.17116);
  mlperf("ML GB200 Llama3.1-8B fp8 512 TP2 CP4", Llama3_8B(), 64, ml_gb200_512, ml8_tp2cp4, 0.08891);
  mlperf("ML GB300 Llama3.1-8B nvfp4 8", Llama3_8B(), 16, ml_gb300_8, ml8_fp4, 0.34662);
  mlperf("ML GB300 Llama3.1-8B fp8 72 CP2", Llama3_8B(), 36, ml_gb300_72, ml8_cp2, 0.14793);
  mlperf("ML GB300 Llama3.1-8B fp8 512 TP2 CP4", Llama3_8B(), 64, ml_gb300_512, ml8_tp2cp4, 0.08542);
  const LaunchKnobs ml405_tp4 =
      With(Uneven(mr(4, 8, 2, 8, 1, 1, true, false, none), 15, 15), Precision::kNvfp4);
  const LaunchKnobs ml405_tp2 =
      With(Uneven(mr(2, 8, 2, 8, 1, 1, true, false, none), 15, 15), Precision::kNvfp4);
  mlperf("ML GB200 Llama3.1-405B nvfp4 512", Llama31_405B(), 1152, ml_gb200_512, ml405_tp4,
         17.28877, layout405_8);
  mlperf("ML GB200 Llama3.1-405B nvfp4 2560", Llama31_405B(), 960, ml_gb200_2560, ml405_tp4,
         3.18845, layout405_8);
  mlperf("ML GB200 Llama3.1-405B nvfp4 5120", Llama31_405B(), 1280, ml_gb200_5120, ml405_tp4,
         2.22695, layout405_8);
  mlperf("ML GB300 Llama3.1-405B nvfp4 512", Llama31_405B(), 1152, ml_gb300_512, ml405_tp2,
         13.14711, layout405_8);

  // ---- [TT] torchtitan on 8 and 128 H100-96GB, and [TY] on 32 and 64 H200
  const ClusterShape tt8 = System("H100-96GB", 8, 8, 50), tt128 = System("H100-96GB", 128, 8, 50);
  const auto op = Recompute::kOp, full = Recompute::kFull;
  rows.push_back(Row("TT 8xH100 8B 32k FSDP8", "[TT]", Llama3_8B(), 32768, 8, tt8,
                     TorchtitanRecipe(1, 1, true, true, full), 3890));
  rows.push_back(Row("TT 8xH100 8B 64k FSDP4 CP2", "[TT]", Llama3_8B(), 65536, 4, tt8,
                     TorchtitanRecipe(2, 1, true, true, full), 2540));
  rows.push_back(Row("TT 8xH100 8B 128k FSDP2 CP4", "[TT]", Llama3_8B(), 131072, 2, tt8,
                     TorchtitanRecipe(4, 1, true, true, full), 1071));
  rows.push_back(Row("TT 8xH100 8B 256k CP8", "[TT]", Llama3_8B(), 262144, 1, tt8,
                     TorchtitanRecipe(8, 1, true, true, full), 548));
  // torchtitan's selective checkpointing ("op": recompute op, see
  // Recompute::kOp) at the 8B recipe's sequence and local batch.
  rows.push_back(Row("TT 8xH100 8B FSDP", "[TT]", Llama3_8B(), 8192, 16, tt8,
                     TorchtitanRecipe(1, 2, false, false, op), 5762));
  rows.push_back(Row("TT 8xH100 8B FSDP compile", "[TT]", Llama3_8B(), 8192, 16, tt8,
                     TorchtitanRecipe(1, 2, true, false, op), 6667));
  rows.push_back(Row("TT 8xH100 8B FSDP compile fp8", "[TT]", Llama3_8B(), 8192, 16, tt8,
                     TorchtitanRecipe(1, 2, true, true, op), 8532));
  rows.push_back(Row("TT 128xH100 8B FSDP", "[TT]", Llama3_8B(), 8192, 256, tt128,
                     TorchtitanRecipe(1, 2, false, false, op), 5605));
  rows.push_back(Row("TT 128xH100 8B FSDP compile", "[TT]", Llama3_8B(), 8192, 256, tt128,
                     TorchtitanRecipe(1, 2, true, false, op), 6514));
  rows.push_back(Row("TT 128xH100 8B FSDP compile fp8", "[TT]", Llama3_8B(), 8192, 256, tt128,
                     TorchtitanRecipe(1, 2, true, true, op), 8380));
  rows.push_back(Row("TY 32xH200 8B FSDP compile fp8", "[TY]", Llama3_8B(), 8192, 64,
                     System("H200", 32, 8, 50), TorchtitanRecipe(1, 2, true, true, op), 10938));
  rows.push_back(Row("TY 64xH200 8B FSDP compile fp8", "[TY]", Llama3_8B(), 8192, 128,
                     System("H200", 64, 8, 50), TorchtitanRecipe(1, 2, true, true, op), 10753));
  // ---- listed, not in the pass set
  {
    LaunchKnobs k = MegatronRecipe(1, 1, 1, 1, 1, 2, true, true);
    k.offload_layers = 40;
    CalibrationRow r = Row(
        "MB GB200 Llama3-70B FSDP fp8", mb, Llama3_70B(), 8192, 256, gb200_64, k, 4312,
        "Megatron-FSDP with 40 layers' activations offloaded to the CPU; fits with Transformer "
        "Engine's in-place cross entropy (184.04 GiB of 184.0 with a fused loss that keeps a "
        "gradient beside the logits); 12% fast: which activations the recipe stores in fp8 "
        "and what the offload's copies cost are not stated");
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  {
    CalibrationRow r = Row("MB H100 Llama3-8B FSDP fp8 (25.11)", mb, Llama3_8B(), 8192, 128,
                           h100_8, MegatronRecipe(1, 1, 1, 1, 1, 1, true, true), 14451,
                           "Megatron-FSDP; the 25.11 recipe is not the one at the commit read "
                           "(which runs DDP with 5 layers recomputed)");
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  {
    LaunchKnobs k = TorchtitanRecipe(1, 16, true, true, full);
    k.tp = 8;
    k.seq_par = true;
    CalibrationRow r = Row("TT 256xH100 70B FSDP32 TP8 async", "[TT]", Llama3_70B(), 8192, 512,
                           System("H100-96GB", 256, 8, 50), k, 876,
                           "async TP and compile are one knob here (fused kernels): the row "
                           "without async TP (829) cannot be told apart");
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  {
    LaunchKnobs k = TorchtitanRecipe(1, 1, true, true, full);
    k.tp = 8, k.pp = 8, k.seq_par = true;
    k = Uneven(k, 15, 15);
    CalibrationRow r = Row("TT 512xH100 405B FSDP8 TP8 PP8", "[TT]", Llama31_405B(), 8192, 256,
                           System("H100-96GB", 512, 8, 50), k, 100,
                           "the pipeline split of 126 layers over 8 stages is not stated");
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  for (const auto& [gpus, dp, cp, seq, tflops] :
       {std::tuple{8192, 64, 1, 8192, 430.0}, std::tuple{16384, 128, 1, 8192, 400.0},
        std::tuple{16384, 8, 16, 131072, 380.0}}) {
    LaunchKnobs k;
    k.tp = 8, k.pp = 16, k.cp = cp, k.seq_par = true, k.flash_attn = true, k.fused_kernels = true;
    k.sharding = Sharding::kZero2;
    k.overlap_grad_reduce = true;
    k = Uneven(k, 7, 7);
    // 16M tokens a step.
    const int64_t gbs = 16 * 1024 * 1024 / seq;
    CalibrationRow r = Row("L3 " + std::to_string(gpus) + "xH100 405B " +
                               std::to_string(seq / 1024) + "k",
                           "[L3]", Llama31_405B(), seq, gbs, System("H100", gpus, 8, 50), k, 0,
                           "recompute and the interleaving depth are not stated (run here "
                           "without either)");
    r.tflops_per_gpu = tflops;
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  {
    LaunchKnobs k;
    k.pp = 16, k.ep = 64, k.dist_opt = true, k.flash_attn = true, k.fused_kernels = true;
    k.precision = Precision::kFp8;
    k.overlap_grad_reduce = true;
    k.recompute = Recompute::kModules;
    k.act_fp8_store = true;
    k.dualpipe = true;
    k = Uneven(k, 0, 1);
    CalibrationRow r = Row("DS 2048xH800 DeepSeek-V3", "[DS]", DeepSeekV3(), 4096, 15360,
                           System("H800", 2048, 8, 50), k, 1e12 / (180e3 * 3600.0),
                           "DualPipe; 61 layers over PP 16: 1 on the last stage (the MTP "
                           "module's place); the micro-batch size is not stated (1 assumed)");
    r.pass_set = false;
    r.fit_only = true;
    rows.push_back(r);
  }
  for (CalibrationRow& r : rows) {
    // Megatron-Core's DDP buckets: max(40M, 1M x data-parallel size with
    // CP) parameters unless the recipe sets one (bf16 gradients here).
    const LaunchKnobs def;
    if ((r.source == "[MB]" || r.source == "[ML]") && r.knobs.sharding == Sharding::kNone &&
        r.knobs.bucket_mb == def.bucket_mb) {
      const int tp = r.knobs.tp, pp = r.knobs.pp;
      const double dpc = static_cast<double>(r.cluster.world()) / (tp * pp);
      r.knobs.bucket_mb = std::max(40e6, 1e6 * dpc) * 2.0 / (1024.0 * 1024.0);
    }
    for (const auto& [name, why] : KnownMisses()) {
      if (r.name == name) r.miss = why;
    }
  }
  return rows;
}

// Tokens per second per GPU of a simulated row.
inline double SimTokensPerGpu(const CalibrationRow& row, const SimResult& r) {
  return static_cast<double>(row.model.global_batch) * row.model.seq_len /
         (r.step_time_s * row.cluster.world());
}

// The row's relative error: simulated / published - 1, by tokens or, where
// the source gives only that, by model TFLOP/s per GPU.
inline double CalibrationError(const CalibrationRow& row, const SimResult& r) {
  if (row.tokens_per_s_per_gpu > 0) return SimTokensPerGpu(row, r) / row.tokens_per_s_per_gpu - 1;
  return r.model_tflops_per_gpu / row.tflops_per_gpu - 1;
}

}  // namespace infrarsi::models::sim

#endif  // INFRARSI_TESTS_MODELS_CALIBRATION_H_
