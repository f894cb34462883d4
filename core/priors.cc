#include "core/priors.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace infrarsi {
namespace {

absl::StatusOr<Effect> ParseEffect(const YAML::Node& n, const std::string& field) {
  if (!n.IsMap()) return absl::InvalidArgumentError(field + ": must be a mapping");
  Effect e;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    double v = 0;
    if (!kv.second.IsScalar() || !absl::SimpleAtod(kv.second.Scalar(), &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", key, ": must be a number"));
    }
    if (key == "time") e.time = v;
    else if (key == "time_sd") e.time_sd = v;
    else if (key == "mem") e.mem = v;
    else if (key == "mem_sd") e.mem_sd = v;
    else return absl::InvalidArgumentError(absl::StrCat(field, ".", key, ": unknown field"));
  }
  if (e.time_sd <= 0 || e.mem_sd <= 0) {
    return absl::InvalidArgumentError(field + ": uncertainties must be positive");
  }
  return e;
}

}  // namespace

Effect Priors::EffectOf(const SessionSpec& spec, const std::string& knob,
                        const std::string& value) const {
  // A patch's own prior, from the spec, speaks for switching it on.
  for (const PatchSpec& p : spec.patches) {
    if (p.knob == knob && p.has_prior && value == "on" && !values.count(knob)) {
      Effect e;
      e.time = p.prior_time;
      e.time_sd = p.prior_time_sd;
      return e;
    }
  }
  const std::string& base = spec.baseline.at(knob);
  if (auto d = per_doubling.find(knob); d != per_doubling.end()) {
    double v = 0, b = 0;
    if (absl::SimpleAtod(value, &v) && absl::SimpleAtod(base, &b) && v > 0 && b > 0) {
      const double doublings = std::log2(v / b);
      Effect e;
      e.time = d->second.time * doublings;
      e.time_sd = d->second.time_sd * std::max(1.0, std::fabs(doublings));
      e.mem = d->second.mem * doublings;
      e.mem_sd = d->second.mem_sd * std::max(1.0, std::fabs(doublings));
      return e;
    }
  }
  auto k = values.find(knob);
  if (k == values.end()) return Effect();
  const Effect none{0, 0, 0, 0};
  auto of = [&](const std::string& v) {
    auto it = k->second.find(v);
    return it == k->second.end() ? none : it->second;
  };
  const Effect a = of(value), b = of(base);
  Effect e;
  e.time = a.time - b.time;
  e.mem = a.mem - b.mem;
  e.time_sd = std::sqrt(a.time_sd * a.time_sd + b.time_sd * b.time_sd);
  e.mem_sd = std::sqrt(a.mem_sd * a.mem_sd + b.mem_sd * b.mem_sd);
  if (e.time_sd == 0) e.time_sd = Effect().time_sd;
  if (e.mem_sd == 0) e.mem_sd = Effect().mem_sd;
  return e;
}

namespace {
std::string EffectJson(const Effect& e) {
  return absl::StrFormat(R"({"time":%.17g,"time_sd":%.17g,"mem":%.17g,"mem_sd":%.17g})", e.time,
                         e.time_sd, e.mem, e.mem_sd);
}
}  // namespace

std::string EncodePriorsJson(const Priors& priors) {
  std::string out = R"({"knobs":{)";
  bool first_knob = true;
  for (const auto& [knob, values] : priors.values) {
    absl::StrAppend(&out, first_knob ? "" : ",", JsonQuote(knob), ":{");
    first_knob = false;
    bool first = true;
    for (const auto& [value, e] : values) {
      absl::StrAppend(&out, first ? "" : ",", JsonQuote(value), ":", EffectJson(e));
      first = false;
    }
    absl::StrAppend(&out, "}");
  }
  absl::StrAppend(&out, R"(},"per_doubling":{)");
  bool first = true;
  for (const auto& [knob, e] : priors.per_doubling) {
    absl::StrAppend(&out, first ? "" : ",", JsonQuote(knob), ":", EffectJson(e));
    first = false;
  }
  return out + "}}";
}

