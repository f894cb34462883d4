#include "core/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "core/derived.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/patch_scope.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {
namespace {

constexpr int32_t kMaxTrialsLimit = 100000;
constexpr int32_t kMaxKnobs = 64;
constexpr int32_t kMaxValuesPerKnob = 256;
constexpr int32_t kMaxPatches = 16;

absl::Status FieldError(const std::string& field, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", msg));
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// Refuses keys of `node` (a map) outside `allowed`.
absl::Status CheckKeys(const YAML::Node& node, const std::string& field,
                       const std::set<std::string>& allowed) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      return FieldError(Join(field, key),
                        absl::StrCat("unknown field (expected one of: ",
                                     absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<YAML::Node> RequireMap(const YAML::Node& parent, const std::string& key,
                                      const std::string& field, bool required) {
  YAML::Node n = parent[key];
  if (!n || n.IsNull()) {
    if (required) return FieldError(field, "is required");
    return YAML::Node();
  }
  if (!n.IsMap()) return FieldError(field, "must be a mapping");
  return n;
}

absl::StatusOr<std::string> RequireString(const YAML::Node& parent, const std::string& key,
                                          const std::string& field) {
  YAML::Node n = parent[key];
  if (!n || n.IsNull()) return FieldError(field, "is required");
  if (!n.IsScalar()) return FieldError(field, "must be a string");
  std::string v = n.Scalar();
  if (v.empty()) return FieldError(field, "must not be empty");
  return v;
}

absl::StatusOr<int64_t> ReadInt(const YAML::Node& parent, const std::string& key,
                                const std::string& field, int64_t lo, int64_t hi,
                                std::optional<int64_t> dflt) {
  YAML::Node n = parent[key];
  if (!n || n.IsNull()) {
    if (dflt) return *dflt;
    return FieldError(field, "is required");
  }
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    return FieldError(field, absl::StrCat("must be an integer, got '",
                                          n.IsScalar() ? n.Scalar() : "<non-scalar>", "'"));
  }
  if (v < lo || v > hi) {
    return FieldError(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  }
  return v;
}

absl::StatusOr<double> ReadDouble(const YAML::Node& parent, const std::string& key,
                                  const std::string& field, double lo, double hi, double dflt) {
  YAML::Node n = parent[key];
  if (!n || n.IsNull()) return dflt;
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    return FieldError(field, "must be a number");
  }
  if (v < lo || v > hi) {
    return FieldError(field, absl::StrFormat("must be in [%g, %g], got %g", lo, hi, v));
  }
  return v;
}

// Knob values keep their YAML text, with booleans in one spelling so that
// `true` in the knob list and `True` in the baseline agree.
std::string NormalizeScalar(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return "true";
  if (s == "false" || s == "False" || s == "FALSE") return "false";
  return s;
}

// Whether `name` is a knob the simulator reads (models::sim::KnobNames).
bool IsSimulatorKnob(const std::string& name) {
  const std::vector<std::string>& names = models::sim::KnobNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool ValidIdentifier(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  if (!(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '_')) return false;
  }
  return true;
}

absl::StatusOr<std::string> ResolvePath(const std::string& path, const std::string& field,
                                        const SpecParseOptions& options) {
  std::filesystem::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  if (options.spec_dir.empty()) {
    return FieldError(field, absl::StrCat("relative path '", path,
                                          "' needs the spec's folder (spec_dir) to resolve"));
  }
  return (std::filesystem::path(options.spec_dir) / p).lexically_normal().string();
}

// The content the submitter sent for a file the spec names at `field`.
// The server reads no path a spec names: a missing one is refused, unless
// the spec is a stored one being re-loaded (null: the caller keeps what it
// froze at Init).
absl::StatusOr<const std::string*> SentFile(const std::string& field, const std::string& path,
                                            const SpecParseOptions& options) {
  if (options.files != nullptr) {
    auto it = options.files->find(field);
    if (it != options.files->end()) {
      if (options.files_used != nullptr) options.files_used->insert(field);
      return &it->second;
    }
  }
  if (options.stored) return nullptr;
  return FieldError(field, absl::StrCat("'", path,
                                        "' was not sent with the spec: the server reads no file a "
                                        "spec names (`infrarsi session create` sends them)"));
}

// Placeholders "{name}" in one argument.
std::vector<std::string> Placeholders(const std::string& arg) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = arg.find('{', pos)) != std::string::npos) {
    const size_t end = arg.find('}', pos + 1);
    if (end == std::string::npos) break;
    std::string name = arg.substr(pos + 1, end - pos - 1);
    // A switch, "{name?TEXT}": its knob is the name before '?'.
    if (const size_t q = name.find('?'); q != std::string::npos) name = name.substr(0, q) + "?";
    if (ValidIdentifier(std::string(absl::StripSuffix(name, "?")))) out.push_back(name);
    pos = end + 1;
  }
  return out;
}


// The model keys of a shape (executor.sim.model, workload.shape).
const std::set<std::string>& ModelShapeKeys() {
  static const std::set<std::string> keys = {
      "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "swiglu", "dropout", "tied_embeddings",
      "experts", "topk", "expert_ffn", "head_dim", "q_lora_rank", "kv_lora_rank", "rope_head_dim",
      "v_head_dim", "shared_expert_ffn", "dense_layers", "window", "global_every"};
  return keys;
}

// Reads the model keys of `m` (field `f`) into `mm`, seq_len and
// global_batch from the workload. The caller has checked `m`'s keys.
absl::Status ParseModelShape(const YAML::Node& m, const std::string& f, const SessionSpec& spec,
                             models::sim::ModelShape& mm) {
  auto int_field = [&](const char* key, int64_t lo, int64_t hi,
                       std::optional<int64_t> dflt) -> absl::StatusOr<int64_t> {
    return ReadInt(m, key, f + "." + key, lo, hi, dflt);
  };
  auto bool_field = [&](const YAML::Node& n, const std::string& key, const std::string& field,
                        bool dflt) -> absl::StatusOr<bool> {
    YAML::Node v = n[key];
    if (!v || v.IsNull()) return dflt;
    const std::string t = v.IsScalar() ? NormalizeScalar(v.Scalar()) : "";
    if (t != "true" && t != "false") return FieldError(field, "must be true or false");
    return t == "true";
  };
  ASSIGN_OR_RETURN(int64_t layers, int_field("layers", 1, 10000, std::nullopt));
  ASSIGN_OR_RETURN(int64_t hidden, int_field("hidden", 1, 1 << 20, std::nullopt));
  ASSIGN_OR_RETURN(int64_t heads, int_field("heads", 1, 1 << 14, std::nullopt));
  ASSIGN_OR_RETURN(int64_t kv, int_field("kv_heads", 0, 1 << 14, 0));
  ASSIGN_OR_RETURN(int64_t ffn, int_field("ffn", 0, 1 << 22, 0));
  ASSIGN_OR_RETURN(int64_t vocab, int_field("vocab", 1, 1 << 24, std::nullopt));
  ASSIGN_OR_RETURN(int64_t experts, int_field("experts", 0, 4096, 0));
  ASSIGN_OR_RETURN(int64_t topk, int_field("topk", 0, 4096, 0));
  ASSIGN_OR_RETURN(int64_t expert_ffn, int_field("expert_ffn", 0, 1 << 22, 0));
  mm.layers = static_cast<int>(layers);
  mm.hidden = static_cast<int>(hidden);
  mm.heads = static_cast<int>(heads);
  mm.kv_heads = static_cast<int>(kv);
  mm.ffn = static_cast<int>(ffn);
  mm.vocab = vocab;
  mm.experts = static_cast<int>(experts);
  mm.topk = static_cast<int>(topk);
  mm.expert_ffn = static_cast<int>(expert_ffn);
  // The optional architecture fields: 0 when absent (ModelShape says what
  // each means), each bounded.
  struct OptionalInt {
    const char* key;
    int* dest;
    int64_t hi;
  };
  for (const OptionalInt& o :
       {OptionalInt{"head_dim", &mm.head_dim, 1 << 16},
        OptionalInt{"q_lora_rank", &mm.q_lora_rank, 1 << 20},
        OptionalInt{"kv_lora_rank", &mm.kv_lora_rank, 1 << 20},
        OptionalInt{"rope_head_dim", &mm.rope_head_dim, 1 << 16},
        OptionalInt{"v_head_dim", &mm.v_head_dim, 1 << 16},
        OptionalInt{"shared_expert_ffn", &mm.shared_expert_ffn, 1 << 22},
        OptionalInt{"dense_layers", &mm.dense_layers, 10000},
        OptionalInt{"window", &mm.window, 1 << 30},
        OptionalInt{"global_every", &mm.global_every, 10000}}) {
    ASSIGN_OR_RETURN(int64_t v, int_field(o.key, 0, o.hi, 0));
    *o.dest = static_cast<int>(v);
  }
  ASSIGN_OR_RETURN(mm.swiglu, bool_field(m, "swiglu", f + ".swiglu", true));
  ASSIGN_OR_RETURN(mm.dropout, bool_field(m, "dropout", f + ".dropout", false));
  ASSIGN_OR_RETURN(mm.tied_embeddings,
                   bool_field(m, "tied_embeddings", f + ".tied_embeddings", false));
  const bool mla = mm.kv_lora_rank > 0;
  if (mm.head_dim == 0 && mm.hidden % mm.heads != 0) {
    return FieldError(f + ".hidden", "must be a multiple of heads (or set head_dim)");
  }
  if (mla) {
    if (mm.head_dim == 0) {
      return FieldError(f + ".head_dim",
                        "is required with multi-head latent attention (kv_lora_rank): the "
                        "query/key head width without its RoPE part");
    }
    if (mm.kv_heads != 0 && mm.kv_heads != mm.heads) {
      return FieldError(f + ".kv_heads",
                        "must be 0 or heads with multi-head latent attention (every head has "
                        "its own keys, decompressed from the latent)");
    }
  } else {
    for (auto [key, v] : {std::pair{"q_lora_rank", mm.q_lora_rank},
                          std::pair{"rope_head_dim", mm.rope_head_dim},
                          std::pair{"v_head_dim", mm.v_head_dim}}) {
      if (v > 0) {
        return FieldError(f + "." + key,
                          "applies to multi-head latent attention only (set kv_lora_rank)");
      }
    }
  }
  if (mm.experts == 0) {
    if (mm.shared_expert_ffn > 0) {
      return FieldError(f + ".shared_expert_ffn", "applies to a MoE model only (experts)");
    }
    if (mm.dense_layers > 0) {
      return FieldError(f + ".dense_layers", "applies to a MoE model only (experts)");
    }
  } else if (mm.dense_layers > 0) {
    if (mm.dense_layers >= mm.layers) {
      return FieldError(f + ".dense_layers", "must leave at least one MoE layer (< layers)");
    }
    if (mm.ffn < 1) {
      return FieldError(f + ".ffn", "is required for the dense layers (dense_layers > 0)");
    }
  }
  if (mm.global_every > 0) {
    if (mm.window == 0) {
      return FieldError(f + ".global_every", "needs a sliding window (window > 0)");
    }
    if (mm.global_every > mm.layers) {
      return FieldError(f + ".global_every", "must be at most layers");
    }
  }
  if (mm.kv_heads > 0 && mm.heads % mm.kv_heads != 0) {
    return FieldError(f + ".kv_heads", "must divide heads");
  }
  if (mm.experts > 0) {
    if (mm.topk < 1 || mm.topk > mm.experts) {
      return FieldError(f + ".topk", "must be in [1, experts] for a MoE model");
    }
    if (mm.expert_ffn < 1) return FieldError(f + ".expert_ffn", "is required for a MoE model");
  } else if (mm.ffn < 1) {
    return FieldError(f + ".ffn", "is required for a dense model");
  }
  mm.seq_len = static_cast<int>(spec.seq_len);
  mm.global_batch = spec.global_batch;

  return absl::OkStatus();
}

