// What the simulator learned to express for issue 34: ZeRO stages, FSDP
// and HSDP; head_dim, MLA, shared experts, leading dense layers, sliding
// windows; uneven pipeline stages; token dropping; the expert all-to-all
// overlapped; NVLink domains larger than a node; torchtitan's op-level
// checkpointing, FlashAttention-2 kernels, activation offloading; and the
// spec fields that carry them.
#include <cmath>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/spec.h"
#include "models/cluster_sim.h"
#include "tests/models/calibration.h"

namespace infrarsi::models::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelShape Small() {
  ModelShape m = calibration::Llama3_8B();
  m.seq_len = 4096;
  m.global_batch = 64;
  return m;
}

ClusterShape Nodes(int nodes, double net = 50, const char* gpu = "H100") {
  ClusterShape c;
  c.gpu = *FindGpu(gpu);
  c.nodes = nodes;
  c.net_gbps = net;
  return c;
}

TEST(ShardingTest, BytesPerParameterByZeroStage) {
  const ModelShape m = Small();
  const ClusterShape c = Nodes(1);  // DP 8
  const double p = CountParams(m).total;
  struct Case {
    Sharding s;
    double weights, grads, opt;  // bytes a parameter
  };
  for (const Case& e : {Case{Sharding::kNone, 2, 4, 12}, Case{Sharding::kZero1, 2, 4, 12.0 / 8},
                        Case{Sharding::kZero2, 2, 4.0 / 8, 12.0 / 8},
                        Case{Sharding::kZero3, 2.0 / 8, 4.0 / 8, 12.0 / 8}}) {
    LaunchKnobs k;
    k.flash_attn = true;
    k.sharding = e.s;
    const SimResult r = Simulate(m, c, k);
    SCOPED_TRACE(static_cast<int>(e.s));
    EXPECT_NEAR(r.memory.weights_gib * kGiB / p, e.weights, 1e-9);
    EXPECT_NEAR(r.memory.grads_gib * kGiB / p, e.grads, 1e-9);
    EXPECT_NEAR(r.memory.optimizer_gib * kGiB / p, e.opt, 1e-9);
  }
  // Megatron's distributed optimizer is ZeRO-1.
  LaunchKnobs dist;
  dist.flash_attn = true;
  dist.dist_opt = true;
  LaunchKnobs zero1 = dist;
  zero1.dist_opt = false;
  zero1.sharding = Sharding::kZero1;
  EXPECT_DOUBLE_EQ(Simulate(m, c, dist).peak_mem_gib, Simulate(m, c, zero1).peak_mem_gib);
}

TEST(ShardingTest, HsdpShardsWithinAGroupAndKeepsTheGathersOffTheNetwork) {
  const ModelShape m = Small();
  const ClusterShape c = Nodes(2, 12.5);  // DP 16 over a slow network
  LaunchKnobs fsdp;
  fsdp.flash_attn = true;
  fsdp.sharding = Sharding::kZero3;
  LaunchKnobs hsdp = fsdp;
  hsdp.shard_group = 8;
  const SimResult a = Simulate(m, c, fsdp), b = Simulate(m, c, hsdp);
  ASSERT_EQ(a.status, Status::kOk) << a.message;
  ASSERT_EQ(b.status, Status::kOk) << b.message;
  const double p = CountParams(m).total;
  EXPECT_NEAR(a.memory.optimizer_gib * kGiB / p, 12.0 / 16, 1e-9);
  EXPECT_NEAR(b.memory.optimizer_gib * kGiB / p, 12.0 / 8, 1e-9);
  // FSDP over both nodes gathers every layer across the network; HSDP
  // gathers inside the node and all-reduces the shards across once.
  EXPECT_LT(b.phases.at("dp_comm"), 0.5 * a.phases.at("dp_comm"));
  EXPECT_LT(b.step_time_s, a.step_time_s);
  // A shard group that does not divide the data-parallel ranks fails at
  // launch, and one without sharded state is not a thing.
  hsdp.shard_group = 3;
  EXPECT_NE(LaunchCheck(m, c, hsdp).find("shard group"), std::string::npos);
  LaunchKnobs plain;
  plain.shard_group = 8;
  EXPECT_NE(LaunchCheck(m, c, plain).find("sharded state"), std::string::npos);
}

TEST(ShardingTest, Zero3PaysTheGathersComputeCannotHide) {
  ModelShape m = Small();
  m.seq_len = 1024;  // little compute to hide them behind
  const ClusterShape c = Nodes(2, 12.5);
  LaunchKnobs z1;
  z1.flash_attn = true;
  z1.sharding = Sharding::kZero1;
  LaunchKnobs z3 = z1;
  z3.sharding = Sharding::kZero3;
  const SimResult a = Simulate(m, c, z1), b = Simulate(m, c, z3);
  ASSERT_EQ(b.status, Status::kOk) << b.message;
  EXPECT_GT(b.phases.at("dp_comm"), 2.0 * a.phases.at("dp_comm"));
  EXPECT_LT(b.peak_mem_gib, a.peak_mem_gib);
}

