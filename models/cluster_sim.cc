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

const std::vector<GpuSpec>& Catalog() {
  // Dense peaks from the vendor datasheets; usable memory as the CUDA
  // allocator reports it (the measured H200 landscape: 139.8 GiB). The GEMM
  // efficiency is what large training GEMMs sustain: Hopper parts run into
  // their power limit well below the datasheet clock.
  static const std::vector<GpuSpec> gpus = {
      {"A100-40GB", 312, 0, 39.4, 1.555, 0.82},
      {"A100-80GB", 312, 0, 79.2, 2.039, 0.82},
      {"H100", 989, 1979, 79.1, 3.35, 0.60},
      {"H200", 989, 1979, 139.8, 4.8, 0.62},
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

// A group of `span` consecutive ranks stays inside one node when it fits.
// NCCL reaches about 80% of the link's bandwidth.
Link LinkFor(const ClusterShape& c, int64_t span) {
  if (span <= c.gpus_per_node) return {c.nvlink_gbps * 0.8, c.nvlink_latency_us};
  return {c.net_gbps * 0.8, c.net_latency_us};
}

// A collective over ranks `stride` apart spanning `span` ranks: across
// nodes, NCCL runs one ring per rail, so the group's members in a node
// (gpus_per_node / stride of them) send through that many NICs at once,
// up to NVLink's bandwidth (nccl-tests' multi-node bus bandwidth on DGX
// nodes: several times one NIC's when the whole node is in the group).
Link GroupLink(const ClusterShape& c, int64_t stride, int64_t span) {
  if (span <= c.gpus_per_node) return LinkFor(c, span);
  const double members = std::max<int64_t>(1, c.gpus_per_node / std::max<int64_t>(1, stride));
  return {std::min(c.nvlink_gbps, members * c.net_gbps) * 0.8, c.net_latency_us};
}

std::string LauncherCheck(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k,
                          int64_t gb) {
  char buf[512];
  const int world = c.world();
  if (k.tp < 1 || k.pp < 1 || k.cp < 1 || k.ep < 1 || k.micro_batch < 1 || k.vpp < 1) {
    return "AssertionError: parallel sizes and micro_batch must be >= 1";
  }
  if (world % (k.tp * k.pp * k.cp) != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: world size (%d) is not divisible by tensor_model_parallel_size "
                  "(%d) x pipeline_model_parallel_size (%d) x context_parallel_size (%d)",
                  world, k.tp, k.pp, k.cp);
    return buf;
  }
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  if (m.heads % k.tp != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: num_attention_heads (%d) must be a multiple of "
                  "tensor_model_parallel_size (%d)",
                  m.heads, k.tp);
    return buf;
  }
  if (kv % k.tp != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: num_query_groups (%d) must be a multiple of "
                  "tensor_model_parallel_size (%d)",
                  kv, k.tp);
    return buf;
  }
  if (m.layers % k.pp != 0) {
    std::snprintf(buf, sizeof(buf),
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
    if ((m.layers / k.pp) % k.vpp != 0) {
      std::snprintf(buf, sizeof(buf),
                    "AssertionError: number of layers per pipeline stage (%d) must be divisible "
                    "by virtual_pipeline_model_parallel_size (%d)",
                    m.layers / k.pp, k.vpp);
      return buf;
    }
  }
  const int dp = world / (k.tp * k.pp * k.cp);
  if (gb % (static_cast<int64_t>(k.micro_batch) * dp) != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: global batch size (%lld) is not divisible by micro batch size "
                  "(%d) times data parallel size (%d)",
                  static_cast<long long>(gb), k.micro_batch, dp);
    return buf;
  }
  const int64_t micro = gb / (static_cast<int64_t>(k.micro_batch) * dp);
  if (k.vpp > 1 && micro % k.pp != 0) {
    std::snprintf(buf, sizeof(buf),
                  "RuntimeError: number of microbatches (%lld) is not divisible by "
                  "pipeline-model-parallel-size (%d) when using interleaved schedule",
                  static_cast<long long>(micro), k.pp);
    return buf;
  }
  if (k.ep > 1 && m.experts == 0) {
    return "AssertionError: expert_model_parallel_size > 1 requires num_experts (a MoE model)";
  }
  if (m.experts > 0 && m.experts % k.ep != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: num_experts (%d) must be divisible by "
                  "expert_model_parallel_size (%d)",
                  m.experts, k.ep);
    return buf;
  }
  if (k.ep > 1 && (dp * k.cp) % k.ep != 0) {
    std::snprintf(buf, sizeof(buf),
                  "AssertionError: data_parallel_size x context_parallel_size (%d) must be "
                  "divisible by expert_model_parallel_size (%d)",
                  dp * k.cp, k.ep);
    return buf;
  }
  if (k.cp > 1 && m.seq_len % (2 * k.cp) != 0) {
    std::snprintf(buf, sizeof(buf),
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
  if (k.overlap_param_gather && !k.dist_opt) {
    return "AssertionError: --overlap-param-gather only supported with "
           "--use-distributed-optimizer";
  }
  if (k.bucket_mb <= 0) return "AssertionError: --ddp-bucket-size must be positive";
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
      "flash_attn", "global_batch_override"};
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
  if (name == "bucket_mb") {
    char* end = nullptr;
    const double d = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(d > 0) || d > 1e5) {
      *error = name + ": expected a positive number of MB, got '" + value + "'";
      return false;
    }
    k->bucket_mb = d;
    return true;
  }
  if (name == "recompute") {
    if (value == "none") k->recompute = Recompute::kNone;
    else if (value == "selective") k->recompute = Recompute::kSelective;
    else if (value == "full") k->recompute = Recompute::kFull;
    else {
      *error = name + ": expected none, selective or full, got '" + value + "'";
      return false;
    }
    return true;
  }
  if (name == "precision") {
    if (value == "bf16") k->precision = Precision::kBf16;
    else if (value == "fp8") k->precision = Precision::kFp8;
    else {
      *error = name + ": expected bf16 or fp8, got '" + value + "'";
      return false;
    }
    return true;
  }
  if (name == "dist_opt") return as_bool(&k->dist_opt);
  if (name == "grad_reduce_bf16") return as_bool(&k->grad_reduce_bf16);
  if (name == "seq_par") return as_bool(&k->seq_par);
  if (name == "overlap_grad_reduce") return as_bool(&k->overlap_grad_reduce);
  if (name == "overlap_param_gather") return as_bool(&k->overlap_param_gather);
  if (name == "fused_kernels") return as_bool(&k->fused_kernels);
  if (name == "flash_attn") return as_bool(&k->flash_attn);
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