// `node`'s optional `fixed` map (field f.fixed): simulator knobs held at a
// value, none of them searched, or read as a searched knob (`taken`:
// simulator knob -> that knob).
absl::Status ParseFixedKnobs(const YAML::Node& node, const std::string& f, const SessionSpec& spec,
                             const std::map<std::string, std::string>& taken, Config& out) {
  namespace ms = models::sim;
  ASSIGN_OR_RETURN(YAML::Node fixed, RequireMap(node, "fixed", f + ".fixed", false));
  if (!fixed) return absl::OkStatus();
  ms::LaunchKnobs probe;
  std::string err;
  for (const auto& kv : fixed) {
    const std::string name = kv.first.as<std::string>();
    const std::string field = absl::StrCat(f, ".fixed.", name);
    if (spec.FindKnob(name)) return FieldError(field, "is also a searched knob");
    if (auto it = taken.find(name); it != taken.end()) {
      return FieldError(field, absl::StrCat("is searched as knob ", it->second));
    }
    if (!kv.second.IsScalar()) return FieldError(field, "must be a scalar");
    const std::string value = NormalizeScalar(kv.second.Scalar());
    if (!ms::SetKnob(&probe, name, value, &err)) {
      return FieldError(field, absl::StrCat(err, " (simulator knobs: ", absl::StrJoin(ms::KnobNames(), ", "), ")"));
    }
    out[name] = value;
  }
  return absl::OkStatus();
}

absl::Status ParseSimExecutor(const YAML::Node& sim, SessionSpec& spec) {
  namespace ms = models::sim;
  const std::string f = "executor.sim";
  RETURN_IF_ERROR(CheckKeys(sim, f, {"model", "cluster", "fixed", "warmup_steps", "timed_steps"}));
  SimExecutorSpec& out = spec.sim;
  ASSIGN_OR_RETURN(YAML::Node m, RequireMap(sim, "model", f + ".model", true));
  RETURN_IF_ERROR(CheckKeys(m, f + ".model", ModelShapeKeys()));
  RETURN_IF_ERROR(ParseModelShape(m, f + ".model", spec, out.model));

  const ms::GpuSpec* gpu = ms::FindGpu(spec.gpu);
  if (gpu == nullptr) {
    return FieldError("hardware.gpu", absl::StrCat("'", spec.gpu,
                                                   "' is not in the simulator's catalog (",
                                                   absl::StrJoin(ms::GpuNames(), ", "), ")"));
  }
  ms::ClusterShape& c = out.cluster;
  c.gpu = *gpu;
  // The GPU's usual fabric where the catalog states one (GB200: NVLink 5
  // across a 72-GPU rack); the spec's own figures override it.
  if (gpu->nvlink_gbps > 0) c.nvlink_gbps = gpu->nvlink_gbps;
  if (gpu->nvlink_domain > c.gpus_per_node) c.nvlink_domain = gpu->nvlink_domain;
  ASSIGN_OR_RETURN(YAML::Node cl, RequireMap(sim, "cluster", f + ".cluster", false));
  if (cl) {
    RETURN_IF_ERROR(CheckKeys(cl, f + ".cluster",
                              {"gpus_per_node", "nodes", "nvlink_domain", "nvlink_gbps", "net_gbps",
                               "nvlink_latency_us", "net_latency_us", "noise_cv",
                               "straggler_prob", "straggler_slowdown", "drift_pct", "seed"}));
    ASSIGN_OR_RETURN(int64_t per_node,
                     ReadInt(cl, "gpus_per_node", f + ".cluster.gpus_per_node", 1, 64, 8));
    ASSIGN_OR_RETURN(int64_t nodes, ReadInt(cl, "nodes", f + ".cluster.nodes", 1, 100000, 1));
    c.gpus_per_node = static_cast<int>(per_node);
    c.nodes = static_cast<int>(nodes);
    ASSIGN_OR_RETURN(int64_t domain,
                     ReadInt(cl, "nvlink_domain", f + ".cluster.nvlink_domain", 0, 100000,
                             gpu->nvlink_domain > per_node ? gpu->nvlink_domain : 0));
    if (domain > 0 && domain % per_node != 0) {
      return FieldError(f + ".cluster.nvlink_domain",
                        absl::StrCat("must be a multiple of gpus_per_node (", per_node,
                                     "): an NVLink domain joins whole nodes, got ", domain));
    }
    c.nvlink_domain = static_cast<int>(domain);
    ASSIGN_OR_RETURN(c.nvlink_gbps, ReadDouble(cl, "nvlink_gbps", f + ".cluster.nvlink_gbps", 1, 1e5, c.nvlink_gbps));
    ASSIGN_OR_RETURN(c.net_gbps, ReadDouble(cl, "net_gbps", f + ".cluster.net_gbps", 0.1, 1e5, c.net_gbps));
    ASSIGN_OR_RETURN(c.nvlink_latency_us, ReadDouble(cl, "nvlink_latency_us", f + ".cluster.nvlink_latency_us", 0, 1e4, c.nvlink_latency_us));
    ASSIGN_OR_RETURN(c.net_latency_us, ReadDouble(cl, "net_latency_us", f + ".cluster.net_latency_us", 0, 1e5, c.net_latency_us));
    ASSIGN_OR_RETURN(c.noise_cv, ReadDouble(cl, "noise_cv", f + ".cluster.noise_cv", 0, 1, c.noise_cv));
    ASSIGN_OR_RETURN(c.straggler_prob, ReadDouble(cl, "straggler_prob", f + ".cluster.straggler_prob", 0, 1, c.straggler_prob));
    ASSIGN_OR_RETURN(c.straggler_slowdown, ReadDouble(cl, "straggler_slowdown", f + ".cluster.straggler_slowdown", 0, 10, c.straggler_slowdown));
    ASSIGN_OR_RETURN(c.drift_pct, ReadDouble(cl, "drift_pct", f + ".cluster.drift_pct", 0, 100, c.drift_pct));
    ASSIGN_OR_RETURN(int64_t seed, ReadInt(cl, "seed", f + ".cluster.seed", 0, std::numeric_limits<int64_t>::max(), 1));
    c.seed = static_cast<uint64_t>(seed);
  }
  if (c.world() != spec.gpu_count) {
    return FieldError("hardware.count",
                      absl::StrCat("must equal executor.sim.cluster gpus_per_node x nodes (",
                                   c.world(), "), got ", spec.gpu_count));
  }
  ASSIGN_OR_RETURN(int64_t warm, ReadInt(sim, "warmup_steps", f + ".warmup_steps", 0, 100, 1));
  ASSIGN_OR_RETURN(int64_t timed, ReadInt(sim, "timed_steps", f + ".timed_steps", 1, 1000, 5));
  out.warmup_steps = static_cast<int32_t>(warm);
  out.timed_steps = static_cast<int32_t>(timed);

  // Every knob, searched or fixed, must be one the simulator understands.
  ms::LaunchKnobs probe;
  std::string err;
  for (const Knob& k : spec.knobs) {
    for (const std::string& v : k.values) {
      if (!ms::SetKnob(&probe, k.name, v, &err)) {
        return FieldError(absl::StrCat("knobs.", k.name),
                          absl::StrCat(err, " (simulator knobs: ",
                                       absl::StrJoin(ms::KnobNames(), ", "), ")"));
      }
    }
  }
  return ParseFixedKnobs(sim, f, spec, {}, out.fixed);
}

