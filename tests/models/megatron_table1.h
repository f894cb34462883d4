// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", Table 1: GPT models on DGX A100 80GB nodes
// (8 x 200 Gb/s InfiniBand), sequence 2048, vocabulary 51200, activation
// recomputation; teraFLOP/s per GPU counts recomputation. Shared by the
// simulator's test (within 20%) and sim_bench (prints the errors).
#ifndef INFRARSI_TESTS_MODELS_MEGATRON_TABLE1_H_
#define INFRARSI_TESTS_MODELS_MEGATRON_TABLE1_H_

#include <algorithm>
#include <cstdint>
#include <ostream>

#include "models/cluster_sim.h"

namespace infrarsi::models::sim {

struct PublishedRow {
  const char* name;
  int heads, hidden, layers, tp, pp, gpus;
  int64_t batch;
  double tflops_per_gpu;
};

inline constexpr PublishedRow kMegatronTable1[] = {
    {"GPT_1_7B", 24, 2304, 24, 1, 1, 32, 512, 137},
    {"GPT_3_6B", 32, 3072, 30, 2, 1, 64, 512, 138},
    {"GPT_7_5B", 32, 4096, 36, 4, 1, 128, 512, 142},
    {"GPT_18_4B", 48, 6144, 40, 8, 1, 256, 1024, 135},
    {"GPT_39_1B", 64, 8192, 48, 8, 2, 512, 1536, 138},
    {"GPT_76_1B", 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {"GPT_145_6B", 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {"GPT_310_1B", 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {"GPT_529_6B", 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {"GPT_1T", 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

// For gtest's parameter names and failure messages.
inline void PrintTo(const PublishedRow& r, std::ostream* os) { *os << r.name; }

// The simulator's best teraFLOP/s per GPU for a row, over the micro-batch
// sizes and interleavings the paper tuned per row.
inline double SimulatedTflops(const PublishedRow& row) {
  ModelShape m;
  m.layers = row.layers;
  m.hidden = row.hidden;
  m.heads = row.heads;
  m.ffn = 4 * row.hidden;  // GPT: GeLU MLP of width 4h, MHA, dropout, tied embeddings
  m.vocab = 51200;
  m.swiglu = false;
  m.dropout = true;
  m.tied_embeddings = true;
  m.seq_len = 2048;
  m.global_batch = row.batch;
  ClusterShape c;
  c.gpu = *FindGpu("A100-80GB");
  c.nodes = row.gpus / 8;
  c.nvlink_gbps = 300;
  c.net_gbps = 25;
  LaunchKnobs k;
  k.tp = row.tp;
  k.pp = row.pp;
  k.recompute = Recompute::kFull;
  k.fused_kernels = true;
  double best = 0;
  for (int mbs : {1, 2, 4, 8}) {
    for (int vpp : {1, 2, 3, 4, 5}) {
      k.micro_batch = mbs;
      k.vpp = vpp;
      const SimResult r = Simulate(m, c, k);
      if (r.status == Status::kOk) best = std::max(best, r.hw_tflops_per_gpu);
    }
  }
  return best;
}

}  // namespace infrarsi::models::sim

#endif  // INFRARSI_TESTS_MODELS_MEGATRON_TABLE1_H_
