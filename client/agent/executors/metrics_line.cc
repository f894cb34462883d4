#include "client/agent/executors/metrics_line.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi::client {
namespace {

using google::protobuf::Value;

absl::StatusOr<double> Number(const google::protobuf::Struct& st, const std::string& key,
                              bool required, double dflt = 0) {
  auto it = st.fields().find(key);
  if (it == st.fields().end()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat("metrics line: missing field '", key, "'"));
    return dflt;
  }
  if (it->second.kind_case() != Value::kNumberValue || !std::isfinite(it->second.number_value())) {
    // NaN/inf losses arrive as strings or nulls in JSON; they are reported
    // as NaN so the server can refuse the trial, not as a parse failure.
    if (key == "loss") return std::nan("");
    return absl::InvalidArgumentError(absl::StrCat("metrics line: field '", key, "' must be a number"));
  }
  return it->second.number_value();
}

}  // namespace

absl::StatusOr<MetricsLine> ParseMetricsLine(const std::string& line) {
  if (line.size() > kMaxMetricsLineBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics line: longer than the limit of ", kMaxMetricsLineBytes, " bytes"));
  }
  google::protobuf::Struct st;
  if (!google::protobuf::util::JsonStringToMessage(line, &st).ok()) {
    return absl::InvalidArgumentError("metrics line: not a JSON object");
  }
  MetricsLine out;
  if (auto ev = st.fields().find("event"); ev != st.fields().end()) {
    if (ev->second.kind_case() == Value::kStringValue && ev->second.string_value() == "oom") {
      out.oom = true;
      return out;
    }
    return absl::InvalidArgumentError("metrics line: unknown 'event' (known: oom)");
  }
  auto step = Number(st, "step", true);
  if (!step.ok()) return step.status();
  auto loss = Number(st, "loss", true);
  if (!loss.ok()) return loss.status();
  auto tokens = Number(st, "tokens", true);
  if (!tokens.ok()) return tokens.status();
  auto time = Number(st, "step_time_s", true);
  if (!time.ok()) return time.status();
  auto mem = Number(st, "peak_mem_gib", true);
  if (!mem.ok()) return mem.status();
  if (*step < 0 || *tokens < 0 || *time < 0 || *mem < 0) {
    return absl::InvalidArgumentError("metrics line: step, tokens, step_time_s and peak_mem_gib must be >= 0");
  }
  // Integers must be whole and fit: casting 1e300 to an integer is
  // undefined behaviour (found by fuzz_metrics).
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  auto whole = [](double v, double max) { return std::isfinite(v) && v == std::floor(v) && v <= max; };
  if (!whole(*step, kMaxExact) || !whole(*tokens, kMaxExact)) {
    return absl::InvalidArgumentError("metrics line: step and tokens must be whole numbers up to 2^53");
  }
  out.step.set_step(static_cast<int64_t>(*step));
  out.step.set_loss(*loss);
  out.step.set_tokens(static_cast<int64_t>(*tokens));
  out.step.set_step_time_s(*time);
  out.step.set_peak_mem_gib(*mem);
  if (auto w = st.fields().find("warmup"); w != st.fields().end()) {
    if (w->second.kind_case() != Value::kBoolValue) {
      return absl::InvalidArgumentError("metrics line: field 'warmup' must be a boolean");
    }
    out.step.set_warmup(w->second.bool_value());
  }
  if (auto d = st.fields().find("data_seed"); d != st.fields().end()) {
    if (d->second.kind_case() != Value::kNumberValue ||
        !whole(std::fabs(d->second.number_value()), kMaxExact)) {
      return absl::InvalidArgumentError("metrics line: field 'data_seed' must be an integer");
    }
    out.step.set_data_seed(static_cast<int64_t>(d->second.number_value()));
  }
  if (auto d = st.fields().find("dtype"); d != st.fields().end()) {
    if (d->second.kind_case() != Value::kStringValue) {
      return absl::InvalidArgumentError("metrics line: field 'dtype' must be a string");
    }
    out.step.set_dtype(d->second.string_value());
  }
  if (auto o = st.fields().find("optimizer_steps"); o != st.fields().end()) {
    if (o->second.kind_case() != Value::kNumberValue || o->second.number_value() < 0 ||
        !whole(o->second.number_value(), 1e6)) {
      return absl::InvalidArgumentError(
          "metrics line: field 'optimizer_steps' must be a non-negative integer");
    }
    out.step.set_optimizer_steps(static_cast<int32_t>(o->second.number_value()));
  }
  if (auto p = st.fields().find("phases"); p != st.fields().end()) {
    if (p->second.kind_case() != Value::kStructValue) {
      return absl::InvalidArgumentError("metrics line: field 'phases' must be an object");
    }
    for (const auto& [name, v] : p->second.struct_value().fields()) {
      if (v.kind_case() != Value::kNumberValue) {
        return absl::InvalidArgumentError(
            absl::StrCat("metrics line: phases.", name, " must be a number"));
      }
      (*out.step.mutable_phases())[name] = v.number_value();
    }
  }
  return out;
}

}  // namespace infrarsi::client
