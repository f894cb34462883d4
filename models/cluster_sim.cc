#include "models/cluster_sim.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>

namespace infrarsi::models::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMB = 1024.0 * 1024.0;
// FlashAttention-2-class kernels on Hopper and later: FlashAttention-3's
// authors (Shah et al. 2024) measure theirs 1.5-2.0x faster; the middle.
constexpr double kFa2Slowdown = 1.75;
// The textbook estimate's expert GEMMs run at rows / (rows + this) of
// their peak: one tile's rows of a Hopper GEMM. Not the simulator's own
// saturation (192 rows): the estimate is a planner's reading, not the
// simulator's; 64 and 256 measured alike (docs/benchmarks.md).
constexpr double kExpertGemmHalfRows = 128;

const std::vector<GpuSpec>& Catalog() {
  // Dense peaks from the vendor datasheets; usable memory as the CUDA
  // allocator reports it (the measured H200 landscape: 139.8 GiB). The GEMM
  // efficiency is what large training GEMMs sustain: Hopper parts run into
  // their power limit well below the datasheet clock.
  //
  // Entries added for current systems state their source. Their GEMM
  // efficiency is an assumption, said here, not fitted to the calibration
  // rows: Hopper-class parts under their power limit like the H100 (0.60);
  // parts that are not power-bound (H20) like the A100; MI300X at half its
  // peak, what public GEMM benchmarks of it report.
  //
  // The host link (last field) is PCIe's x16 nominal rate, one direction
  // (Gen4 on A100, Gen5 after), or Grace's NVLink-C2C (900 GB/s both
  // directions) on GB200 and GB300.
  static const std::vector<GpuSpec> gpus = {
      {"A100-40GB", 312, 0, 39.4, 1.555, 0.82, 0, 0, "NVIDIA A100 datasheet", 0, 32},
      {"A100-80GB", 312, 0, 79.2, 2.039, 0.82, 0, 0, "NVIDIA A100 datasheet", 0, 32},
      {"H100", 989, 1979, 79.1, 3.35, 0.60, 450, 8, "NVIDIA H100 SXM5 datasheet (700 W)", 0, 64},
      // Meta's Grand Teton H100s (torchtitan's benchmarks): HBM2e, 2.4 TB/s,
      // 500 W; "peak between SXM and NVL" (989 and 835): their midpoint.
      {"H100-96GB", 912, 1824, 94.5, 2.4, 0.60, 450, 8,
       "torchtitan benchmarks/llama3_h100_202412 (Grand Teton, 500 W, HBM2e)", 0, 64},
      // The export part DeepSeek-V3 trained on: H100 compute, NVLink 400 GB/s
      // both directions.
      {"H800", 989, 1979, 79.1, 3.35, 0.60, 200, 8, "DeepSeek-V3 technical report, sec. 3.1", 0, 64},
      {"H20", 148, 296, 94.5, 4.0, 0.82, 450, 8, "NVIDIA H20 product brief (96 GB HBM3)", 0, 64},
      {"H200", 989, 1979, 139.8, 4.8, 0.62, 450, 8, "NVIDIA H200 datasheet; measured capacity", 0, 64},
      {"B200", 2250, 4500, 178.4, 8.0, 0.60, 900, 8,
       "NVIDIA DGX B200 datasheet (dense; NVLink 5 1.8 TB/s both directions)", 9000, 64},
      {"GB200", 2500, 5000, 184.0, 8.0, 0.60, 900, 72,
       "NVIDIA GB200 NVL72 datasheet (dense; 72-GPU NVLink domain, 186 GB HBM3e)", 10000, 450},
      {"GB300", 2500, 5000, 284.0, 8.0, 0.60, 900, 72,
       "NVIDIA GB300 NVL72 datasheet (dense; 288 GB HBM3e; FP4 1.5x GB200's)", 15000, 450},
      {"MI300X", 1307, 2615, 191.5, 5.3, 0.50, 448, 8,
       "AMD Instinct MI300X datasheet (Infinity Fabric 896 GB/s aggregate)", 0, 64},
  };
  return gpus;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Fmt(const char* fmt, double a = 0, double b = 0, double c = 0, double d = 0) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c, d);
  return buf;
}

// Saturating efficiency: small dimensions waste the GPU's tiles and waves.
double Sat(double x, double half) { return x / (x + half); }

// Ring collective times (seconds) over `n` ranks for `bytes` per rank.
double AllReduce(double bytes, int n, double bw_gbps, double lat_us) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / (bw_gbps * 1e9) + 2.0 * (n - 1) * lat_us * 1e-6;
}
double AllGather(double bytes, int n, double bw_gbps, double lat_us) {
  if (n <= 1) return 0;
  return 1.0 * (n - 1) / n * bytes / (bw_gbps * 1e9) + 1.0 * (n - 1) * lat_us * 1e-6;
}

struct Link {
  double gbps;
  double lat_us;
};

// A group of `span` consecutive ranks stays inside one NVLink domain (a
// node, or a GB200 NVL72 rack) when it fits. NCCL reaches about 80% of the
// link's bandwidth.
Link LinkFor(const ClusterShape& c, int64_t span) {
  if (span <= c.domain()) return {c.nvlink_gbps * 0.8, c.nvlink_latency_us};
  return {c.net_gbps * 0.8, c.net_latency_us};
}

// A collective over ranks `stride` apart spanning `span` ranks: across
// NVLink domains, NCCL runs one ring per rail (or reduces within the
// domain first), so the group's members in a domain (domain / stride of
// them: a node's, or a GB200 NVL72 rack's) send through that many NICs at
// once, up to NVLink's bandwidth (nccl-tests' multi-node bus bandwidth on
// DGX nodes: several times one NIC's when the whole node is in the group).
Link GroupLink(const ClusterShape& c, int64_t stride, int64_t span) {
  if (span <= c.domain()) return LinkFor(c, span);
  const double members = std::max<int64_t>(1, c.domain() / std::max<int64_t>(1, stride));
  return {std::min(c.nvlink_gbps, members * c.net_gbps) * 0.8, c.net_latency_us};
}

// `explain`: format the messages that name the values (the search asks
// whether thousands of settings launch and reads none of them; then a
// failure's message is only "fails").
std::string LauncherCheck(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k,
                          int64_t gb, bool explain = true) {
  char buf[512] = "fails";
  const int world = c.world();
  if (k.tp < 1 || k.pp < 1 || k.cp < 1 || k.ep < 1 || k.micro_batch < 1 || k.vpp < 1) {
    return "AssertionError: parallel sizes and micro_batch must be >= 1";
  }
  if (world % (k.tp * k.pp * k.cp) != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: world size (%d) is not divisible by tensor_model_parallel_size "
                               "(%d) x pipeline_model_parallel_size (%d) x context_parallel_size (%d)",
                               world, k.tp, k.pp, k.cp);
    return buf;
  }
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  if (m.heads % k.tp != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: num_attention_heads (%d) must be a multiple of "
                               "tensor_model_parallel_size (%d)",
                               m.heads, k.tp);
    return buf;
  }
  if (kv % k.tp != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: num_query_groups (%d) must be a multiple of "
                               "tensor_model_parallel_size (%d)",
                               kv, k.tp);
    return buf;
  }
  const bool uneven = k.pp_first_layers > 0 || k.pp_last_layers > 0;
  if (uneven) {
    if (k.pp < 2) {
      return "AssertionError: --decoder-first/last-pipeline-num-layers require "
             "pipeline_model_parallel_size > 1";
    }
    const int middle = k.pp - (k.pp_first_layers > 0) - (k.pp_last_layers > 0);
    const int rest = m.layers - k.pp_first_layers - k.pp_last_layers;
    if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest < middle || rest % middle != 0))) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "AssertionError: num_layers (%d) minus the first (%d) and last (%d) stage's "
                                 "layers must split evenly over the other %d pipeline stages",
                                 m.layers, k.pp_first_layers, k.pp_last_layers, middle);
      return buf;
    }
  } else if (m.layers % k.pp != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: num_layers (%d) must be divisible by "
                               "pipeline_model_parallel_size (%d)",
                               m.layers, k.pp);
    return buf;
  }
  if (k.vpp > 1) {
    if (k.pp < 2) {
      return "AssertionError: virtual_pipeline_model_parallel_size > 1 requires "
             "pipeline_model_parallel_size > 1";
    }
    // With uneven stages the virtual stages follow a pipeline layout
    // (Megatron's --pipeline-model-parallel-layout), which need not divide.
    if (!uneven && (m.layers / k.pp) % k.vpp != 0) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "AssertionError: number of layers per pipeline stage (%d) must be divisible "
                                 "by virtual_pipeline_model_parallel_size (%d)",
                                 m.layers / k.pp, k.vpp);
      return buf;
    }
  }
  const int dp = world / (k.tp * k.pp * k.cp);
  if (gb % (static_cast<int64_t>(k.micro_batch) * dp) != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: global batch size (%lld) is not divisible by micro batch size "
                               "(%d) times data parallel size (%d)",
                               static_cast<long long>(gb), k.micro_batch, dp);
    return buf;
  }
  const int64_t micro = gb / (static_cast<int64_t>(k.micro_batch) * dp);
  if (k.vpp > 1 && micro % k.pp != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "RuntimeError: number of microbatches (%lld) is not divisible by "
                               "pipeline-model-parallel-size (%d) when using interleaved schedule",
                               static_cast<long long>(micro), k.pp);
    return buf;
  }
  if (k.dualpipe) {
    // DualPipe's own checks (deepseek-ai/DualPipe): ranks pair up from both
    // ends, and each direction needs a full pipeline of micro-batches.
    if (k.pp < 2 || k.pp % 2 != 0) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "AssertionError: DualPipe needs an even pipeline_model_parallel_size >= 2 "
                                 "(got %d)",
                                 k.pp);
      return buf;
    }
    if (k.vpp > 1) {
      return "AssertionError: DualPipe runs two chunks per rank by itself: "
             "virtual_pipeline_model_parallel_size must be 1";
    }
    if (micro < 2 * k.pp) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "AssertionError: DualPipe needs at least 2 x pipeline_model_parallel_size "
                                 "(%d) micro-batches, got %lld",
                                 2 * k.pp, static_cast<long long>(micro));
      return buf;
    }
  }
  if (k.ep > 1 && m.experts == 0) {
    return "AssertionError: expert_model_parallel_size > 1 requires num_experts (a MoE model)";
  }
  if (m.experts > 0 && m.experts % k.ep != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: num_experts (%d) must be divisible by "
                               "expert_model_parallel_size (%d)",
                               m.experts, k.ep);
    return buf;
  }
  if (k.ep > 1 && (dp * k.cp) % k.ep != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: data_parallel_size x context_parallel_size (%d) must be "
                               "divisible by expert_model_parallel_size (%d)",
                               dp * k.cp, k.ep);
    return buf;
  }
  if (k.cp > 1 && m.seq_len % (2 * k.cp) != 0) {
    if (explain) std::snprintf(buf, sizeof(buf),
                               "AssertionError: seq_length (%d) must be divisible by 2 x "
                               "context_parallel_size (%d)",
                               m.seq_len, k.cp);
    return buf;
  }
  if (k.cp > 1 && !k.flash_attn) {
    return "AssertionError: context parallelism requires flash/fused attention "
           "(--use-flash-attn)";
  }
  if (k.precision == Precision::kFp8 && c.gpu.fp8_tflops <= 0) {
    return "RuntimeError: FP8 requires compute capability >= 8.9 (got " + c.gpu.name + ")";
  }
  if ((k.precision == Precision::kMxfp8 || k.precision == Precision::kNvfp4) &&
      c.gpu.fp4_tflops <= 0) {
    return std::string("RuntimeError: ") +
           (k.precision == Precision::kMxfp8 ? "MXFP8" : "NVFP4") +
           " block scaling requires compute capability >= 10.0 (Blackwell; got " + c.gpu.name + ")";
  }
  if (k.overlap_param_gather && !k.dist_opt && k.sharding == Sharding::kNone) {
    return "AssertionError: --overlap-param-gather only supported with "
           "--use-distributed-optimizer";
  }
  if (k.overlap_moe_comm && k.ep < 2) {
    return "AssertionError: overlap_moe_expert_parallel_comm requires "
           "expert_model_parallel_size > 1";
  }
  if (k.capacity_factor > 0 && m.experts == 0) {
    return "AssertionError: --moe-expert-capacity-factor requires num_experts (a MoE model)";
  }
  if (k.shard_group > 0) {
    if (k.sharding == Sharding::kNone && !k.dist_opt) {
      return "AssertionError: a shard group (HSDP) needs sharded state (sharding zero1-3 or "
             "dist_opt)";
    }
    if ((dp * k.cp) % k.shard_group != 0) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "AssertionError: data_parallel_size x context_parallel_size (%d) must be "
                                 "divisible by the shard group size (%d)",
                                 dp * k.cp, k.shard_group);
      return buf;
    }
  }
  if (k.bucket_mb <= 0) return "AssertionError: --ddp-bucket-size must be positive";
  // Megatron-Core's TransformerConfig checks on activation offloading.
  if (k.offload_layers > 0) {
    if (k.offload_layers >= m.layers) {
      if (explain) std::snprintf(buf, sizeof(buf),
                                 "ValueError: CPU offloading can be done only for layers less than %d",
                                 m.layers);
      return buf;
    }
    if (k.pp > 1) {
      return "ValueError: Currently there is no support for Pipeline parallelism with CPU "
             "offloading";
    }
    if (k.recompute != Recompute::kNone) {
      return "ValueError: CPU offloading does not work when activation recomputation is enabled";
    }
  }
  return "";
}

}  // namespace