TEST(ArchitectureTest, PublishedParameterCounts) {
  struct Case {
    const char* name;
    ModelShape m;
    double total, active;  // billions, as the model cards give them
  };
  for (const Case& e : {Case{"DeepSeek-V3", calibration::DeepSeekV3(), 671, 37},
                        Case{"Qwen3-30B-A3B", calibration::Qwen3_30B_A3B(), 30.5, 3.3},
                        Case{"Qwen3-235B-A22B", calibration::Qwen3_235B_A22B(), 235, 22},
                        Case{"GPT-OSS-120B", calibration::GptOss120B(), 116.8, 0},
                        Case{"Llama-3.1-405B", calibration::Llama31_405B(), 405, 0}}) {
    SCOPED_TRACE(e.name);
    const ParamCounts p = CountParams(e.m);
    EXPECT_NEAR(p.total / 1e9 / e.total, 1.0, 0.02);
    if (e.active > 0) {
      EXPECT_NEAR(p.active / 1e9 / e.active, 1.0, 0.03);
    }
  }
  // Without its own head_dim Qwen3's attention would be half as wide.
  ModelShape narrow = calibration::Qwen3_30B_A3B();
  narrow.head_dim = 0;
  EXPECT_LT(CountParams(narrow).attention, 0.6 * CountParams(calibration::Qwen3_30B_A3B()).attention);
}

TEST(ArchitectureTest, LeadingDenseLayersAndSharedExpertsCountWhereTheyAre) {
  ModelShape m = calibration::DeepSeekV3();
  EXPECT_FALSE(IsMoeLayer(m, 0));
  EXPECT_FALSE(IsMoeLayer(m, 2));
  EXPECT_TRUE(IsMoeLayer(m, 3));
  const ParamCounts p = CountParams(m);
  EXPECT_EQ(p.moe_layers, 58);
  EXPECT_DOUBLE_EQ(p.dense_mlp, 3.0 * 7168 * 18432);
  EXPECT_DOUBLE_EQ(p.moe_dense, 7168.0 * 256 + 3.0 * 7168 * 2048);
  // A stage holding the dense layers holds no experts.
  LaunchKnobs k;
  k.pp = 2;
  k.pp_first_layers = 3;
  k.pp_last_layers = 58;
  EXPECT_EQ(LayersOfStage(m, k, 0).count, 3);
  EXPECT_EQ(LayersOfStage(m, k, 1).first, 3);
}

TEST(ArchitectureTest, SlidingWindowLayersAttendToTheirWindowOnly) {
  ModelShape m = Small();
  m.seq_len = 32768;
  ModelShape w = m;
  w.window = 4096;
  w.global_every = 4;  // layers 3, 7, ... attend globally
  EXPECT_TRUE(IsGlobalLayer(w, 3));
  EXPECT_FALSE(IsGlobalLayer(w, 0));
  // Attention FLOPs: a quarter of the layers see 32k keys, the rest
  // 2w - w^2/s.
  const double full = ModelFlopsPerToken(m), windowed = ModelFlopsPerToken(w);
  const double attn_full = 12.0 * m.layers * m.hidden * 32768.0;
  const double keys = 2.0 * 4096 - 4096.0 * 4096 / 32768;
  const double attn_w = 12.0 * m.hidden * (8 * 32768.0 + 24 * keys);
  EXPECT_NEAR(full - windowed, attn_full - attn_w, 1.0);
  LaunchKnobs k;
  k.flash_attn = true;
  k.cp = 2;
  k.dist_opt = true;
  k.recompute = Recompute::kFull;
  const ClusterShape c = Nodes(1, 50, "H200");
  const SimResult a = Simulate(m, c, k), b = Simulate(w, c, k);
  ASSERT_EQ(a.status, Status::kOk) << a.message;
  EXPECT_LT(b.phases.at("attention"), 0.5 * a.phases.at("attention"));
}

// Activation bytes of one DeepSeek-V3 MoE layer, one 4,096-token
// sequence, flash attention.
double DeepSeekMoeLayerBytes(Recompute rc, bool act_fp8_store = false) {
  ModelShape m = calibration::DeepSeekV3();
  m.seq_len = 4096;
  LaunchKnobs k;
  k.flash_attn = true;
  k.recompute = rc;
  k.act_fp8_store = act_fp8_store;
  return ActivationBytesPerLayer(m, k, true);
}

TEST(ArchitectureTest, MlaRecomputesItsUpProjectionsUnderSelectiveRecompute) {
  // The decompressed Q, K and V: 128 heads x (192 + 192 + 128) bf16 values a token.
  EXPECT_DOUBLE_EQ(DeepSeekMoeLayerBytes(Recompute::kNone) - DeepSeekMoeLayerBytes(Recompute::kSelective),
                   2.0 * 4096 * 128 * (192 + 192 + 128));
}