// workload.shape: a real job's model shape (ShapeSpec), read after the
// executor (the simulator's spec has its own) and the knobs.
absl::Status ParseWorkloadShape(const YAML::Node& wl, SessionSpec& spec) {
  namespace ms = models::sim;
  const std::string f = "workload.shape";
  if (!wl["shape"] || wl["shape"].IsNull()) return absl::OkStatus();
  if (spec.Executor().simulated) {
    return FieldError(f, "is for real jobs: the simulator's model shape is executor.sim.model");
  }
  ASSIGN_OR_RETURN(YAML::Node sh, RequireMap(wl, "shape", f, true));
  std::set<std::string> keys = ModelShapeKeys();
  keys.insert({"gpus_per_node", "fixed", "launch_rules", "knobs"});
  RETURN_IF_ERROR(CheckKeys(sh, f, keys));
  ShapeSpec out;
  RETURN_IF_ERROR(ParseModelShape(sh, f, spec, out.model));
  const ms::GpuSpec* gpu = ms::FindGpu(spec.gpu);
  if (gpu == nullptr) {
    return FieldError("hardware.gpu",
                      absl::StrCat("'", spec.gpu, "' is not in the simulator's catalog (",
                                   absl::StrJoin(ms::GpuNames(), ", "),
                                   "): workload.shape's estimates need the GPU's figures"));
  }
  ms::ClusterShape& c = out.cluster;
  c.gpu = *gpu;
  if (gpu->nvlink_gbps > 0) c.nvlink_gbps = gpu->nvlink_gbps;
  ASSIGN_OR_RETURN(int64_t per_node, ReadInt(sh, "gpus_per_node", f + ".gpus_per_node", 1, 64,
                                             std::min<int64_t>(spec.gpu_count, 8)));
  if (spec.gpu_count % per_node != 0) {
    return FieldError(f + ".gpus_per_node", absl::StrCat("hardware.count ", spec.gpu_count,
                                                        " is not a whole number of nodes of ",
                                                        per_node, " GPUs"));
  }
  c.gpus_per_node = static_cast<int>(per_node);
  c.nodes = static_cast<int>(spec.gpu_count / per_node);
  if (gpu->nvlink_domain > c.gpus_per_node) c.nvlink_domain = gpu->nvlink_domain;
  const std::vector<std::string>& names = ms::KnobNames();
  ASSIGN_OR_RETURN(YAML::Node mapped, RequireMap(sh, "knobs", f + ".knobs", false));
  std::map<std::string, std::string> read_as;  // simulator knob -> the searched knob read as it
  if (mapped) {
    for (const auto& kv : mapped) {
      const std::string name = kv.first.as<std::string>();
      const std::string field = absl::StrCat(f, ".knobs.", name);
      const Knob* knob = spec.FindKnob(name);
      if (knob == nullptr) return FieldError(field, "is not a searched knob (not in knobs)");
      ShapeSpec::KnobAs as;
      // The simulator knob named: the entry itself, or its `as` (looked up
      // through a const node: a missing key is then undefined, not a zombie).
      const YAML::Node entry = kv.second;
      std::optional<std::string> sim_text;
      if (entry.IsScalar()) sim_text = entry.Scalar();
      if (entry.IsMap()) {
        const YAML::Node& const_entry = entry;
        const YAML::Node as_node = const_entry["as"];
        if (as_node.IsDefined() && as_node.IsScalar()) sim_text = as_node.Scalar();
      }
      if (kv.second.IsMap()) {  // {as: KNOB, values: {VALUE: SIMULATOR VALUE, ...}}
        RETURN_IF_ERROR(CheckKeys(kv.second, field, {"as", "values"}));
        ASSIGN_OR_RETURN(YAML::Node values, RequireMap(kv.second, "values", field + ".values", true));
        for (const auto& vv : values) {
          const std::string value = NormalizeScalar(vv.first.as<std::string>());
          const std::string vfield = absl::StrCat(field, ".values.", vv.first.as<std::string>());
          const bool listed = std::any_of(knob->values.begin(), knob->values.end(),
                                          [&](const std::string& v) { return NormalizeScalar(v) == value; });
          if (!listed) return FieldError(vfield, absl::StrCat("is not a value of knobs.", name));
          if (!vv.second.IsScalar()) return FieldError(vfield, "must be a scalar");
          as.values[value] = NormalizeScalar(vv.second.Scalar());
        }
        for (const std::string& v : knob->values) {
          if (!as.values.count(NormalizeScalar(v))) {
            return FieldError(field + ".values", absl::StrCat("has no simulator value for '", v, "'"));
          }
        }
      }
      if (kv.second.IsNull()) {  // read as no simulator knob, whatever its name
        out.knobs[name] = std::move(as);
        continue;
      }
      const std::string sim_field = kv.second.IsMap() ? field + ".as" : field;
      if (!sim_text || !IsSimulatorKnob(*sim_text)) {
        return FieldError(sim_field, absl::StrCat("must name a simulator knob (", absl::StrJoin(names, ", "), ")"));
      }
      as.sim = *sim_text;
      out.knobs[name] = std::move(as);
    }
  }
  // A searched knob read as a simulator knob (mapped, or of its name) must
  // have the simulator's values; other knobs stay out of the estimates.
  ms::LaunchKnobs probe;
  std::string err;
  for (const Knob& k : spec.knobs) {
    const std::string sim_name = out.SimKnobOf(k.name);
    if (sim_name.empty()) continue;
    const std::string field = out.knobs.count(k.name) ? absl::StrCat(f, ".knobs.", k.name) : absl::StrCat("knobs.", k.name);
    if (auto [it, fresh] = read_as.emplace(sim_name, k.name); !fresh) {
      return FieldError(field, absl::StrCat("is read as the simulator's ", sim_name, ", and so is knob ", it->second));
    }
    for (const std::string& v : k.values) {
      if (!ms::SetKnob(&probe, sim_name, out.SimValueOf(k.name, v), &err)) {
        return FieldError(field, absl::StrCat(err, " (with workload.shape, knob ", k.name,
                                              " is read as the simulator's ", sim_name, ")"));
      }
    }
  }
  RETURN_IF_ERROR(ParseFixedKnobs(sh, f, spec, read_as, out.fixed));
  if (sh["launch_rules"] && !sh["launch_rules"].IsNull()) {
    const std::string v = sh["launch_rules"].IsScalar() ? NormalizeScalar(sh["launch_rules"].Scalar()) : "";
    if (v != "true" && v != "false") return FieldError(f + ".launch_rules", "must be true or false");
    out.launch_rules = v == "true";
  }
  spec.shape = std::move(out);
  return absl::OkStatus();
}

bool SlurmName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

absl::Status ParseSlurm(const YAML::Node& sl, SessionSpec& spec) {
  const std::string f = "executor.slurm";
  RETURN_IF_ERROR(CheckKeys(sl, f, {"partition", "account", "qos", "time_limit_min",
                                    "sbatch_options", "gpus_per_node", "exclude_failed_nodes"}));
  SlurmPlacementSpec& out = spec.slurm;
  out.enabled = true;
  for (auto [key, dest] : {std::pair{"partition", &out.partition},
                           std::pair{"account", &out.account}, std::pair{"qos", &out.qos}}) {
    if (!sl[key] || sl[key].IsNull()) continue;
    ASSIGN_OR_RETURN(*dest, RequireString(sl, key, Join(f, key)));
    if (!SlurmName(*dest)) {
      return FieldError(Join(f, key), "1-64 letters, digits, '_', '-' or '.'");
    }
  }
  ASSIGN_OR_RETURN(int64_t limit,
                   ReadInt(sl, "time_limit_min", f + ".time_limit_min", 0, 7 * 1440, 0));
  out.time_limit_min = static_cast<int32_t>(limit);
  ASSIGN_OR_RETURN(int64_t gpn, ReadInt(sl, "gpus_per_node", f + ".gpus_per_node", 0, 64, 0));
  out.gpus_per_node = static_cast<int32_t>(gpn);
  if (gpn > 0 && spec.gpu_count > gpn && spec.gpu_count % gpn != 0) {
    return FieldError(f + ".gpus_per_node",
                      absl::StrCat("hardware.count ", spec.gpu_count,
                                   " is not a whole number of nodes of ", gpn, " GPUs"));
  }
  if (sl["exclude_failed_nodes"] && !sl["exclude_failed_nodes"].IsNull()) {
    bool v = true;
    if (!sl["exclude_failed_nodes"].IsScalar() ||
        !YAML::convert<bool>::decode(sl["exclude_failed_nodes"], v)) {
      return FieldError(f + ".exclude_failed_nodes", "must be true or false");
    }
    out.exclude_failed_nodes = v;
  }
  YAML::Node opts = sl["sbatch_options"];
  if (opts && !opts.IsNull()) {
    if (!opts.IsSequence()) return FieldError(f + ".sbatch_options", "must be a list of strings");
    if (opts.size() > 16) return FieldError(f + ".sbatch_options", "at most 16 options");
    for (size_t i = 0; i < opts.size(); ++i) {
      const std::string field = absl::StrCat(f, ".sbatch_options[", i, "]");
      if (!opts[i].IsScalar()) return FieldError(field, "must be a string");
      std::string name;
      if (std::string why = SlurmOptionError(opts[i].Scalar(), &name); !why.empty()) {
        return FieldError(field, why);
      }
      out.sbatch_options.push_back(opts[i].Scalar());
    }
  }
  return absl::OkStatus();
}

// executor.process.env: {NAME: "text with {knob} placeholders"}: environment
// knobs, set without a shell or an `env` command; each agent's operator
// decides which names trials may be given (--env-allow).
absl::Status ParseProcessEnv(const YAML::Node& p, SessionSpec& spec) {
  const std::string f = "executor.process.env";
  ASSIGN_OR_RETURN(YAML::Node e, RequireMap(p, "env", f, false));
  if (!e || e.IsNull()) return absl::OkStatus();
  if (e.size() > 32) return FieldError(f, "at most 32 variables");
  for (const auto& kv : e) {
    const std::string name = kv.first.as<std::string>();
    const std::string field = absl::StrCat(f, ".", name);
    if (std::string why = TrialEnvNameError(name); !why.empty()) return FieldError(field, why);
    if (!kv.second.IsScalar()) return FieldError(field, "must be a string");
    const std::string value = kv.second.Scalar();
    if (value.size() > 4096 || value.find('\0') != std::string::npos) {
      return FieldError(field, "must be at most 4096 characters, without NUL");
    }
    for (std::string ph : Placeholders(value)) {
      if (!ph.empty() && ph.back() == '?') {
        return FieldError(field, "a switch {knob?...} belongs in the command, not a variable");
      }
      if (spec.FindKnob(ph) == nullptr && spec.FindDerived(ph) == nullptr) {
        return FieldError(field, absl::StrCat("placeholder {", ph, "} is not a knob or a derived value"));
      }
    }
    spec.process.env[name] = value;
  }
  if (spec.slurm.enabled && !spec.process.env.empty()) {
    return FieldError(f, "a Slurm-placed job takes its environment from Slurm; not supported here");
  }
  return absl::OkStatus();
}