ParamCounts CountParams(const ModelShape& m) {
  ParamCounts p;
  const double h = m.hidden;
  const double kv = (m.kv_heads > 0 ? m.kv_heads : m.heads) * (h / m.heads);
  const double mats = m.swiglu ? 3.0 : 2.0;
  const double attn = h * (h + 2 * kv) + h * h;
  const double norms = 2 * h;
  if (m.experts > 0) {
    p.per_layer_dense = attn + norms + h * m.experts;  // router
    p.per_layer_expert = m.experts * mats * h * m.expert_ffn;
  } else {
    p.per_layer_dense = attn + norms + mats * h * m.ffn;
  }
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

double TextbookMemoryGib(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  const ParamCounts p = CountParams(m);
  const int tp = std::max(k.tp, 1), pp = std::max(k.pp, 1), cp = std::max(k.cp, 1);
  const int ep = std::max(k.ep, 1);
  const int dp = std::max(1, c.world() / (tp * pp * cp));
  const double layers = static_cast<double>(m.layers) / pp;
  const double params =
      (p.embedding / 2 + layers * (p.per_layer_dense + p.per_layer_expert / ep)) / tp;
  const double state = params * (k.grad_reduce_bf16 ? (k.dist_opt ? 4.0 + 16.0 / dp : 20.0)
                                                    : (k.dist_opt ? 6.0 + 12.0 / dp : 18.0));
  const double s = static_cast<double>(m.seq_len) / cp, b = k.micro_batch, h = m.hidden;
  double act;
  if (k.recompute == Recompute::kFull) {
    act = 2.0 * s * b * h;
  } else {
    act = 34.0 * s * b * h / (k.seq_par ? tp : 1);
    if (!k.flash_attn && k.recompute == Recompute::kNone) act += 5.0 * m.heads * s * s * b / tp;
  }
  return (state + act * layers * pp) / (1024.0 * 1024.0 * 1024.0);
}

double TextbookStepTimeS(const ModelShape& m, const ClusterShape& c, const LaunchKnobs& k) {
  const GpuSpec& g = c.gpu;
  const int tp = std::max(k.tp, 1), pp = std::max(k.pp, 1), cp = std::max(k.cp, 1);
  const int ep = std::max(k.ep, 1), vpp = std::max(k.vpp, 1), mb = std::max(k.micro_batch, 1);
  const int world = std::max(c.world(), 1);
  const int dp = std::max(1, world / (tp * pp * cp));
  const double tokens = static_cast<double>(m.global_batch) * m.seq_len;
  const double peak =
      (k.precision == Precision::kFp8 && g.fp8_tflops > 0 ? g.fp8_tflops : g.bf16_tflops) * 1e12 *
      g.gemm_efficiency;
  double flops = ModelFlopsPerToken(m);
  const double attention = 12.0 * m.layers * static_cast<double>(m.hidden) * m.seq_len;
  if (k.recompute == Recompute::kFull) flops *= 4.0 / 3.0;
  if (k.recompute == Recompute::kSelective) flops += attention / 3.0;
  const double micro = std::max(1.0, static_cast<double>(m.global_batch) / (mb * dp));
  const double bubble = 1.0 + static_cast<double>(pp - 1) / (micro * vpp);
  double time = flops * tokens / world / peak * bubble;
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
    time += layer_steps * 4.0 * (ep - 1) / ep * layer_bytes * std::max(m.topk, 1) / tp /
            bw(static_cast<int64_t>(tp) * cp * ep);
  }
  if (dp * cp > 1 && !k.overlap_grad_reduce) {
    const ParamCounts p = CountParams(m);
    const double params = (p.embedding / 2 + m.layers * (p.per_layer_dense + p.per_layer_expert / ep)) /
                          (tp * pp);
    time += 2.0 * (dp * cp - 1) / (dp * cp) * 2.0 * params / bw(static_cast<int64_t>(world));
  }
  return time;
}