TEST(PipelineTest, UnevenStagesLaunchLikeMegatronAndBalanceMemory) {
  ModelShape m = calibration::Llama31_405B();
  m.seq_len = 8192;
  m.global_batch = 2048;
  ClusterShape c = Nodes(16);  // 128 GPUs
  LaunchKnobs k;
  k.tp = 8, k.pp = 16, k.seq_par = true, k.flash_attn = true, k.fused_kernels = true;
  k.precision = Precision::kFp8;
  k.sharding = Sharding::kZero2;
  EXPECT_NE(LaunchCheck(m, c, k).find("num_layers (126) must be divisible"), std::string::npos);
  k.pp_first_layers = 7;
  k.pp_last_layers = 8;  // 111 over 14 stages does not split
  EXPECT_NE(LaunchCheck(m, c, k).find("split evenly"), std::string::npos);
  k.pp_last_layers = 7;
  EXPECT_EQ(LaunchCheck(m, c, k), "");
  EXPECT_EQ(LayersOfStage(m, k, 0).count, 7);
  EXPECT_EQ(LayersOfStage(m, k, 1).count, 8);
  EXPECT_EQ(LayersOfStage(m, k, 15).first, 7 + 14 * 8);
  const SimResult r = Simulate(m, c, k);
  ASSERT_NE(r.status, Status::kLauncherError) << r.message;
  // The first stage holds 16 micro-batches of 7 layers, not 8: the balance
  // Llama 3 struck. The same shape with 128 layers split evenly holds more.
  ModelShape even = m;
  even.layers = 128;
  LaunchKnobs ek = k;
  ek.pp_first_layers = ek.pp_last_layers = 0;
  EXPECT_LT(r.memory.activations_gib, Simulate(even, c, ek).memory.activations_gib);
  LaunchKnobs one = k;
  one.pp = 1;
  EXPECT_NE(LaunchCheck(m, Nodes(1), one).find("require"), std::string::npos);
}

TEST(MoeTest, CapacityBoundsTheBusiestExpertAndChangesTheNumbers) {
  ModelShape m = calibration::Qwen3_30B_A3B();
  m.seq_len = 4096;
  m.global_batch = 64;
  ClusterShape c = Nodes(1, 50, "H200");
  LaunchKnobs k;
  k.ep = 8, k.flash_attn = true, k.dist_opt = true, k.recompute = Recompute::kSelective;
  const SimResult dropless = Simulate(m, c, k);
  LaunchKnobs cap = k;
  cap.capacity_factor = 1.0;
  const SimResult capped = Simulate(m, c, cap);
  ASSERT_EQ(capped.status, Status::kOk) << capped.message;
  EXPECT_LT(capped.step_time_s, dropless.step_time_s);
  // Dropping tokens trains on less: the losses are not the dropless ones.
  const Measurement a = MeasureTrial(m, c, k, 0, 3, 1, 0), b = MeasureTrial(m, c, cap, 0, 3, 1, 0);
  EXPECT_GT(std::abs(b.steps[2].loss - a.steps[2].loss), 1e-3);
  ModelShape dense = Small();
  cap.ep = 1;
  EXPECT_NE(LaunchCheck(dense, c, cap).find("capacity"), std::string::npos);
}

TEST(MoeTest, OverlapHidesTheAllToAllBehindAnotherMicroBatch) {
  ModelShape m = calibration::Qwen3_30B_A3B();
  m.seq_len = 4096;
  m.global_batch = 64;
  LaunchKnobs k;
  k.ep = 8, k.flash_attn = true, k.dist_opt = true;
  const ClusterShape c = Nodes(1, 50, "H200");
  const SimResult plain = Simulate(m, c, k);
  k.overlap_moe_comm = true;
  const SimResult over = Simulate(m, c, k);
  ASSERT_EQ(over.status, Status::kOk);
  EXPECT_LT(over.phases.at("moe_all_to_all"), 0.5 * plain.phases.at("moe_all_to_all"));
  k.ep = 1;
  EXPECT_NE(LaunchCheck(m, Nodes(1), k).find("expert_model_parallel_size > 1"), std::string::npos);
}

// Megatron-Core's grouped experts weigh each routed token inside the fused
// SwiGLU (weighted_bias_swiglu), so the combine saves nothing for backward:
// a routed token keeps its dispatched input and its activation's input and
// output, not the expert's output.
TEST(MoeTest, ExpertOutputsAreNotKeptForTheCombine) {
  ModelShape m = calibration::Qwen3_30B_A3B();
  m.seq_len = 4096;
  LaunchKnobs k;
  k.flash_attn = true;
  const double top8 = ActivationBytesPerLayer(m, k, true);
  m.topk = 9;
  const double top9 = ActivationBytesPerLayer(m, k, true);
  // One more routed copy of every token (x 1.12, the router's imbalance):
  // its bf16 input (2 bytes of hidden) and SwiGLU's gate, up and product
  // (6 bytes of expert width).
  const double t = 4096, h = m.hidden;
  EXPECT_NEAR(top9 - top8, 1.12 * t * (2.0 * h + 6.0 * m.expert_ffn), 1.0);
}