const GpuSpec* FindGpu(std::string_view name) {
  const std::string n = Lower(name);
  if (n == "a100") return &Catalog()[1];
  for (const GpuSpec& g : Catalog()) {
    if (Lower(g.name) == n) return &g;
  }
  return nullptr;
}

std::vector<std::string> GpuNames() {
  std::vector<std::string> out;
  for (const GpuSpec& g : Catalog()) out.push_back(g.name);
  return out;
}

const std::vector<std::string>& KnobNames() {
  static const std::vector<std::string> names = {
      "tp", "pp", "cp", "ep", "micro_batch", "vpp", "recompute", "dist_opt", "grad_reduce_bf16",
      "seq_par", "overlap_grad_reduce", "overlap_param_gather", "bucket_mb", "precision", "fused_kernels",
      "flash_attn", "attn_kernel", "offload_layers", "sharding", "shard_group", "pp_first_layers", "pp_last_layers",
      "capacity_factor", "overlap_moe_comm", "dualpipe", "act_fp8_store", "loss_in_place",
      "global_batch_override"};
  return names;
}

bool SetKnob(LaunchKnobs* k, const std::string& name, const std::string& value,
             std::string* error) {
  auto as_int = [&](int64_t* out) {
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0) {
      *error = name + ": expected a non-negative integer, got '" + value + "'";
      return false;
    }
    *out = v;
    return true;
  };
  // A number in [lo, hi] (lo itself only when `lo_ok`); `want` says what.
  auto as_double = [&](double lo, bool lo_ok, double hi, const char* want, double* out) {
    char* end = nullptr;
    const double d = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(lo_ok ? d >= lo : d > lo) || d > hi) {
      *error = name + ": expected " + want + ", got '" + value + "'";
      return false;
    }
    *out = d;
    return true;
  };
  // One of the named values; the error lists them all ("a, b or c").
  auto one_of = [&]<typename T>(std::initializer_list<std::pair<const char*, T>> choices, T* out) {
    std::string names;
    size_t i = 0;
    for (const auto& [text, v] : choices) {
      if (value == text) {
        *out = v;
        return true;
      }
      names += i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ";
      names += text;
      ++i;
    }
    *error = name + ": expected " + names + ", got '" + value + "'";
    return false;
  };
  auto as_bool = [&](bool* out) {
    if (value == "true") *out = true;
    else if (value == "false") *out = false;
    else {
      *error = name + ": expected true or false, got '" + value + "'";
      return false;
    }
    return true;
  };
  int64_t v = 0;
  if (name == "tp" || name == "pp" || name == "cp" || name == "ep" || name == "micro_batch" ||
      name == "vpp") {
    if (!as_int(&v)) return false;
    if (v < 1 || v > 65536) {
      *error = name + ": must be in [1, 65536], got '" + value + "'";
      return false;
    }
    int* field = name == "tp" ? &k->tp : name == "pp" ? &k->pp : name == "cp" ? &k->cp
               : name == "ep" ? &k->ep : name == "micro_batch" ? &k->micro_batch : &k->vpp;
    *field = static_cast<int>(v);
    return true;
  }
  if (name == "global_batch_override") {
    if (!as_int(&v)) return false;
    k->global_batch_override = v;
    return true;
  }
  if (name == "shard_group" || name == "pp_first_layers" || name == "pp_last_layers" ||
      name == "offload_layers") {
    if (!as_int(&v)) return false;
    if (v > 65536) {
      *error = name + ": must be in [0, 65536] (0: " +
               (name == "shard_group"      ? "one group"
                : name == "offload_layers" ? "none"
                                           : "an even split") +
               "), got '" + value + "'";
      return false;
    }
    int* field = name == "shard_group"       ? &k->shard_group
               : name == "pp_first_layers" ? &k->pp_first_layers
               : name == "offload_layers"  ? &k->offload_layers
                                           : &k->pp_last_layers;
    *field = static_cast<int>(v);
    return true;
  }
  if (name == "capacity_factor") {
    return as_double(0, true, 64, "0 (dropless) or a capacity factor in (0, 64]",
                     &k->capacity_factor);
  }
  if (name == "sharding") {
    return one_of({{"none", Sharding::kNone}, {"zero1", Sharding::kZero1},
                   {"zero2", Sharding::kZero2}, {"zero3", Sharding::kZero3},
                   {"fsdp", Sharding::kZero3}},
                  &k->sharding);
  }
  if (name == "bucket_mb") {
    return as_double(0, false, 1e5, "a positive number of MB", &k->bucket_mb);
  }
  if (name == "recompute") {
    return one_of({{"none", Recompute::kNone}, {"selective", Recompute::kSelective},
                   {"full", Recompute::kFull}, {"op", Recompute::kOp},
                   {"modules", Recompute::kModules}},
                  &k->recompute);
  }
  if (name == "attn_kernel") {
    return one_of({{"fused", AttnKernel::kFused}, {"fa2", AttnKernel::kFa2}}, &k->attn_kernel);
  }
  if (name == "precision") {
    return one_of({{"bf16", Precision::kBf16}, {"fp8", Precision::kFp8},
                   {"mxfp8", Precision::kMxfp8}, {"nvfp4", Precision::kNvfp4}},
                  &k->precision);
  }
  if (name == "dist_opt") return as_bool(&k->dist_opt);
  if (name == "grad_reduce_bf16") return as_bool(&k->grad_reduce_bf16);
  if (name == "seq_par") return as_bool(&k->seq_par);
  if (name == "overlap_grad_reduce") return as_bool(&k->overlap_grad_reduce);
  if (name == "overlap_param_gather") return as_bool(&k->overlap_param_gather);
  if (name == "fused_kernels") return as_bool(&k->fused_kernels);
  if (name == "flash_attn") return as_bool(&k->flash_attn);
  if (name == "overlap_moe_comm") return as_bool(&k->overlap_moe_comm);
  if (name == "dualpipe") return as_bool(&k->dualpipe);
  if (name == "act_fp8_store") return as_bool(&k->act_fp8_store);
  if (name == "loss_in_place") return as_bool(&k->loss_in_place);
  *error = name + ": not a simulator knob";
  return false;
}

namespace {
template <typename T>
KnobSetter Assign(T LaunchKnobs::*field, T value) {
  return [field, value](LaunchKnobs* k) { k->*field = value; };
}
}  // namespace