absl::StatusOr<Priors> ParsePriors(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("priors: invalid YAML: ", e.msg));
  }
  Priors p;
  if (!root.IsMap()) return absl::InvalidArgumentError("priors: must be a mapping");
  for (const auto& top : root) {
    const std::string key = top.first.as<std::string>();
    if (key == "knobs") {
      for (const auto& k : top.second) {
        const std::string knob = k.first.as<std::string>();
        for (const auto& v : k.second) {
          const std::string value = v.first.as<std::string>();
          auto e = ParseEffect(v.second, absl::StrCat("knobs.", knob, ".", value));
          if (!e.ok()) return e.status();
          p.values[knob][value] = *e;
        }
      }
    } else if (key == "per_doubling") {
      for (const auto& k : top.second) {
        const std::string knob = k.first.as<std::string>();
        auto e = ParseEffect(k.second, "per_doubling." + knob);
        if (!e.ok()) return e.status();
        p.per_doubling[knob] = *e;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("priors.", key, ": unknown field"));
    }
  }
  return p;
}

absl::Status ValidatePriorsFor(const Priors& priors, const SessionSpec& spec) {
  auto check = [](const Effect& e, const std::string& field) -> absl::Status {
    for (const auto& [name, v] : {std::pair<const char*, double>{"time", e.time}, {"mem", e.mem}}) {
      if (std::fabs(v) > 2.0) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".", name, ": ", v, " is outside [-2, 2]"));
      }
    }
    for (const auto& [name, v] :
         {std::pair<const char*, double>{"time_sd", e.time_sd}, {"mem_sd", e.mem_sd}}) {
      if (!(v > 0 && v <= 3.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".", name, ": ", v, " is outside (0, 3]"));
      }
    }
    return absl::OkStatus();
  };
  for (const auto& [knob, vals] : priors.values) {
    const Knob* k = spec.FindKnob(knob);
    if (k == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("knobs.", knob, ": not a knob of this session"));
    }
    for (const auto& [value, e] : vals) {
      if (std::find(k->values.begin(), k->values.end(), value) == k->values.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("knobs.", knob, ".", value, ": not a value of this knob"));
      }
      if (absl::Status st = check(e, absl::StrCat("knobs.", knob, ".", value)); !st.ok()) return st;
    }
  }
  for (const auto& [knob, e] : priors.per_doubling) {
    const Knob* k = spec.FindKnob(knob);
    if (k == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("per_doubling.", knob, ": not a knob of this session"));
    }
    for (const std::string& v : k->values) {
      double d = 0;
      if (!absl::SimpleAtod(v, &d) || d <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("per_doubling.", knob, ": the knob is not numeric ('", v, "')"));
      }
    }
    if (absl::Status st = check(e, "per_doubling." + knob); !st.ok()) return st;
  }
  return absl::OkStatus();
}

Priors BlendPriors(const Priors& base, const Priors& other, const SessionSpec& spec) {
  auto blend = [](double m1, double s1, double m2, double s2, double* m, double* s) {
    const double p1 = 1.0 / (s1 * s1), p2 = 1.0 / (s2 * s2);
    *m = (m1 * p1 + m2 * p2) / (p1 + p2);
    *s = std::sqrt(1.0 / (p1 + p2));
  };
  Priors out;
  for (const Knob& k : spec.knobs) {
    const std::string& b = spec.baseline.at(k.name);
    for (const std::string& v : k.values) {
      if (v == b) continue;
      const Effect e1 = base.EffectOf(spec, k.name, v), e2 = other.EffectOf(spec, k.name, v);
      Effect e;
      blend(e1.time, e1.time_sd, e2.time, e2.time_sd, &e.time, &e.time_sd);
      blend(e1.mem, e1.mem_sd, e2.mem, e2.mem_sd, &e.mem, &e.mem_sd);
      out.values[k.name][v] = e;
    }
    // The baseline value is the reference: no effect, no uncertainty.
    out.values[k.name][b] = Effect{0, 0, 0, 0};
  }
  return out;
}

}  // namespace infrarsi