// Megatron-Core's --recompute-modules layernorm mla_up_proj moe_act, and
// the activation's input kept in fp8: what DeepSeek-V3's report says it
// did to fit 80 GB.
TEST(RecomputeTest, ModulesRebuildNormsUpProjectionsAndTheExpertActivation) {
  const ModelShape m = calibration::DeepSeekV3();
  const double none = DeepSeekMoeLayerBytes(Recompute::kNone);
  const double modules = DeepSeekMoeLayerBytes(Recompute::kModules);
  const double t = 4096, h = m.hidden, tk = 1.12 * t * m.topk;
  // Two norm outputs (bf16), the decompressed Q, K and V (128 heads x 192,
  // 192, 128), the routed experts' SwiGLU product (bf16): 2 bytes each.
  EXPECT_NEAR(none - modules, 2.0 * t * (2.0 * h + 128 * (192 + 192 + 128)) +
                                  2.0 * tk * m.expert_ffn,
              1.0);
  // The SwiGLU input in fp8: gate and up at a byte each, routed and shared.
  EXPECT_NEAR(modules - DeepSeekMoeLayerBytes(Recompute::kModules, true),
              2.0 * (tk * m.expert_ffn + t * m.shared_expert_ffn), 1.0);
  const ModelShape dense = Small();
  LaunchKnobs d;
  d.flash_attn = true;
  const double plain = ActivationBytesPerLayer(dense, d, false);
  d.act_fp8_store = true;
  EXPECT_NEAR(plain - ActivationBytesPerLayer(dense, d, false), 2.0 * t * dense.ffn, 1.0);

  // The rebuilt pieces cost time, less than rerunning whole layers.
  ModelShape q = calibration::Qwen3_30B_A3B();
  q.seq_len = 4096;
  q.global_batch = 64;
  LaunchKnobs run;
  run.ep = 8, run.flash_attn = true, run.dist_opt = true;
  const ClusterShape c = Nodes(1, 50, "H200");
  const SimResult off = Simulate(q, c, run);
  run.recompute = Recompute::kModules;
  const SimResult on = Simulate(q, c, run);
  run.recompute = Recompute::kFull;
  const SimResult full = Simulate(q, c, run);
  ASSERT_EQ(on.status, Status::kOk) << on.message;
  EXPECT_GT(on.phases.at("recompute"), 0);
  EXPECT_LT(on.memory.activations_gib, off.memory.activations_gib);
  EXPECT_GT(on.step_time_s, off.step_time_s);
  EXPECT_LT(on.step_time_s, full.step_time_s);
}

// DeepSeek-V3's DualPipe: rank r holds stages r and PP-1-r, PP + 1 chunks
// in flight, the all-to-all and sends under the other direction's compute,
// a bubble of 2/3 (PP/2 - 1) stage times against 1F1B's PP - 1.
TEST(PipelineTest, DualPipeHoldsTwoStagesAndHidesTheAllToAll) {
  ModelShape m = calibration::Qwen3_30B_A3B();
  m.seq_len = 4096;
  m.global_batch = 64;
  const ClusterShape c = Nodes(2, 50, "H200");  // PP 4 x EP-DP 4
  LaunchKnobs k;
  k.pp = 4, k.ep = 4, k.flash_attn = true, k.dist_opt = true;
  const SimResult one = Simulate(m, c, k);
  k.dualpipe = true;
  ASSERT_EQ(LaunchCheck(m, c, k), "");
  const SimResult dual = Simulate(m, c, k);
  ASSERT_EQ(dual.status, Status::kOk) << dual.message;
  ASSERT_EQ(one.status, Status::kOk) << one.message;
  // Stages 0 and 3 each hold 12 layers and an embedding (input or output).
  EXPECT_NEAR(dual.memory.weights_gib / one.memory.weights_gib, 2.0, 1e-6);
  EXPECT_NEAR(dual.memory.grads_gib / one.memory.grads_gib, 2.0, 1e-6);
  // The optimizer's shards spread over both copies' ranks.
  EXPECT_NEAR(dual.memory.optimizer_gib / one.memory.optimizer_gib, 1.0, 1e-6);
  // 5 chunks of 12 layers in flight against the first stage's 4.
  EXPECT_NEAR(dual.memory.activations_gib / one.memory.activations_gib, 5.0 / 4.0, 1e-6);
  EXPECT_LT(dual.phases.at("moe_all_to_all"), 0.5 * one.phases.at("moe_all_to_all"));
  EXPECT_LT(dual.phases.at("pp_bubble"), 0.5 * one.phases.at("pp_bubble"));
  EXPECT_LT(dual.step_time_s, one.step_time_s);

  LaunchKnobs two = k;
  two.pp = 2;
  EXPECT_EQ(LaunchCheck(m, c, two), "");
  LaunchKnobs inter = k;
  inter.vpp = 2;
  EXPECT_NE(LaunchCheck(m, c, inter).find("DualPipe"), std::string::npos);
  ModelShape few = m;
  few.global_batch = 16;  // 4 micro-batches a rank, DualPipe needs 8
  EXPECT_NE(LaunchCheck(few, c, k).find("at least 2 x pipeline_model_parallel_size (8)"),
            std::string::npos)
      << LaunchCheck(few, c, k);
  ClusterShape six = Nodes(6, 50, "H200");  // 48 GPUs: PP 3 x 16
  LaunchKnobs three = k;
  three.pp = 3;
  three.ep = 8;
  EXPECT_NE(LaunchCheck(m, six, three).find("even pipeline_model_parallel_size"),
            std::string::npos)
      << LaunchCheck(m, six, three);
}

