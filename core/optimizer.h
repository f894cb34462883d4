// Search strategies behind one interface, so the search issue can replace
// the plain strategy without touching scheduling.
#ifndef INFRARSI_CORE_OPTIMIZER_H_
#define INFRARSI_CORE_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/priors.h"
#include "core/spec.h"

namespace infrarsi {

// What an optimizer keeps from one of a session's proposals to the next
// (ModelOptimizer: its fits' modes, where the next proposal's Newton
// iterations start, a trial or two later: half the memory model's
// factorizations). A hint only: a proposal made with an empty, stale or
// mismatched memo is the same proposal to within the fits' tolerance, so
// nothing a proposal returns depends on what a memo held beyond that.
// Owned by the caller, one per session (the session manager's lives with
// the running session, and goes when its search does). Thread-safe.
class ProposalMemo {
 public:
  // What was last put under `key` with this `layout` (the caller's
  // fingerprint of what the numbers mean: a space of other knobs gives
  // another); empty when nothing was, or with another layout.
  std::vector<double> Get(const std::string& key, uint64_t layout) const;
  void Put(const std::string& key, uint64_t layout, std::vector<double> values);
  // Keys held.
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::pair<uint64_t, std::vector<double>>> entries_ ABSL_GUARDED_BY(mu_);
};

// One trial the optimizer may learn from. `status` is a trial status
// ("ok", "oom", ...; "queued"/"leased"/"running" for trials in flight).
struct Observation {
  Config config;
  std::string status;
  double step_time_s = 0;
  double peak_mem_gib = 0;
};

// What a session brings to the search besides its own trials.
struct SearchContext {
  const SessionSpec* spec = nullptr;  // required; not owned
  // Prior knob effects for this session (knowledge file, maybe blended with
  // an LLM's answer); null: a cold start. Not owned.
  const Priors* priors = nullptr;
  // The bank's best settings of similar workloads (same or other hardware),
  // already in this spec's space, most relevant first.
  std::vector<Config> warm_starts;
  // Trials of the same workload from the bank's other sessions (maybe on
  // another GPU), already in this spec's space; `source` names the session.
  // The models learn from them at a discount, each source with its own
  // step-time offset (another GPU is uniformly faster or slower).
  struct Related {
    Observation obs;
    std::string source;
  };
  const std::vector<Related>* related = nullptr;  // null: none; not owned
  // The server passes at most this many (the newest), which bounds a
  // proposal's cost however large the bank grows.
  static constexpr size_t kMaxRelated = 400;
  // The expected gain below which the caller's stop rule ends the session
  // (SearchStopReason's max(spec.stop_gain, noise floor)); 0: not known.
  // ModelOptimizer probes untried knob values before it (Options::
  // probe_untried_values).
  double stop_below = 0;
  // The session's memo from its earlier proposals, which this one may read
  // and update; null: none (each proposal starts its fits afresh). Not
  // owned.
  ProposalMemo* memo = nullptr;
  // IndexOf(*spec, history[i].config) for each entry of the history passed
  // with this context, where the caller keeps them between proposals
  // (SearchHistory::space_indices: re-walking 2,000 Config maps was about
  // a tenth of a proposal); null: the search computes them. Read as given:
  // the caller vouches they are the history's under *spec. One of another
  // length than the history, or holding a value outside [-1, SpaceSize()),
  // is not read. Not owned.
  const std::vector<int64_t>* history_index = nullptr;
};

struct Proposal {
  std::vector<Config> configs;
  // Why each setting was picked, parallel to `configs`: "bank",
  // "bank+memory-saver", "space-filling", "model", "model (local)",
  // "model (probe)", "model+memory-saver", "random".
  std::vector<std::string> reasons;
  // The memory model's P(fits) of each setting as the pick saw it, parallel
  // to `configs` (ModelOptimizer; -1 for a pick made before its models were
  // fitted, 1 without a memory model), or empty (other optimizers): what a
  // reliability table of the memory model reads against the outcomes.
  std::vector<double> p_fit;
  // The largest expected improvement of log step time over the best so far
  // (weighted by the chance the setting runs) among the settings scored:
  // about the relative speed-up still expected; for a probe of a knob value
  // no trial held (ModelOptimizer), what that value's best setting would
  // gain were it to fit. -1: not known (no model yet); the stop rule then
  // does not apply.
  double expected_gain = -1;
  // Why the optimizer advises stopping now, before min_trials too, or ""
  // (ModelOptimizer: after OOMs, no untried setting is more likely to fit
  // than not; none likely to fit has a fair chance (Options::
  // stop_p_beat_baseline) to beat the baseline).
  std::string stop;
};

// Why a session's search stops rather than run `p`'s settings, after
// `search_done` finished search trials, or "" to go on: nothing left to try,
// or, past spec.min_trials, nothing expected to beat the best by more than
// max(spec.stop_gain, noise_floor). The server's rule, which the benchmarks
// call rather than copy.
std::string SearchStopReason(const SessionSpec& spec, int search_done, const Proposal& p,
                             double noise_floor);
// The expected gain below which SearchStopReason stops a search past
// min_trials: max(spec.stop_gain, noise_floor) (SearchContext::stop_below).
double SearchStopBelow(const SessionSpec& spec, double noise_floor);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Proposes up to `n` settings of the context's space that are in no
  // observation of `history` (finished or in flight): no setting is run
  // twice. Returns fewer, possibly none, when the space is exhausted
  // (settings a planner knows to run like one tried count as tried).
  // `seed` makes the proposal repeatable. Thread-safe for distinct calls:
  // implementations keep no per-call state.
  virtual Proposal Propose(const SearchContext& ctx, const std::vector<Observation>& history,
                           int n, uint64_t seed) = 0;
  virtual std::string Name() const = 0;
};

