#include "core/value_blame.h"

#include <algorithm>

#include "core/trial_status.h"

namespace infrarsi {

bool IsContractEvidence(const std::string& status) {
  return status == trial_status::kViolation || status == trial_status::kTimeout;
}

ValueBlame::ValueBlame(const SessionSpec& spec, const std::vector<Observation>& history) {
  std::set<Value> cleared;
  for (const Observation& o : history) {
    // It ran and broke no rule: none of its values is poison. (An OOM
    // clears nothing: it ended before its loss could be judged.)
    if (o.status == trial_status::kOk) {
      for (const auto& kv : o.config) cleared.insert(kv);
    }
  }
  for (const Observation& o : history) {
    if (!IsContractEvidence(o.status)) continue;
    std::vector<Value> suspects;
    for (const Knob& k : spec.knobs) {
      auto it = o.config.find(k.name);
      if (it == o.config.end()) continue;
      if (!cleared.count(*it)) suspects.push_back(*it);
    }
    if (suspects.empty()) continue;  // a combination: not this model's
    if (suspects.size() == 1) {
      certain_.insert(suspects[0]);
    } else {
      suspects_.push_back(std::move(suspects));
    }
  }
}

double ValueBlame::Risk(const Config& config) const {
  if (!Certain(config).empty()) return 1.0;
  double clean = 1;
  for (const std::vector<Value>& s : suspects_) {
    // A bad trial one of whose suspects is now known poison is explained.
    bool explained = false;
    size_t held = 0;
    for (const Value& v : s) {
      explained = explained || certain_.count(v) > 0;
      auto it = config.find(v.first);
      held += it != config.end() && it->second == v.second;
    }
    if (explained || held == 0) continue;
    const double share = static_cast<double>(held) / static_cast<double>(s.size());
    clean *= 1.0 - share * share;
  }
  return 1.0 - clean;
}

std::string ValueBlame::Certain(const Config& config) const {
  for (const auto& kv : config) {
    if (certain_.count(kv)) return kv.first + "=" + kv.second;
  }
  return "";
}

}  // namespace infrarsi