KnobSetter CompileKnob(const std::string& name, const std::string& value, std::string* error) {
  LaunchKnobs p;
  if (!SetKnob(&p, name, value, error)) return nullptr;
  // Copy only the field `name` sets, as SetKnob parsed it.
  if (name == "tp") return Assign(&LaunchKnobs::tp, p.tp);
  if (name == "pp") return Assign(&LaunchKnobs::pp, p.pp);
  if (name == "cp") return Assign(&LaunchKnobs::cp, p.cp);
  if (name == "ep") return Assign(&LaunchKnobs::ep, p.ep);
  if (name == "micro_batch") return Assign(&LaunchKnobs::micro_batch, p.micro_batch);
  if (name == "vpp") return Assign(&LaunchKnobs::vpp, p.vpp);
  if (name == "recompute") return Assign(&LaunchKnobs::recompute, p.recompute);
  if (name == "dist_opt") return Assign(&LaunchKnobs::dist_opt, p.dist_opt);
  if (name == "grad_reduce_bf16") return Assign(&LaunchKnobs::grad_reduce_bf16, p.grad_reduce_bf16);
  if (name == "seq_par") return Assign(&LaunchKnobs::seq_par, p.seq_par);
  if (name == "overlap_grad_reduce") return Assign(&LaunchKnobs::overlap_grad_reduce, p.overlap_grad_reduce);
  if (name == "overlap_param_gather") return Assign(&LaunchKnobs::overlap_param_gather, p.overlap_param_gather);
  if (name == "bucket_mb") return Assign(&LaunchKnobs::bucket_mb, p.bucket_mb);
  if (name == "precision") return Assign(&LaunchKnobs::precision, p.precision);
  if (name == "fused_kernels") return Assign(&LaunchKnobs::fused_kernels, p.fused_kernels);
  if (name == "flash_attn") return Assign(&LaunchKnobs::flash_attn, p.flash_attn);
  if (name == "attn_kernel") return Assign(&LaunchKnobs::attn_kernel, p.attn_kernel);
  if (name == "offload_layers") return Assign(&LaunchKnobs::offload_layers, p.offload_layers);
  if (name == "sharding") return Assign(&LaunchKnobs::sharding, p.sharding);
  if (name == "shard_group") return Assign(&LaunchKnobs::shard_group, p.shard_group);
  if (name == "pp_first_layers") return Assign(&LaunchKnobs::pp_first_layers, p.pp_first_layers);
  if (name == "pp_last_layers") return Assign(&LaunchKnobs::pp_last_layers, p.pp_last_layers);
  if (name == "capacity_factor") return Assign(&LaunchKnobs::capacity_factor, p.capacity_factor);
  if (name == "overlap_moe_comm") return Assign(&LaunchKnobs::overlap_moe_comm, p.overlap_moe_comm);
  if (name == "dualpipe") return Assign(&LaunchKnobs::dualpipe, p.dualpipe);
  if (name == "act_fp8_store") return Assign(&LaunchKnobs::act_fp8_store, p.act_fp8_store);
  if (name == "loss_in_place") return Assign(&LaunchKnobs::loss_in_place, p.loss_in_place);
  if (name == "global_batch_override") return Assign(&LaunchKnobs::global_batch_override, p.global_batch_override);
  *error = name + ": not a simulator knob";
  return nullptr;
}

const char* StatusName(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kOom: return "oom";
    case Status::kLauncherError: return "failed";
  }
  return "failed";
}

namespace {

// Attention widths of one layer (see ModelShape's head_dim and MLA fields).
struct AttnDims {
  double params = 0;   // projections (MLA: down- and up-projections)
  double q = 0;        // query width, heads x query/key head dim
  double k = 0;        // key width after up-projection (GQA: kv heads)
  double v = 0;        // value width
  double o = 0;        // output projection's input width, heads x value head dim
  double latent = 0;   // MLA: compressed query and KV latents (+ RoPE key)
  double score = 0;    // heads x (qk + v) / 2: the width attention's FLOPs scale with
};

AttnDims Attention(const ModelShape& m) {
  AttnDims d;
  const double h = m.hidden, a = m.heads;
  const double hd = m.head_dim > 0 ? m.head_dim : h / a;
  const double kvh = m.kv_heads > 0 ? m.kv_heads : m.heads;
  if (m.kv_lora_rank > 0) {
    const double r = m.rope_head_dim, vh = m.v_head_dim > 0 ? m.v_head_dim : hd;
    d.q = a * (hd + r);
    d.k = a * (hd + r);
    d.v = a * vh;
    d.o = a * vh;
    d.latent = (m.q_lora_rank > 0 ? m.q_lora_rank : 0) + m.kv_lora_rank + r;
    const double q_params = m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * d.q : h * d.q;
    const double kv_params = h * (m.kv_lora_rank + r) + m.kv_lora_rank * a * (hd + vh);
    d.params = q_params + kv_params + d.o * h;
    d.score = a * (hd + r + vh) / 2.0;
  } else {
    d.q = a * hd;
    d.k = kvh * hd;
    d.v = kvh * hd;
    d.o = a * hd;
    d.params = h * (d.q + d.k + d.v) + d.o * h;
    d.score = a * hd;
  }
  return d;
}

// Keys a query attends to in a layer, as a non-causal count (MFU
// conventions count full attention as s keys): s globally; with a window
// w, twice the causal mean w - w^2/(2s).
double KeysPerQuery(const ModelShape& m, bool global) {
  const double s = m.seq_len;
  if (global || m.window <= 0 || m.window >= m.seq_len) return s;
  const double w = m.window;
  return 2.0 * w - w * w / s;
}

// Bytes an element of a GEMM input, or of a weight's low-precision copy,
// takes at the launch's precision: bf16 2; fp8 and MXFP8 1 (Transformer
// Engine keeps both in it); NVFP4 4 bits plus an fp8 scale per 16 values.
// The simulator and the planner's estimate read the same figures.
double PrecisionBytes(Precision p) {
  return p == Precision::kBf16 ? 2.0 : p == Precision::kNvfp4 ? 0.5625 : 1.0;
}

}  // namespace

bool IsMoeLayer(const ModelShape& m, int layer) {
  return m.experts > 0 && layer >= m.dense_layers;
}

bool IsGlobalLayer(const ModelShape& m, int layer) {
  if (m.window <= 0) return true;
  return m.global_every > 0 && (layer + 1) % m.global_every == 0;
}

StageLayers LayersOfStage(const ModelShape& m, const LaunchKnobs& k, int stage) {
  const int pp = std::max(k.pp, 1);
  if (pp == 1) return {0, m.layers};
  const int f = k.pp_first_layers, l = k.pp_last_layers;
  const int middle = pp - (f > 0) - (l > 0);
  const int per = middle > 0 ? (m.layers - f - l) / middle : 0;
  auto count = [&](int s) { return s == 0 && f > 0 ? f : s == pp - 1 && l > 0 ? l : per; };
  StageLayers out;
  for (int s = 0; s < stage; ++s) out.first += count(s);
  out.count = count(stage);
  return out;
}

ParamCounts CountParams(const ModelShape& m) {
  ParamCounts p;
  const double h = m.hidden;
  const double mats = m.swiglu ? 3.0 : 2.0;
  p.attention = Attention(m).params + 2 * h + (m.kv_lora_rank > 0 ? m.kv_lora_rank + m.q_lora_rank : 0);
  p.dense_mlp = mats * h * m.ffn;
  if (m.experts > 0) {
    p.moe_dense = h * m.experts + mats * h * m.shared_expert_ffn;  // router, shared experts
    p.moe_experts = m.experts * mats * h * m.expert_ffn;
    p.moe_layers = std::max(0, m.layers - m.dense_layers);
  }
  const int dense_layers = m.layers - p.moe_layers;
  const double layers = std::max(1, m.layers);
  p.per_layer_dense =
      p.attention + (dense_layers * p.dense_mlp + p.moe_layers * p.moe_dense) / layers;
  p.per_layer_expert = p.moe_layers * p.moe_experts / layers;
  p.embedding = static_cast<double>(m.vocab) * h * (m.tied_embeddings ? 1 : 2);
  p.total = m.layers * (p.per_layer_dense + p.per_layer_expert) + p.embedding;
  const double active_expert =
      m.experts > 0 ? p.per_layer_expert * static_cast<double>(m.topk) / m.experts : 0;
  p.active = m.layers * (p.per_layer_dense + active_expert) + p.embedding;
  return p;
}
std::string LaunchCheck(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  return LauncherCheck(m, c, k, k.global_batch_override > 0 ? k.global_batch_override
                                                            : m.global_batch);
}

bool Launches(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  return LauncherCheck(m, c, k, k.global_batch_override > 0 ? k.global_batch_override : m.global_batch,
                       /*explain=*/false)
      .empty();
}

double TextbookMemoryGib(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  return TextbookMemory(m, c, k).total_gib;
}

