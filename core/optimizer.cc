#include "core/optimizer.h"

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_format.h"

namespace infrarsi {

std::vector<double> ProposalMemo::Get(const std::string& key, uint64_t layout) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.first != layout) return {};
  return it->second.second;
}

void ProposalMemo::Put(const std::string& key, uint64_t layout, std::vector<double> values) {
  absl::MutexLock lock(&mu_);
  entries_[key] = {layout, std::move(values)};
}

size_t ProposalMemo::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

double SearchStopBelow(const SessionSpec& spec, double noise_floor) {
  return std::max(spec.stop_gain, noise_floor);
}

std::string SearchStopReason(const SessionSpec& spec, int search_done, const Proposal& p,
                             double noise_floor) {
  // (Or runs at the step time of one tried: core/planner.h.)
  if (p.configs.empty()) return "every setting of the space was tried";
  if (!p.stop.empty()) return p.stop;
  const double stop_below = SearchStopBelow(spec, noise_floor);
  if (search_done >= spec.min_trials && p.expected_gain >= 0 && p.expected_gain < stop_below) {
    return absl::StrFormat(
        "no setting is expected to beat the best by more than %.2f%% (expected gain %.3f%%) "
        "after %d search trials",
        100 * stop_below, 100 * p.expected_gain, search_done);
  }
  return "";
}

Config ConfigAt(const SessionSpec& spec, int64_t index) {
  Config c;
  for (auto it = spec.knobs.rbegin(); it != spec.knobs.rend(); ++it) {
    const int64_t radix = static_cast<int64_t>(it->values.size());
    c[it->name] = it->values[static_cast<size_t>(index % radix)];
    index /= radix;
  }
  return c;
}

int64_t IndexOf(const SessionSpec& spec, const Config& config) {
  int64_t index = 0;
  for (const Knob& k : spec.knobs) {
    auto it = config.find(k.name);
    if (it == config.end()) return -1;
    const auto v = std::find(k.values.begin(), k.values.end(), it->second);
    if (v == k.values.end()) return -1;
    index = index * static_cast<int64_t>(k.values.size()) + (v - k.values.begin());
  }
  return index;
}

SpaceIndexer::SpaceIndexer(const SessionSpec& spec) : spec_(spec), stride_(spec.knobs.size()) {
  by_name_.resize(spec.knobs.size());
  for (size_t k = 0; k < by_name_.size(); ++k) by_name_[k] = k;
  std::sort(by_name_.begin(), by_name_.end(),
            [&](size_t a, size_t b) { return spec.knobs[a].name < spec.knobs[b].name; });
  int64_t stride = 1;
  for (size_t k = spec.knobs.size(); k-- > 0;) {
    stride_[k] = stride;
    stride *= static_cast<int64_t>(spec.knobs[k].values.size());
  }
}

int64_t SpaceIndexer::operator()(const Config& config) const {
  // Anything but exactly the spec's knobs takes the general path.
  if (config.size() != by_name_.size()) return IndexOf(spec_, config);
  int64_t index = 0;
  auto it = config.begin();
  for (size_t k : by_name_) {
    const Knob& knob = spec_.knobs[k];
    if (it->first != knob.name) return IndexOf(spec_, config);
    const auto v = std::find(knob.values.begin(), knob.values.end(), it->second);
    if (v == knob.values.end()) return -1;
    index += static_cast<int64_t>(v - knob.values.begin()) * stride_[k];
    ++it;
  }
  return index;
}

std::vector<int64_t> SpaceIndexer::operator()(const std::vector<Observation>& history) const {
  constexpr size_t kLanes = 8;
  std::vector<int64_t> out(history.size(), 0);
  for (size_t first = 0; first < history.size(); first += kLanes) {
    const size_t lanes = std::min(kLanes, history.size() - first);
    Config::const_iterator it[kLanes];
    bool fast[kLanes];
    for (size_t l = 0; l < lanes; ++l) {
      const Config& c = history[first + l].config;
      fast[l] = c.size() == by_name_.size();
      it[l] = c.begin();
    }
    for (size_t k : by_name_) {
      const Knob& knob = spec_.knobs[k];
      for (size_t l = 0; l < lanes; ++l) {
        if (!fast[l]) continue;
        // Not exactly the spec's knobs (or a value it does not offer):
        // the one-at-a-time path below says which.
        if (it[l]->first != knob.name) {
          fast[l] = false;
          continue;
        }
        const auto v = std::find(knob.values.begin(), knob.values.end(), it[l]->second);
        if (v == knob.values.end()) {
          fast[l] = false;
          continue;
        }
        out[first + l] += static_cast<int64_t>(v - knob.values.begin()) * stride_[k];
        ++it[l];
      }
    }
    for (size_t l = 0; l < lanes; ++l) {
      if (!fast[l]) out[first + l] = (*this)(history[first + l].config);
    }
  }
  return out;
}

Proposal RandomOptimizer::Propose(const SearchContext& ctx, const std::vector<Observation>& history,
                                  int n, uint64_t seed) {
  Proposal p;
  p.configs = Sample(*ctx.spec, history, n, seed);
  p.reasons.assign(p.configs.size(), "random");
  return p;
}

std::vector<Config> RandomOptimizer::Sample(const SessionSpec& spec,
                                            const std::vector<Observation>& history, int n,
                                            uint64_t seed) {
  std::set<std::string> seen;
  for (const Observation& o : history) seen.insert(ConfigKey(o.config));
  std::mt19937_64 rng(seed);
  std::vector<Config> out;
  const int64_t size = spec.SpaceSize();
  const int64_t untried = size - static_cast<int64_t>(seen.size());
  if (n <= 0 || untried <= 0) return out;
  if (size <= 100000 && untried <= 4 * n) {
    // Few left: enumerate them all rather than rejection-sample.
    std::vector<Config> rest;
    for (int64_t i = 0; i < size; ++i) {
      Config c = ConfigAt(spec, i);
      // Conflicting patches are never combined, even at random.
      if (!seen.count(ConfigKey(c)) && spec.PatchConflict(c).empty()) rest.push_back(std::move(c));
    }
    std::shuffle(rest.begin(), rest.end(), rng);
    if (rest.size() > static_cast<size_t>(n)) rest.resize(static_cast<size_t>(n));
    return rest;
  }
  std::uniform_int_distribution<int64_t> pick(0, size - 1);
  for (int attempts = 0; static_cast<int>(out.size()) < n && attempts < 100 * n; ++attempts) {
    Config c = ConfigAt(spec, pick(rng));
    if (seen.insert(ConfigKey(c)).second && spec.PatchConflict(c).empty()) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace infrarsi