TEST(CatalogTest, CurrentSystemsWithTheirSourcesAndRackScaleNvlink) {
  for (const char* g : {"B200", "GB200", "GB300", "H20", "H800", "MI300X", "H100-96GB"}) {
    const GpuSpec* s = FindGpu(g);
    ASSERT_NE(s, nullptr) << g;
    EXPECT_GT(std::string(s->source).size(), 10u) << g;
    EXPECT_GT(s->bf16_tflops, 0) << g;
  }
  EXPECT_EQ(FindGpu("GB200")->nvlink_domain, 72);
  // Expert parallelism over 16 GPUs on four trays of 4: inside an NVL72
  // domain it never touches the NIC; as four separate nodes it does.
  ModelShape m = calibration::Qwen3_30B_A3B();
  m.seq_len = 4096;
  m.global_batch = 64;
  ClusterShape rack = calibration::System("GB200", 16, 4, 50);
  ClusterShape trays = rack;
  trays.nvlink_domain = 0;
  LaunchKnobs k;
  k.ep = 16, k.flash_attn = true, k.dist_opt = true, k.precision = Precision::kFp8;
  const SimResult a = Simulate(m, rack, k), b = Simulate(m, trays, k);
  ASSERT_EQ(a.status, Status::kOk) << a.message;
  EXPECT_LT(a.phases.at("moe_all_to_all"), 0.25 * b.phases.at("moe_all_to_all"));
}

TEST(PrecisionTest, MicroscalingFormatsNeedBlackwellAndRunAtTheirPeaks) {
  const ModelShape m = Small();
  LaunchKnobs k;
  k.flash_attn = true, k.dist_opt = true, k.tp = 2;
  for (const char* p : {"mxfp8", "nvfp4"}) {
    std::string err;
    ASSERT_TRUE(SetKnob(&k, "precision", p, &err)) << err;
    EXPECT_NE(LaunchCheck(m, Nodes(1), k).find("Blackwell"), std::string::npos) << p;
  }
  const ClusterShape gb = calibration::System("GB200", 8, 4, 50);
  auto time = [&](Precision p) {
    k.precision = p;
    const SimResult r = Simulate(m, gb, k);
    EXPECT_EQ(r.status, Status::kOk) << r.message;
    return r.phases.at("compute");
  };
  const double bf16 = time(Precision::kBf16), fp8 = time(Precision::kFp8),
               mx = time(Precision::kMxfp8), fp4 = time(Precision::kNvfp4);
  EXPECT_DOUBLE_EQ(mx, fp8);  // the same tensor-core peak
  EXPECT_LT(fp8, 0.75 * bf16);
  EXPECT_LT(fp4, 0.8 * fp8);
  // NVFP4's numbers drift more than fp8's.
  ClusterShape quiet = gb;
  quiet.noise_cv = 0;
  auto loss = [&](Precision p) {
    k.precision = p;
    return MeasureTrial(m, quiet, k, 0, 5, 1, 0).steps.back().loss;
  };
  const double base = loss(Precision::kBf16);
  EXPECT_GT(std::abs(loss(Precision::kNvfp4) - base), std::abs(loss(Precision::kMxfp8) - base));
}

TEST(MemoryTest, FusedCrossEntropyKeepsOnlyTheBf16LogitsAndTheirGradient) {
  const ModelShape m = Small();
  LaunchKnobs k;
  k.flash_attn = true;
  const double unfused = Simulate(m, Nodes(1), k).memory.logits_gib;
  k.fused_kernels = true;
  EXPECT_NEAR(Simulate(m, Nodes(1), k).memory.logits_gib / unfused, 0.4, 1e-9);
}

// Transformer Engine's Triton cross entropy overwrites the logits it saved
// with their gradient: half a fused loss's logit bytes, a fifth of an
// unfused one's, whether or not the other kernels are fused; and the
// total moves by exactly what the logits shed.
TEST(MemoryTest, AnInPlaceCrossEntropyKeepsOnlyTheBf16Logits) {
  const ModelShape m = Small();
  LaunchKnobs k;
  k.flash_attn = true;
  k.fused_kernels = true;
  const SimResult fused = Simulate(m, Nodes(1), k);
  k.loss_in_place = true;
  const SimResult in_place = Simulate(m, Nodes(1), k);
  EXPECT_NEAR(in_place.memory.logits_gib / fused.memory.logits_gib, 0.5, 1e-9);
  EXPECT_NEAR(fused.memory.total_gib - in_place.memory.total_gib,
              fused.memory.logits_gib - in_place.memory.logits_gib, 1e-9);
  EXPECT_EQ(in_place.step_time_s, fused.step_time_s);  // memory only
  k.fused_kernels = false;
  LaunchKnobs unfused = k;
  unfused.loss_in_place = false;
  EXPECT_NEAR(Simulate(m, Nodes(1), k).memory.logits_gib /
                  Simulate(m, Nodes(1), unfused).memory.logits_gib,
              0.2, 1e-9);
}

// ---- the spec carries the new fields, and names the field it rejects.

absl::StatusOr<SessionSpec> Parse(const std::string& model, const std::string& gpu = "H100",
                                  int count = 8, const std::string& cluster = "") {
  const std::string yaml = std::string("name: t\nworkload: {model: m, global_batch: 64, seq_len: 4096}\n") +
                           "hardware: {gpu: " + gpu + ", count: " + std::to_string(count) + "}\n" +
                           "knobs: {tp: [1, 2]}\nbaseline: {tp: 1}\nbudget: {max_trials: 5}\n" +
                           "executor:\n  sim:\n    model: " +
                           model + "\n" + (cluster.empty() ? "" : "    cluster: " + cluster + "\n");
  return ParseSpec(yaml, SpecParseOptions());
}

