#include "core/value_blame.h"

#include <algorithm>
#include <map>

#include "core/trial_status.h"

namespace infrarsi {

bool IsContractEvidence(const std::string& status) {
  return status == trial_status::kViolation || status == trial_status::kTimeout;
}

ValueBlame::ValueBlame(const SessionSpec& spec, const std::vector<Observation>& history,
                       const std::vector<int64_t>* indices)
    : space_(spec) {
  // It ran and broke no rule: none of its values is poison. (An OOM
  // clears nothing: it ended before its loss could be judged.) By knob
  // position and value index where the setting is in the space, else by
  // name and value; without a bad trial nothing is blamed, so the trials
  // that ran are not read.
  const bool any_bad = std::any_of(history.begin(), history.end(),
                                   [](const Observation& o) { return IsContractEvidence(o.status); });
  std::set<Value> cleared;
  std::vector<std::vector<char>> cleared_at(spec.knobs.size());
  for (size_t k = 0; k < spec.knobs.size(); ++k) cleared_at[k].assign(spec.knobs[k].values.size(), 0);
  for (size_t i = 0; i < history.size() && any_bad; ++i) {
    const Observation& o = history[i];
    if (o.status != trial_status::kOk) continue;
    const int64_t index = indices != nullptr ? (*indices)[i] : -1;
    if (index >= 0) {
      for (size_t k = 0; k < spec.knobs.size(); ++k) cleared_at[k][static_cast<size_t>(space_.Digit(index, k))] = 1;
    } else {
      for (const auto& kv : o.config) cleared.insert(kv);
    }
  }
  auto is_cleared = [&](size_t k, const Value& v) {
    const std::vector<std::string>& values = spec.knobs[k].values;
    const auto at = std::find(values.begin(), values.end(), v.second);
    return (at != values.end() && cleared_at[k][static_cast<size_t>(at - values.begin())]) || cleared.count(v) > 0;
  };
  std::vector<std::vector<Value>> suspects;  // per bad trial, with 2+ suspects
  for (const Observation& o : history) {
    if (!IsContractEvidence(o.status)) continue;
    std::vector<Value> s;
    for (size_t k = 0; k < spec.knobs.size(); ++k) {
      auto it = o.config.find(spec.knobs[k].name);
      if (it == o.config.end()) continue;
      if (!is_cleared(k, *it)) s.push_back(*it);
    }
    if (s.empty()) continue;  // a combination: not this model's
    if (s.size() == 1) {
      certain_.insert(s[0]);
    } else {
      suspects.push_back(std::move(s));
    }
  }
  // Each value of the space by knob position and value index.
  std::map<Value, std::pair<size_t, int64_t>> at;
  certain_at_.resize(spec.knobs.size());
  for (size_t k = 0; k < spec.knobs.size(); ++k) {
    const Knob& knob = spec.knobs[k];
    certain_at_[k].assign(knob.values.size(), 0);
    for (size_t v = 0; v < knob.values.size(); ++v) {
      const Value value{knob.name, knob.values[v]};
      at[value] = {k, static_cast<int64_t>(v)};
      certain_at_[k][v] = certain_.count(value) > 0;
    }
  }
  for (std::vector<Value>& s : suspects) {
    // A bad trial one of whose suspects is now known poison is explained.
    if (std::any_of(s.begin(), s.end(), [&](const Value& v) { return certain_.count(v) > 0; })) continue;
    Trial t;
    for (const Value& v : s) {
      auto it = at.find(v);
      if (it != at.end()) t.held.push_back(it->second);
    }
    t.suspects = std::move(s);
    unexplained_.push_back(std::move(t));
  }
}

bool ValueBlame::CertainAt(int64_t index) const {
  for (size_t k = 0; k < space_.knobs(); ++k) {
    if (certain_at_[k][static_cast<size_t>(space_.Digit(index, k))]) return true;
  }
  return false;
}

double ValueBlame::RiskAt(int64_t index) const {
  if (CertainAt(index)) return 1.0;
  return Combined([&](const Trial& t) {
    return std::count_if(t.held.begin(), t.held.end(),
                         [&](const auto& kv) { return space_.Digit(index, kv.first) == kv.second; });
  });
}

double ValueBlame::Risk(const Config& config) const {
  if (!Certain(config).empty()) return 1.0;
  return Combined([&](const Trial& t) {
    return std::count_if(t.suspects.begin(), t.suspects.end(), [&](const Value& v) {
      auto it = config.find(v.first);
      return it != config.end() && it->second == v.second;
    });
  });
}

std::string ValueBlame::Certain(const Config& config) const {
  for (const auto& kv : config) {
    if (certain_.count(kv)) return kv.first + "=" + kv.second;
  }
  return "";
}

}  // namespace infrarsi
