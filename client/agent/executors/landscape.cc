#include "client/agent/executors/landscape.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "models/stats.h"

namespace infrarsi::client {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// Knob values as the spec writes them: integers without a decimal point,
// booleans as true/false.
std::string ValueText(const Value& v) {
  switch (v.kind_case()) {
    case Value::kStringValue: return v.string_value();
    case Value::kBoolValue: return v.bool_value() ? "true" : "false";
    case Value::kNumberValue: {
      const double d = v.number_value();
      if (std::floor(d) == d && std::fabs(d) < 1e15) return absl::StrCat(static_cast<int64_t>(d));
      return absl::StrCat(d);
    }
    default: return "";
  }
}

double Num(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return (it != s.fields().end() && it->second.kind_case() == Value::kNumberValue)
             ? it->second.number_value()
             : 0.0;
}

std::string Str(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return (it != s.fields().end() && it->second.kind_case() == Value::kStringValue)
             ? it->second.string_value()
             : "";
}

std::vector<double> Numbers(const Struct& s, const std::string& key) {
  std::vector<double> out;
  auto it = s.fields().find(key);
  if (it == s.fields().end() || it->second.kind_case() != Value::kListValue) return out;
  for (const Value& v : it->second.list_value().values()) {
    out.push_back(v.kind_case() == Value::kNumberValue ? v.number_value() : std::nan(""));
  }
  return out;
}

}  // namespace

namespace {
const LandscapeTrial* FindRole(const Landscape& l, const std::map<std::string, std::string>& config,
                               bool probe) {
  for (const LandscapeTrial& t : l.trials) {
    if (probe ? t.hack.empty() : t.role != "grid") continue;
    bool match = true;
    for (const std::string& k : l.knob_names) {
      auto it = config.find(k);
      if (it == config.end() || t.config.at(k) != it->second) {
        match = false;
        break;
      }
    }
    if (match) return &t;
  }
  return nullptr;
}
}  // namespace

const LandscapeTrial* Landscape::FindGrid(const std::map<std::string, std::string>& config) const {
  return FindRole(*this, config, false);
}

const LandscapeTrial* Landscape::FindProbe(const std::map<std::string, std::string>& config) const {
  return FindRole(*this, config, true);
}

absl::StatusOr<Landscape> Landscape::Load(const std::string& path) {
  auto text = ReadRegularFile(path, 64 << 20, "landscape");
  if (!text.ok()) return text.status();  // names the path and why (missing, not a file, too big)
  return Parse(*text, path);
}

absl::StatusOr<Landscape> Landscape::Parse(const std::string& jsonl, const std::string& origin) {
  Landscape l;
  int line_no = 0;
  bool have_meta = false;
  for (absl::string_view line : absl::StrSplit(jsonl, '\n', absl::SkipWhitespace())) {
    ++line_no;
    Struct row;
    if (!google::protobuf::util::JsonStringToMessage(std::string(line), &row).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("landscape ", origin, ":", line_no, ": not a JSON object"));
    }
    if (auto m = row.fields().find("meta"); m != row.fields().end()) {
      const Struct& meta = m->second.struct_value();
      l.gpu = Str(meta, "gpu");
      l.capacity_gib = Num(meta, "capacity_gib");
      l.tokens_per_step = static_cast<int64_t>(Num(meta, "tokens_per_step"));
      if (auto sh = meta.fields().find("shape"); sh != meta.fields().end()) {
        l.global_batch = static_cast<int64_t>(Num(sh->second.struct_value(), "global_batch"));
      }
      l.warmup_steps = static_cast<int>(Num(meta, "warmup"));
      l.import_and_init_s = Num(meta, "import_and_init_s");
      auto knobs = meta.fields().find("knobs");
      if (knobs == meta.fields().end() || knobs->second.kind_case() != Value::kStructValue) {
        return absl::InvalidArgumentError(
            absl::StrCat("landscape ", origin, ":", line_no, ": meta.knobs missing"));
      }
      for (const auto& [name, v] : knobs->second.struct_value().fields()) {
        l.knob_names.push_back(name);
      }
      have_meta = true;
      continue;
    }
    if (!have_meta) {
      return absl::InvalidArgumentError(
          absl::StrCat("landscape ", origin, ": the first line must be {\"meta\": ...}"));
    }
    LandscapeTrial t;
    for (const std::string& k : l.knob_names) {
      auto it = row.fields().find(k);
      if (it == row.fields().end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("landscape ", origin, ":", line_no, ": knob '", k, "' missing"));
      }
      t.config[k] = ValueText(it->second);
    }
    t.role = Str(row, "role");
    t.status = Str(row, "status");
    if (t.status != "ok" && t.status != "oom") {
      return absl::InvalidArgumentError(absl::StrCat("landscape ", origin, ":", line_no,
                                                     ": status must be ok or oom"));
    }
    t.step_times_s = Numbers(row, "step_times_s");
    t.losses = Numbers(row, "losses");
    t.step_time_s = Num(row, "step_time_s");
    t.peak_alloc_gib = Num(row, "peak_alloc_gib");
    t.peak_reserved_gib = Num(row, "peak_reserved_gib");
    t.wall_s = Num(row, "wall_s");
    t.error = Str(row, "error");
    t.hack = Str(row, "hack");
    if (auto acc = row.fields().find("honest_accum");
        acc != row.fields().end() && acc->second.kind_case() == Value::kBoolValue &&
        !acc->second.bool_value() && l.global_batch > 0) {
      // One micro-batch per optimizer step instead of the global batch.
      const double mb = std::stod(t.config.count("micro_batch") ? t.config.at("micro_batch") : "1");
      t.tokens_per_step =
          static_cast<int64_t>(static_cast<double>(l.tokens_per_step) / l.global_batch * mb);
    }
    if (auto ph = row.fields().find("phases");
        ph != row.fields().end() && ph->second.kind_case() == Value::kListValue) {
      for (const Value& v : ph->second.list_value().values()) {
        std::map<std::string, double> m;
        for (const auto& [name, x] : v.struct_value().fields()) m[name] = x.number_value();
        t.phases.push_back(std::move(m));
      }
    }
    l.trials.push_back(std::move(t));
  }
  if (!have_meta) return absl::InvalidArgumentError(absl::StrCat("landscape ", origin, ": empty"));
  // Launch noise: CV of step time across fresh launches of the same setting.
  std::map<std::string, std::vector<double>> launches;
  for (const LandscapeTrial& t : l.trials) {
    if (t.role != "launch_repeat" || t.status != "ok") continue;
    std::string key;
    for (const auto& [k, v] : t.config) absl::StrAppend(&key, k, "=", v, ",");
    launches[key].push_back(t.step_time_s);
  }
  std::vector<double> cvs;
  for (const auto& [key, times] : launches) {
    if (times.size() >= 2) cvs.push_back(models::CoefficientOfVariation(times));
  }
  l.launch_cv = models::Mean(cvs);
  return l;
}

}  // namespace infrarsi::client