// executor.process.metrics: {reader, from, pattern, warmup_steps}.
absl::Status ParseMetricsReader(const YAML::Node& p, SessionSpec& spec) {
  const std::string f = "executor.process.metrics";
  ASSIGN_OR_RETURN(YAML::Node m, RequireMap(p, "metrics", f, false));
  if (!m || m.IsNull()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckKeys(m, f, {"reader", "from", "pattern", "warmup_steps"}));
  LogReaderSpec& r = spec.process.metrics;
  ASSIGN_OR_RETURN(r.reader, RequireString(m, "reader", f + ".reader"));
  if (m["from"] && !m["from"].IsNull()) {
    ASSIGN_OR_RETURN(r.stream, RequireString(m, "from", f + ".from"));
  }
  if (m["pattern"] && !m["pattern"].IsNull()) {
    ASSIGN_OR_RETURN(r.pattern, RequireString(m, "pattern", f + ".pattern"));
  }
  ASSIGN_OR_RETURN(int64_t warmup, ReadInt(m, "warmup_steps", f + ".warmup_steps", 0, 1000, 1));
  r.warmup_steps = static_cast<int32_t>(warmup);
  if (std::string why = LogReaderSpecError(r); !why.empty()) {
    const size_t colon = why.find(": ");
    return FieldError(absl::StrCat(f, ".", why.substr(0, colon)), why.substr(colon + 2));
  }
  if (!r.UsesHarness() && spec.slurm.enabled && r.stream != "stdout") {
    return FieldError(f + ".from",
                      "a Slurm job's stdout and stderr are one file (its --output): leave from out");
  }
  return absl::OkStatus();
}

// Replay landscapes and the simulator know booleans in one spelling.
void NormalizeKnobValues(SessionSpec& spec) {
  for (Knob& k : spec.knobs) {
    for (std::string& v : k.values) v = NormalizeScalar(v);
  }
  for (auto& [name, v] : spec.baseline) v = NormalizeScalar(v);
}

// derived: {name: "expression over knobs"}; every setting of the knobs an
// expression names must give a positive whole number.
absl::Status ParseDerived(const YAML::Node& root, SessionSpec& spec) {
  ASSIGN_OR_RETURN(YAML::Node d, RequireMap(root, "derived", "derived", false));
  if (!d || d.IsNull()) return absl::OkStatus();
  if (d.size() > 16) return FieldError("derived", "at most 16 derived values");
  for (const auto& kv : d) {
    const std::string name = kv.first.as<std::string>();
    const std::string field = absl::StrCat("derived.", name);
    if (!ValidIdentifier(name)) {
      return FieldError(field, "names are identifiers ([A-Za-z_][A-Za-z0-9_]*)");
    }
    if (spec.FindKnob(name) != nullptr) {
      return FieldError(field, "is a knob's name: a derived value follows from the knobs");
    }
    if (!kv.second.IsScalar()) return FieldError(field, "must be an expression (a string)");
    auto expr = DerivedExpr::Parse(kv.second.Scalar());
    if (!expr.ok()) return FieldError(field, expr.status().message());
    // The settings of the knobs it names, all of them.
    std::vector<const Knob*> used;
    double settings = 1;
    for (const std::string& n : expr->names()) {
      const Knob* k = spec.FindKnob(n);
      if (k == nullptr) return FieldError(field, absl::StrCat("'", n, "' is not a knob"));
      used.push_back(k);
      settings *= static_cast<double>(k->values.size());
    }
    if (settings > 100000) {
      return FieldError(field, "names knobs with more than 100000 settings together");
    }
    std::vector<size_t> at(used.size(), 0);
    while (true) {
      std::map<std::string, std::string> values;
      for (size_t i = 0; i < used.size(); ++i) values[used[i]->name] = used[i]->values[at[i]];
      auto v = expr->Eval(values);
      const std::string where =
          values.empty() ? "" : absl::StrCat(" at ", absl::StrJoin(values, ", ", absl::PairFormatter("=")));
      if (!v.ok()) return FieldError(field, absl::StrCat(v.status().message(), where));
      if (*v < 1) {
        return FieldError(field, absl::StrCat("is ", *v, where, ": a derived value must be a positive "
                                              "whole number for every setting"));
      }
      size_t i = 0;
      while (i < at.size() && ++at[i] == used[i]->values.size()) at[i++] = 0;
      if (i == at.size()) break;
    }
    spec.derived.emplace_back(name, *std::move(expr));
  }
  return absl::OkStatus();
}

// A contract rule a log reader cannot feed is refused at Init, naming it:
// a rule that can never run must not look locked.
absl::Status CheckReaderAgainstContract(const SessionSpec& spec) {
  const LogReaderSpec& r = spec.process.metrics;
  if (spec.executor_kind != SessionSpec::ExecutorKind::kProcess || r.UsesHarness()) {
    return absl::OkStatus();
  }
  const ReaderTraits* t = ReaderTraitsOf(r.reader);
  if (spec.contract.optimizer_in_window && !t->optimizer) {
    return FieldError("contract.optimizer_in_window",
                      absl::StrCat("needs the harness (it counts optimizer.step() inside the "
                                   "timer); the ", r.reader,
                                   " reader cannot see the optimizer: leave it out or use "
                                   "reader: harness"));
  }
  if (spec.contract.data_seed_set && !StatesDataSeed(r)) {
    return FieldError("contract.data_seed",
                      absl::StrCat("the ", r.reader,
                                   " reader's lines state no data seed, so the rule could never "
                                   "run: leave it out, or print it (jsonl's data_seed, a "
                                   "regex's (?P<data_seed>...))"));
  }
  return absl::OkStatus();
}

absl::Status ParseExecutor(const YAML::Node& root, const SpecParseOptions& options,
                           SessionSpec& spec) {
  ASSIGN_OR_RETURN(YAML::Node ex, RequireMap(root, "executor", "executor", true));
  RETURN_IF_ERROR(CheckKeys(ex, "executor", {"replay", "process", "sim", "slurm"}));
  if (ex["slurm"]) {
    if (!ex["process"] && !ex["sim"]) {
      return FieldError("executor.slurm",
                        "places a process executor's command (or the simulator) as a Slurm job: "
                        "add executor.process or executor.sim");
    }
    ASSIGN_OR_RETURN(YAML::Node sl, RequireMap(ex, "slurm", "executor.slurm", true));
    RETURN_IF_ERROR(ParseSlurm(sl, spec));
  }
  if (ex.size() != (spec.slurm.enabled ? 2u : 1u)) {
    return FieldError("executor", "must name exactly one of: replay, process, sim");
  }
  if (ex["sim"]) {
    spec.executor_kind = SessionSpec::ExecutorKind::kSim;
    ASSIGN_OR_RETURN(YAML::Node sim, RequireMap(ex, "sim", "executor.sim", true));
    return ParseSimExecutor(sim, spec);
  }
  if (ex["replay"]) {
    spec.executor_kind = SessionSpec::ExecutorKind::kReplay;
    ASSIGN_OR_RETURN(YAML::Node r, RequireMap(ex, "replay", "executor.replay", true));
    RETURN_IF_ERROR(CheckKeys(r, "executor.replay", {"landscape", "capacity_gib", "noise_pct"}));
    ASSIGN_OR_RETURN(spec.replay.landscape,
                     RequireString(r, "landscape", "executor.replay.landscape"));
    ASSIGN_OR_RETURN(const std::string* sent,
                     SentFile("executor.replay.landscape", spec.replay.landscape, options));
    if (sent != nullptr) {
      if (sent->empty()) return FieldError("executor.replay.landscape", "the file is empty");
      spec.replay.landscape_content = *sent;
    } else {
      // A stored pre-tenancy session: its agents read the path, as before.
      ASSIGN_OR_RETURN(spec.replay.landscape,
                       ResolvePath(spec.replay.landscape, "executor.replay.landscape", options));
    }
    ASSIGN_OR_RETURN(spec.replay.capacity_gib,
                     ReadDouble(r, "capacity_gib", "executor.replay.capacity_gib", 0, 1e6, 0));
    ASSIGN_OR_RETURN(spec.replay.noise_pct,
                     ReadDouble(r, "noise_pct", "executor.replay.noise_pct", 0, 100, 0));
    return absl::OkStatus();
  }
  spec.executor_kind = SessionSpec::ExecutorKind::kProcess;
  ASSIGN_OR_RETURN(YAML::Node p, RequireMap(ex, "process", "executor.process", true));
  RETURN_IF_ERROR(
      CheckKeys(p, "executor.process",
                {"command", "workdir", "timeout_s", "watchdog_s", "metrics", "env"}));
  YAML::Node cmd = p["command"];
  if (!cmd || cmd.IsNull()) return FieldError("executor.process.command", "is required");
  if (cmd.IsScalar()) {
    auto argv = SplitCommandLine(cmd.Scalar());
    if (!argv.ok()) return FieldError("executor.process.command", argv.status().message());
    spec.process.argv = *std::move(argv);
  } else if (cmd.IsSequence()) {
    for (const auto& a : cmd) {
      if (!a.IsScalar()) return FieldError("executor.process.command", "items must be strings");
      spec.process.argv.push_back(a.Scalar());
    }
  } else {
    return FieldError("executor.process.command", "must be a string or a list of strings");
  }
  if (spec.process.argv.empty() || spec.process.argv[0].empty()) {
    return FieldError("executor.process.command", "is empty");
  }
  for (const std::string& arg : spec.process.argv) {
    for (std::string ph : Placeholders(arg)) {
      const bool is_switch = !ph.empty() && ph.back() == '?';
      if (is_switch) ph.pop_back();
      const Knob* knob = spec.FindKnob(ph);
      if (!knob && !is_switch && spec.FindDerived(ph) != nullptr) continue;
      if (!knob) {
        return FieldError("executor.process.command",
                          absl::StrCat("placeholder {", ph, is_switch ? "?...}" : "}",
                                       " is not a knob", is_switch ? "" : " or a derived value"));
      }
      if (is_switch) {
        for (const std::string& v : knob->values) {
          if (NormalizeScalar(v) != "true" && NormalizeScalar(v) != "false") {
            return FieldError("executor.process.command",
                              absl::StrCat("switch {", ph, "?...} needs knobs.", ph,
                                           " to take only true and false, not '", v, "'"));
          }
        }
      }
    }
  }
  // An agent-side path: resolved here as text, never read by the server.
  if (p["workdir"] && !p["workdir"].IsNull()) {
    ASSIGN_OR_RETURN(std::string workdir, RequireString(p, "workdir", "executor.process.workdir"));
    ASSIGN_OR_RETURN(spec.process.workdir,
                     ResolvePath(workdir, "executor.process.workdir", options));
  } else {
    spec.process.workdir = options.spec_dir;  // the spec's folder; checked below
  }
  ASSIGN_OR_RETURN(int64_t timeout,
                   ReadInt(p, "timeout_s", "executor.process.timeout_s", 1, 7 * 86400, 600));
  spec.process.timeout_s = static_cast<int32_t>(timeout);
  ASSIGN_OR_RETURN(int64_t watchdog,
                   ReadInt(p, "watchdog_s", "executor.process.watchdog_s", 0, 7 * 86400, 300));
  spec.process.watchdog_s = static_cast<int32_t>(watchdog);
  RETURN_IF_ERROR(ParseProcessEnv(p, spec));
  return ParseMetricsReader(p, spec);
}