TextbookMemoryParts TextbookMemory(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  const ParamCounts p = CountParams(m);
  const int tp = std::max(k.tp, 1), pp = std::max(k.pp, 1), cp = std::max(k.cp, 1);
  const int ep = std::max(k.ep, 1);
  const int dp = std::max(1, c.world() / (tp * pp * cp));
  const double layers = static_cast<double>(m.layers) / pp;
  const double dense = (p.embedding / 2 + layers * p.per_layer_dense) / tp;
  const double experts = layers * p.per_layer_expert / ep / tp;
  // Bytes per parameter: weights 2, gradients 4 (2 in bf16), optimizer 12;
  // ZeRO-1 shards the optimizer,
  // ZeRO-2 the gradients too, ZeRO-3/FSDP the weights as well, over the
  // data-parallel ranks with context parallelism's (Megatron's data
  // parallel group with CP: they hold the same weights), experts over
  // those ranks less expert parallelism's.
  const int zero = std::max(static_cast<int>(k.sharding), k.dist_opt ? 1 : 0);
  // Low precision (Transformer Engine's fp8 recipes, MXFP8, NVFP4) keeps a
  // low-precision copy of each weight beside the bf16 one (NVFP4: 4 bits
  // and an fp8 scale per 16 values) and saves GEMM inputs in it for the
  // backward pass.
  const double gemm_in = PrecisionBytes(k.precision);
  const double weight = 2.0 + (k.precision != Precision::kBf16 ? gemm_in : 0.0);
  const int dpc = dp * cp;
  const double d = k.shard_group > 0 ? std::min(k.shard_group, dpc) : dpc;
  const double de = std::max(1.0, std::min(d, static_cast<double>(dpc / ep)));
  const double grad = k.grad_reduce_bf16 ? 2.0 : 4.0, opt = 12.0;
  auto bytes = [&](double g) {
    return (zero >= 3 ? weight / g : weight) + (zero >= 2 ? grad / g : grad) + (zero >= 1 ? opt / g : opt);
  };
  const double state = dense * bytes(d) + experts * bytes(de);
  // With bf16 gradients the optimizer casts the ones it owns to fp32 at the
  // step (Megatron: `main_param.grad = main_grad.float()`), 4 bytes a
  // parameter the next zero_grad frees before the forward: a peak of its
  // own, never beside the activations.
  const double step_copy =
      k.grad_reduce_bf16 ? 4.0 * (zero >= 1 ? dense / d + experts / de : dense + experts) : 0.0;
  const double s = static_cast<double>(m.seq_len) / cp, b = k.micro_batch, h = m.hidden;
  // Table 2 counts dropout: two sbh masks (attention output, MLP output)
  // among the 10sbh TP does not split, and the scores' mask (as^2b) and
  // output (2as^2b) beside the softmax's 2as^2b. Without dropout (the
  // model's config says) neither is stored: 8sbh and 2as^2b. Of the 8, the
  // QKV and MLP inputs (2sbh each) are GEMM inputs, the layer norms' 4 not.
  const double drop = m.dropout ? 1.0 : 0.0;
  const double unsplit = 4.0 + 2.0 * gemm_in + 2.0 * drop, scores = (2.0 + 3.0 * drop) * m.heads * s * s * b / tp;
  // Table 2's 24sbh that TP splits, at the model's widths (Megatron's
  // theoretical memory reads ffn_hidden_size the same way; the weights
  // above already use them): Q, K and V (K and V at the KV heads' width)
  // and the output projection's input, 2 bytes an element; an MLP's
  // first GEMM outputs and the second's input (GeLU: 4 bytes per element
  // of its width, 16h at 4h; SwiGLU: gate, up and their product, 6); a
  // MoE's routed tokens, top-k of each, with their dispatched input (no
  // imbalance: a planner's even split), and its shared experts. GEMM
  // inputs (the output projection's, the dispatched tokens, the second
  // GEMM's) at the precision's bytes; the activation's input (GeLU's, or
  // SwiGLU's gate and up) in fp8 where `act_fp8_store` says.
  const AttnDims ad = Attention(m);
  const double per_width = (m.swiglu ? 4.0 : 2.0) * (k.act_fp8_store ? 0.5 : 1.0) + gemm_in;
  const double mlp_split = m.experts > 0 ? m.topk * (gemm_in * h + per_width * m.expert_ffn) +
                                               per_width * m.shared_expert_ffn
                                         : per_width * m.ffn;
  const double split = 2.0 * (ad.q + ad.k + ad.v) + gemm_in * ad.o + mlp_split;  // bytes a token
  // A whole layer's activations (Table 2): what full recompute holds again
  // for the one layer it recomputes.
  const double whole = k.seq_par ? s * b * (unsplit * h + split) / tp : s * b * (unsplit * h + split / tp);
  double act;
  // Without flash attention the layer being computed materializes what
  // it keeps of its scores and, transiently, their fp32 copy for the
  // softmax (Megatron-Core's attention_softmax_in_fp32, on by default):
  // 4as^2b/t more, whatever is kept across layers.
  double working = k.flash_attn ? 0.0 : scores + 4.0 * m.heads * s * s * b / tp;
  if (k.recompute == Recompute::kFull) {
    // The checkpointed layer inputs, sharded by sequence parallelism (Section
    // 5: 2sbh/t with it), and one layer recomputed at a time.
    act = 2.0 * s * b * h / (k.seq_par ? tp : 1);
    working += whole;
  } else if (k.recompute == Recompute::kOp) {
    // The layer input and attention output, half the matmul outputs.
    act = s * b * (4.0 * h + (3.0 * h + 3.0 * m.ffn) / tp);
  } else {
    // Korthikanti et al. 2022, Table 2: tensor parallelism splits the
    // attention and MLP internals (24sbh) but not the layer norms, dropouts
    // and the inputs of the first GEMMs (10sbh); sequence parallelism splits
    // those too.
    act = whole;
    if (!k.flash_attn && (k.recompute == Recompute::kNone || k.recompute == Recompute::kModules)) {
      act += scores;
    }
  }
  // The first stage holds PP micro-batches in flight under 1F1B, each over
  // its layers (less those offloaded, which only a single stage allows);
  // the last holds one, and the output layer's logits with the loss's fp32
  // copy (Megatron's theoretical memory: 4sbv/t bytes). With one stage
  // they are the same stage.
  const double logits = 4.0 * s * b * m.vocab / tp;
  // The interleaved schedule keeps more in flight: Megatron's theoretical
  // memory scales the first stage's activations by 1 + (PP - 1) / (PP x VPP).
  const double interleave =
      pp > 1 && k.vpp > 1 ? 1.0 + static_cast<double>(pp - 1) / (pp * k.vpp) : 1.0;
  const double resident = std::max(0.0, layers * pp - std::max(0, k.offload_layers));
  double peak = act * resident * interleave + working + (pp == 1 ? logits : 0.0);
  if (pp > 1) peak = std::max(peak, act * layers + working + logits);
  constexpr double kGiBytes = 1024.0 * 1024.0 * 1024.0;
  TextbookMemoryParts out;
  out.total_gib = (state + std::max(peak, step_copy)) / kGiBytes;
  out.activation_gib = peak >= step_copy ? peak / kGiBytes : 0.0;
  return out;
}

double TextbookStepTimeS(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  const GpuSpec& g = c.gpu;
  const int tp = std::max(k.tp, 1), pp = std::max(k.pp, 1), cp = std::max(k.cp, 1);
  const int ep = std::max(k.ep, 1), vpp = std::max(k.vpp, 1), mb = std::max(k.micro_batch, 1);
  const int world = std::max(c.world(), 1);
  const int dp = std::max(1, world / (tp * pp * cp));
  const double tokens = static_cast<double>(m.global_batch) * m.seq_len;
  const double peak =
      (k.precision == Precision::kNvfp4 && g.fp4_tflops > 0 ? g.fp4_tflops
       : k.precision != Precision::kBf16 && g.fp8_tflops > 0 ? g.fp8_tflops
                                                            : g.bf16_tflops) * 1e12 *
      g.gemm_efficiency;
  double flops = ModelFlopsPerToken(m);
  const double attention = 12.0 * m.layers * static_cast<double>(m.hidden) * m.seq_len;
  if (k.recompute == Recompute::kFull) flops *= 4.0 / 3.0;
  if (k.recompute == Recompute::kSelective) flops += attention / 3.0;
  if (k.recompute == Recompute::kOp) {
    flops += 0.5 * std::max(0.0, flops - attention) / 3.0;
  }
  const double micro = std::max(1.0, static_cast<double>(m.global_batch) / (mb * dp));
  const double bubble = 1.0 + static_cast<double>(pp - 1) / (micro * vpp);
  double time = flops * tokens / world / peak * bubble;
  const ParamCounts p = CountParams(m);
  if (m.experts > 0) {
    // Each expert's GEMMs get the rows routed to it: a micro-batch's tokens
    // on a rank times top-k over the experts the rank holds (E / EP), so
    // expert parallelism is what gives the grouped GEMMs rows to fill the
    // device with. Efficiency rows / (rows + 128), 128 a tile's rows: few
    // rows an expert run far below peak, which is what an EP of 1 with many
    // experts costs (the all-to-all below is what a larger EP costs).
    const int topk = std::max(m.topk, 1);
    const double active_expert = m.layers * p.per_layer_expert * topk / m.experts;
    const double rows = static_cast<double>(mb) * m.seq_len / cp * topk * ep / m.experts;
    time += 6.0 * active_expert * tokens / world / peak * bubble * kExpertGemmHalfRows / rows;
  }
  const double compute = time;
  // Per micro-batch and layer of a stage: b * s / cp tokens of h values.
  const double layer_bytes = static_cast<double>(mb) * m.seq_len / cp * m.hidden * 2.0;
  const double layer_steps = micro * static_cast<double>(m.layers) / pp;
  auto bw = [&](int64_t span) {
    return (span <= c.gpus_per_node ? c.nvlink_gbps : c.net_gbps) * 1e9;
  };
  if (tp > 1) time += layer_steps * 4.0 * 2.0 * (tp - 1) / tp * layer_bytes / bw(tp);
  // Pipeline point-to-point: each micro-batch's activations forward and
  // gradients backward at every virtual stage boundary, on the critical
  // path with the bubble's (p - 1) / v slots (Narayanan et al. 2021, sec.
  // 3.3). The stages tile the world, so on more than one node some stage
  // boundary is a node boundary, and the slowest send paces the pipeline.
  if (pp > 1) {
    time += (micro + static_cast<double>(pp - 1) / vpp) * 2.0 * vpp * layer_bytes / bw(world);
  }
  if (m.experts > 0 && ep > 1) {
    double a2a = layer_steps * 4.0 * (ep - 1) / ep * layer_bytes * std::max(m.topk, 1) / tp /
                 bw(static_cast<int64_t>(tp) * cp * ep);
    // Overlapped with another micro-batch's compute (Megatron-Core's
    // overlap_moe_expert_parallel_comm, DualPipe), as the gradient
    // all-reduce below: only what the compute cannot cover is exposed.
    if ((k.overlap_moe_comm || k.dualpipe) && micro >= 2) {
      a2a = std::max(0.05 * a2a, a2a - 0.8 * compute);
    }
    time += a2a;
  }
  if (dp * cp > 1 && !k.overlap_grad_reduce) {
    const double params = (p.embedding / 2 + m.layers * (p.per_layer_dense + p.per_layer_expert / ep)) /
                          (tp * pp);
    time += 2.0 * (dp * cp - 1) / (dp * cp) * 2.0 * params / bw(static_cast<int64_t>(world));
  }
  return time;
}

