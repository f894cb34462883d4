// NVIDIA NeMo Framework's published pre-training performance (performance
// summary, FP8 on DGX-H100: 8 x H100 SXM per node, 8 x 400 Gb/s
// InfiniBand), the table that lists LLAMA3-8B at 12,273 and LLAMA3-70B at
// 1,524 tokens/s/GPU:
// https://docs.nvidia.com/nemo-framework/user-guide/24.09/performance/performance_summary.html
// A second published source beside Narayanan et al.'s Table 1 (A100, bf16):
// Hopper, fp8, GQA and SwiGLU, context parallelism. Shared by the
// simulator's test (every recipe fits; throughput within 10%) and sim_bench.
//
// The recipes' settings beyond the table's columns are NeMo's performance
// recipes' defaults: Transformer Engine fp8 with fused attention and
// kernels, the distributed optimizer with bf16 gradients (Megatron-Core's
// grad_reduce_in_fp32 off) and gradient reduce and parameter gather
// overlapped, sequence parallel with tensor parallel, no activation
// recomputation.
#ifndef INFRARSI_TESTS_MODELS_NEMO_PERF_H_
#define INFRARSI_TESTS_MODELS_NEMO_PERF_H_

#include <cstdint>
#include <ostream>

#include "models/cluster_sim.h"
#include "tests/models/calibration.h"

namespace infrarsi::models::sim {

struct NemoRow {
  const char* name;
  // Model: layers, hidden, heads, kv heads, MLP width, vocabulary, SwiGLU
  // (Llama) or GeLU (GPT-3).
  int layers, hidden, heads, kv_heads, ffn;
  int64_t vocab;
  bool swiglu;
  // Recipe.
  int gpus;
  int64_t global_batch;
  int micro_batch, seq_len, tp, pp, cp, vp;
  double tokens_per_s_per_gpu;
};

inline constexpr NemoRow kNemoH100Fp8[] = {
    {"GPT3_5B", 24, 4096, 32, 32, 16384, 50304, false, 64, 2048, 4, 2048, 1, 1, 1, 1, 23406},
    {"GPT3_20B", 44, 6144, 48, 48, 24576, 50304, false, 64, 256, 2, 2048, 2, 1, 1, 1, 5851},
    {"GPT3_175B_128", 96, 12288, 96, 96, 49152, 50304, false, 128, 256, 1, 2048, 4, 8, 1, 6, 716},
    {"GPT3_175B_512", 96, 12288, 96, 96, 49152, 50304, false, 512, 2048, 2, 2048, 4, 8, 1, 6, 825},
    {"LLAMA2_7B", 32, 4096, 32, 32, 11008, 32000, true, 8, 128, 1, 4096, 1, 1, 1, 1, 16934},
    {"LLAMA2_13B", 40, 5120, 40, 40, 13824, 32000, true, 16, 128, 1, 4096, 1, 4, 1, 10, 8715},
    {"LLAMA2_70B", 80, 8192, 64, 8, 28672, 32000, true, 64, 128, 1, 4096, 4, 4, 1, 20, 1728},
    {"LLAMA3_8B", 32, 4096, 32, 8, 14336, 128256, true, 8, 128, 1, 8192, 1, 1, 2, 1, 12273},
    {"LLAMA3_70B", 80, 8192, 64, 8, 28672, 128256, true, 64, 128, 1, 8192, 4, 4, 2, 5, 1524},
};

inline void PrintTo(const NemoRow& r, std::ostream* os) { *os << r.name; }

// The recipe as the simulator runs it (noise-free).
inline SimResult SimulateNemo(const NemoRow& row) {
  ModelShape m;
  m.layers = row.layers;
  m.hidden = row.hidden;
  m.heads = row.heads;
  m.kv_heads = row.kv_heads;
  m.ffn = row.ffn;
  m.vocab = row.vocab;
  m.swiglu = row.swiglu;
  m.seq_len = row.seq_len;
  m.global_batch = row.global_batch;
  ClusterShape c;
  c.gpu = *FindGpu("H100");
  c.gpus_per_node = 8;
  c.nodes = row.gpus / 8;
  c.nvlink_gbps = 450;
  c.net_gbps = 50;
  // NeMo's performance recipe defaults (the header's list), as the
  // calibration set's Megatron-Bridge rows run them.
  const LaunchKnobs k = calibration::MegatronRecipe(row.tp, row.pp, row.cp, row.vp, /*ep=*/1,
                                                    row.micro_batch, /*fp8=*/true, /*fsdp=*/false);
  return Simulate(m, c, k);
}

// Tokens per second per GPU of a simulated step.
inline double TokensPerGpu(const NemoRow& row, const SimResult& r) {
  return static_cast<double>(row.global_batch) * row.seq_len / (r.step_time_s * row.gpus);
}

}  // namespace infrarsi::models::sim

#endif  // INFRARSI_TESTS_MODELS_NEMO_PERF_H_
