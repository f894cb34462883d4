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
  // The indexed form: strides as IndexOf counts them (the last knob fastest).
  const size_t n = spec.knobs.size();
  stride_.assign(n, 1);
  radix_.assign(n, 1);
  certain_at_.resize(n);
  std::map<Value, std::pair<size_t, int64_t>> at;
  int64_t stride = 1;
  for (size_t k = n; k-- > 0;) {
    const Knob& knob = spec.knobs[k];
    stride_[k] = stride;
    radix_[k] = static_cast<int64_t>(knob.values.size());
    stride *= radix_[k];
    certain_at_[k].assign(knob.values.size(), 0);
    for (size_t v = 0; v < knob.values.size(); ++v) {
      const Value value{knob.name, knob.values[v]};
      at[value] = {k, static_cast<int64_t>(v)};
      certain_at_[k][v] = certain_.count(value) > 0;
    }
  }
  for (const std::vector<Value>& s : suspects_) {
    // A bad trial one of whose suspects is now known poison is explained.
    if (std::any_of(s.begin(), s.end(), [&](const Value& v) { return certain_.count(v) > 0; })) continue;
    Trial t;
    t.size = static_cast<double>(s.size());
    for (const Value& v : s) {
      auto it = at.find(v);
      if (it != at.end()) t.held.push_back(it->second);
    }
    unexplained_.push_back(std::move(t));
  }
}

bool ValueBlame::CertainAt(int64_t index) const {
  for (size_t k = 0; k < stride_.size(); ++k) {
    if (certain_at_[k][static_cast<size_t>((index / stride_[k]) % radix_[k])]) return true;
  }
  return false;
}

double ValueBlame::RiskAt(int64_t index) const {
  if (CertainAt(index)) return 1.0;
  double clean = 1;
  for (const Trial& t : unexplained_) {
    size_t held = 0;
    for (const auto& [k, v] : t.held) held += (index / stride_[k]) % radix_[k] == v;
    if (held == 0) continue;
    const double share = static_cast<double>(held) / t.size;
    clean *= 1.0 - share * share;
  }
  return 1.0 - clean;
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