double ModelFlopsPerToken(const ModelShape& m) {
  const ParamCounts p = CountParams(m);
  // 6 per parameter per token through every layer, the output layer's
  // matmul, and attention scores and values (non-causal count, as MFU
  // conventions do; a windowed layer counts the keys its window holds).
  const double layer_params = p.active - p.embedding;
  const double score = Attention(m).score;
  double attention = 0;
  for (int i = 0; i < m.layers; ++i) attention += 12.0 * score * KeysPerQuery(m, IsGlobalLayer(m, i));
  return 6.0 * layer_params + 6.0 * static_cast<double>(m.vocab) * m.hidden + attention;
}

double ActivationBytesPerLayer(const ModelShape& m, const LaunchKnobs& k) {
  return ActivationBytesPerLayer(m, k, m.experts > 0);
}

double ActivationBytesPerLayer(const ModelShape& m, const LaunchKnobs& k, bool moe) {
  // Korthikanti et al. 2022, section 4, term by term, for t tokens of one
  // micro-batch on this rank (sequence split by CP).
  const double t = static_cast<double>(k.micro_batch) * m.seq_len / k.cp;
  const double h = m.hidden;
  const double a = m.heads;
  const AttnDims d = Attention(m);
  const double tp = k.tp;
  // With sequence parallelism the parts TP would replicate are split too.
  const double rep = (k.seq_par && k.tp > 1) ? tp : 1.0;
  const double drop = m.dropout ? 1.0 : 0.0;
  const double s_keys = m.seq_len;  // materialised scores span the whole sequence
  // Low precision keeps GEMM inputs in it (Transformer Engine stores fp8
  // copies).
  const double gemm_in = PrecisionBytes(k.precision);

  if (k.recompute == Recompute::kFull) return 2.0 * t * h / rep;  // the layer input
  if (k.recompute == Recompute::kOp) {
    // torchtitan's op-level policy: the layer input, the attention
    // kernel's output and log-sum-exp, and every second aten.mm's output
    // (under torchao's fp8 too: a dispatch mode sees the op before the fp8
    // tensor subclass does). Its mm counter runs across layers and steps,
    // so which half is kept alternates: half of the projections' and
    // dense MLP widths on average. Grouped expert GEMMs are not aten.mm.
    const double ups = m.swiglu ? 2.0 : 1.0;  // up-projections (gate, up) or fc1
    double widths = (d.q + d.k + d.v) / tp + h / rep;  // QKV and output projections
    widths += moe ? (ups * m.shared_expert_ffn / tp + (m.shared_expert_ffn > 0 ? h / rep : 0.0))
                  : ups * m.ffn / tp + h / rep;
    return 2.0 * t * h / rep + 2.0 * t * d.o / tp + 4.0 * a * t / tp + 0.5 * 2.0 * t * widths;
  }

  // Recomputed norms (modules) rebuild their outputs, the first GEMMs'
  // inputs, from the layer's residual stream.
  const bool modules = k.recompute == Recompute::kModules;
  const double norm_out = modules ? 0.0 : gemm_in;
  double attn = 0;
  attn += norm_out * t * h / rep;                 // QKV matmul input
  attn += 2.0 * t * d.latent / rep;               // MLA: the latents the up-projections read
  // Q, K, V; with MLA, selective recompute rebuilds them from the latents
  // (Megatron-Core's mla_up_proj), as the published MLA recipes run.
  if (!(m.kv_lora_rank > 0 && (k.recompute == Recompute::kSelective || modules))) {
    attn += 2.0 * t * (d.q + d.k + d.v) / tp;
  }
  attn += gemm_in * t * d.o / tp;                 // output projection input
  attn += drop * t * h / rep;                     // attention output dropout mask
  if (!k.flash_attn && k.recompute != Recompute::kSelective) {
    // softmax output; with dropout also its mask and output.
    attn += (2.0 + drop * 3.0) * a * t * s_keys / tp;
  } else if (k.flash_attn) {
    attn += 4.0 * a * t / tp;  // log-sum-exp statistics
  }
  // Per element of an MLP's width: SwiGLU's gate and up outputs (2 + 2)
  // and their product, the second GEMM's input (GeLU: its input and
  // output); a GEMM input is kept in fp8 under fp8.
  // The activation's input (SwiGLU: gate and up) may be kept in fp8.
  const double act_in = (m.swiglu ? 4.0 : 2.0) * (k.act_fp8_store ? 0.5 : 1.0);
  const double act_bytes = act_in + gemm_in;
  // Routed experts under modules recompute their activation's output.
  const double expert_act_bytes = modules ? act_in : act_bytes;
  double mlp = 0;
  if (moe) {
    // Routed tokens: dropless with the router's imbalance, or padded to
    // the capacity.
    const double tk = t * m.topk * (k.capacity_factor > 0 ? k.capacity_factor : 1.12);
    mlp += norm_out * t * h / rep;            // router / MLP input
    // Dispatched tokens (the experts' first GEMM input). Megatron-Core's
    // grouped experts apply the routing probabilities inside the fused
    // SwiGLU (weighted_bias_swiglu), so the combine is an unweighted sum
    // that saves nothing: the experts' outputs are not kept.
    mlp += gemm_in * tk * h / rep;
    mlp += expert_act_bytes * tk * m.expert_ffn / tp;
    mlp += act_bytes * t * m.shared_expert_ffn / tp;
    mlp += drop * t * h / rep;
  } else {
    mlp += norm_out * t * h / rep;  // first linear input
    // GeLU: its input and output (2+2 bytes per element of ffn); SwiGLU:
    // gate and up outputs and their product.
    mlp += act_bytes * t * m.ffn / tp;
    mlp += drop * t * h / rep;
  }
  const double norms = 4.0 * t * h / rep;
  return attn + mlp + norms;
}