TEST(SpecTest, NewModelFieldsParseAndBadOnesNameTheirField) {
  auto ok = Parse(
      "{layers: 27, hidden: 2048, heads: 16, head_dim: 128, kv_lora_rank: 512, rope_head_dim: 64, "
      "v_head_dim: 128, vocab: 102400, experts: 64, topk: 6, expert_ffn: 1408, "
      "shared_expert_ffn: 2816, dense_layers: 1, ffn: 10944, window: 1024, global_every: 3}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->sim.model.kv_lora_rank, 512);
  EXPECT_EQ(ok->sim.model.shared_expert_ffn, 2816);
  EXPECT_EQ(ok->sim.model.global_every, 3);
  struct Bad {
    const char* model;
    const char* field;
  };
  for (const Bad& b :
       {Bad{"{layers: 4, hidden: 64, heads: 4, kv_lora_rank: 16, vocab: 100, ffn: 64}", "head_dim"},
        Bad{"{layers: 4, hidden: 64, heads: 4, q_lora_rank: 16, vocab: 100, ffn: 64}", "q_lora_rank"},
        Bad{"{layers: 4, hidden: 64, heads: 4, shared_expert_ffn: 16, vocab: 100, ffn: 64}",
            "shared_expert_ffn"},
        Bad{"{layers: 4, hidden: 64, heads: 4, global_every: 2, vocab: 100, ffn: 64}", "global_every"},
        Bad{"{layers: 4, hidden: 64, heads: 4, vocab: 100, experts: 4, topk: 1, expert_ffn: 8, "
            "dense_layers: 4, ffn: 64}",
            "dense_layers"},
        Bad{"{layers: 4, hidden: 64, heads: 4, head_dim: -1, vocab: 100, ffn: 64}", "head_dim"},
        Bad{"{layers: 4, hidden: 66, heads: 4, vocab: 100, ffn: 64}", "hidden"}}) {
    auto r = Parse(b.model);
    ASSERT_FALSE(r.ok()) << b.model;
    EXPECT_NE(r.status().message().find(std::string("executor.sim.model.") + b.field),
              std::string::npos)
        << r.status();
  }
  // hidden need not divide by heads when the heads have their own width.
  EXPECT_TRUE(Parse("{layers: 4, hidden: 2880, heads: 64, head_dim: 64, vocab: 100, ffn: 64}").ok());
}

TEST(SpecTest, Gb200BringsItsNvlinkDomainAndADomainJoinsWholeNodes) {
  auto r = Parse("{layers: 4, hidden: 64, heads: 4, vocab: 100, ffn: 64}", "GB200", 16,
                 "{gpus_per_node: 4, nodes: 4}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sim.cluster.nvlink_domain, 72);
  EXPECT_DOUBLE_EQ(r->sim.cluster.nvlink_gbps, 900);
  auto bad = Parse("{layers: 4, hidden: 64, heads: 4, vocab: 100, ffn: 64}", "GB200", 16,
                   "{gpus_per_node: 4, nodes: 4, nvlink_domain: 6}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("executor.sim.cluster.nvlink_domain"), std::string::npos);
  auto h100 = Parse("{layers: 4, hidden: 64, heads: 4, vocab: 100, ffn: 64}");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->sim.cluster.nvlink_domain, 0);
}

TEST(SpecTest, NewKnobsValidateTheirValues) {
  LaunchKnobs k;
  std::string err;
  EXPECT_TRUE(SetKnob(&k, "sharding", "fsdp", &err));
  EXPECT_EQ(k.sharding, Sharding::kZero3);
  EXPECT_FALSE(SetKnob(&k, "sharding", "zero4", &err));
  EXPECT_NE(err.find("sharding"), std::string::npos);
  EXPECT_FALSE(SetKnob(&k, "capacity_factor", "-1", &err));
  EXPECT_NE(err.find("capacity_factor"), std::string::npos);
  EXPECT_FALSE(SetKnob(&k, "pp_first_layers", "x", &err));
  EXPECT_TRUE(SetKnob(&k, "shard_group", "8", &err));
  EXPECT_EQ(k.shard_group, 8);
  EXPECT_FALSE(SetKnob(&k, "dualpipe", "yes please", &err));
  EXPECT_NE(err.find("dualpipe"), std::string::npos);
  EXPECT_TRUE(SetKnob(&k, "recompute", "modules", &err));
  EXPECT_EQ(k.recompute, Recompute::kModules);
  for (const std::string name : {"sharding", "shard_group", "pp_first_layers", "pp_last_layers",
                                  "capacity_factor", "overlap_moe_comm", "dualpipe",
                                  "act_fp8_store"}) {
    const std::string v = name == "sharding" ? "zero2"
                          : name == "overlap_moe_comm" || name == "dualpipe" ||
                                  name == "act_fp8_store"
                              ? "true"
                              : "2";
    LaunchKnobs a, b;
    ASSERT_TRUE(SetKnob(&a, name, v, &err)) << name << ": " << err;
    KnobSetter set = CompileKnob(name, v, &err);
    ASSERT_TRUE(set) << name;
    set(&b);
    EXPECT_EQ(Simulate(Small(), Nodes(1), a).message, Simulate(Small(), Nodes(1), b).message) << name;
  }
}

// torchtitan's op-level selective checkpointing keeps the layer input, the
// attention kernel's outputs and every second matmul's output, and reruns
// the rest in backward.
TEST(RecomputeTest, OpLevelCheckpointingSitsBetweenNoneAndFull) {
  const ModelShape m = Small();
  const ClusterShape c = Nodes(1);
  auto run = [&](Recompute rc, Precision p) {
    LaunchKnobs k;
    k.flash_attn = true;
    k.sharding = Sharding::kZero3;
    k.recompute = rc;
    k.precision = p;
    return Simulate(m, c, k);
  };
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    SCOPED_TRACE(static_cast<int>(p));
    const SimResult none = run(Recompute::kNone, p), op = run(Recompute::kOp, p),
                    full = run(Recompute::kFull, p);
    ASSERT_EQ(op.status, Status::kOk) << op.message;
    EXPECT_LT(op.memory.activations_gib, none.memory.activations_gib);
    EXPECT_GT(op.memory.activations_gib, full.memory.activations_gib);
    EXPECT_GT(op.phases.at("recompute"), 0);
    EXPECT_LT(op.phases.at("recompute"), full.phases.at("recompute"));
    EXPECT_GT(op.step_time_s, none.step_time_s);
    EXPECT_LT(op.step_time_s, full.step_time_s);
  }
  // Per token and layer: the input and attention output (2 + 2 bytes of
  // hidden), 4-byte statistics per head, and half of the matmul outputs
  // (QKV, output, gate, up, down) at 2 bytes, the same under fp8.
  const double t = static_cast<double>(m.seq_len), h = m.hidden;
  const double qkv = h + 2.0 * h * m.kv_heads / m.heads;
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    LaunchKnobs k;
    k.flash_attn = true;
    k.recompute = Recompute::kOp;
    k.precision = p;
    EXPECT_NEAR(ActivationBytesPerLayer(m, k),
                t * (4.0 * h + 4.0 * m.heads + (qkv + h + 2.0 * m.ffn + h)), 1.0);
  }
  LaunchKnobs k;
  std::string err;
  EXPECT_TRUE(SetKnob(&k, "recompute", "op", &err));
  EXPECT_FALSE(SetKnob(&k, "recompute", "ops", &err));
  EXPECT_NE(err.find("expected none, selective, full, op or modules"), std::string::npos) << err;
}