absl::StatusOr<std::vector<std::string>> ReadStringList(const YAML::Node& parent,
                                                       const std::string& key,
                                                       const std::string& field) {
  std::vector<std::string> out;
  YAML::Node n = parent[key];
  if (!n || n.IsNull()) return out;
  if (!n.IsSequence()) return FieldError(field, "must be a list of strings");
  for (const auto& v : n) {
    if (!v.IsScalar() || v.Scalar().empty()) return FieldError(field, "items must be non-empty strings");
    out.push_back(NormalizeScalar(v.Scalar()));
  }
  return out;
}

absl::Status ParseRepository(const YAML::Node& root, const SpecParseOptions& options,
                             SessionSpec& spec) {
  ASSIGN_OR_RETURN(YAML::Node r, RequireMap(root, "repository", "repository", false));
  if (!r || r.IsNull()) return absl::OkStatus();  // RequireMap gives a null node when absent
  RETURN_IF_ERROR(CheckKeys(r, "repository", {"name", "url", "path", "base"}));
  if (spec.executor_kind != SessionSpec::ExecutorKind::kProcess) {
    return FieldError("repository", "only a process executor runs code from a repository");
  }
  const int named = (r["name"] ? 1 : 0) + (r["url"] ? 1 : 0) + (r["path"] ? 1 : 0);
  if (named != 1) return FieldError("repository", "give exactly one of name or url");
  if (r["name"]) {
    // Registered by an admin for a team; the caller's team only.
    ASSIGN_OR_RETURN(spec.repository.name, RequireString(r, "name", "repository.name"));
    if (!options.repository_url) {
      return FieldError("repository.name", "this server resolves no repository names");
    }
    auto url = options.repository_url(spec.repository.name);
    if (!url.ok()) return FieldError("repository.name", url.status().message());
    spec.repository.url = *url;
  } else if (r["path"] && !options.stored) {
    return FieldError("repository.path",
                      "the server reads no path a spec names: ask an admin to register the "
                      "repository (infrarsi-server repo add NAME --url URL --team TEAM) and name "
                      "it (repository: {name: NAME})");
  } else {
    const char* key = r["url"] ? "url" : "path";
    const std::string field = absl::StrCat("repository.", key);
    if (!options.may_name_urls && !options.stored) {
      return FieldError(field,
                        "only an admin may name a repository by URL: ask one to register it "
                        "(infrarsi-server repo add NAME --url URL --team TEAM) and name it "
                        "(repository: {name: NAME})");
    }
    ASSIGN_OR_RETURN(std::string url, RequireString(r, key, field));
    // A relative local path is the submitter's (an admin's) folder's.
    if (IsRemoteRepositoryUrl(url)) {
      spec.repository.url = url;
    } else {
      ASSIGN_OR_RETURN(spec.repository.url, ResolvePath(url, field, options));
    }
  }
  if (r["base"] && !r["base"].IsNull()) {
    ASSIGN_OR_RETURN(spec.repository.base, RequireString(r, "base", "repository.base"));
  }
  // Trials run at the root of a clean work tree of the repository, so
  // workdir-relative (protected) and repository-relative (patched) paths
  // are the same paths.
  YAML::Node wd = root["executor"]["process"]["workdir"];
  if (wd && !wd.IsNull() && !options.stored) {
    return FieldError("executor.process.workdir",
                      "with a repository, trials run at the root of a fresh work tree of it; "
                      "leave workdir out");
  }
  spec.process.workdir.clear();
  if (options.source_repo != nullptr) {
    auto sha = options.source_repo->ResolveCommit(spec.repository.url, spec.repository.base);
    if (!sha.ok()) return FieldError("repository", sha.status().message());
    spec.repository.base_commit = *sha;
  }
  return absl::OkStatus();
}

}  // namespace

// "patch_<name>" with the characters a knob name may not hold as '_'.
std::string PatchKnobName(const std::string& patch) {
  std::string out = "patch_";
  for (char c : patch) out += absl::ascii_isalnum(c) ? c : '_';
  return out;
}