SimResult Simulate(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  SimResult r;
  const int64_t gb = k.global_batch_override > 0 ? k.global_batch_override : m.global_batch;
  r.message = LauncherCheck(m, c, k, gb);
  if (!r.message.empty()) {
    r.status = Status::kLauncherError;
    return r;
  }
  const GpuSpec& g = c.gpu;
  const int world = c.world();
  const int dp = world / (k.tp * k.pp * k.cp);
  const int64_t micro = gb / (static_cast<int64_t>(k.micro_batch) * dp);
  r.dp = dp;
  r.microbatches = micro;

  const double h = m.hidden;
  const AttnDims ad = Attention(m);
  const double t = static_cast<double>(k.micro_batch) * m.seq_len / k.cp;  // tokens per rank
  const double s_q = static_cast<double>(m.seq_len) / k.cp;
  const double tp = k.tp;
  const double rep = (k.seq_par && k.tp > 1) ? tp : 1.0;
  const double mats = m.swiglu ? 3.0 : 2.0;
  // fp8, mxfp8 or nvfp4: GEMMs at a low-precision peak, casts, fp8 dispatch.
  const bool fp8 = k.precision != Precision::kBf16;
  const double low_copy = PrecisionBytes(k.precision);  // weight copy, bytes (under fp8 only)
  const double hbm = g.hbm_tbps * 1e12 * 0.75;  // achievable streaming bandwidth
  const ParamCounts pc = CountParams(m);
  const int zero = std::max(static_cast<int>(k.sharding), k.dist_opt ? 1 : 0);

  // ---- compute per layer per micro-batch (seconds), by kind of layer
  // fp8 GEMMs reach the same share of their doubled peak as bf16 ones of
  // theirs: NeMo's fp8 recipes on H100 (tests/models/nemo_perf.h) land
  // within 10% so; at 0.75 of it, the simulator was 8-27% slow on them.
  const double peak = (k.precision == Precision::kNvfp4 ? g.fp4_tflops
                      : fp8                               ? g.fp8_tflops
                                                          : g.bf16_tflops) *
                     1e12;
  auto gemm_eff = [&](double rows, double cols) {
    return g.gemm_efficiency * Sat(rows, 192) * Sat(cols, 256);
  };
  struct LayerCost {
    double gemm_f = 0, attn_f = 0, attn_b = 0, elem_f = 0, tp_comm = 0, cp_comm = 0, a2a = 0,
           recompute = 0, launch = 0;
    double mm_f = 0;  // the part of gemm_f in plain matmuls (aten.mm), not in total()
    double total() const {
      return 3.0 * gemm_f + attn_f + attn_b + 3.0 * elem_f + recompute + tp_comm + cp_comm + a2a +
             launch;
    }
    // this += w x o, every field.
    void AddScaled(const LayerCost& o, double w) {
      gemm_f += w * o.gemm_f, attn_f += w * o.attn_f, attn_b += w * o.attn_b;
      elem_f += w * o.elem_f, tp_comm += w * o.tp_comm, cp_comm += w * o.cp_comm;
      a2a += w * o.a2a, recompute += w * o.recompute, launch += w * o.launch, mm_f += w * o.mm_f;
    }
  };
  auto layer_cost = [&](bool moe, bool global) {
    LayerCost lc;
    const double attn_proj_flops = 2.0 * t * ad.params / tp;
    lc.gemm_f = attn_proj_flops / (peak * gemm_eff(t, h / tp));
    double mm = lc.gemm_f;
    if (moe) {
      // Dropless: the router's imbalance makes the busiest expert rank the
      // one to wait for; with a capacity, every expert's input is padded to
      // it. Grouped GEMMs run below dense GEMM efficiency.
      const double load = k.capacity_factor > 0 ? k.capacity_factor : 1.2;
      const double tk = t * m.topk;
      const double per_expert_rows = tk * k.ep / m.experts;
      const double expert_flops = 2.0 * tk * mats * h * m.expert_ffn / tp * load;
      lc.gemm_f += expert_flops / (peak * gemm_eff(per_expert_rows, m.expert_ffn / tp) * 0.75);
      const double router = 2.0 * t * h * m.experts / (peak * 0.2);
      lc.gemm_f += router;
      mm += router;
      if (m.shared_expert_ffn > 0) {
        const double shared = 2.0 * t * mats * h * m.shared_expert_ffn / tp /
                              (peak * gemm_eff(t, m.shared_expert_ffn / tp));
        lc.gemm_f += shared;
        mm += shared;
      }
      // Token permutation and un-permutation around the experts.
      const double routed = tk * (k.capacity_factor > 0 ? k.capacity_factor : 1.0);
      lc.gemm_f += (k.fused_kernels ? 4.0 : 8.0) * routed * h * 2.0 / rep / hbm;
      if (k.ep > 1) {
        // Dispatch and combine, forward and backward; under fp8 the forward
        // dispatch sends fp8 tokens (DeepEP, Transformer Engine).
        const double values = routed * h / rep;
        const double bytes = values * (fp8 ? 1.0 + 2.0 + 2.0 + 2.0 : 8.0);
        const int64_t span = static_cast<int64_t>(k.tp) * k.cp * k.ep;
        const int64_t stride = static_cast<int64_t>(k.tp) * k.cp;
        if (span <= c.domain()) {
          const Link l = LinkFor(c, span);
          lc.a2a = bytes * (k.ep - 1) / k.ep / (l.gbps * 1e9) + 4.0 * (k.ep - 1) * l.lat_us * 1e-6;
        } else {
          // Across NVLink domains only the peers outside this rank's domain
          // are reached through its NIC; the rest move over NVLink at once.
          const double local = std::max<int64_t>(1, c.domain() / stride);
          const double remote_share = (k.ep - local) / k.ep;
          const double local_share = (local - 1) / k.ep;
          const double net = bytes * remote_share / (c.net_gbps * 0.8 * 1e9);
          const double nvl = bytes * local_share / (c.nvlink_gbps * 0.8 * 1e9);
          lc.a2a = std::max(net, nvl) + 4.0 * (k.ep - 1) * c.net_latency_us * 1e-6;
        }
      }
    } else {
      const double mlp = 2.0 * t * mats * h * m.ffn / tp / (peak * gemm_eff(t, m.ffn / tp));
      lc.gemm_f += mlp;
      mm += mlp;
    }
    lc.mm_f = mm;
    // Attention scores and values over the keys this layer sees.
    const double keys = KeysPerQuery(m, global);
    const double attn_flops = 4.0 * k.micro_batch * s_q * keys * ad.score / tp;
    if (k.flash_attn) {
      // Causal flash attention skips the masked half (a window's keys are
      // already a causal count, doubled).
      double eff = 0.42 * (g.gemm_efficiency / 0.6) * Sat(s_q, 512);
      if (k.attn_kernel == AttnKernel::kFa2 && g.fp8_tflops > 0) eff /= kFa2Slowdown;
      lc.attn_f = 0.5 * attn_flops / (g.bf16_tflops * 1e12 * eff);
      lc.attn_b = 2.5 * lc.attn_f;
    } else {
      // Materialised scores span the whole sequence, masked or not.
      const double full = 4.0 * k.micro_batch * s_q * m.seq_len * ad.score / tp;
      const double score_bytes = static_cast<double>(k.micro_batch) * (m.heads / tp) * s_q *
                                 m.seq_len * 2.0;
      const double passes = m.dropout ? 6.0 : 4.0;
      lc.attn_f = full / (g.bf16_tflops * 1e12 * 0.45 * g.gemm_efficiency) +
                  passes * score_bytes / hbm;
      lc.attn_b = 2.0 * lc.attn_f;
    }
    // Memory-bound element-wise work: norms, residuals, activations, casts.
    const double passes_h = k.fused_kernels ? 8.0 : 20.0;
    const double passes_f = (k.fused_kernels ? 3.0 : 6.0) * (m.swiglu ? 1.5 : 1.0);
    const double ffn_width =
        moe ? m.topk * m.expert_ffn + m.shared_expert_ffn : static_cast<double>(m.ffn);
    lc.elem_f = (passes_h * t * h * 2.0 / rep + passes_f * t * ffn_width * 2.0 / tp) / hbm;
    if (fp8) lc.elem_f += 4.0 * (t * h / rep + t * ffn_width / tp) / hbm;  // casts, amax
    // Tensor-parallel collectives: 2 forward, 2 backward per layer.
    if (k.tp > 1) {
      const Link l = LinkFor(c, k.tp);
      const double one = AllReduce(t * h * 2.0, k.tp, l.gbps, l.lat_us);
      // Fused kernels with sequence parallelism overlap TP communication
      // with the GEMMs (Transformer Engine's userbuffers, async TP).
      const double exposed = (k.fused_kernels && k.seq_par) ? 0.35 : 1.0;
      lc.tp_comm = 4.0 * one * exposed;
      if (k.recompute == Recompute::kFull) lc.tp_comm *= 1.5;
      if (k.recompute == Recompute::kOp) lc.tp_comm *= 1.25;  // about half the forward's rerun
    }
    // Context parallelism: ring exchange of K and V, hidden behind attention.
    if (k.cp > 1) {
      const Link l = LinkFor(c, static_cast<int64_t>(k.tp) * k.cp);
      const double kv_bytes = t * (ad.k + ad.v) * 2.0 / tp;
      const double comm = 3.0 * (k.cp - 1) * kv_bytes / (l.gbps * 1e9) +
                          3.0 * (k.cp - 1) * l.lat_us * 1e-6;
      lc.cp_comm = std::max(0.0, comm - 0.8 * (lc.attn_f + lc.attn_b));
    }
    if (k.recompute == Recompute::kFull) {
      lc.recompute = lc.gemm_f + lc.attn_f + lc.elem_f;
    } else if (k.recompute == Recompute::kSelective) {
      lc.recompute = lc.attn_f;
    } else if (k.recompute == Recompute::kModules) {
      // Two norms' forward passes (read, statistics, write), MLA's
      // query/key/value up-projections, the routed experts' activation.
      lc.recompute = 2.0 * 3.0 * t * h * 2.0 / rep / hbm;
      if (m.kv_lora_rank > 0) {
        const double up = (m.q_lora_rank > 0 ? m.q_lora_rank * ad.q : 0.0) +
                          m.kv_lora_rank * (ad.k - m.heads * m.rope_head_dim + ad.v);
        lc.recompute += 2.0 * t * up / tp / (peak * gemm_eff(t, ad.q / tp));
      }
      if (moe) lc.recompute += 3.0 * t * m.topk * 1.12 * m.expert_ffn * 2.0 / tp / hbm;
    } else if (k.recompute == Recompute::kOp) {
      // Everything but the attention kernel and the kept half of the plain
      // matmuls: the other half, grouped GEMMs, the element-wise work.
      lc.recompute = lc.gemm_f - 0.5 * lc.mm_f + lc.elem_f;
    }
    // Kernel launches: small micro-batches cannot hide them.
    lc.launch = k.fused_kernels ? 0.25e-3 : 0.5e-3;
    if ((k.overlap_moe_comm || k.dualpipe) && lc.a2a > 0 && micro >= 2) {
      // One micro-batch's dispatch and combine run under another's
      // compute (Megatron-Core's combined 1F1B with
      // overlap_moe_expert_parallel_comm, or DualPipe's overlapped forward
      // and backward chunks); a twentieth stays exposed.
      const double cover = 0.8 * (3.0 * lc.gemm_f + lc.attn_f + lc.attn_b + 3.0 * lc.elem_f);
      lc.a2a = std::max(0.05 * lc.a2a, lc.a2a - cover);
    }
    return lc;
  };
  // The four kinds of layer (dense or MoE, global or windowed).
  const std::array<LayerCost, 4> kinds = {layer_cost(false, false), layer_cost(false, true),
                                          layer_cost(true, false), layer_cost(true, true)};
  auto kind_of = [&](int i) { return 2 * IsMoeLayer(m, i) + IsGlobalLayer(m, i); };

  // Output layer and loss on the last stage.
  const double logit_flops = 2.0 * t * h * static_cast<double>(m.vocab) / tp;
  const double logits_time = 3.0 * logit_flops / (peak * gemm_eff(t, h)) +
                             6.0 * t * static_cast<double>(m.vocab) / tp * 4.0 / hbm;

  // ---- every pipeline stage: its layers' time and parameters
  struct Stage {
    LayerCost sum;  // per micro-batch
    double time = 0;
    double dense_params = 0, expert_params = 0;  // per GPU, this stage's
    int moe_layers = 0;
    StageLayers layers;
  };
  std::vector<Stage> stages(k.pp);
  for (int s = 0; s < k.pp; ++s) {
    Stage& st = stages[s];
    st.layers = LayersOfStage(m, k, s);
    for (int i = st.layers.first; i < st.layers.first + st.layers.count; ++i) {
      st.sum.AddScaled(kinds[kind_of(i)], 1.0);
      const bool moe = IsMoeLayer(m, i);
      st.moe_layers += moe;
      st.dense_params += (pc.attention + (moe ? pc.moe_dense : pc.dense_mlp)) / tp;
      if (moe) st.expert_params += pc.moe_experts / (tp * k.ep);
    }
    st.time = st.sum.total() + (s == k.pp - 1 ? logits_time : 0.0);
  }
  const double emb = static_cast<double>(m.vocab) * h / tp;
  // The output layer's parameters on the last stage (its gradients sync there).
  stages.back().dense_params += emb;
  // What each rank runs: its stage or, under DualPipe, stages r and
  // PP-1-r on half the micro-batches each (per micro-batch their mean; the
  // weights of both).
  std::vector<Stage> ranks = stages;
  if (k.dualpipe) {
    for (int r = 0; r < k.pp; ++r) {
      const Stage& a = stages[r];
      const Stage& b = stages[k.pp - 1 - r];
      Stage& o = ranks[r];
      o.sum = LayerCost();
      o.sum.AddScaled(a.sum, 0.5);
      o.sum.AddScaled(b.sum, 0.5);
      o.time = 0.5 * (a.time + b.time);
      o.dense_params = a.dense_params + b.dense_params;
      o.expert_params = a.expert_params + b.expert_params;
      o.moe_layers = a.moe_layers + b.moe_layers;
      o.layers.count = a.layers.count + b.layers.count;  // FSDP gathers each
    }
  }
  // The share of the output layer's time in a micro-batch of rank r.
  auto logits_share = [&](size_t r) {
    if (!k.dualpipe) return r + 1 == stages.size() ? 1.0 : 0.0;
    return r == 0 || r + 1 == stages.size() ? 0.5 : 0.0;
  };
  size_t pace_at = 0;
  for (size_t s = 1; s < ranks.size(); ++s) {
    if (ranks[s].time > ranks[pace_at].time) pace_at = s;
  }
  const Stage& pace = ranks[pace_at];
  // Activations offloaded to the host (one stage: the launch check): each
  // micro-batch copies them out during its forward and back during its
  // backward; what the host link cannot move under that compute shows.
  const double act_dense = ActivationBytesPerLayer(m, k, false);
  const double act_moe = ActivationBytesPerLayer(m, k, true);
  const int offloaded = std::clamp(k.offload_layers, 0, stages[0].layers.count);
  double offload_bytes = 0;
  for (int i = 0; i < offloaded; ++i) offload_bytes += IsMoeLayer(m, i) ? act_moe : act_dense;
  double offload_exposed = 0;
  if (offloaded > 0) {
    const double copy = offload_bytes / (g.host_gbps * 0.8 * 1e9);
    offload_exposed = std::max(0.0, copy - 0.9 * pace.time / 3.0) +
                      std::max(0.0, copy - 0.9 * 2.0 * pace.time / 3.0);
  }
  const double stage_mb = pace.time + offload_exposed;

  // Pipeline point-to-point: activations forward, gradients backward.
  double p2p = 0;
  if (k.pp > 1) {
    const Link l = LinkFor(c, static_cast<int64_t>(k.tp) * k.cp * dp + 1);
    const double bytes = t * h * 2.0 / rep;
    p2p = 2.0 * k.vpp * (bytes / (l.gbps * 1e9) + l.lat_us * 1e-6);
    // DualPipe sends under the other direction's compute; a twentieth shows.
    if (k.dualpipe) p2p *= 0.05;
  }
  // 1F1B: (PP - 1)(F + B), interleaved divided by the virtual stages.
  // DualPipe: (PP/2 - 1)(F&B + B - 3W) with F = W = 1/3 and B = 2/3 of a
  // micro-batch's stage time and F&B the whole of it: 2/3 (PP/2 - 1).
  const double bubble_mbs = k.dualpipe ? (k.pp / 2 - 1) * 2.0 / 3.0
                                       : static_cast<double>(k.pp - 1) / k.vpp;

  // ---- data-parallel gradient sync, sharded state and optimizer, for the
  // stage with the most parameters (its sync ends last)
  const Stage* heavy = &ranks[0];
  for (const Stage& st : ranks) {
    if (st.dense_params + st.expert_params > heavy->dense_params + heavy->expert_params) heavy = &st;
  }
  const double dense_params = heavy->dense_params;
  const double expert_params = heavy->expert_params;
  const int dpc = dp * k.cp;
  const int edp = std::max(1, dpc / k.ep);
  // Sharding groups (HSDP: within shard_group ranks, replicated across).
  const int sg = k.shard_group > 0 ? std::min(k.shard_group, dpc) : dpc;
  const int esg = std::max(1, std::min(sg, edp));
  const int replicas = std::max(1, dpc / sg);
  const int ereplicas = std::max(1, edp / esg);
  const Link dl = GroupLink(c, k.tp, static_cast<int64_t>(k.tp) * k.cp * dp);
  const Link sl = GroupLink(c, k.tp, static_cast<int64_t>(k.tp) * sg);
  const double grad_bytes = 2.0 * (dense_params + expert_params);
  const double bucket = k.bucket_mb * kMB;
  const double n_buckets = std::ceil(grad_bytes / bucket);
  const double coll_lat = 30e-6 + 2.0 * std::ceil(std::log2(std::max(2, dpc))) * dl.lat_us * 1e-6;
  const double bwd_window = 0.85 * (2.0 / 3.0) * stage_mb;  // a micro-batch's backward
  double grad_exposed = 0, param_gather = 0, fsdp_exposed = 0;
  if (zero <= 1) {
    // All-reduce (or, sharded, reduce-scatter) once a step.
    auto sync = [&](double params, int n, const Link& l) {
      const double bytes = 2.0 * params;
      return zero == 1 ? AllGather(bytes, n, l.gbps, 0) : AllReduce(bytes, n, l.gbps, 0);
    };
    double grad_comm;
    if (zero == 1 && replicas > 1) {
      grad_comm = sync(dense_params, sg, sl) + sync(expert_params, esg, sl) +
                  AllReduce(2.0 * dense_params / sg, replicas, dl.gbps, 0) +
                  AllReduce(2.0 * expert_params / esg, ereplicas, dl.gbps, 0);
    } else {
      grad_comm = sync(dense_params, dpc, dl) + sync(expert_params, edp, dl);
    }
    if (dpc > 1) grad_comm += n_buckets * coll_lat;
    grad_exposed = grad_comm;
    if (k.overlap_grad_reduce && dpc > 1) {
      // Reduction runs during the last micro-batch's backward; the last
      // bucket (first layers' gradients) cannot start before it ends.
      const double tail = std::min(grad_bytes, bucket) * 2.0 / (dl.gbps * 1e9) + coll_lat;
      grad_exposed = std::max(tail, grad_comm - bwd_window) + 0.05 * std::min(grad_comm, bwd_window);
    }
  } else {
    // ZeRO-2/3: gradients are reduce-scattered into their shards on every
    // micro-batch's backward (no unsharded buffer accumulates them), then
    // the shards all-reduced across HSDP replicas once a step.
    const double rs = AllGather(grad_bytes, sg, sl.gbps, 0) + n_buckets * coll_lat;
    const double tail = std::min(grad_bytes, bucket) * 2.0 / (sl.gbps * 1e9) + coll_lat;
    double per_mb = rs;
    if (k.overlap_grad_reduce) per_mb = std::max(tail, rs - bwd_window) + 0.05 * std::min(rs, bwd_window);
    grad_exposed = static_cast<double>(micro) * per_mb;
    if (replicas > 1) grad_exposed += AllReduce(grad_bytes / sg, replicas, dl.gbps, 0) + coll_lat;
    if (zero == 3) {
      // FSDP: every layer's weights all-gathered before its forward and
      // again before its backward, one layer prefetched ahead, so only what
      // compute cannot cover, and the first layer's gather, shows.
      const double gather = 2.0 * AllGather(grad_bytes, sg, sl.gbps, 0) +
                             2.0 * pace.layers.count * coll_lat;
      const double compute = 0.9 * stage_mb;
      const double first = AllGather(grad_bytes / std::max(1, pace.layers.count), sg, sl.gbps, 0);
      fsdp_exposed = static_cast<double>(micro) * (std::max(0.0, gather - compute) + first);
    }
  }
  if (zero == 1 || zero == 2) {
    // Updated shards gathered back into whole weights after the step.
    param_gather = AllGather(2.0 * dense_params, std::min(sg, dpc), sl.gbps, 0) +
                   AllGather(2.0 * expert_params, esg, sl.gbps, 0) + n_buckets * coll_lat;
    if (dpc <= 1) param_gather = 0;
    if (k.overlap_param_gather && param_gather > 0) {
      const double window = 0.8 * (1.0 / 3.0) * stage_mb;
      param_gather = std::max(param_gather / n_buckets, param_gather - window);
    }
  }
  const double pipeline = (static_cast<double>(micro) + bubble_mbs) * (stage_mb + p2p) + fsdp_exposed;
  // Under DualPipe a stage's shards spread over both of its copies' ranks.
  const double opt_params = zero >= 1 ? (dense_params / sg + expert_params / esg) /
                                            (k.dualpipe ? 2.0 : 1.0)
                                      : dense_params + expert_params;
  const double optimizer = opt_params * (k.fused_kernels ? 28.0 : 48.0) / hbm + 2e-3;
  const double overhead = 0.025 + 0.3e-3 * static_cast<double>(micro);

  r.step_time_s = pipeline + grad_exposed + param_gather + optimizer + overhead;
  const double tokens = static_cast<double>(gb) * m.seq_len;
  const double model_flops = ModelFlopsPerToken(m) * tokens;
  double hw_flops = model_flops;
  if (k.recompute == Recompute::kFull) hw_flops += model_flops / 3.0;
  if (k.recompute == Recompute::kOp) hw_flops += 0.5 * model_flops / 3.0;
  r.tokens_per_s = tokens / r.step_time_s;
  r.model_tflops_per_gpu = model_flops / r.step_time_s / world / 1e12;
  r.hw_tflops_per_gpu = hw_flops / r.step_time_s / world / 1e12;
  r.mfu = model_flops / (r.step_time_s * world * g.bf16_tflops * 1e12);

  const double mb = static_cast<double>(micro);
  const LayerCost& ps = pace.sum;
  r.phases["compute"] = mb * (3.0 * ps.gemm_f + 3.0 * ps.elem_f + ps.launch) +
                        mb * logits_share(pace_at) * logits_time;
  r.phases["attention"] = mb * (ps.attn_f + ps.attn_b);
  r.phases["recompute"] = mb * ps.recompute;
  r.phases["tp_comm"] = mb * ps.tp_comm;
  r.phases["cp_comm"] = mb * ps.cp_comm;
  r.phases["moe_all_to_all"] = mb * ps.a2a;
  r.phases["pp_bubble"] = bubble_mbs * (stage_mb + p2p);
  r.phases["pp_p2p"] = mb * p2p;
  if (offloaded > 0) r.phases["offload"] = mb * offload_exposed;
  r.phases["dp_comm"] = grad_exposed + param_gather + fsdp_exposed;
  r.phases["optimizer"] = optimizer;
  r.phases["other"] = overhead;

  // ---- memory per GPU: every stage's, the worst is the peak (the first
  // holds the most activations in flight, the last the output layer and
  // logits).
  const int dsh = zero >= 1 ? sg : 1, esh = zero >= 1 ? esg : 1;
  auto state_bytes = [&](double dense, double expert) {
    const double wd = zero >= 3 ? dense / dsh : dense, we = zero >= 3 ? expert / esh : expert;
    const double weights = 2.0 * (wd + we) + (fp8 ? low_copy * (wd + we) : 0.0);
    // fp32 main gradients, or bf16 ones with an fp32 copy in the optimizer.
    const double gb_per = k.grad_reduce_bf16 ? 2.0 : 4.0;
    const double grads = zero >= 2 ? gb_per * (dense / dsh + expert / esh) : gb_per * (dense + expert);
    // fp32 master weights and Adam moments. With bf16 gradients the
    // optimizer also casts its gradients to fp32 at the step (Megatron's
    // optimizers: `main_param.grad = main_grad.float()`), a copy the next
    // step's zero_grad frees before its forward: 4 bytes a parameter that
    // never meet the activations.
    const double owned = zero >= 1 ? dense / dsh + expert / esh : dense + expert;
    const double step_copy = k.grad_reduce_bf16 ? 4.0 * owned : 0.0;
    return std::array<double, 4>{weights, grads, 12.0 * owned, step_copy};
  };
  LaunchKnobs none = k;
  none.recompute = Recompute::kNone;
  const double whole_dense = ActivationBytesPerLayer(m, none, false);
  const double whole_moe = ActivationBytesPerLayer(m, none, true);
  // bf16 logits, their fp32 copy for the loss and its gradient; a fused
  // cross entropy works on the bf16 logits and their gradient, and one
  // that writes the gradient over the logits on them alone.
  const double logit_value_bytes = k.loss_in_place ? 2.0 : k.fused_kernels ? 4.0 : 10.0;
  const double logits = logit_value_bytes * t * static_cast<double>(m.vocab) / tp;
  const double buffers =
      (1.5 + 0.25 * ((k.tp > 1) + (k.pp > 1) + (k.cp > 1) + (k.ep > 1))) * kGiB +
      (k.overlap_grad_reduce ? 2.0 * bucket : 0.0);
  const bool tied_single = m.tied_embeddings && k.pp == 1;
  auto stage_state = [&](int s) {
    const Stage& st = stages[s];
    double dense = st.dense_params - (s == k.pp - 1 ? emb : 0.0);
    if (s == 0) dense += emb;                                     // input embedding
    if (s == k.pp - 1 && !tied_single) dense += emb;              // output layer
    return state_bytes(dense, st.expert_params);
  };
  // One micro-batch's activations on stage s.
  auto stage_act = [&](int s) {
    const Stage& st = stages[s];
    return (st.layers.count - st.moe_layers) * act_dense + st.moe_layers * act_moe;
  };
  double worst = -1;
  for (int s = 0; s < k.pp; ++s) {
    const Stage& st = stages[s];
    auto state = stage_state(s);
    double act = 0;
    if (k.dualpipe) {
      // Both stages' state; what is sharded spreads over both copies' ranks.
      const int q = k.pp - 1 - s;
      const auto other = stage_state(q);
      state[0] = (state[0] + other[0]) / (zero >= 3 ? 2.0 : 1.0);
      state[1] = (state[1] + other[1]) / (zero >= 2 ? 2.0 : 1.0);
      state[2] = (state[2] + other[2]) / (zero >= 1 ? 2.0 : 1.0);
      state[3] = (state[3] + other[3]) / (zero >= 1 ? 2.0 : 1.0);
      // PP + 1 chunks in flight, half of each direction.
      act = 0.5 * (k.pp + 1) * (stage_act(s) + stage_act(q));
    } else {
      // 1F1B: stage s holds min(m, p - s) micro-batches' activations.
      double inflight = k.pp == 1 ? 1.0 : static_cast<double>(std::min<int64_t>(micro, k.pp - s));
      if (k.vpp > 1) inflight *= 1.0 + static_cast<double>(k.pp - 1) / (k.pp * k.vpp);
      act = stage_act(s) * inflight;
      if (s == 0 && offloaded > 0) {
        // Offloaded layers stay resident only while copied: the one going
        // out and the one coming back.
        act -= offload_bytes * inflight;
        act += std::min(offloaded, 2) * offload_bytes / offloaded;
      }
    }
    if (k.recompute == Recompute::kFull) {
      // Recomputing one layer needs its whole working set again.
      act += st.moe_layers > 0 ? whole_moe : whole_dense;
    }
    if (!k.flash_attn) {
      // The fp32 softmax workspace of the layer being computed.
      act += static_cast<double>(k.micro_batch) * (m.heads / tp) * s_q * m.seq_len * 4.0;
    }
    double transient = 0;
    if (zero >= 2 && st.layers.count > 0) {
      // A layer's unsharded gradients before their reduce-scatter; FSDP
      // also holds two layers' gathered weights (one prefetched).
      const double layer = (st.dense_params - (s == k.pp - 1 ? emb : 0.0) + st.expert_params) /
                           st.layers.count;
      transient = layer * (k.grad_reduce_bf16 ? 2.0 : 4.0) + (zero == 3 ? 2.0 * 2.0 * layer : 0.0);
    }
    const double logit_bytes = logits_share(s) > 0 ? 1.07 * logits : 0.0;
    // The peak is in forward and backward or, with little activation
    // memory, at the optimizer step.
    const double states = state[0] + state[1] + state[2];
    const double during = states + 1.07 * act + logit_bytes + buffers + transient;
    const double at_step = states + state[3] + buffers;
    const bool step_peak = at_step > during;
    const double total = std::max(during, at_step);
    if (total > worst) {
      worst = total;
      r.memory.weights_gib = state[0] / kGiB;
      r.memory.grads_gib = state[1] / kGiB;
      r.memory.optimizer_gib = state[2] / kGiB;
      r.memory.optimizer_step_gib = state[3] / kGiB;
      r.memory.activations_gib = step_peak ? 0.0 : 1.07 * act / kGiB;
      r.memory.logits_gib = step_peak ? 0.0 : logit_bytes / kGiB;
      r.memory.buffers_gib = (buffers + (step_peak ? state[3] : transient)) / kGiB;
    }
  }
  r.memory.total_gib = worst / kGiB;
  r.peak_mem_gib = r.memory.total_gib;
  if (r.peak_mem_gib > g.memory_gib) {
    r.status = Status::kOom;
    r.message = Fmt(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a "
        "total capacity of %.2f GiB (simulated peak %.1f GiB)",
        std::min(r.peak_mem_gib - g.memory_gib + 0.5, r.memory.activations_gib + 0.5),
        g.memory_gib, r.peak_mem_gib);
  }
  return r;
}

