#include "core/optimizer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <future>
#include <random>
#include <set>
#include <system_error>

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

namespace {

// std::string equality without a call into libc's memcmp: the names and
// values compared here are a few bytes each, and indexing a history of
// thousands of trials compares tens of thousands of them a proposal
// (memcmp's call was a tenth of a proposal's profile).
inline bool SameString(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, p + i, 8);
    std::memcpy(&y, q + i, 8);
    if (x != y) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != q[i]) return false;
  }
  return true;
}

// The position of `value` among `values`, or -1.
inline int64_t ValuePosition(const std::vector<std::string>& values, const std::string& value) {
  for (size_t v = 0; v < values.size(); ++v) {
    if (SameString(values[v], value)) return static_cast<int64_t>(v);
  }
  return -1;
}

}  // namespace

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
    if (!SameString(it->first, knob.name)) return IndexOf(spec_, config);
    const int64_t v = ValuePosition(knob.values, it->second);
    if (v < 0) return -1;
    index += v * stride_[k];
    ++it;
  }
  return index;
}

std::vector<int64_t> SpaceIndexer::operator()(const std::vector<Observation>& history) const {
  std::vector<int64_t> out(history.size(), 0);
  // A long history's second half on another core: a proposal indexes its
  // whole history first, before anything else can run beside it.
  constexpr size_t kSplitAt = 512;
  if (history.size() < kSplitAt) {
    IndexRange(history, 0, history.size(), &out);
    return out;
  }
  const size_t half = history.size() / 2;
  std::future<void> second;
  try {
    second = std::async(std::launch::async, [&] { IndexRange(history, half, history.size(), &out); });
  } catch (const std::system_error&) {
    IndexRange(history, half, history.size(), &out);  // no thread to be had
  }
  IndexRange(history, 0, half, &out);
  if (second.valid()) second.get();
  return out;
}

void SpaceIndexer::IndexRange(const std::vector<Observation>& history, size_t begin, size_t end,
                              std::vector<int64_t>* out_ptr) const {
  constexpr size_t kLanes = 8;
  std::vector<int64_t>& out = *out_ptr;
  for (size_t first = begin; first < end; first += kLanes) {
    const size_t lanes = std::min(kLanes, end - first);
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
        if (!SameString(it[l]->first, knob.name)) {
          fast[l] = false;
          continue;
        }
        const int64_t v = ValuePosition(knob.values, it[l]->second);
        if (v < 0) {
          fast[l] = false;
          continue;
        }
        out[first + l] += v * stride_[k];
        ++it[l];
      }
    }
    for (size_t l = 0; l < lanes; ++l) {
      if (!fast[l]) out[first + l] = (*this)(history[first + l].config);
    }
  }
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
