#include "core/priors.h"

#include <yaml-cpp/yaml.h>

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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
    else if (key == "fit") e.fit = v;
    else if (key == "fit_sd") e.fit_sd = v;
    else return absl::InvalidArgumentError(absl::StrCat(field, ".", key, ": unknown field"));
  }
  if (e.time_sd <= 0 || e.fit_sd <= 0) {
    return absl::InvalidArgumentError(field + ": uncertainties must be positive");
  }
  return e;
}

}  // namespace

Effect Priors::EffectOf(const SessionSpec& spec, const std::string& knob,
                        const std::string& value) const {
  const std::string& base = spec.baseline.at(knob);
  if (auto d = per_doubling.find(knob); d != per_doubling.end()) {
    double v = 0, b = 0;
    if (absl::SimpleAtod(value, &v) && absl::SimpleAtod(base, &b) && v > 0 && b > 0) {
      const double doublings = std::log2(v / b);
      Effect e;
      e.time = d->second.time * doublings;
      e.time_sd = d->second.time_sd * std::max(1.0, std::fabs(doublings));
      e.fit = d->second.fit * doublings;
      e.fit_sd = d->second.fit_sd * std::max(1.0, std::fabs(doublings));
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
  e.fit = a.fit - b.fit;
  e.time_sd = std::sqrt(a.time_sd * a.time_sd + b.time_sd * b.time_sd);
  e.fit_sd = std::sqrt(a.fit_sd * a.fit_sd + b.fit_sd * b.fit_sd);
  if (e.time_sd == 0) e.time_sd = Effect().time_sd;
  if (e.fit_sd == 0) e.fit_sd = Effect().fit_sd;
  return e;
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

}  // namespace infrarsi