TEST(AttentionTest, FlashAttention2KernelsRunSlowerOnHopperOnly) {
  const ModelShape m = Small();
  for (const char* gpu : {"H100", "A100-80GB"}) {
    SCOPED_TRACE(gpu);
    LaunchKnobs k;
    k.flash_attn = true;
    k.sharding = Sharding::kZero3;
    k.recompute = Recompute::kFull;
    const SimResult fused = Simulate(m, Nodes(1, 50, gpu), k);
    k.attn_kernel = AttnKernel::kFa2;
    const SimResult fa2 = Simulate(m, Nodes(1, 50, gpu), k);
    ASSERT_EQ(fa2.status, Status::kOk) << fa2.message;
    const double ratio = fa2.phases.at("attention") / fused.phases.at("attention");
    EXPECT_NEAR(ratio, std::string(gpu) == "H100" ? 1.75 : 1.0, 1e-9);
    EXPECT_EQ(fa2.peak_mem_gib, fused.peak_mem_gib);  // the same tensors
  }
  LaunchKnobs k;
  std::string err;
  EXPECT_TRUE(SetKnob(&k, "attn_kernel", "fa2", &err));
  EXPECT_EQ(k.attn_kernel, AttnKernel::kFa2);
  EXPECT_FALSE(SetKnob(&k, "attn_kernel", "fa3", &err));
  EXPECT_NE(err.find("attn_kernel"), std::string::npos);
}