double ModelFlopsPerToken(const ModelShape& m) {
  const ParamCounts p = CountParams(m);
  // 6 per parameter per token through every layer, the output layer's
  // matmul, and attention scores (non-causal count, as MFU conventions do).
  const double layer_params = p.active - p.embedding;
  return 6.0 * layer_params + 6.0 * static_cast<double>(m.vocab) * m.hidden +
         12.0 * m.layers * static_cast<double>(m.hidden) * m.seq_len;
}

double ActivationBytesPerLayer(const ModelShape& m, const LaunchKnobs& k) {
  // Korthikanti et al. 2022, section 4, term by term, for t tokens of one
  // micro-batch on this rank (sequence split by CP).
  const double t = static_cast<double>(k.micro_batch) * m.seq_len / k.cp;
  const double h = m.hidden;
  const double a = m.heads;
  const double kv = (m.kv_heads > 0 ? m.kv_heads : m.heads) * (h / m.heads);
  const double tp = k.tp;
  // With sequence parallelism the parts TP would replicate are split too.
  const double rep = (k.seq_par && k.tp > 1) ? tp : 1.0;
  const double drop = m.dropout ? 1.0 : 0.0;
  const double s_keys = m.seq_len;  // each query attends to the whole sequence
  const bool fp8 = k.precision == Precision::kFp8;
  // fp8 keeps GEMM inputs in 1 byte (Transformer Engine stores fp8 copies).
  const double gemm_in = fp8 ? 1.0 : 2.0;

  if (k.recompute == Recompute::kFull) return 2.0 * t * h / rep;  // the layer input

  double attn = 0;
  attn += gemm_in * t * h / rep;                  // QKV matmul input
  attn += 2.0 * t * (h + 2 * kv) / tp;            // Q, K, V
  attn += gemm_in * t * h / tp;                   // output projection input
  attn += drop * t * h / rep;                     // attention output dropout mask
  if (!k.flash_attn && k.recompute != Recompute::kSelective) {
    // softmax output; with dropout also its mask and output.
    attn += (2.0 + drop * 3.0) * a * t * s_keys / tp;
  } else if (k.flash_attn) {
    attn += 4.0 * a * t / tp;  // log-sum-exp statistics
  }
  double mlp = 0;
  if (m.experts > 0) {
    const double tk = t * m.topk * 1.12;  // routed tokens, with imbalance
    const double mats = m.swiglu ? 3.0 : 2.0;
    mlp += gemm_in * t * h / rep;             // router / MLP input
    mlp += 2.0 * 2.0 * tk * h / rep;          // dispatched and combined tokens
    mlp += (mats == 3.0 ? 6.0 : 4.0) * tk * m.expert_ffn / tp;
    mlp += drop * t * h / rep;
  } else {
    mlp += gemm_in * t * h / rep;  // first linear input
    // GeLU: its input and output (2+2 bytes per element of ffn); SwiGLU:
    // gate and up outputs and their product.
    mlp += (m.swiglu ? 6.0 : 4.0) * t * m.ffn / tp;
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
  const double kvd = (m.kv_heads > 0 ? m.kv_heads : m.heads) * (h / m.heads);
  const double t = static_cast<double>(k.micro_batch) * m.seq_len / k.cp;  // tokens per rank
  const double s_q = static_cast<double>(m.seq_len) / k.cp;
  const double tp = k.tp;
  const double rep = (k.seq_par && k.tp > 1) ? tp : 1.0;
  const double mats = m.swiglu ? 3.0 : 2.0;
  const bool fp8 = k.precision == Precision::kFp8;
  const double hbm = g.hbm_tbps * 1e12 * 0.75;  // achievable streaming bandwidth
  const ParamCounts pc = CountParams(m);
  const int layers_stage = m.layers / k.pp;

  // ---- compute per layer per micro-batch (seconds)
  // fp8 GEMMs reach the same share of their doubled peak as bf16 ones of
  // theirs: NeMo's fp8 recipes on H100 (tests/models/nemo_perf.h) land
  // within 10% so; at 0.75 of it, the simulator was 8-27% slow on them.
  const double peak = (fp8 ? g.fp8_tflops : g.bf16_tflops) * 1e12;
  auto gemm_eff = [&](double rows, double cols) {
    return g.gemm_efficiency * Sat(rows, 192) * Sat(cols, 256);
  };
  const double attn_proj_flops = 2.0 * t * (h * (h + 2 * kvd) + h * h) / tp;
  double gemm_f = attn_proj_flops / (peak * gemm_eff(t, h / tp));
  double moe_a2a = 0;
  if (m.experts > 0) {
    const double tk = t * m.topk;
    const double per_expert_rows = tk * k.ep / m.experts;
    // Router load imbalance makes the busiest expert rank the one to wait for;
    // grouped GEMMs run below dense GEMM efficiency.
    const double expert_flops = 2.0 * tk * mats * h * m.expert_ffn / tp * 1.2;
    gemm_f += expert_flops / (peak * gemm_eff(per_expert_rows, m.expert_ffn / tp) * 0.75);
    gemm_f += 2.0 * t * h * m.experts / (peak * 0.2);  // router
    // Token permutation and un-permutation around the experts.
    gemm_f += (k.fused_kernels ? 4.0 : 8.0) * tk * h * 2.0 / rep / hbm;
    if (k.ep > 1) {
      const Link l = LinkFor(c, static_cast<int64_t>(k.tp) * k.cp * k.ep);
      const double bytes = tk * h * 2.0 / rep;
      const double one = bytes * (k.ep - 1) / k.ep / (l.gbps * 1e9) + (k.ep - 1) * l.lat_us * 1e-6;
      moe_a2a = 4.0 * one;  // dispatch + combine, forward and backward
    }
  } else {
    gemm_f += 2.0 * t * mats * h * m.ffn / tp / (peak * gemm_eff(t, m.ffn / tp));
  }
  // Attention scores and values.
  const double attn_flops = 4.0 * k.micro_batch * s_q * m.seq_len * h / tp;
  double attn_f, attn_b;
  if (k.flash_attn) {
    // Causal flash attention skips the masked half.
    const double eff = 0.42 * (g.gemm_efficiency / 0.6) * Sat(s_q, 512);
    attn_f = 0.5 * attn_flops / (g.bf16_tflops * 1e12 * eff);
    attn_b = 2.5 * attn_f;
  } else {
    const double score_bytes = static_cast<double>(k.micro_batch) * (m.heads / tp) * s_q *
                               m.seq_len * 2.0;
    const double passes = m.dropout ? 6.0 : 4.0;
    attn_f = attn_flops / (g.bf16_tflops * 1e12 * 0.45 * g.gemm_efficiency) +
             passes * score_bytes / hbm;
    attn_b = 2.0 * attn_f;
  }
  // Memory-bound element-wise work: norms, residuals, activations, casts.
  const double passes_h = k.fused_kernels ? 8.0 : 20.0;
  const double passes_f = (k.fused_kernels ? 3.0 : 6.0) * (m.swiglu ? 1.5 : 1.0);
  const double ffn_width = m.experts > 0 ? m.topk * m.expert_ffn : m.ffn;
  double elem_f = (passes_h * t * h * 2.0 / rep + passes_f * t * ffn_width * 2.0 / tp) / hbm;
  if (fp8) elem_f += 4.0 * (t * h / rep + t * ffn_width / tp) / hbm;  // casts, amax
  // Tensor-parallel collectives: 2 forward, 2 backward per layer.
  double tp_comm = 0;
  if (k.tp > 1) {
    const Link l = LinkFor(c, k.tp);
    const double bytes = t * h * 2.0;
    const double one = AllReduce(bytes, k.tp, l.gbps, l.lat_us);
    // Fused kernels with sequence parallelism overlap TP communication
    // with the GEMMs (Transformer Engine's userbuffers).
    const double exposed = (k.fused_kernels && k.seq_par) ? 0.35 : 1.0;
    tp_comm = 4.0 * one * exposed;
    if (k.recompute == Recompute::kFull) tp_comm *= 1.5;
  }
  // Context parallelism: ring exchange of K and V, hidden behind attention.
  double cp_comm = 0;
  if (k.cp > 1) {
    const Link l = LinkFor(c, static_cast<int64_t>(k.tp) * k.cp);
    const double kv_bytes = t * 2.0 * kvd * 2.0 / tp;
    const double comm = 3.0 * (k.cp - 1) * kv_bytes / (l.gbps * 1e9) +
                        3.0 * (k.cp - 1) * l.lat_us * 1e-6;
    cp_comm = std::max(0.0, comm - 0.8 * (attn_f + attn_b));
  }
  double recompute = 0;
  if (k.recompute == Recompute::kFull) {
    recompute = gemm_f + attn_f + elem_f;
  } else if (k.recompute == Recompute::kSelective) {
    recompute = attn_f;
  }
  // Kernel launches: small micro-batches cannot hide them.
  const double launch = k.fused_kernels ? 0.25e-3 : 0.5e-3;
  const double layer_time = 3.0 * gemm_f + attn_f + attn_b + 3.0 * elem_f + recompute +
                            tp_comm + cp_comm + moe_a2a + launch;

  // Output layer and loss on the last stage.
  const double logit_flops = 2.0 * t * h * static_cast<double>(m.vocab) / tp;
  const double logits_time = 3.0 * logit_flops / (peak * gemm_eff(t, h)) +
                             6.0 * t * static_cast<double>(m.vocab) / tp * 4.0 / hbm;
  double stage_mb = layers_stage * layer_time + logits_time;
  // Pipeline point-to-point: activations forward, gradients backward.
  double p2p = 0;
  if (k.pp > 1) {
    const Link l = LinkFor(c, static_cast<int64_t>(k.tp) * k.cp * dp + 1);
    const double bytes = t * h * 2.0 / rep;
    p2p = 2.0 * k.vpp * (bytes / (l.gbps * 1e9) + l.lat_us * 1e-6);
  }
  const double bubble_mbs = static_cast<double>(k.pp - 1) / k.vpp;
  const double pipeline = (static_cast<double>(micro) + bubble_mbs) * (stage_mb + p2p);

  // ---- data-parallel gradient sync and optimizer, for the last stage
  const double dense_params = layers_stage * pc.per_layer_dense / tp +
                              static_cast<double>(m.vocab) * h / tp;
  const double expert_params = layers_stage * pc.per_layer_expert / (tp * k.ep);
  const int dpc = dp * k.cp;
  const int edp = std::max(1, dpc / k.ep);
  const Link dl = GroupLink(c, k.tp, static_cast<int64_t>(k.tp) * k.cp * dp);
  const double grad_bytes = 2.0 * (dense_params + expert_params);
  const double bucket = k.bucket_mb * kMB;
  const double n_buckets = std::ceil(grad_bytes / bucket);
  const double coll_lat = 30e-6 + 2.0 * std::ceil(std::log2(std::max(2, dpc))) * dl.lat_us * 1e-6;
  auto sync = [&](double params, int n) {
    const double bytes = 2.0 * params;
    return k.dist_opt ? AllGather(bytes, n, dl.gbps, 0) : AllReduce(bytes, n, dl.gbps, 0);
  };
  double grad_comm = sync(dense_params, dpc) + sync(expert_params, edp);
  if (dpc > 1) grad_comm += n_buckets * coll_lat;
  double grad_exposed = grad_comm;
  if (k.overlap_grad_reduce && dpc > 1) {
    // Reduction runs during the last micro-batch's backward; the last
    // bucket (first layers' gradients) cannot start before it ends.
    const double window = 0.85 * (2.0 / 3.0) * stage_mb;
    const double tail = std::min(grad_bytes, bucket) * 2.0 / (dl.gbps * 1e9) + coll_lat;
    grad_exposed = std::max(tail, grad_comm - window) + 0.05 * std::min(grad_comm, window);
  }
  double param_gather = 0;
  if (k.dist_opt && dpc > 1) {
    param_gather = AllGather(2.0 * dense_params, dpc, dl.gbps, 0) +
                   AllGather(2.0 * expert_params, edp, dl.gbps, 0) + n_buckets * coll_lat;
    if (k.overlap_param_gather) {
      const double window = 0.8 * (1.0 / 3.0) * stage_mb;
      param_gather = std::max(param_gather / n_buckets, param_gather - window);
    }
  }
  const double opt_params =
      k.dist_opt ? dense_params / dpc + expert_params / edp : dense_params + expert_params;
  const double optimizer = opt_params * (k.fused_kernels ? 28.0 : 48.0) / hbm + 2e-3;
  const double overhead = 0.025 + 0.3e-3 * static_cast<double>(micro);

  r.step_time_s = pipeline + grad_exposed + param_gather + optimizer + overhead;
  const double tokens = static_cast<double>(gb) * m.seq_len;
  const double model_flops = ModelFlopsPerToken(m) * tokens;
  double hw_flops = model_flops;
  if (k.recompute == Recompute::kFull) hw_flops += model_flops / 3.0;
  r.tokens_per_s = tokens / r.step_time_s;
  r.model_tflops_per_gpu = model_flops / r.step_time_s / world / 1e12;
  r.hw_tflops_per_gpu = hw_flops / r.step_time_s / world / 1e12;
  r.mfu = model_flops / (r.step_time_s * world * g.bf16_tflops * 1e12);

  const double mb = static_cast<double>(micro);
  r.phases["compute"] = mb * layers_stage * (3.0 * gemm_f + 3.0 * elem_f + launch) + mb * logits_time;
  r.phases["attention"] = mb * layers_stage * (attn_f + attn_b);
  r.phases["recompute"] = mb * layers_stage * recompute;
  r.phases["tp_comm"] = mb * layers_stage * tp_comm;
  r.phases["cp_comm"] = mb * layers_stage * cp_comm;
  r.phases["moe_all_to_all"] = mb * layers_stage * moe_a2a;
  r.phases["pp_bubble"] = bubble_mbs * (stage_mb + p2p);
  r.phases["pp_p2p"] = mb * p2p;
  r.phases["dp_comm"] = grad_exposed + param_gather;
  r.phases["optimizer"] = optimizer;
  r.phases["other"] = overhead;

  // ---- memory per GPU: the worse of the first stage (most activations in
  // flight) and the last (output layer and logits).
  const double layer_params = layers_stage * (pc.per_layer_dense / tp);
  const double emb = static_cast<double>(m.vocab) * h / tp;
  const double exp_params = expert_params;
  auto state_bytes = [&](double dense, double expert) {
    const double weights = 2.0 * (dense + expert) + (fp8 ? 1.0 * (dense + expert) : 0.0);
    // fp32 main gradients, or bf16 ones with an fp32 copy in the optimizer.
    const double grads = (k.grad_reduce_bf16 ? 2.0 : 4.0) * (dense + expert);
    const double per = k.grad_reduce_bf16 ? 16.0 : 12.0;
    const double opt = k.dist_opt ? per * (dense / dpc + expert / edp) : per * (dense + expert);
    return std::array<double, 3>{weights, grads, opt};
  };
  const double act_layer = ActivationBytesPerLayer(m, k);
  double inflight = k.pp == 1 ? 1.0 : static_cast<double>(std::min<int64_t>(micro, k.pp));
  if (k.vpp > 1) inflight *= 1.0 + static_cast<double>(k.pp - 1) / (k.pp * k.vpp);
  double act_first = act_layer * layers_stage * inflight;
  double act_last = act_layer * layers_stage;
  if (k.recompute == Recompute::kFull) {
    // Recomputing one layer needs its whole working set again.
    LaunchKnobs none = k;
    none.recompute = Recompute::kNone;
    const double one = ActivationBytesPerLayer(m, none);
    act_first += one;
    act_last += one;
  }
  if (!k.flash_attn) {
    // The fp32 softmax workspace of the layer being computed.
    const double ws = static_cast<double>(k.micro_batch) * (m.heads / tp) * s_q * m.seq_len * 4.0;
    act_first += ws;
    act_last += ws;
  }
  const double logits = 10.0 * t * static_cast<double>(m.vocab) / tp;  // bf16 + fp32 + grad
  const double buffers =
      (1.5 + 0.25 * ((k.tp > 1) + (k.pp > 1) + (k.cp > 1) + (k.ep > 1))) * kGiB +
      (k.overlap_grad_reduce ? 2.0 * bucket : 0.0);
  const bool tied_single = m.tied_embeddings && k.pp == 1;
  const auto first = state_bytes(layer_params + emb, exp_params);
  const auto last = state_bytes(layer_params + (k.pp == 1 ? (tied_single ? 0 : emb) : emb), exp_params);
  const double first_total = first[0] + first[1] + first[2] + 1.07 * act_first +
                             (k.pp == 1 ? 1.07 * logits : 0.0) + buffers;
  const double last_total = last[0] + last[1] + last[2] + 1.07 * (act_last + logits) + buffers;
  const bool first_worse = first_total >= last_total;
  const auto& st = first_worse ? first : last;
  r.memory.weights_gib = st[0] / kGiB;
  r.memory.grads_gib = st[1] / kGiB;
  r.memory.optimizer_gib = st[2] / kGiB;
  r.memory.activations_gib = 1.07 * (first_worse ? act_first : act_last) / kGiB;
  r.memory.logits_gib = (first_worse ? (k.pp == 1 ? 1.07 * logits : 0.0) : 1.07 * logits) / kGiB;
  r.memory.buffers_gib = buffers / kGiB;
  r.memory.total_gib = std::max(first_total, last_total) / kGiB;
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
    if (k.precision == Precision::kFp8) loss += 1.5e-3 * (i + 1);  // fp8 drifts slightly
    s.loss = loss;
    wall += s.step_time_s;
    out.steps.push_back(std::move(s));
  }
  out.wall_s = wall;
  return out;
}

}  // namespace infrarsi::models::sim