// Uniform random sampling without repeats.
class RandomOptimizer : public Optimizer {
 public:
  Proposal Propose(const SearchContext& ctx, const std::vector<Observation>& history, int n,
                   uint64_t seed) override;
  std::string Name() const override { return "random"; }

 private:
  static std::vector<Config> Sample(const SessionSpec& spec,
                                    const std::vector<Observation>& history, int n, uint64_t seed);
};

// The setting with mixed-radix index `index` (knobs in spec order).
// Precondition: 0 <= index < spec.SpaceSize().
Config ConfigAt(const SessionSpec& spec, int64_t index);

// The inverse of ConfigAt: the index of `config` in the space, or -1 when a
// knob is missing or holds a value the spec does not offer.
int64_t IndexOf(const SessionSpec& spec, const Config& config);

// IndexOf for many settings of one spec, as fast as a proposal over
// thousands of trials needs: each Config (a map ordered by name) is walked
// once beside the knobs in name order, instead of a lookup per knob.
// Holds a reference to `spec`, which must outlive it. Thread-compatible.
class SpaceIndexer {
 public:
  explicit SpaceIndexer(const SessionSpec& spec);
  // IndexOf(spec, config).
  int64_t operator()(const Config& config) const;
  // IndexOf of each observation's config, in order. A history's configs
  // lie all over the heap, so walking one map at a time waits on a cache
  // miss per node; these walk eight maps in step, whose misses overlap.
  // A long history's halves are indexed on two threads.
  std::vector<int64_t> operator()(const std::vector<Observation>& history) const;

 private:
  // Writes (*out)[i] for i in [begin, end); touches nothing else of it.
  void IndexRange(const std::vector<Observation>& history, size_t begin, size_t end,
                  std::vector<int64_t>* out) const;
  const SessionSpec& spec_;
  std::vector<size_t> by_name_;  // knob positions in name order
  std::vector<int64_t> stride_;  // per knob position
};

// Mixed-radix arithmetic on indices of the space (ConfigAt's order): a
// proposal handles thousands of settings, so it keys, moves and compares
// them as integers and builds a Config only for what it returns.
// Thread-compatible; holds no reference to `spec`.
class Space {
 public:
  explicit Space(const SessionSpec& spec) : stride_(spec.knobs.size()), radix_(spec.knobs.size()) {
    int64_t stride = 1;
    for (size_t k = spec.knobs.size(); k-- > 0;) {
      stride_[k] = stride;
      radix_[k] = static_cast<int64_t>(spec.knobs[k].values.size());
      stride *= radix_[k];
    }
  }
  size_t knobs() const { return radix_.size(); }
  int64_t radix(size_t k) const { return radix_[k]; }
  int64_t Digit(int64_t index, size_t k) const { return (index / stride_[k]) % radix_[k]; }
  // `index` with knob k set to its value v.
  int64_t With(int64_t index, size_t k, int64_t v) const {
    return index + (v - Digit(index, k)) * stride_[k];
  }
  // Calls fn(c) for every setting c at most two knobs from `index`, itself
  // and repeats included (in a fixed order).
  template <typename Fn>
  void ForEachWithinTwo(int64_t index, Fn&& fn) const {
    for (size_t a = 0; a < knobs(); ++a) {
      for (int64_t va = 0; va < radix(a); ++va) {
        const int64_t one = With(index, a, va);
        for (size_t b = a; b < knobs(); ++b) {
          for (int64_t vb = 0; vb < radix(b); ++vb) fn(With(one, b, vb));
        }
      }
    }
  }
  // Knobs that differ.
  int Distance(int64_t a, int64_t b) const {
    int d = 0;
    for (size_t k = radix_.size(); k-- > 0;) {
      d += a % radix_[k] != b % radix_[k];
      a /= radix_[k];
      b /= radix_[k];
    }
    return d;
  }

 private:
  std::vector<int64_t> stride_, radix_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_OPTIMIZER_H_