TEST(OffloadTest, OffloadedLayersLeaveTheGpuAndCostWhatTheHostLinkCannotHide) {
  ModelShape m = Small();
  m.seq_len = 8192;
  auto run = [&](const char* gpu, int offload) {
    LaunchKnobs k;
    k.flash_attn = true;
    k.sharding = Sharding::kZero3;
    k.offload_layers = offload;
    return Simulate(m, Nodes(1, 50, gpu), k);
  };
  const SimResult none = run("H100", 0), half = run("H100", 16);
  ASSERT_EQ(half.status, Status::kOk) << half.message;
  LaunchKnobs k;
  k.flash_attn = true;
  const double layer = ActivationBytesPerLayer(m, k) / kGiB;
  // 16 of 32 layers leave; two stay resident while copied (x 1.07 the
  // simulator's fragmentation allowance).
  EXPECT_NEAR(none.memory.activations_gib - half.memory.activations_gib, 1.07 * 14 * layer, 1e-6);
  EXPECT_EQ(none.phases.count("offload"), 0u);
  // 16 layers of this micro-batch over PCIe 5 (64 GB/s) take longer than
  // the compute they hide under; Grace's NVLink-C2C (450) hides them.
  EXPECT_GT(half.phases.at("offload"), 0);
  EXPECT_GT(half.step_time_s, none.step_time_s);
  const SimResult gb = run("GB200", 16);
  ASSERT_EQ(gb.status, Status::kOk) << gb.message;
  EXPECT_EQ(gb.phases.at("offload"), 0);
  EXPECT_NEAR(gb.step_time_s, run("GB200", 0).step_time_s, 1e-12);

  // Megatron-Core's checks: fewer than the model's layers, one pipeline
  // stage, no recompute.
  LaunchKnobs bad;
  bad.flash_attn = true;
  bad.offload_layers = m.layers;
  EXPECT_NE(Simulate(m, Nodes(1), bad).message.find("layers less than 32"), std::string::npos);
  bad.offload_layers = 4;
  bad.pp = 2;
  EXPECT_NE(Simulate(m, Nodes(1), bad).message.find("Pipeline parallelism"), std::string::npos);
  bad.pp = 1;
  bad.recompute = Recompute::kSelective;
  EXPECT_NE(Simulate(m, Nodes(1), bad).message.find("recomputation"), std::string::npos);
  std::string err;
  EXPECT_FALSE(SetKnob(&bad, "offload_layers", "-3", &err));
  EXPECT_NE(err.find("offload_layers"), std::string::npos);
  KnobSetter set = CompileKnob("offload_layers", "6", &err);
  ASSERT_TRUE(set);
  set(&bad);
  EXPECT_EQ(bad.offload_layers, 6);
}

// Across NVL72 racks NCCL reduces inside the rack first: every member of
// the group in a rack sends through its own NIC, so a data-parallel sync
// between two racks moves at many NICs' bandwidth, not one tray's four.
TEST(NetworkTest, DataParallelSyncAcrossRacksUsesEveryNicInTheRack) {
  ModelShape m = Small();
  m.global_batch = 144;
  LaunchKnobs k;
  k.flash_attn = true;
  k.dist_opt = true;
  k.bucket_mb = 1000;  // few buckets: the bandwidth, not per-bucket latency, shows
  const ClusterShape racks = calibration::System("GB200", 144, 4, 50);
  ASSERT_EQ(racks.domain(), 72);
  ClusterShape trays = racks;
  trays.nvlink_domain = 4;  // the same GPUs, NVLink only within a tray
  const SimResult r = Simulate(m, racks, k), t = Simulate(m, trays, k);
  ASSERT_EQ(r.status, Status::kOk) << r.message;
  EXPECT_LT(r.phases.at("dp_comm"), 0.5 * t.phases.at("dp_comm"));
  EXPECT_LT(r.step_time_s, t.step_time_s);
}

// The search asks Launches of thousands of settings a proposal, without
// the messages: it must say what LaunchCheck says of every one.
TEST(LaunchTest, LaunchesIsLaunchCheckWithoutTheMessage) {
  ModelShape moe = Small();
  moe.experts = 8;
  moe.topk = 2;
  const std::vector<ModelShape> models = {Small(), moe};
  std::mt19937_64 rng(7);
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size()));
  };
  int fails = 0, runs = 0;
  std::set<std::string> rules;  // the failures' messages, by their start
  for (int i = 0; i < 4000; ++i) {
    const ModelShape& m = models[static_cast<size_t>(i) % models.size()];
    const ClusterShape c = Nodes(pick({1, 2}), 50, pick({0, 1}) ? "H100" : "A100");
    LaunchKnobs k;
    k.tp = pick({1, 1, 2, 4, 8, 3, 0});
    k.pp = pick({1, 1, 1, 2, 4, 3});
    k.cp = pick({1, 1, 1, 2, 4});
    k.ep = pick({1, 1, 1, 2, 16});
    k.micro_batch = pick({1, 2, 3, 4});
    k.vpp = pick({1, 1, 1, 2, 3});
    k.dualpipe = pick({0, 0, 0, 0, 1});
    k.flash_attn = pick({1, 1, 1, 0});
    k.dist_opt = pick({1, 1, 0});
    k.overlap_param_gather = pick({0, 0, 0, 1});
    k.overlap_moe_comm = pick({0, 0, 0, 0, 1});
    k.shard_group = pick({0, 0, 0, 0, 3, 8});
    k.offload_layers = pick({0, 0, 0, 0, 2, 64});
    k.pp_first_layers = pick({0, 0, 0, 0, 3});
    k.bucket_mb = pick({40, 40, 40, 40, 0});
    k.capacity_factor = pick({0, 0, 0, 0, 1});
    k.precision = pick({0, 0, 0, 1}) ? Precision::kFp8 : Precision::kBf16;
    k.recompute = pick({0, 1}) ? Recompute::kNone : Recompute::kFull;
    const std::string message = LaunchCheck(m, c, k);
    ASSERT_EQ(Launches(m, c, k), message.empty()) << i << ": " << message;
    (message.empty() ? runs : fails) += 1;
    if (!message.empty()) rules.insert(message.substr(0, 40));
  }
  // Both sides seen, and most of the rules among the failures.
  EXPECT_GT(runs, 50);
  EXPECT_GT(fails, 1000);
  EXPECT_GE(rules.size(), 18u);
}

}  // namespace
}  // namespace infrarsi::models::sim