double StartupS(const ModelShape& m, const ClusterShape& c) {
  const ParamCounts pc = CountParams(m);
  return 20.0 + 3.0 * std::log2(std::max(1, c.world())) + 2.0 * pc.total / std::max(1, c.world()) / 2e9;
}

Measurement MeasureTrial(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k,
                         int warmup_steps, int timed_steps, uint64_t trial_seed,
                         int64_t trial_index) {
  Measurement out;
  out.truth = Simulate(m, c, k);
  out.status = out.truth.status;
  out.message = out.truth.message;
  const double startup = StartupS(m, c);
  if (out.status == Status::kLauncherError) {
    out.wall_s = 8.0;  // argument validation fails before any GPU work
    return out;
  }
  std::mt19937_64 rng(c.seed * 0x9e3779b97f4a7c15ULL ^ (trial_seed + 0x632be59bd9b4e019ULL));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  out.peak_mem_gib = out.truth.peak_mem_gib;
  if (out.status == Status::kOom) {
    // Detected at the first step, like a real run.
    out.wall_s = startup + 0.5 * out.truth.step_time_s;
    return out;
  }
  const double launch = std::exp(c.noise_cv * normal(rng));
  const double drift = 1.0 + c.drift_pct / 100.0 * static_cast<double>(trial_index) / 100.0;
  const int64_t gb = k.global_batch_override > 0 ? k.global_batch_override : m.global_batch;
  const int64_t tokens = gb * m.seq_len;
  // Losses depend on the data only: the same seed and tokens per step give
  // the same trajectory for every honest setting.
  std::mt19937_64 data(c.seed * 1000003ULL + static_cast<uint64_t>(tokens));
  std::mt19937_64 numerics(trial_seed * 7919ULL + 17);
  // One distribution per generator: a distribution caches values between
  // calls, which would leak launch noise into the data's loss noise.
  std::normal_distribution<double> data_normal(0.0, 1.0), numerics_normal(0.0, 1.0);
  double wall = startup;
  for (int i = 0; i < warmup_steps + timed_steps; ++i) {
    StepSample s;
    s.step = i;
    s.warmup = i < warmup_steps;
    s.tokens = tokens;
    double f = launch * drift * (1.0 + 0.25 * c.noise_cv * normal(rng));
    if (uniform(rng) < c.straggler_prob) f *= 1.0 + c.straggler_slowdown;
    if (s.warmup) f *= 1.8;  // allocator and autotuning warm-up
    s.step_time_s = out.truth.step_time_s * f;
    for (const auto& [name, secs] : out.truth.phases) s.phases[name] = secs * f;
    const double progress = static_cast<double>(i + 1) * tokens / 4e6;
    double loss = 2.3 + 8.6 * std::exp(-progress) + 0.02 * data_normal(data);
    loss += 1e-4 * numerics_normal(numerics);  // bf16 reduction order
    // fp8 and mxfp8 drift slightly, nvfp4 more.
    if (k.precision == Precision::kFp8 || k.precision == Precision::kMxfp8) loss += 1.5e-3 * (i + 1);
    if (k.precision == Precision::kNvfp4) loss += 3e-3 * (i + 1);
    // Dropped tokens train the experts on less: the lower the capacity,
    // the more dropped (any capacity drops some).
    if (k.capacity_factor > 0) loss += 2e-3 + 0.02 * std::max(0.0, 1.5 - k.capacity_factor);
    s.loss = loss;
    wall += s.step_time_s;
    out.steps.push_back(std::move(s));
  }
  out.wall_s = wall;
  return out;
}

}  // namespace infrarsi::models::sim