namespace {

absl::Status ParseContract(const YAML::Node& root, const SpecParseOptions& options,
                           SessionSpec& spec) {
  ContractSpec& c = spec.contract;
  c.tokens_per_step = spec.global_batch * spec.seq_len;
  ASSIGN_OR_RETURN(YAML::Node n, RequireMap(root, "contract", "contract", false));
  if (n) {
    RETURN_IF_ERROR(CheckKeys(n, "contract",
                              {"tokens_per_step", "timed_steps", "data_seed", "loss_abs_tol",
                               "loss_rel_tol", "timing_tolerance", "precision",
                               "optimizer_in_window", "editable", "protected"}));
    ASSIGN_OR_RETURN(c.tokens_per_step, ReadInt(n, "tokens_per_step", "contract.tokens_per_step",
                                                1, int64_t{1} << 40, c.tokens_per_step));
    ASSIGN_OR_RETURN(int64_t steps, ReadInt(n, "timed_steps", "contract.timed_steps", 0, 100000, 0));
    c.timed_steps = static_cast<int32_t>(steps);
    if (n["data_seed"] && !n["data_seed"].IsNull()) {
      ASSIGN_OR_RETURN(c.data_seed, ReadInt(n, "data_seed", "contract.data_seed", 0,
                                            std::numeric_limits<int64_t>::max(), std::nullopt));
      c.data_seed_set = true;
    }
    ASSIGN_OR_RETURN(c.loss_abs_tol, ReadDouble(n, "loss_abs_tol", "contract.loss_abs_tol", 0, 1e3, c.loss_abs_tol));
    ASSIGN_OR_RETURN(c.loss_rel_tol, ReadDouble(n, "loss_rel_tol", "contract.loss_rel_tol", 0, 1, c.loss_rel_tol));
    ASSIGN_OR_RETURN(c.timing_tolerance, ReadDouble(n, "timing_tolerance", "contract.timing_tolerance", 0, 0.9, c.timing_tolerance));
    ASSIGN_OR_RETURN(c.precision, ReadStringList(n, "precision", "contract.precision"));
    if (n["optimizer_in_window"] && !n["optimizer_in_window"].IsNull()) {
      const std::string v = NormalizeScalar(n["optimizer_in_window"].Scalar());
      if (v != "true" && v != "false") return FieldError("contract.optimizer_in_window", "must be true or false");
      c.optimizer_in_window = v == "true";
    }
    ASSIGN_OR_RETURN(c.editable, ReadStringList(n, "editable", "contract.editable"));
    ASSIGN_OR_RETURN(c.protected_files, ReadStringList(n, "protected", "contract.protected"));
  }
  // The precision policy bounds the space itself.
  if (!c.precision.empty()) {
    auto allowed = [&](const std::string& v) { return PrecisionAllowed(c.precision, v); };
    if (const Knob* k = spec.FindKnob("precision")) {
      for (const std::string& v : k->values) {
        if (!allowed(v)) {
          return FieldError("knobs.precision", absl::StrCat("value '", v, "' is not allowed by contract.precision [",
                                                            absl::StrJoin(c.precision, ", "), "]"));
        }
      }
    }
    auto fixed = spec.sim.fixed.find("precision");
    if (fixed != spec.sim.fixed.end() && !allowed(fixed->second)) {
      return FieldError("executor.sim.fixed.precision", "is not allowed by contract.precision");
    }
  }
  if (!c.protected_files.empty()) {
    if (spec.executor_kind != SessionSpec::ExecutorKind::kProcess) {
      return FieldError("contract.protected", "only a process executor has files to protect");
    }
    for (const std::string& rel : c.protected_files) {
      const std::string field = absl::StrCat("contract.protected[", rel, "]");
      std::filesystem::path p(rel);
      if (p.is_absolute() || rel.find("..") != std::string::npos) {
        return FieldError(field, "must be a path inside the workdir");
      }
      if (!spec.repository.url.empty()) {
        // Trials run on the base commit: lock the file as committed there.
        if (options.source_repo == nullptr || spec.repository.base_commit.empty()) continue;
        auto h = options.source_repo->BlobAt(spec.repository.url, spec.repository.base_commit,
                                             p.lexically_normal().generic_string());
        if (!h.ok()) return FieldError(field, h.status().message());
        c.protected_hashes[rel] = *h;
        continue;
      }
      // Without a repository the submitter sends the file as it is in the
      // workdir; its hash is locked, and the agents check theirs against it.
      ASSIGN_OR_RETURN(const std::string* sent, SentFile(field, rel, options));
      if (sent != nullptr && options.blob_hash) c.protected_hashes[rel] = options.blob_hash(*sent);
    }
  }
  // Verification of the top candidates.
  ASSIGN_OR_RETURN(YAML::Node v, RequireMap(root, "verify", "verify", false));
  if (v) {
    RETURN_IF_ERROR(CheckKeys(v, "verify", {"candidates", "runs", "busier_retries"}));
    ASSIGN_OR_RETURN(int64_t cands, ReadInt(v, "candidates", "verify.candidates", 0, 20, 3));
    ASSIGN_OR_RETURN(int64_t runs, ReadInt(v, "runs", "verify.runs", 2, 50, 3));
    ASSIGN_OR_RETURN(int64_t retries,
                     ReadInt(v, "busier_retries", "verify.busier_retries", 0, 2, 1));
    spec.verify.candidates = static_cast<int32_t>(cands);
    spec.verify.runs = static_cast<int32_t>(runs);
    spec.verify.busier_retries = static_cast<int32_t>(retries);
  }
  // Patches: each parsed for the files it touches and held to the scope.
  YAML::Node patches = root["patches"];
  if (patches && !patches.IsNull()) {
    if (!patches.IsSequence()) return FieldError("patches", "must be a list");
    std::set<std::string> names;
    for (const auto& pn : patches) {
      if (!pn.IsMap()) return FieldError("patches", "items must be mappings");
      RETURN_IF_ERROR(CheckKeys(pn, "patches[]", {"name", "rationale", "diff", "file", "prior"}));
      PatchSpec ps;
      ASSIGN_OR_RETURN(ps.name, RequireString(pn, "name", "patches[].name"));
      const std::string field = absl::StrCat("patches[", ps.name, "]");
      if (!IsValidName(ps.name) || !names.insert(ps.name).second) {
        return FieldError(field, "names must be unique and use letters, digits, '-', '_' or '.'");
      }
      if (spec.repository.url.empty()) {
        return FieldError(field, "patches need a repository to apply to (repository: {name: ...})");
      }
      if (names.size() > static_cast<size_t>(kMaxPatches)) {
        return FieldError("patches", absl::StrCat("at most ", kMaxPatches, " patches"));
      }
      if (pn["rationale"] && pn["rationale"].IsScalar()) ps.rationale = pn["rationale"].Scalar();
      if (pn["prior"] && !pn["prior"].IsNull()) {
        ASSIGN_OR_RETURN(YAML::Node pr, RequireMap(pn, "prior", field + ".prior", true));
        RETURN_IF_ERROR(CheckKeys(pr, field + ".prior", {"time", "time_sd"}));
        if (!pr["time"] || pr["time"].IsNull()) return FieldError(field + ".prior.time", "is required");
        ASSIGN_OR_RETURN(ps.prior_time, ReadDouble(pr, "time", field + ".prior.time", -2, 2, 0));
        ASSIGN_OR_RETURN(ps.prior_time_sd,
                         ReadDouble(pr, "time_sd", field + ".prior.time_sd", 1e-3, 3, 0.5));
        ps.has_prior = true;
      }
      const bool has_diff = pn["diff"] && pn["diff"].IsScalar();
      const bool has_file = pn["file"] && pn["file"].IsScalar();
      if (has_diff == has_file) return FieldError(field, "give exactly one of diff or file");
      if (has_diff) {
        ps.diff = pn["diff"].Scalar();
      } else if (options.frozen_patch_diffs != nullptr &&
                 options.frozen_patch_diffs->count(ps.name) > 0) {
        ps.diff = options.frozen_patch_diffs->at(ps.name);
      } else {
        ASSIGN_OR_RETURN(const std::string* sent,
                         SentFile(field + ".file", pn["file"].Scalar(), options));
        if (sent == nullptr) {
          return FieldError(field + ".file", "a stored spec lost its patch (not frozen at init)");
        }
        ps.diff = *sent;
      }
      RETURN_IF_ERROR(AddCheckedPatch(std::move(ps), options.source_repo, field, &spec));
    }
  }
  // Pairs that do not apply one after the other are never combined.
  if (options.source_repo != nullptr && !spec.repository.base_commit.empty()) {
    for (size_t i = 0; i < spec.patches.size(); ++i) {
      for (size_t j = i + 1; j < spec.patches.size(); ++j) {
        auto both = options.source_repo->CheckPatch(spec.repository.url,
                                                    spec.repository.base_commit,
                                                    {spec.patches[i].diff}, spec.patches[j].diff);
        if (!both.ok()) spec.patch_conflicts.emplace_back(spec.patches[i].name, spec.patches[j].name);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AddCheckedPatch(PatchSpec ps, const SourceRepo* source_repo, const std::string& field,
                             SessionSpec* out) {
  SessionSpec& spec = *out;
  const ContractSpec& c = spec.contract;
  if (!IsValidName(ps.name)) {
    return FieldError(field, "names must be unique and use letters, digits, '-', '_' or '.'");
  }
  for (const PatchSpec& other : spec.patches) {
    if (other.name == ps.name) {
      return FieldError(field, "names must be unique and use letters, digits, '-', '_' or '.'");
    }
  }
  if (spec.repository.url.empty()) {
    return FieldError(field, "patches need a repository to apply to (repository: {name: ...})");
  }
  if (spec.patches.size() >= static_cast<size_t>(kMaxPatches)) {
    return FieldError("patches", absl::StrCat("at most ", kMaxPatches, " patches"));
  }
  if (ps.diff.size() > kMaxPatchBytes) {
    return FieldError(field, absl::StrCat("larger than the limit of ", kMaxPatchBytes, " bytes"));  // NOLINT
  }
  auto files = ParsePatchedFiles(ps.diff);
  if (!files.ok()) return FieldError(field, files.status().message());
  RETURN_IF_ERROR(CheckPatchScope(ps.name, *files, c.editable, c.protected_files));
  ps.paths.clear();
  for (const PatchedFile& f : *files) ps.paths.push_back(f.path);
  if (source_repo != nullptr && !spec.repository.base_commit.empty()) {
    // Git's own reading of the diff: it must apply to the base commit,
    // and the files it changes are held to the same scope.
    auto paths = source_repo->CheckPatch(spec.repository.url, spec.repository.base_commit, {}, ps.diff);
    if (!paths.ok()) return FieldError(field, paths.status().message());
    std::vector<PatchedFile> by_git;
    for (const std::string& path : *paths) by_git.push_back({path});
    RETURN_IF_ERROR(CheckPatchScope(ps.name, by_git, c.editable, c.protected_files));
    ps.paths = *paths;
  }
  ps.knob = PatchKnobName(ps.name);
  if (spec.FindKnob(ps.knob) != nullptr) {
    return FieldError(field, absl::StrCat("its switch '", ps.knob, "' clashes with another knob"));
  }
  spec.knobs.push_back({ps.knob, {"off", "on"}});
  spec.baseline[ps.knob] = "off";
  spec.patches.push_back(std::move(ps));
  return absl::OkStatus();
}

namespace {

absl::StatusOr<SessionSpec> ParseSpecNode(const YAML::Node& root,
                                          const SpecParseOptions& options) {
  if (!root.IsMap()) return FieldError("spec", "must be a YAML mapping");
  RETURN_IF_ERROR(CheckKeys(root, "", {"name", "workload", "hardware", "knobs", "baseline",
                                       "derived", "budget", "doctor", "seed", "executor",
                                       "contract", "verify", "patches", "repository",
                                       "share_bank"}));
  SessionSpec spec;
  ASSIGN_OR_RETURN(spec.name, RequireString(root, "name", "name"));
  if (!IsValidName(spec.name)) {
    return FieldError("name", "use 1-128 letters, digits, '-', '_' or '.'");
  }

  ASSIGN_OR_RETURN(YAML::Node wl, RequireMap(root, "workload", "workload", true));
  RETURN_IF_ERROR(CheckKeys(wl, "workload",
                            {"model", "global_batch", "seq_len", "params", "flops_per_token", "shape"}));
  ASSIGN_OR_RETURN(spec.model, RequireString(wl, "model", "workload.model"));
  ASSIGN_OR_RETURN(spec.global_batch,
                   ReadInt(wl, "global_batch", "workload.global_batch", 1, 1 << 24, std::nullopt));
  ASSIGN_OR_RETURN(spec.seq_len,
                   ReadInt(wl, "seq_len", "workload.seq_len", 1, 1 << 24, std::nullopt));
  ASSIGN_OR_RETURN(spec.params, ReadDouble(wl, "params", "workload.params", 0, 1e15, 0));
  ASSIGN_OR_RETURN(spec.flops_per_token,
                   ReadDouble(wl, "flops_per_token", "workload.flops_per_token", 0, 1e18, 0));

  ASSIGN_OR_RETURN(YAML::Node hw, RequireMap(root, "hardware", "hardware", true));
  RETURN_IF_ERROR(CheckKeys(hw, "hardware", {"gpu", "count", "pool"}));
  ASSIGN_OR_RETURN(spec.gpu, RequireString(hw, "gpu", "hardware.gpu"));
  ASSIGN_OR_RETURN(int64_t count, ReadInt(hw, "count", "hardware.count", 1, 65536, 1));
  spec.gpu_count = static_cast<int32_t>(count);
  if (hw["pool"] && !hw["pool"].IsNull()) {
    const std::string pool = hw["pool"].IsScalar() ? hw["pool"].Scalar() : "";
    if (pool != "any" && pool != "team") {
      return FieldError("hardware.pool", "must be any (shared and team agents) or team (only "
                                         "agents whose token is scoped to the session's team)");
    }
    spec.pool = pool == "team" ? SessionSpec::Pool::kTeam : SessionSpec::Pool::kAny;
  }

  ASSIGN_OR_RETURN(YAML::Node knobs, RequireMap(root, "knobs", "knobs", true));
  if (knobs.size() == 0) return FieldError("knobs", "the search space is empty");
  if (knobs.size() > static_cast<size_t>(kMaxKnobs)) {
    return FieldError("knobs", absl::StrCat("at most ", kMaxKnobs, " knobs"));
  }
  for (const auto& kv : knobs) {
    Knob k;
    k.name = kv.first.as<std::string>();
    const std::string field = absl::StrCat("knobs.", k.name);
    if (!ValidIdentifier(k.name)) {
      return FieldError(field, "knob names are identifiers ([A-Za-z_][A-Za-z0-9_]*)");
    }
    if (!kv.second.IsSequence()) return FieldError(field, "must be a list of values");
    if (kv.second.size() == 0) return FieldError(field, "value list is empty");
    if (kv.second.size() > static_cast<size_t>(kMaxValuesPerKnob)) {
      return FieldError(field, absl::StrCat("at most ", kMaxValuesPerKnob, " values"));
    }
    std::set<std::string> seen;
    for (const auto& v : kv.second) {
      if (!v.IsScalar()) return FieldError(field, "values must be scalars");
      // As written: a process's command gets the text the spec wrote
      // (`True` stays `True`); other executors' values are normalised
      // once the executor is known (NormalizeKnobValues).
      std::string value = v.Scalar();
      if (!seen.insert(NormalizeScalar(value)).second) {
        return FieldError(field, absl::StrCat("duplicate value '", value, "'"));
      }
      k.values.push_back(std::move(value));
    }
    spec.knobs.push_back(std::move(k));
  }

  ASSIGN_OR_RETURN(YAML::Node base, RequireMap(root, "baseline", "baseline", true));
  for (const auto& kv : base) {
    const std::string name = kv.first.as<std::string>();
    const std::string field = absl::StrCat("baseline.", name);
    const Knob* knob = spec.FindKnob(name);
    if (!knob) return FieldError(field, "unknown knob (not in knobs)");
    if (!kv.second.IsScalar()) return FieldError(field, "must be a scalar");
    const std::string value = kv.second.Scalar();
    // `true` in the baseline names the knob's `True`: the knob's spelling
    // is the one kept.
    auto same = std::find_if(knob->values.begin(), knob->values.end(), [&](const std::string& v) {
      return v == value || NormalizeScalar(v) == NormalizeScalar(value);
    });
    if (same == knob->values.end()) {
      return FieldError(field, absl::StrCat("value '", value, "' is not in knobs.", name,
                                            " [", absl::StrJoin(knob->values, ", "), "]"));
    }
    spec.baseline[name] = *same;
  }
  for (const Knob& k : spec.knobs) {
    if (!spec.baseline.count(k.name)) {
      return FieldError(absl::StrCat("baseline.", k.name), "is missing: the baseline must set every knob");
    }
  }

  ASSIGN_OR_RETURN(YAML::Node budget, RequireMap(root, "budget", "budget", true));
  RETURN_IF_ERROR(
      CheckKeys(budget, "budget", {"max_trials", "max_gpu_hours", "min_trials", "stop_gain"}));
  ASSIGN_OR_RETURN(int64_t max_trials, ReadInt(budget, "max_trials", "budget.max_trials", 1,
                                               kMaxTrialsLimit, std::nullopt));
  spec.max_trials = static_cast<int32_t>(max_trials);
  ASSIGN_OR_RETURN(spec.max_gpu_hours,
                   ReadDouble(budget, "max_gpu_hours", "budget.max_gpu_hours", 0, 1e7, 0));
  ASSIGN_OR_RETURN(int64_t min_trials, ReadInt(budget, "min_trials", "budget.min_trials", 0,
                                               kMaxTrialsLimit, 10));
  spec.min_trials = static_cast<int32_t>(min_trials);
  ASSIGN_OR_RETURN(spec.stop_gain, ReadDouble(budget, "stop_gain", "budget.stop_gain", 0, 1, 0));

  ASSIGN_OR_RETURN(YAML::Node doctor, RequireMap(root, "doctor", "doctor", false));
  if (doctor) {
    RETURN_IF_ERROR(CheckKeys(doctor, "doctor", {"repeats"}));
    ASSIGN_OR_RETURN(int64_t repeats, ReadInt(doctor, "repeats", "doctor.repeats", 1, 100, 5));
    spec.doctor_repeats = static_cast<int32_t>(repeats);
  }
  ASSIGN_OR_RETURN(int64_t seed, ReadInt(root, "seed", "seed", 0,
                                         std::numeric_limits<int64_t>::max(), 0));
  spec.seed = static_cast<uint64_t>(seed);
  if (root["share_bank"] && !root["share_bank"].IsNull()) {
    const std::string v = NormalizeScalar(root["share_bank"].Scalar());
    if (v != "true" && v != "false") return FieldError("share_bank", "must be true or false");
    spec.share_bank = v == "true";
  }

  RETURN_IF_ERROR(ParseDerived(root, spec));
  RETURN_IF_ERROR(ParseExecutor(root, options, spec));
  if (spec.executor_kind != SessionSpec::ExecutorKind::kProcess) {
    if (!spec.derived.empty()) {
      return FieldError("derived", "derived values fill a process's command; this executor has none");
    }
    NormalizeKnobValues(spec);
  }
  RETURN_IF_ERROR(ParseWorkloadShape(wl, spec));
  RETURN_IF_ERROR(ParseRepository(root, options, spec));
  if (spec.executor_kind == SessionSpec::ExecutorKind::kProcess && spec.repository.url.empty() &&
      spec.process.workdir.empty()) {
    return FieldError("executor.process.workdir",
                      "is required (an absolute path on the agents) when the spec's folder is "
                      "not known");
  }
  if (spec.pool == SessionSpec::Pool::kTeam && !options.team_known) {
    return FieldError("hardware.pool",
                      "team needs a session that belongs to a team: create it with a team's token");
  }
  RETURN_IF_ERROR(ParseContract(root, options, spec));
  RETURN_IF_ERROR(CheckReaderAgainstContract(spec));
  return spec;
}

}  // namespace

std::string NormalizedKnobValue(const std::string& value) { return NormalizeScalar(value); }

std::string ShapeSpec::SimValueOf(const std::string& name, const std::string& value) const {
  const std::string v = NormalizeScalar(value);
  if (auto it = knobs.find(name); it != knobs.end()) {
    if (auto jt = it->second.values.find(v); jt != it->second.values.end()) return jt->second;
  }
  return v;
}

std::string ShapeSpec::SimKnobOf(const std::string& name) const {
  if (auto it = knobs.find(name); it != knobs.end()) return it->second.sim;
  return IsSimulatorKnob(name) ? name : "";
}

bool IsRemoteRepositoryUrl(const std::string& url) {
  const size_t colon = url.find(':');
  return absl::StrContains(url, "://") ||
         (colon != std::string::npos && colon > 0 && url.find('/') > colon);
}

bool IsValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string CanonicalPrecision(const std::string& name) {
  const std::string p = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  if (p == "float32" || p == "fp32" || p == "f32" || p == "float" || p == "torch.float32") return "fp32";
  if (p == "bfloat16" || p == "bf16" || p == "torch.bfloat16") return "bf16";
  if (p == "float16" || p == "fp16" || p == "f16" || p == "half" || p == "torch.float16") return "fp16";
  if (p == "tensorfloat32" || p == "tf32") return "tf32";
  if (p == "float8" || p == "fp8" || p == "float8_e4m3fn" || p == "e4m3" || p == "hybrid") return "fp8";
  return p;
}

bool PrecisionAllowed(const std::vector<std::string>& allowed, const std::string& dtype) {
  const std::string want = CanonicalPrecision(dtype);
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& a) { return CanonicalPrecision(a) == want; });
}

std::string TrialEnvNameError(const std::string& name) {
  if (name.empty() || name.size() > 128 || !(absl::ascii_isupper(name[0]) || name[0] == '_')) {
    return "variable names are [A-Z_][A-Z0-9_]*";
  }
  for (char c : name) {
    if (!(absl::ascii_isupper(c) || absl::ascii_isdigit(c) || c == '_')) {
      return "variable names are [A-Z_][A-Z0-9_]*";
    }
  }
  if (absl::StartsWith(name, "INFRARSI_")) return "INFRARSI_ variables are the agent's own";
  // The agent sets these for every trial, or they choose which program the
  // allowed command is (PATH, the dynamic linker's).
  for (const char* reserved : {"PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES",
                               "NVIDIA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"}) {
    if (name == reserved) return absl::StrCat(name, " is set by the agent for every trial");
  }
  if (absl::StartsWith(name, "LD_")) {
    return "the dynamic linker's variables would change which program the allowed command runs";
  }
  return "";
}

const DerivedExpr* SessionSpec::FindDerived(const std::string& name) const {
  for (const auto& [n, e] : derived) {
    if (n == name) return &e;
  }
  return nullptr;
}

Config CommandValues(const SessionSpec& spec, const Config& config) {
  Config out = config;
  for (const auto& [name, expr] : spec.derived) {
    // Checked at Init for every setting of the space.
    auto v = expr.Eval(config);
    if (v.ok()) out[name] = absl::StrCat(*v);
  }
  return out;
}

std::string ContractText(const SessionSpec& s) {
  const ContractSpec& c = s.contract;
  std::string out = absl::StrCat(
      "workload=", s.WorkloadSignature(),
      absl::StrFormat("\nflops=%.9g/%.9g", s.params, s.flops_per_token), "\nhardware=", s.gpu,
      "x", s.gpu_count,
      "\nbaseline=", ConfigKey(s.baseline), "\nexecutor=", s.ExecutorName(),
      "\ntokens_per_step=", c.tokens_per_step, "\ntimed_steps=", c.timed_steps,
      "\ndata_seed=", c.data_seed_set ? absl::StrCat(c.data_seed) : "-",
      absl::StrFormat("\nloss_tol=%.9g+%.9g\ntiming=%.9g", c.loss_abs_tol, c.loss_rel_tol,
                      c.timing_tolerance),
      "\nprecision=", absl::StrJoin(c.precision, "|"),
      "\noptimizer_in_window=", c.optimizer_in_window ? "1" : "0",
      "\neditable=", absl::StrJoin(c.editable, "|"), "\nprotected=",
      absl::StrJoin(c.protected_hashes, "|", absl::PairFormatter("@")), "\nknobs=");
  for (const Knob& k : s.knobs) absl::StrAppend(&out, k.name, ":", absl::StrJoin(k.values, "|"), ";");
  for (const PatchSpec& p : s.patches) absl::StrAppend(&out, "\npatch=", p.name, ":", StableHash(p.diff));
  if (!s.repository.url.empty()) {
    absl::StrAppend(&out, "\nrepository=", s.repository.url, "@", s.repository.base_commit);
  }
  if (s.pool == SessionSpec::Pool::kTeam) absl::StrAppend(&out, "\npool=team");
  // Only when set, so contracts locked before these existed hash alike.
  for (const auto& [name, expr] : s.derived) absl::StrAppend(&out, "\nderived=", name, ":", expr.text());
  for (const auto& [name, value] : s.process.env) absl::StrAppend(&out, "\nenv=", name, ":", value);
  if (const LogReaderSpec& r = s.process.metrics; !r.UsesHarness()) {
    absl::StrAppend(&out, "\nreader=", r.reader, ":", r.stream, ":", r.warmup_steps, ":",
                    StableHash(r.pattern));
  }
  for (const auto& [a, b] : s.patch_conflicts) absl::StrAppend(&out, "\nconflict=", a, "+", b);
  return out;
}

std::vector<const PatchSpec*> SessionSpec::PatchesOn(const Config& config) const {
  std::vector<const PatchSpec*> out;
  for (const PatchSpec& p : patches) {
    auto it = config.find(p.knob);
    if (it != config.end() && it->second == "on") out.push_back(&p);
  }
  return out;
}

std::string SessionSpec::PatchConflict(const Config& config) const {
  for (const auto& [a, b] : patch_conflicts) {
    bool on_a = false, on_b = false;
    for (const PatchSpec* p : PatchesOn(config)) {
      on_a = on_a || p->name == a;
      on_b = on_b || p->name == b;
    }
    if (on_a && on_b) return absl::StrCat("patches ", a, " and ", b, " do not apply together");
  }
  return "";
}

std::string SessionSpec::WorkloadSignature() const {
  return absl::StrCat(model, "/gb", global_batch, "/seq", seq_len);
}

int64_t SessionSpec::SpaceSize() const {
  int64_t n = 1;
  for (const Knob& k : knobs) {
    const int64_t v = static_cast<int64_t>(k.values.size());
    if (n > std::numeric_limits<int64_t>::max() / v) return std::numeric_limits<int64_t>::max();
    n *= v;
  }
  return n;
}

const Knob* SessionSpec::FindKnob(const std::string& name) const {
  for (const Knob& k : knobs) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

const std::set<std::string>& SlurmReservedOptions() {
  static const auto* kReserved = new std::set<std::string>{
      "--nodes", "--ntasks", "--ntasks-per-node", "--gres", "--gpus", "--gpus-per-node",
      "--partition", "--account", "--qos", "--time", "--exclude", "--output", "--error",
      "--input", "--chdir", "--job-name", "--export", "--export-file", "--get-user-env",
      "--parsable", "--wrap", "--uid", "--gid", "--requeue", "--no-requeue", "--array",
      "--dependency", "--wait", "--open-mode", "--propagate", "--container", "--batch",
      "--signal", "--test-only"};
  return *kReserved;
}

std::string SlurmOptionError(const std::string& option, std::string* name) {
  if (option.size() > 200) return "at most 200 characters";
  if (option.size() < 3 || option[0] != '-' || option[1] != '-' || !absl::ascii_islower(option[2])) {
    return absl::StrCat("'", option, "' must be a long option: --name or --name=value");
  }
  const size_t eq = option.find('=');
  *name = option.substr(0, eq);
  for (char c : name->substr(2)) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
      return absl::StrCat("'", *name, "': option names are lowercase letters, digits and '-'");
    }
  }
  for (char c : option) {
    if (!absl::ascii_isgraph(c)) return "no spaces or control characters";
  }
  const std::string reserved = SlurmReservedOption(*name);
  if (reserved == *name) {
    return absl::StrCat(*name, " is set by InfraRSI from the spec (hardware, executor.slurm) "
                               "and the agent's policy");
  }
  if (!reserved.empty()) {
    return absl::StrCat(*name, " abbreviates ", reserved,
                        " (sbatch takes any unambiguous prefix of an option), which InfraRSI "
                        "sets from the spec and the agent's policy");
  }
  return "";
}

std::string SlurmReservedOption(const std::string& name) {
  if (name.size() < 3) return "";
  // sbatch, like getopt_long, reads "--ui" as "--uid" and "--expor" as
  // "--export": any prefix of a reserved name is that name to it. The set
  // is sorted, so an exact name ("--gpus") comes before its extensions
  // ("--gpus-per-node").
  for (const std::string& r : SlurmReservedOptions()) {
    if (absl::StartsWith(r, name)) return r;
  }
  return "";
}

namespace {
const ExecutorTraits kExecutorTraits[] = {
    // kind, name, runs_code, agent_clock, simulated
    {SessionSpec::ExecutorKind::kReplay, "replay", false, false, false},
    {SessionSpec::ExecutorKind::kProcess, "process", true, true, false},
    {SessionSpec::ExecutorKind::kSim, "sim", false, false, true},
};
}  // namespace

const ExecutorTraits& ExecutorTraitsOf(SessionSpec::ExecutorKind kind) {
  for (const ExecutorTraits& t : kExecutorTraits) {
    if (t.kind == kind) return t;
  }
  return kExecutorTraits[0];  // every kind has a row (spec_test checks)
}

const ExecutorTraits& SessionSpec::Executor() const { return ExecutorTraitsOf(executor_kind); }

std::string SessionSpec::ExecutorName() const {
  if (slurm.enabled) return "slurm";
  return Executor().name;
}

models::sim::LaunchKnobs SimKnobs(const SessionSpec& spec, const Config& config) {
  models::sim::LaunchKnobs k;
  std::string unused;
  for (const auto& [name, value] : spec.sim.fixed) models::sim::SetKnob(&k, name, value, &unused);
  for (const auto& [name, value] : config) models::sim::SetKnob(&k, name, value, &unused);
  return k;
}

absl::StatusOr<SessionSpec> ParseSpec(const std::string& yaml, const SpecParseOptions& options) {
  if (yaml.size() > kMaxSpecBytes) {
    return FieldError("spec", absl::StrCat("larger than the limit of ", kMaxSpecBytes, " bytes"));
  }
  if (!options.spec_dir.empty() && !std::filesystem::path(options.spec_dir).is_absolute()) {
    return FieldError("spec_dir", absl::StrCat("must be absolute, got '", options.spec_dir, "'"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return FieldError("spec", absl::StrCat("invalid YAML at line ", e.mark.line + 1, ": ", e.msg));
  }
  try {
    return ParseSpecNode(root, options);
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on malformed shapes (e.g. a sequence used as a key).
    return FieldError("spec", absl::StrCat("malformed at line ", e.mark.line + 1, ": ", e.msg));
  }
}

absl::StatusOr<std::vector<std::string>> SplitCommandLine(const std::string& command) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      if (end == std::string::npos) return absl::InvalidArgumentError("unbalanced single quote");
      cur += command.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < command.size() && command[j] != '"'; ++j) {
        if (command[j] == '\\' && j + 1 < command.size() &&
            (command[j + 1] == '"' || command[j + 1] == '\\')) {
          ++j;
        }
        cur += command[j];
      }
      if (j >= command.size()) return absl::InvalidArgumentError("unbalanced double quote");
      in_word = true;
      i = j;
    } else if (c == '\\') {
      if (i + 1 >= command.size()) return absl::InvalidArgumentError("trailing backslash");
      cur += command[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

void FillKnobDefaults(const SessionSpec& spec, Config* config) {
  for (const Knob& k : spec.knobs) {
    auto it = config->find(k.name);
    if (it == config->end()) {
      auto b = spec.baseline.find(k.name);
      if (b != spec.baseline.end()) (*config)[k.name] = b->second;
      continue;
    }
    // A trial recorded when booleans had one spelling ("true") reads as the
    // knob's own spelling now ("True"): the same setting.
    if (std::find(k.values.begin(), k.values.end(), it->second) == k.values.end()) {
      for (const std::string& v : k.values) {
        if (NormalizeScalar(v) == NormalizeScalar(it->second)) {
          it->second = v;
          break;
        }
      }
    }
  }
}

std::string SubstituteKnobs(const std::string& arg, const Config& config) {
  std::string out;
  size_t pos = 0;
  while (pos < arg.size()) {
    const size_t open = arg.find('{', pos);
    if (open == std::string::npos) break;
    const size_t close = arg.find('}', open + 1);
    if (close == std::string::npos) break;
    out += arg.substr(pos, open - pos);
    const std::string inner = arg.substr(open + 1, close - open - 1);
    const size_t q = inner.find('?');
    auto it = config.find(q == std::string::npos ? inner : inner.substr(0, q));
    if (it == config.end()) {
      out += arg.substr(open, close - open + 1);
    } else if (q == std::string::npos) {
      out += it->second;
    } else if (NormalizeScalar(it->second) == "true") {
      out += inner.substr(q + 1);
    }
    pos = close + 1;
  }
  out += arg.substr(pos);
  return out;
}

std::vector<std::string> SubstituteCommand(const std::vector<std::string>& argv,
                                           const Config& config) {
  std::vector<std::string> out;
  for (const std::string& a : argv) {
    std::string v = SubstituteKnobs(a, config);
    const bool lone_switch = a.size() > 2 && a.front() == '{' && a.back() == '}' &&
                             a.find('?') != std::string::npos &&
                             a.find('{', 1) == std::string::npos;
    if (lone_switch && v.empty()) continue;
    out.push_back(std::move(v));
  }
  return out;
}

std::string ConfigKey(const Config& config) {
  return absl::StrJoin(config, ",", absl::PairFormatter("="));
}

std::string EncodeConfigJson(const Config& config) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : config) {
    if (!first) out += ",";
    first = false;
    out += JsonQuote(k) + ":" + JsonQuote(v);
  }
  return out + "}";
}

absl::StatusOr<Config> DecodeConfigJson(const std::string& json) {
  // What EncodeConfigJson writes of an ASCII setting is read directly
  // (protobuf's JSON parser took 40 ms for a 2,000-trial history, six
  // proposals' worth); anything else goes to it.
  if (std::optional<Config> fast = ParseFlatStringObject(json)) return *std::move(fast);
  google::protobuf::Struct st;
  if (!google::protobuf::util::JsonStringToMessage(json, &st).ok()) {
    return absl::DataLossError(absl::StrCat("config: not a JSON object: ", json));
  }
  Config out;
  for (const auto& [k, v] : st.fields()) {
    if (v.kind_case() != google::protobuf::Value::kStringValue) {
      return absl::DataLossError(absl::StrCat("config.", k, ": not a string"));
    }
    out[k] = v.string_value();
  }
  return out;
}

std::string EncodeDoubleMapJson(const std::map<std::string, double>& m, int digits) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : m) {
    if (!first) out += ",";
    first = false;
    out += JsonQuote(k) + ":" + (std::isfinite(v) ? absl::StrFormat("%.*g", digits, v) : "null");
  }
  return out + "}";
}

absl::StatusOr<std::map<std::string, double>> DecodeDoubleMapJson(const std::string& json) {
  std::map<std::string, double> out;
  if (json.empty()) return out;
  google::protobuf::Struct st;
  if (!google::protobuf::util::JsonStringToMessage(json, &st).ok()) {
    return absl::DataLossError(absl::StrCat("phases: not a JSON object: ", json));
  }
  for (const auto& [k, v] : st.fields()) {
    if (v.kind_case() == google::protobuf::Value::kNumberValue) out[k] = v.number_value();
  }
  return out;
}

std::string StableHash(const std::string& data) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return absl::StrFormat("%016x", h);
}

std::vector<std::string> CommandPlaceholders(const std::string& word) { return Placeholders(word); }

}  // namespace infrarsi
