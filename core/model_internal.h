// The search's models as the model optimizer and ExplainKnobs fit them:
// the step-time features, the three models fitted to one history (step
// time, whether a setting runs, its peak memory), and mixed-radix
// arithmetic on the space's indices. Internal to core/model_optimizer.cc
// and core/knob_effects.cc: not an interface of its own.
//
// Thread safety: none of these types is shared between threads; a
// proposal builds its own. Models fits and predicts its sub-models on two
// threads inside its own calls, each thread writing only its own members.
#ifndef INFRARSI_CORE_MODEL_INTERNAL_H_
#define INFRARSI_CORE_MODEL_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "core/model_optimizer.h"
#include "core/planner.h"
#include "core/trial_status.h"
#include "models/bayes_linear.h"
#include "models/tobit.h"

namespace infrarsi::model_internal {


// Runs `f` on another thread, or here when no thread can be started; the
// future is ready once it has run.
template <typename F>
std::future<void> RunAside(F f) {
  try {
    return std::async(std::launch::async, f);
  } catch (const std::system_error&) {
    f();
    std::promise<void> done;
    done.set_value();
    return done.get_future();
  }
}

// What a model's weights mean, for a ProposalMemo: the space's knobs and
// values (which give the features) and the model's column count (which the
// textbook estimates' columns add to). FNV-1a.
inline uint64_t MemoLayout(const SessionSpec& spec, int columns) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const std::string& s) {
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    h = (h ^ 0xffu) * 1099511628211ULL;  // ends each string
  };
  for (const Knob& k : spec.knobs) {
    mix(k.name);
    for (const std::string& v : k.values) mix(v);
    mix("");
  }
  mix(std::to_string(columns));
  return h;
}
// The memo's vector under `key` for `layout`, or an empty one.
inline Eigen::VectorXd MemoStart(const ProposalMemo* memo, const std::string& key, uint64_t layout) {
  if (memo == nullptr) return {};
  const std::vector<double> v = memo->Get(key, layout);
  return Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()));
}
inline void MemoPut(ProposalMemo* memo, const std::string& key, uint64_t layout,
                    const Eigen::VectorXd& w) {
  if (memo != nullptr) memo->Put(key, layout, std::vector<double>(w.data(), w.data() + w.size()));
}

// The residual sd of log peak memory the runs' peaks show for a model
// fitted to them, pooled with options.memory_sigma as memory_sigma_weight
// pseudo-trials, within [min, max]_memory_sigma. Each peak's residual is
// shrunk by what the fit spent on it (its leverage: a model with many
// features fits some noise), so the degrees of freedom are the peaks less
// the leverages. An OOM's peak is not known and is left out.
inline double LearnedMemorySigma(const models::CensoredLinear& m, const Eigen::MatrixXd& x,
                                 const models::RowPattern& pattern, const Eigen::VectorXd& y,
                                 const Eigen::VectorXd& censored, const Eigen::VectorXd& weights,
                                 const ModelOptimizer::Options& o) {
  const Eigen::VectorXd resid = y - x * m.weights();
  const Eigen::VectorXd q = m.MeanVarianceBatch(pattern);
  const double s2 = o.memory_sigma * o.memory_sigma;
  double ss = o.memory_sigma_weight * s2, n = o.memory_sigma_weight;
  for (Eigen::Index i = 0; i < resid.size(); ++i) {
    if (censored[i] > 0.5) continue;
    ss += weights[i] * resid[i] * resid[i];
    n += weights[i] * std::max(0.0, 1.0 - std::min(1.0, q[i] / s2));
  }
  n = std::max(n, o.memory_sigma_weight);
  return std::clamp(std::sqrt(ss / n), o.min_memory_sigma, o.max_memory_sigma);
}

// One-hot coding against the baseline (whose values are the reference), plus
// all pairwise products: feature 0 is the intercept.
class Features {
 public:
  explicit Features(const SessionSpec& spec) : spec_(spec) {
    int next = 1;
    for (const Knob& k : spec.knobs) {
      std::vector<int> idx;
      for (const std::string& v : k.values) idx.push_back(v == spec.baseline.at(k.name) ? -1 : next++);
      main_.push_back(std::move(idx));
    }
    main_count_ = next;
    pair_.assign(static_cast<size_t>(main_count_ * main_count_), -1);
    for (size_t a = 0; a < main_.size(); ++a) {
      for (size_t b = a + 1; b < main_.size(); ++b) {
        for (int ia : main_[a]) {
          for (int ib : main_[b]) {
            if (ia >= 0 && ib >= 0) pair_[static_cast<size_t>(ia * main_count_ + ib)] = next++;
          }
        }
      }
    }
    dim_ = next;
  }
  int dim() const { return dim_; }
  bool is_main(int i) const { return i < main_count_; }
  // Per knob (spec order), per value: its main-effect column, -1 for the
  // baseline's value.
  const std::vector<std::vector<int>>& main_columns() const { return main_; }
  // The interaction column of two main-effect columns of different knobs.
  int PairColumn(int a, int b) const {
    return pair_[static_cast<size_t>(std::min(a, b) * main_count_ + std::max(a, b))];
  }
  // The main-effect feature of knob = value; -1 for the baseline's value.
  int MainIndex(const std::string& knob, const std::string& value) const {
    for (size_t k = 0; k < spec_.knobs.size(); ++k) {
      if (spec_.knobs[k].name != knob) continue;
      const auto& vals = spec_.knobs[k].values;
      for (size_t v = 0; v < vals.size(); ++v) {
        if (vals[v] == value) return main_[k][v];
      }
    }
    return -1;
  }

  // Writes the features of `c` into `row` (length >= dim(); the rest is
  // left for callers).
  template <typename Row>
  void EncodeInto(const Config& c, Row&& row) const {
    row.head(dim_).setZero();
    row[0] = 1.0;
    int on[128];  // knobs (at most 64) plus patch switches (at most 16)
    int n_on = 0;
    for (size_t k = 0; k < spec_.knobs.size() && n_on < 128; ++k) {
      const std::string& v = c.at(spec_.knobs[k].name);
      const auto& vals = spec_.knobs[k].values;
      for (size_t j = 0; j < vals.size(); ++j) {
        if (vals[j] == v) {
          if (main_[k][j] >= 0) on[n_on++] = main_[k][j];
          break;
        }
      }
    }
    for (int a = 0; a < n_on; ++a) {
      row[on[a]] = 1.0;
      for (int b = a + 1; b < n_on; ++b) row[pair_[static_cast<size_t>(on[a] * main_count_ + on[b])]] = 1.0;
    }
  }
  // The same for the setting at `index` of the space (ConfigAt), without
  // building it. `zeroed`: the row is known to be all zeros already (a row
  // of a column-major matrix is strided: clearing it costs a cache line per
  // feature).
  template <typename Row>
  void EncodeAt(int64_t index, Row&& row, bool zeroed = false) const {
    if (!zeroed) row.head(dim_).setZero();
    ForEachActive(index, [&](int f) { row[f] = 1.0; });
  }
  // Calls `f(feature)` for each feature set (to 1) for the setting at
  // `index`: the intercept, then each main effect followed by its pairs
  // with later knobs' values.
  template <typename F>
  void ForEachActive(int64_t index, F&& f) const {
    int on[128];  // knobs (at most 64) plus patch switches (at most 16)
    int n_on = 0;
    for (size_t k = main_.size(); k-- > 0;) {
      const int64_t radix = static_cast<int64_t>(main_[k].size());
      const int f = main_[k][static_cast<size_t>(index % radix)];
      index /= radix;
      if (f >= 0 && n_on < 128) on[n_on++] = f;
    }
    std::sort(on, on + n_on);  // pairs are indexed (lower, higher)
    f(0);
    for (int a = 0; a < n_on; ++a) {
      f(on[a]);
      for (int b = a + 1; b < n_on; ++b) f(pair_[static_cast<size_t>(on[a] * main_count_ + on[b])]);
    }
  }
  // Calls `f(feature)` for each main-effect feature the setting at `index`
  // holds, or where index < 0, the setting `c` (a knob it lacks, or a
  // value outside the knob's, holds none).
  template <typename F>
  void ForEachMain(int64_t index, const Config& c, F&& f) const {
    if (index >= 0) {
      for (size_t k = main_.size(); k-- > 0;) {
        const int64_t radix = static_cast<int64_t>(main_[k].size());
        const int m = main_[k][static_cast<size_t>(index % radix)];
        index /= radix;
        if (m >= 0) f(m);
      }
      return;
    }
    for (size_t k = 0; k < spec_.knobs.size(); ++k) {
      const auto it = c.find(spec_.knobs[k].name);
      if (it == c.end()) continue;
      const auto& vals = spec_.knobs[k].values;
      for (size_t j = 0; j < vals.size(); ++j) {
        if (vals[j] == it->second && main_[k][j] >= 0) f(main_[k][j]);
      }
    }
  }
  Eigen::VectorXd Encode(const Config& c, int extra = 0) const {
    Eigen::VectorXd x(dim_ + extra);
    x.setZero();
    EncodeInto(c, x);
    return x;
  }

 private:
  const SessionSpec& spec_;
  std::vector<std::vector<int>> main_;  // per knob, per value: feature or -1
  std::vector<int> pair_;               // [ia * main_count + ib] -> feature
  int main_count_ = 1;
  int dim_ = 1;
};

inline double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
inline double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }

// How far the memory model's guesses at new settings err, learned from
// its own trials (ModelOptimizer::Options::learn_memory_doubt). Each of
// the newest `o.memory_doubt_rows` of the first `session_rows` rows of `x`
// (the session's own, as Subsample ordered them; related rows follow) is
// predicted as if it had not run (the newest OOMs among them up to half):
// its row's curvature h at the mode (w / fit_sigma^2 for a measured peak,
// w lambda (lambda - z) / fit_sigma^2 for an OOM at z = (capacity - mean)
// / fit_sigma, lambda the normal hazard at z) taken out of the posterior, so its doubt q becomes
// q / (1 - h q), and its gradient's pull undone (one Newton step): a
// measured peak's residual e becomes e / (1 - h q), an OOM's mean drops by
// that doubt times w lambda / fit_sigma. The share k of the doubt and the
// residual sd s that make those predictions likeliest (a measured peak's
// density, an OOM's chance of exceeding capacity, with variance k q + s^2)
// are taken on a grid, with log-normal priors around
// o.memory_doubt_scale and `sigma` (the residual sd learned in sample), sd
// o.memory_doubt_log_sd each. A trial whose values other runs share has a
// small q and speaks to s; one that tried something new says how far such
// a guess errs; an OOM the model would not have foreseen widens both. A row
// the fit all but interpolates (1 - h q < 0.01) is skipped, as the
// division is unstable there. Without rows the priors' centres come back.
struct MemoryDoubt {
  double scale;        // the share of the weights' posterior variance
  double residual_sd;  // of log peak, beside it
};
inline MemoryDoubt LearnedMemoryDoubt(const models::CensoredLinear& m, const Eigen::MatrixXd& x,
                                      const Eigen::VectorXd& y, const Eigen::VectorXd& censored,
                                      const Eigen::VectorXd& weights, Eigen::Index session_rows,
                                      double fit_sigma, double sigma, const ModelOptimizer::Options& o) {
  // The rows come as Subsample leaves them (each class newest first): the
  // newest OOMs, up to half the rows, then the newest measured peaks.
  std::vector<Eigen::Index> rows;
  const Eigen::Index last = std::min(session_rows, x.rows());
  const size_t cap = static_cast<size_t>(std::max(0, o.memory_doubt_rows));
  for (Eigen::Index i = 0; i < last && rows.size() < cap / 2; ++i) {
    if (censored[i] > 0.5 && weights[i] > 0) rows.push_back(i);
  }
  for (Eigen::Index i = 0; i < last && rows.size() < cap; ++i) {
    if (censored[i] < 0.5 && weights[i] > 0) rows.push_back(i);
  }
  const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
  if (n == 0) return {o.memory_doubt_scale, sigma};
  Eigen::MatrixXd xs(n, x.cols());
  for (Eigen::Index j = 0; j < n; ++j) xs.row(j) = x.row(rows[static_cast<size_t>(j)]);
  const Eigen::VectorXd q = m.MeanVarianceBatch(xs), mean = xs * m.weights();
  const double f2 = fit_sigma * fit_sigma;
  // Measured peaks: the left-out residual squared, doubt and weight; OOMs:
  // capacity less the left-out mean, doubt and weight.
  std::vector<double> e2, ql, w, gap, cq, cw;
  for (Eigen::Index j = 0; j < n; ++j) {
    const Eigen::Index i = rows[static_cast<size_t>(j)];
    if (censored[i] > 0.5) {
      const double z = (y[i] - mean[j]) / fit_sigma;
      // The tail's hazard as the fit reads it (models::InverseMills): 1 -
      // NormalCdf(z) rounds to 0 from z = 8.3, and the OOMs the model was
      // surest would fit are the ones to read.
      const double lambda = models::InverseMills(z);
      const double keep = 1.0 - weights[i] * lambda * (lambda - z) / f2 * q[j];
      if (keep < 0.01) continue;
      gap.push_back(y[i] - (mean[j] - q[j] / keep * weights[i] * lambda / fit_sigma));
      cq.push_back(q[j] / keep);
      cw.push_back(weights[i]);
    } else {
      const double keep = 1.0 - weights[i] * q[j] / f2;
      if (keep < 0.01) continue;
      const double e = (y[i] - mean[j]) / keep;
      e2.push_back(e * e);
      ql.push_back(q[j] / keep);
      w.push_back(weights[i]);
    }
  }
  if (w.empty() && cw.empty()) return {o.memory_doubt_scale, sigma};
  const auto arr = [](std::vector<double>& v) {
    return Eigen::Map<Eigen::ArrayXd>(v.data(), static_cast<Eigen::Index>(v.size()));
  };
  const Eigen::ArrayXd e2a = arr(e2), qla = arr(ql), wa = arr(w);
  constexpr int kScales = 25, kSds = 15;
  const double k_lo = std::log(o.min_memory_doubt_scale), k_prior = std::log(o.memory_doubt_scale);
  const double s_lo = std::log(o.min_memory_sigma), s_hi = std::log(o.max_memory_sigma);
  const double s_prior = std::log(std::clamp(sigma, o.min_memory_sigma, o.max_memory_sigma));
  MemoryDoubt best{o.memory_doubt_scale, sigma};
  double best_ll = -std::numeric_limits<double>::infinity();
  for (int a = 0; a < kSds; ++a) {
    const double log_s = s_lo + (s_hi - s_lo) * a / (kSds - 1), s2 = std::exp(2 * log_s);
    const double zs = (log_s - s_prior) / o.memory_doubt_log_sd;
    for (int b = 0; b < kScales; ++b) {
      const double log_k = k_lo * (1.0 - static_cast<double>(b) / (kScales - 1));  // up to log 1
      const double k = std::exp(log_k), zk = (log_k - k_prior) / o.memory_doubt_log_sd;
      double ll = -0.5 * (zs * zs + zk * zk);
      if (!w.empty()) {
        const Eigen::ArrayXd v = k * qla + s2;
        ll -= 0.5 * (wa * (v.log() + e2a / v)).sum();
      }
      for (size_t c = 0; c < cw.size(); ++c) {
        ll += cw[c] * std::log(std::max(1e-300, models::UpperTail(gap[c] / std::sqrt(k * cq[c] + s2))));
      }
      if (ll > best_ll) best_ll = ll, best = {k, std::exp(log_s)};
    }
  }
  return best;
}
// E[max(0, X)] for X ~ N(mean, sd^2), sd > 0: expected improvement (mean =
// best - mu) and the expected slowdown against the baseline (mu - base).
inline double ExpectedPositivePart(double mean, double sd) {
  const double z = mean / sd;
  return mean * NormalCdf(z) + sd * NormalPdf(z);
}

inline bool InFlight(const std::string& s) { return IsInFlightStatus(s); }
inline bool Ran(const Observation& o) { return o.status == trial_status::kOk && o.step_time_s > 0; }

// Past `cap` rows, the run and memory models (iterative fits) see a
// weighted subsample: the newest rows of each class (rare: failures or
// OOMs; common: the rest), each weighted to stand for its whole class, so
// a proposal's cost stays bounded however long the session.
struct Sample {
  std::vector<size_t> rows;
  Eigen::VectorXd weights;
};
inline Sample Subsample(const std::vector<bool>& rare, size_t cap) {
  Sample s;
  std::vector<size_t> r, c;
  for (size_t i = rare.size(); i-- > 0;) (rare[i] ? r : c).push_back(i);  // newest first
  const size_t keep_r = std::min(r.size(), rare.size() <= cap ? r.size() : cap / 2);
  const size_t keep_c = std::min(c.size(), rare.size() <= cap ? c.size() : cap - keep_r);
  s.rows.assign(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(keep_r));
  s.rows.insert(s.rows.end(), c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep_c));
  s.weights.resize(static_cast<Eigen::Index>(s.rows.size()));
  for (size_t i = 0; i < s.rows.size(); ++i) {
    s.weights[static_cast<Eigen::Index>(i)] =
        i < keep_r ? static_cast<double>(r.size()) / static_cast<double>(keep_r)
                   : static_cast<double>(c.size()) / static_cast<double>(keep_c);
  }
  return s;
}
template <typename T>
std::vector<T> Pick(const std::vector<T>& v, const std::vector<size_t>& rows) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (size_t i : rows) out.push_back(v[i]);
  return out;
}

inline Eigen::VectorXd Vec(const std::vector<double>& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()));
}

using CtxRelated = SearchContext::Related;

// The three models fitted to one history.
class Models {
 public:
  // `indices`: IndexOf of each history entry, when the caller has them.
  Models(const SearchContext& ctx, const Planner& planner, const std::vector<Observation>& history,
         const ModelOptimizer::Options& o, const Priors* priors,
         const std::vector<int64_t>* indices = nullptr)
      : spec_(*ctx.spec), f_(spec_), planner_(planner), cost_weight_(o.cost_weight) {
    const int d = f_.dim();
    const bool memory = planner_.capacity_gib > 0;
    const bool estimate = static_cast<bool>(planner_.memory_estimate_gib);
    rules_hint_ = static_cast<bool>(planner_.rules_refuse_at) && o.rules_hint_logit != 0;
    share_ = estimate && planner_.memory_estimate_parts && planner_.memory_estimate_parts_at;
    mem_dim_ = d + (estimate ? 1 : 0) + (share_ ? 1 : 0);
    if (estimate) memory_doubt_ = o.memory_doubt_scale;
    if (estimate) base_estimate_ = std::log(std::max(planner_.memory_estimate_gib(spec_.baseline), 1e-3));
    if (share_) base_share_ = planner_.memory_estimate_parts(spec_.baseline).activation_share;
    const bool time_estimate = o.use_time_estimate && static_cast<bool>(planner_.time_estimate_s);
    time_estimate_ = time_estimate;
    // Related trials that ran, each source with an offset column after the
    // estimate's.
    std::vector<const CtxRelated*> related;
    std::vector<int64_t> related_index;
    std::map<std::string, int> source_col;
    static const std::vector<CtxRelated> kNone;
    const SpaceIndexer index_of(spec_);
    for (const CtxRelated& r : ctx.related != nullptr ? *ctx.related : kNone) {
      const int64_t index = Ran(r.obs) ? index_of(r.obs.config) : -1;
      if (index < 0) continue;
      related.push_back(&r);
      related_index.push_back(index);
      source_col.emplace(r.source, static_cast<int>(source_col.size()));
    }
    const int est_dim = d + (time_estimate ? 1 : 0);
    time_dim_ = est_dim + static_cast<int>(source_col.size());
    // Only beside a textbook estimate: the trend's prior is sized against
    // what the estimate misses (estimated_main_effect_var); without one,
    // on the measured H200 landscape, it moved no median and skewed the
    // knob table's averaged effects (KnobTableTest).
    if (o.trend_var > 0 && time_estimate) {
      int64_t stride = 1;
      for (size_t k = spec_.knobs.size(); k-- > 0;) {
        const Knob& knob = spec_.knobs[k];
        const int64_t radix = static_cast<int64_t>(knob.values.size());
        Trend t;
        t.stride = stride;
        t.radix = radix;
        t.knob = &knob.name;
        stride *= radix;
        if (radix < 3 || !PositiveNumber(spec_.baseline.at(knob.name), &t.base)) continue;
        bool numeric = true;
        for (const std::string& v : knob.values) {
          double x = 0;
          numeric = numeric && PositiveNumber(v, &x);
          if (numeric) t.log_ratio.push_back(std::log2(x) - std::log2(t.base));
        }
        if (!numeric) continue;
        t.column = time_dim_++;
        trend_.push_back(std::move(t));
      }
    }
    if (time_estimate) base_time_estimate_ = std::log(std::max(planner_.time_estimate_s(spec_.baseline), 1e-9));

    // One row per finished trial, encoded once; each model takes its rows.
    // The main effects some trial held, finished or in flight (what the
    // probes call tried): a stall's growth reaches only those
    // (Options::stall_grows_untried).
    const bool only_held_grow = time_estimate && o.stall_trials > 0 && !o.stall_grows_untried;
    std::vector<char> held(only_held_grow ? static_cast<size_t>(d) : 0, 0);
    std::vector<const Observation*> done;
    std::vector<int64_t> done_index;
    for (size_t i = 0; i < history.size(); ++i) {
      const bool in_flight = InFlight(history[i].status);
      if (in_flight && !only_held_grow) continue;
      const int64_t index = indices != nullptr ? (*indices)[i] : index_of(history[i].config);
      if (only_held_grow) f_.ForEachMain(index, history[i].config, [&held](int m) { held[static_cast<size_t>(m)] = 1; });
      if (in_flight) continue;
      done.push_back(&history[i]);
      done_index.push_back(index);
    }
    const int64_t base_index = IndexOf(spec_, spec_.baseline);
    // Each model encodes only the rows it fits (a few hundred of thousands
    // of trials), into a zeroed row of its own matrix.
    auto encode = [&](size_t r, auto&& row) {
      if (done_index[r] >= 0) {
        f_.EncodeAt(done_index[r], row, /*zeroed=*/true);
      } else {
        f_.EncodeInto(done[r]->config, row);
      }
    };
    std::vector<size_t> ok_rows, mem_rows;
    std::vector<double> ys, mem_y, mem_cens;
    // The baseline's step time and peak: the geometric means of its runs
    // (the doctor repeats it), so neither the order the repeats finished in
    // nor one lucky run moves the intercepts, the slowdown charge or the
    // baseline floor (Propose reads baseline_log_time()).
    double base_log_sum = 0, base_peak_log_sum = 0;
    int base_runs = 0, base_peaks = 0;
    for (size_t r = 0; r < done.size(); ++r) {
      const Observation& h = *done[r];
      const int64_t index = done_index[r];
      const bool oom = h.status == trial_status::kOom;
      if (Ran(h)) {
        ok_rows.push_back(r);
        ys.push_back(std::log(h.step_time_s));
        if (index == base_index) {
          base_log_sum += ys.back();
          ++base_runs;
        }
      }
      if (!memory) continue;
      if (oom) {
        mem_rows.push_back(r);
        mem_y.push_back(std::log(planner_.capacity_gib));
        mem_cens.push_back(1.0);
      } else if (h.peak_mem_gib > 0) {
        mem_rows.push_back(r);
        mem_y.push_back(std::log(h.peak_mem_gib));
        mem_cens.push_back(0.0);
        if (index == base_index) {
          base_peak_log_sum += mem_y.back();
          ++base_peaks;
        }
      }
    }
    have_base_ = base_runs > 0;
    if (have_base_) base_log_ = base_log_sum / base_runs;
    const double base_peak = base_peaks > 0 ? std::exp(base_peak_log_sum / base_peaks) : 0.0;
    // Step time: knob effects are a few tens of percent each (main effects
    // wider than interactions); the intercept centres on the baseline.
    const double y_mean =
        ys.empty() ? 0.0 : std::accumulate(ys.begin(), ys.end(), 0.0) / static_cast<double>(ys.size());
    Eigen::VectorXd mean = Eigen::VectorXd::Zero(time_dim_), var(time_dim_);
    mean[0] = have_base_ ? base_log_ : y_mean;
    // Interactions share one variance budget over the knob pairs: with a
    // dozen knobs a far setting has ~80 active pairs, and a per-pair prior
    // sized for five knobs would make every far setting look promising.
    const double knob_pairs = std::max(1.0, 0.5 * static_cast<double>(spec_.knobs.size()) *
                                                (static_cast<double>(spec_.knobs.size()) - 1.0));
    // The budget itself shrinks as pairs are added (total x 10 / pairs at
    // more than 10 pairs): of many knob pairs, a smaller share interact.
    const double total = time_estimate ? o.estimated_interaction_var_total : o.interaction_var_total;
    const double budget = total * std::min(1.0, 10.0 / knob_pairs);
    const double pair_var = std::min(o.max_interaction_var, budget / knob_pairs);
    double main_var = time_estimate ? o.estimated_main_effect_var : o.main_effect_var;
    const double start_main_var = main_var;
    // A search that stopped improving has learned what the estimate's
    // neighbourhood holds: the doubt about what it misses elsewhere doubles
    // with every stall_trials finished trials since the best, up to
    // main_effect_var.
    if (time_estimate && o.stall_trials > 0 && !ys.empty()) {
      size_t best_row = 0;
      for (size_t i = 1; i < ok_rows.size(); ++i) {
        if (ys[i] < ys[best_row]) best_row = i;
      }
      const double since = static_cast<double>(done.size() - 1 - ok_rows[best_row]);
      main_var = std::min(std::max(main_var, o.main_effect_var),
                          main_var * std::pow(2.0, since / o.stall_trials));
    }
    for (int i = 0; i < d; ++i) {
      if (i == 0) {
        var[i] = 0.25;
      } else if (!f_.is_main(i)) {
        var[i] = pair_var;
      } else {
        var[i] = only_held_grow && !held[static_cast<size_t>(i)] ? start_main_var : main_var;
      }
    }
    if (time_estimate) {
      mean[d] = 1.0;  // trust the textbook's proportions...
      var[d] = 0.1;   // ...within about 30%
    }
    for (int i = est_dim; i < time_dim_; ++i) var[i] = 1.0;  // another GPU: within ~e
    for (const Trend& t : trend_) var[t.column] = o.trend_var;
    // Memory: the same shape of prior, tighter (memory is less noisy and
    // knob effects on it are more nearly additive in log space).
    Eigen::VectorXd mmean = Eigen::VectorXd::Zero(mem_dim_), mvar(mem_dim_);
    const double mem_pair_var =
        std::min(o.max_memory_interaction_var, o.memory_interaction_var_total / knob_pairs);
    for (int i = 0; i < mem_dim_; ++i) mvar[i] = i == 0 ? 1.0 : (f_.is_main(i) ? 0.25 : mem_pair_var);
    if (estimate) {
      mmean[d] = 1.0;  // trust the textbook estimate's proportions...
      mvar[d] = 0.1;   // ...within about 30%
    }
    // How far off the estimate's activations are against its weights and
    // states (its formulas assume MHA, a 4h MLP and dropout): a setting
    // whose estimate is all activations may be off by about e^0.5 more.
    if (share_) mvar[d + 1] = 1.0;
    mmean[0] = base_peak > 0       ? std::log(base_peak)
               : estimate          ? base_estimate_
               : planner_.capacity_gib > 0 ? std::log(planner_.capacity_gib) - 0.7
                                   : 0.0;
    // What the textbook estimate leaves out but is known: flash attention
    // and fused kernels make a step faster (the session's priors, below,
    // override this). Only specs with a model shape (the simulator's, or
    // a real job's declared one) have an estimate; their switches are
    // true / false (ParseSpec checks), a process's maybe spelled True.
    if (time_estimate) {
      for (const Knob& k : spec_.knobs) {
        const double off = k.name == "flash_attn" ? o.flash_off_prior : k.name == "fused_kernels" ? o.fused_off_prior : 0.0;
        if (off == 0.0) continue;
        for (const std::string& v : k.values) {
          if (const int i = f_.MainIndex(k.name, v); i >= 0) mean[i] = NormalizedKnobValue(v) == "false" ? off : -off;
        }
      }
    }
    if (priors != nullptr) {
      for (const Knob& k : spec_.knobs) {
        for (const std::string& v : k.values) {
          const int i = f_.MainIndex(k.name, v);
          if (i < 0) continue;
          const Effect e = priors->EffectOf(spec_, k.name, v);
          // With a textbook estimate, the prior speaks for what the
          // estimate misses: its effect less the estimate's own.
          mean[i] = e.time;
          if (time_estimate) {
            Config c = spec_.baseline;
            c[k.name] = v;
            mean[i] -= TimeFeature(c);
          }
          var[i] = e.time_sd * e.time_sd;
          // With a textbook estimate, the prior speaks for what it misses.
          mmean[i] = estimate ? 0.0 : e.mem;
          mvar[i] = estimate ? 0.05 : e.mem_sd * e.mem_sd;
        }
      }
    }
    best_ = ys.empty() ? mean[0] : *std::min_element(ys.begin(), ys.end());
    // Only where a textbook estimate narrows the prior: without one every
    // setting's doubt is the wide prior's, and charging it stalls the
    // search (the measured H200 landscape's median 6 -> 7 trials; the toy
    // space of ModelOptimizerTest.ContractViolationsAndTimeoutsTeachThe-
    // SearchToAvoidTheirValues found its optimum in 2 sessions of 10, not 4).
    if (have_base_ && o.risk_weight > 0 && time_estimate) risk_weight_ = o.risk_weight;
    auto fit_time = [&] {
      const Eigen::Index n_own = static_cast<Eigen::Index>(ok_rows.size());
      Eigen::MatrixXd xt =
          Eigen::MatrixXd::Zero(n_own + static_cast<Eigen::Index>(related.size()), time_dim_);
      for (size_t i = 0; i < ok_rows.size(); ++i) {
        const size_t r = ok_rows[i];
        encode(r, xt.row(static_cast<Eigen::Index>(i)));
        if (time_estimate) xt(static_cast<Eigen::Index>(i), d) = TimeFeature(done_index[r], done[r]->config);
        for (const Trend& t : trend_) xt(static_cast<Eigen::Index>(i), t.column) = TrendAt(t, done_index[r], done[r]->config);
      }
      // A related row counts related_weight of an own one: scaling the row
      // and its target by sqrt(weight) is weighted least squares.
      Eigen::VectorXd yt(xt.rows());
      yt.head(n_own) = Vec(ys);
      const double rw = std::sqrt(o.related_weight);
      for (size_t j = 0; j < related.size(); ++j) {
        const Eigen::Index r = n_own + static_cast<Eigen::Index>(j);
        const Observation& h = related[j]->obs;
        f_.EncodeAt(related_index[j], xt.row(r), /*zeroed=*/true);
        if (time_estimate) xt(r, d) = LogTime(planner_.time_estimate_s_at(related_index[j]));
        xt(r, est_dim + source_col.at(related[j]->source)) = 1.0;
        for (const Trend& t : trend_) xt(r, t.column) = TrendAt(t, related_index[j], h.config);
        xt.row(r) *= rw;
        yt[r] = rw * std::log(h.step_time_s);
      }
      // The covariance is inverted once, for the fit kept (ScaleByKnob
      // reads a few weights' sds from the factor).
      time_.Fit(xt, yt, mean, var, o.time_noise_var, /*covariance=*/o.learned_knob_scale_floor <= 0);
      if (o.learned_knob_scale_floor > 0) {
        Eigen::VectorXd scaled = var;
        if (ScaleByKnob(time_, o.learned_knob_scale_floor, &scaled)) {
          time_.Refit(mean, scaled);
        } else {
          time_.ComputeCovariance();
        }
      }
    };
    // Launching: most settings launch; learn the failing values and pairs.
    auto fit_launch = [&] {
      std::vector<size_t> launch_rows;
      std::vector<double> launched;
      for (size_t r = 0; r < done.size(); ++r) {
        const Observation& h = *done[r];
        const int64_t index = done_index[r];
        // Without a capacity, an OOM is just a failure to run. Failures the
        // launcher's known rules explain are left out: such settings are
        // never proposed, and the model is for the failures nobody predicted.
        if (Ran(h) || !planner_.launches_at || index < 0 || planner_.launches_at(index)) {
          launch_rows.push_back(r);
          launched.push_back(Ran(h) || (h.status == trial_status::kOom && memory) ? 1.0 : 0.0);
        }
      }
      // With the rules' hint the model speaks before any failure: its
      // prior alone starts a refused setting's chance low.
      fit_launch_ = rules_hint_ || std::find(launched.begin(), launched.end(), 0.0) != launched.end();
      if (!fit_launch_) return;
      const int ld = d + (rules_hint_ ? 1 : 0);
      Eigen::VectorXd lmean = Eigen::VectorXd::Zero(ld), lvar(ld);
      lmean[0] = 3.0;
      for (int i = 0; i < d; ++i) lvar[i] = i == 0 ? 2.0 : (f_.is_main(i) ? 4.0 : 1.0);
      if (rules_hint_) {
        lmean[d] = o.rules_hint_logit;
        lvar[d] = o.rules_hint_var;
      }
      std::vector<bool> rare;
      for (double l : launched) rare.push_back(l == 0.0);
      const Sample sub = Subsample(rare, static_cast<size_t>(o.max_fit_rows));
      Eigen::MatrixXd xl = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(sub.rows.size()), ld);
      for (size_t i = 0; i < sub.rows.size(); ++i) {
        const size_t r = launch_rows[sub.rows[i]];
        encode(r, xl.row(static_cast<Eigen::Index>(i)));
        if (rules_hint_ && done_index[r] >= 0 && planner_.rules_refuse_at(done_index[r])) {
          xl(static_cast<Eigen::Index>(i), d) = 1.0;
        }
      }
      // Started where the session's last proposal left the mode.
      const uint64_t layout = MemoLayout(spec_, ld);
      const Eigen::VectorXd start = MemoStart(ctx.memo, "launch", layout);
      launch_.Fit(xl, Vec(Pick(launched, sub.rows)), lmean, lvar, &sub.weights, 30, &start);
      MemoPut(ctx.memo, "launch", layout, launch_.weights());
    };
    // The fits are independent: the step-time and launch models (their
    // rows encoded there too) run on another core while the memory model
    // (the longest: two fits, for its learned sigma) is fitted here; joined
    // below. Each writes only its own members; all read the history, the
    // features and the planner (const).
    std::future<void> aside_fits = RunAside([&] {
      fit_time();
      fit_launch();
    });
    if (memory) {
      std::vector<bool> rare;
      for (double c : mem_cens) rare.push_back(c == 1.0);
      const Sample sub = Subsample(rare, static_cast<size_t>(o.max_fit_rows));
      // The textbook estimate is computed only for the rows the fit sees.
      Eigen::MatrixXd xm = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(sub.rows.size()), mem_dim_);
      for (size_t i = 0; i < sub.rows.size(); ++i) {
        const size_t r = mem_rows[sub.rows[i]];
        encode(r, xm.row(static_cast<Eigen::Index>(i)));
        if (estimate) SetEstimateColumns(done_index[r], &done[r]->config, xm.row(static_cast<Eigen::Index>(i)));
      }
      // Related peaks: the same workload's memory on another GPU is the
      // same, so they join uncensored at a discount (their OOMs were against
      // another capacity and are left out), the newest, in what room the
      // session's own rows leave under max_fit_rows.
      Eigen::VectorXd my = Vec(Pick(mem_y, sub.rows)), mc = Vec(Pick(mem_cens, sub.rows));
      Eigen::VectorXd mw = sub.weights;
      const size_t cap = static_cast<size_t>(o.max_fit_rows);
      const size_t room = cap > sub.rows.size() ? cap - sub.rows.size() : 0;
      std::vector<size_t> peaks;  // into related
      for (size_t j = related.size(); j-- > 0 && peaks.size() < room;) {
        if (related[j]->obs.peak_mem_gib > 0) peaks.push_back(j);
      }
      std::reverse(peaks.begin(), peaks.end());
      if (!peaks.empty()) {
        const Eigen::Index n0 = xm.rows(), extra = static_cast<Eigen::Index>(peaks.size());
        xm.conservativeResize(n0 + extra, Eigen::NoChange);
        my.conservativeResize(n0 + extra);
        mc.conservativeResize(n0 + extra);
        mw.conservativeResize(n0 + extra);
        for (Eigen::Index j = 0; j < extra; ++j) {
          const size_t k = peaks[static_cast<size_t>(j)];
          xm.row(n0 + j).setZero();  // the estimate's column too
          f_.EncodeAt(related_index[k], xm.row(n0 + j), /*zeroed=*/true);
          if (estimate) SetEstimateColumns(related_index[k], &related[k]->obs.config, xm.row(n0 + j));
          my[n0 + j] = std::log(related[k]->obs.peak_mem_gib);
          mc[n0 + j] = 0.0;
          mw[n0 + j] = o.related_weight;
        }
      }
      memory_.emplace();
      const models::RowPattern pattern(xm);  // found once for both fits
      // Each fit starts where the session's last proposal left its mode
      // (a trial or two ago: half the factorizations), else afresh.
      const uint64_t layout = MemoLayout(spec_, mem_dim_);
      const Eigen::VectorXd start = MemoStart(ctx.memo, "memory", layout);
      memory_->Fit(xm, my, mc, mmean, mvar, o.memory_sigma, &mw, 30, &pattern, &start);
      MemoPut(ctx.memo, "memory", layout, memory_->weights());
      memory_sigma_ = o.memory_sigma;
      double fit_sigma = o.memory_sigma;  // the sigma the posterior's covariance is at
      if (o.learn_memory_sigma) {
        const double sigma = LearnedMemorySigma(*memory_, xm, pattern, my, mc, mw, o);
        if (std::fabs(std::log(sigma / o.memory_sigma)) > 0.1) {  // refit where it moved
          // Its start: the last refit's mode, where it was at about this
          // sigma (the memo's last entry), else this fit's.
          const Eigen::VectorXd last = MemoStart(ctx.memo, "memory-refit", layout);
          Eigen::VectorXd refit_start;
          if (last.size() == mem_dim_ + 1 && std::fabs(std::log(sigma / last[mem_dim_])) <= 0.1) {
            refit_start = last.head(mem_dim_);
          }
          memory_->Refit(xm, sigma, 30, &pattern, &refit_start);
          Eigen::VectorXd put(mem_dim_ + 1);
          put << memory_->weights(), sigma;
          MemoPut(ctx.memo, "memory-refit", layout, put);
          fit_sigma = sigma;
        }
        memory_sigma_ = sigma;
      }
      if (estimate && o.learn_memory_doubt) {
        const MemoryDoubt d = LearnedMemoryDoubt(*memory_, xm, my, mc, mw, static_cast<Eigen::Index>(sub.rows.size()),
                                                 fit_sigma, memory_sigma_, o);
        memory_doubt_ = d.scale;
        fits_residual_sd_ = d.residual_sd;
      }
    }
    aside_fits.get();
  }

  struct Prediction {
    double mu = 0, sd = 1;  // log step time
    // P(fits) as the score bets on it: the memory model's doubt about its
    // weights scaled by Options::memory_doubt_scale.
    double p_fit = 1, p_launch = 1;
    // P(fits) with that doubt whole: what the probes and the OOM retry
    // read (ProbeRule), which ask whether a setting could fit were the
    // model wrong where no trial has been.
    double p_fit_doubt = 1;
    double ei = 0;          // expected improvement of log time over the best
    // Predicted cost of running it against the best's (exp(mu) / t_best,
    // at least 1), raised to Options::cost_weight: a setting predicted
    // slower than the best pays for its trial in GPU-hours.
    double cost = 1;
    // risk_weight x the expected slowdown against the baseline's measured
    // step time (log), E[(mu - base)+]: what a trial slower than what
    // already runs costs (0 without a measured baseline, a textbook
    // step-time estimate or the option).
    double risk = 0;
    double Score() const { return GainIfItFits() * p_fit / cost; }
    // The score's gain before P(fits) and the cost: expected improvement
    // less the charge, times the chance to launch.
    double GainIfItFits() const { return std::max(0.0, ei - risk) * p_launch; }
    // P(log step time < `log_time`): of beating the baseline, say.
    double ProbabilityBelow(double log_time) const { return NormalCdf((log_time - mu) / sd); }
  };
  // Predictions for the settings at `indices` of the space.
  std::vector<Prediction> PredictAll(const std::vector<int64_t>& indices) const {
    const Eigen::Index n = static_cast<Eigen::Index>(indices.size());
    std::vector<Prediction> out(indices.size());
    if (n == 0) return out;
    // The rows by their non-zeros (a pool's codes set a few dozen of a few
    // hundred features); the related sources' columns stay 0.
    const int d = f_.dim();
    const size_t guess = static_cast<size_t>(n) * 64;
    Eigen::VectorXd mu, var;
    // Step time on another core (its rows and their textbook estimates
    // too) while memory and launching are encoded and predicted here.
    std::future<void> time_pred = RunAside([&] {
      models::SparseRows xt(time_dim_);
      xt.Reserve(static_cast<size_t>(n), guess);
      for (const int64_t index : indices) {
        f_.ForEachActive(index, [&](int c) { xt.Add(c, 1.0); });
        if (time_estimate_) xt.Add(d, LogTime(planner_.time_estimate_s_at(index)));
        for (const Trend& t : trend_) {
          const double v = TrendAt(t, index);
          if (v != 0) xt.Add(t.column, v);
        }
        xt.EndRow();
      }
      time_.PredictBatch(xt, &mu, &var);
    });
    models::SparseRows xm(mem_dim_);
    if (memory_) xm.Reserve(static_cast<size_t>(n), guess);
    Eigen::VectorXd launch(fit_launch_ ? n : 0);
    if (memory_ || fit_launch_) {
      for (Eigen::Index i = 0; i < n; ++i) {
        const int64_t index = indices[static_cast<size_t>(i)];
        double logit = 0;
        f_.ForEachActive(index, [&](int c) {
          if (memory_) xm.Add(c, 1.0);
          if (fit_launch_) logit += launch_.weights()[c];
        });
        if (fit_launch_ && rules_hint_ && planner_.rules_refuse_at(index)) logit += launch_.weights()[d];
        if (memory_) {
          if (mem_dim_ > d) {
            const auto [log_estimate, share] = EstimateColumns(index, nullptr);
            xm.Add(d, log_estimate);
            if (share_) xm.Add(d + 1, share);
          }
          xm.EndRow();
        }
        if (fit_launch_) launch[i] = logit;
      }
    }
    Eigen::VectorXd fit, fit_doubt;
    if (memory_) {
      const Eigen::VectorXd mean = xm.Times(memory_->weights());
      const Eigen::VectorXd doubt = memory_->MeanVarianceBatch(xm);
      const double cap = std::log(planner_.capacity_gib);
      fit = memory_->ProbabilityBelow(mean, doubt, cap, memory_doubt_, fits_residual_sd_);
      fit_doubt = memory_doubt_ == 1.0 && fits_residual_sd_ < 0 ? fit : memory_->ProbabilityBelow(mean, doubt, cap, 1.0);
    }
    time_pred.get();
    for (Eigen::Index i = 0; i < n; ++i) {
      Prediction& p = out[static_cast<size_t>(i)];
      p.mu = mu[i];
      p.sd = std::sqrt(var[i]);
      p.ei = ExpectedPositivePart(best_ - p.mu, p.sd);
      if (risk_weight_ > 0) p.risk = risk_weight_ * ExpectedPositivePart(p.mu - base_log_, p.sd);
      if (cost_weight_ > 0) {
        p.cost = std::pow(std::max(1.0, std::exp(std::min(20.0, p.mu - best_))), cost_weight_);
      }
      if (fit_launch_) p.p_launch = 1.0 / (1.0 + std::exp(-launch[i]));
      if (memory_) {
        p.p_fit = fit[i];
        p.p_fit_doubt = fit_doubt[i];
      }
    }
    return out;
  }
  // The share of the weights' posterior variance P(fits) counts, and the
  // residual sd beside it (-1: the fit's own).
  double memory_doubt() const { return memory_doubt_; }
  double fits_residual_sd() const { return fits_residual_sd_; }
  // Predicted peak memory (GiB); 0 without a memory model.
  double PeakGib(const Config& c) const { return memory_ ? std::exp(memory_->Mean(MemX(c))) : 0; }
  // The same for the setting at `index` of the space (ConfigAt), without
  // building it: the same row, so the same answer to the last bit.
  double PeakGibAt(int64_t index) const {
    if (!memory_) return 0;
    Eigen::VectorXd x = Eigen::VectorXd::Zero(mem_dim_);
    f_.EncodeAt(index, x, /*zeroed=*/true);
    if (mem_dim_ > f_.dim()) SetEstimateColumns(index, nullptr, x);
    return std::exp(memory_->Mean(x));
  }
  // P(fits) of the setting at `index` (PredictAll's p_fit, from a dense
  // row: equal to the last bits or so); 1 without a memory model.
  double PFitAt(int64_t index) const {
    if (!memory_) return 1;
    Eigen::VectorXd x = Eigen::VectorXd::Zero(mem_dim_);
    f_.EncodeAt(index, x, /*zeroed=*/true);
    if (mem_dim_ > f_.dim()) SetEstimateColumns(index, nullptr, x);
    return memory_->ProbabilityBelow(x, std::log(planner_.capacity_gib), memory_doubt_, fits_residual_sd_);
  }
  // The rows the step-time and memory models see for `c` (the bank
  // sources' offset columns stay 0: contrasts within this session).
  Eigen::VectorXd TimeX(const Config& c) const {
    Eigen::VectorXd x = f_.Encode(c, time_dim_ - f_.dim());
    if (time_estimate_) x[f_.dim()] = TimeFeature(c);
    for (const Trend& t : trend_) x[t.column] = TrendAt(t, -1, c);
    return x;
  }
  Eigen::VectorXd MemX(const Config& c) const {
    Eigen::VectorXd x = f_.Encode(c, mem_dim_ - f_.dim());
    if (mem_dim_ > f_.dim()) SetEstimateColumns(-1, &c, x);
    return x;
  }

  const Features& features() const { return f_; }
  double memory_sigma() const { return memory_ ? memory_sigma_ : 0.0; }
  // Log step time of the fastest own trial that ran (what EI improves on).
  double best_log_time() const { return best_; }
  // The mean log step time of the baseline's runs; nullopt where none ran.
  std::optional<double> baseline_log_time() const {
    return have_base_ ? std::optional<double>(base_log_) : std::nullopt;
  }
  const models::BayesLinear& time() const { return time_; }
  const std::optional<models::CensoredLinear>& memory() const { return memory_; }

 private:
  double LogEstimate(double gib) const { return std::log(std::max(gib, 1e-3)) - base_estimate_; }
  double LogTime(double s) const { return std::log(std::max(s, 1e-9)) - base_time_estimate_; }
  double TimeFeature(const Config& c) const { return LogTime(planner_.time_estimate_s(c)); }

  // By index of the space where the setting is in it (no Config parsing),
  // else from the Config.
  double TimeFeature(int64_t index, const Config& c) const {
    return index >= 0 ? LogTime(planner_.time_estimate_s_at(index)) : TimeFeature(c);
  }
  // The estimate's columns of a memory row for the setting at `index` (or
  // `*c` where index < 0), from one estimate: its log against the
  // baseline's and, with share_, its activation share less the baseline's
  // (0 without).
  std::pair<double, double> EstimateColumns(int64_t index, const Config* c) const {
    if (share_) {
      const Planner::MemoryEstimate e =
          index >= 0 ? planner_.memory_estimate_parts_at(index) : planner_.memory_estimate_parts(*c);
      return {LogEstimate(e.gib), e.activation_share - base_share_};
    }
    return {LogEstimate(index >= 0 ? planner_.memory_estimate_gib_at(index) : planner_.memory_estimate_gib(*c)), 0.0};
  }
  // Writes them at columns d (and d + 1) of `row`.
  template <typename Row>
  void SetEstimateColumns(int64_t index, const Config* c, Row&& row) const {
    const auto [log_estimate, share] = EstimateColumns(index, c);
    row[f_.dim()] = log_estimate;
    if (share_) row[f_.dim() + 1] = share;
  }

  // Each knob's effects at the scale its values that ran show: where the
  // fit has learned some of a knob's main effects (posterior sd under half
  // the prior's), the largest of them, s, caps the prior variance of all
  // its main effects and of its interactions at max(2 s, floor)^2. A knob
  // whose tried values barely matter stops promising much through the
  // values it has not tried (one-hot columns share nothing). Returns
  // whether any variance in `var` was lowered.
  bool ScaleByKnob(const models::BayesLinear& fit, double floor, Eigen::VectorXd* var) const {
    const std::vector<std::vector<int>>& mains = f_.main_columns();
    std::vector<double> scale(mains.size(), -1.0);
    bool lowered = false;
    auto cap = [&](int col, double s) {
      if (col >= 0 && s * s < (*var)[col]) {
        (*var)[col] = s * s;
        lowered = true;
      }
    };
    for (size_t k = 0; k < mains.size(); ++k) {
      double largest = -1;
      for (int col : mains[k]) {
        if (col >= 0 && fit.WeightSd(col) < 0.5 * std::sqrt((*var)[col])) {
          largest = std::max(largest, std::fabs(fit.weights()[col]));
        }
      }
      if (largest < 0) continue;
      // (Capping knob k's columns cannot change another knob's largest.)
      scale[k] = std::max(2.0 * largest, floor);
      for (int col : mains[k]) cap(col, scale[k]);
    }
    for (size_t a = 0; a < mains.size(); ++a) {
      for (size_t b = a + 1; b < mains.size(); ++b) {
        if (scale[a] < 0 && scale[b] < 0) continue;
        const double s = scale[a] < 0 ? scale[b] : scale[b] < 0 ? scale[a] : std::min(scale[a], scale[b]);
        for (int ia : mains[a]) {
          for (int ib : mains[b]) {
            if (ia >= 0 && ib >= 0) cap(f_.PairColumn(ia, ib), s);
          }
        }
      }
    }
    return lowered;
  }

  // A numeric knob's trend: log2 of its value against the baseline's, one
  // step-time column (Options::trend_var).
  struct Trend {
    int64_t stride = 1, radix = 1;  // the knob's digit in a setting's index
    const std::string* knob = nullptr;
    double base = 0;                // the baseline's value
    std::vector<double> log_ratio;  // per value
    int column = -1;
  };
  // The trend's value for the setting at `index` of the space, or, where
  // index < 0 (a trial outside the space: the bank's, say), for `c`'s
  // value of the knob, whichever number it is (0 where it is none).
  static double TrendAt(const Trend& t, int64_t index) {
    return t.log_ratio[static_cast<size_t>(index / t.stride % t.radix)];
  }
  double TrendAt(const Trend& t, int64_t index, const Config& c) const {
    if (index >= 0) return TrendAt(t, index);
    const auto it = c.find(*t.knob);
    double x = 0;
    return it != c.end() && PositiveNumber(it->second, &x) ? std::log2(x) - std::log2(t.base) : 0.0;
  }
  // A finite number > 0: a value such as "inf" or "1e999" in a spec or a
  // bank trial would make the trend's column infinite and the fit NaN.
  static bool PositiveNumber(const std::string& s, double* x) {
    return absl::SimpleAtod(s, x) && std::isfinite(*x) && *x > 0;
  }
  std::vector<Trend> trend_;

  const SessionSpec& spec_;
  Features f_;
  const Planner& planner_;
  int mem_dim_ = 0, time_dim_ = 0;
  bool time_estimate_ = false;
  double base_estimate_ = 0, base_time_estimate_ = 0, base_share_ = 0;
  bool share_ = false;  // the memory row has the estimate's activation share (column d + 1)
  double cost_weight_ = 0;
  double best_ = 0;
  bool have_base_ = false;
  double base_log_ = 0, risk_weight_ = 0;
  // The share of the weights' posterior variance P(fits) counts
  // (Options::memory_doubt_scale where the textbook estimate is a column,
  // or what the runs' peaks bear out: LearnedMemoryDoubt), and the
  // residual sd beside it (-1: the fit's own).
  double memory_doubt_ = 1.0;
  double fits_residual_sd_ = -1;
  double memory_sigma_ = 0;
  models::BayesLinear time_;
  bool fit_launch_ = false;
  // Whether the launch model has the planner's rules hint as a column (the
  // last; Planner::rules_refuse_at, Options::rules_hint_logit).
  bool rules_hint_ = false;
  models::BayesLogistic launch_;
  std::optional<models::CensoredLinear> memory_;
};

// A knob value no trial held is known to the models only from priors and
// the textbook estimates; a stop that rests on them may leave
// the optimum untried (ModelOptimizer::Options::probe_untried_values).
// What a probe must meet:
struct ProbeRule {
  // Some setting holding the value is expected to gain at least this were
  // it to fit (Prediction::GainIfItFits, times the chance to keep the
  // contract).
  double min_promise = 0;
  // The probe itself fits with at least this probability, keeps the
  // contract more likely than not, and, where the baseline was measured
  // (base_log, its log step time), beats it with at least min_p_beat.
  double min_fit = 0.75;
  double min_p_beat = 0.8;
  std::optional<double> base_log;
  // And the probe's own gain, were it to fit, times P(fits) and the chance
  // to keep the contract, is at least this.
  double min_expected = 0;
  // Whether a setting predicted `p`, keeping the contract with probability
  // `keeps`, may be run under the rule (all but min_promise, which is the
  // value's, not the setting's).
  bool Admits(const Models::Prediction& p, double keeps) const {
    return p.p_fit_doubt >= min_fit && keeps > 0.5 && p.GainIfItFits() * keeps * p.p_fit_doubt >= min_expected &&
           (!base_log || p.ProbabilityBelow(*base_log) >= min_p_beat);
  }
};
struct Probe {
  size_t at = 0;       // into the pool
  double promise = 0;  // the value's best setting's, as in ProbeRule
};

// Of the values no trial in `history` held (an OOM holds its values: its
// peak is evidence; so does one in flight: its answer is coming, and a
// window of several would otherwise probe the value twice), the one whose
// settings in `pool` promise most (Prediction::GainIfItFits times the
// chance to keep the contract), at least rule.min_promise, probed at its
// setting likeliest to fit among those that meet the rule (ties: the
// faster predicted); none where no value has such a setting. `pred[i]` is
// pool[i]'s prediction, `history_index[i]` history[i]'s index (-1 outside
// the space), `clean(index)` a setting's chance to keep the contract.
template <typename Clean>
std::optional<Probe> ProbeUntriedValue(const Space& space, const std::vector<Observation>& history,
                                       const std::vector<int64_t>& history_index,
                                       const std::vector<int64_t>& pool,
                                       const std::vector<Models::Prediction>& pred, Clean&& clean,
                                       const ProbeRule& rule) {
  std::vector<std::vector<char>> held(space.knobs());
  for (size_t k = 0; k < space.knobs(); ++k) held[k].assign(static_cast<size_t>(space.radix(k)), 0);
  for (size_t i = 0; i < history.size(); ++i) {
    if (history_index[i] < 0) continue;
    for (size_t k = 0; k < space.knobs(); ++k) held[k][static_cast<size_t>(space.Digit(history_index[i], k))] = 1;
  }
  struct Best {
    double promise = 0;
    std::optional<size_t> probe;
  };
  std::vector<std::vector<Best>> best(space.knobs());
  for (size_t k = 0; k < space.knobs(); ++k) best[k].resize(static_cast<size_t>(space.radix(k)));
  for (size_t i = 0; i < pool.size(); ++i) {
    const Models::Prediction& p = pred[i];
    const double keeps = clean(pool[i]);
    const double gain = p.GainIfItFits() * keeps;
    const bool eligible = rule.Admits(p, keeps);
    for (size_t k = 0; k < space.knobs(); ++k) {
      const size_t v = static_cast<size_t>(space.Digit(pool[i], k));
      if (held[k][v]) continue;
      Best& b = best[k][v];
      b.promise = std::max(b.promise, gain);
      if (eligible && (!b.probe || p.p_fit_doubt > pred[*b.probe].p_fit_doubt ||
                       (p.p_fit_doubt == pred[*b.probe].p_fit_doubt && p.mu < pred[*b.probe].mu))) {
        b.probe = i;
      }
    }
  }
  std::optional<Probe> out;
  for (const std::vector<Best>& values : best) {
    for (const Best& b : values) {
      if (b.probe && b.promise >= rule.min_promise && (!out || b.promise > out->promise)) {
        out = Probe{*b.probe, b.promise};
      }
    }
  }
  return out;
}

// An OOM retried with a memory saver, as an engineer would: of the pool's
// settings one knob away from an OOM'd setting that no later trial came
// within one knob of (finished or in flight: each OOM is retried once) and
// that is not itself one knob from an earlier OOM (a retry that ran out of
// memory is not retried in turn), and that `saves(setting, oom)` says
// saves memory enough against that OOM, the likeliest to fit among those
// that meet `rule` (ties: the faster predicted); none where none does.
// Other arguments as ProbeUntriedValue's; rule.min_promise is not read.
template <typename Clean, typename Saves>
std::optional<size_t> OomRetry(const Space& space, const std::vector<Observation>& history,
                               const std::vector<int64_t>& history_index, const std::vector<int64_t>& pool,
                               const std::vector<Models::Prediction>& pred, Clean&& clean, Saves&& saves,
                               const ProbeRule& rule) {
  // Each setting of the history: its last position, and whether it ran out
  // of memory (by lookup: a long history's OOMs are not compared pairwise).
  struct Seen {
    size_t last = 0;
    bool oom = false;
  };
  absl::flat_hash_map<int64_t, Seen> seen;
  for (size_t i = 0; i < history.size(); ++i) {
    if (history_index[i] < 0) continue;
    Seen& s = seen[history_index[i]];
    s.last = i;
    s.oom = s.oom || history[i].status == trial_status::kOom;
  }
  // The fresh OOMs' one-knob neighbours, each with the OOMs it neighbours.
  absl::flat_hash_map<int64_t, std::vector<int64_t>> next_to;
  for (size_t i = 0; i < history.size(); ++i) {
    const int64_t at = history_index[i];
    if (history[i].status != trial_status::kOom || at < 0 || seen.at(at).last != i) continue;
    bool retried = false;
    std::vector<int64_t> near;
    for (size_t k = 0; k < space.knobs(); ++k) {
      for (int64_t v = 0; v < space.radix(k); ++v) {
        const int64_t c = space.With(at, k, v);
        if (c == at) continue;
        near.push_back(c);
        const auto it = seen.find(c);
        retried = retried || (it != seen.end() && (it->second.last > i || it->second.oom));
      }
    }
    if (retried) continue;
    for (const int64_t c : near) next_to[c].push_back(at);
  }
  std::optional<size_t> out;
  for (size_t i = 0; i < pool.size() && !next_to.empty(); ++i) {
    const auto it = next_to.find(pool[i]);
    if (it == next_to.end()) continue;
    const Models::Prediction& p = pred[i];
    if (out && (p.p_fit_doubt < pred[*out].p_fit_doubt ||
                (p.p_fit_doubt == pred[*out].p_fit_doubt && p.mu >= pred[*out].mu))) {
      continue;
    }
    // The saving last: it prices memory twice per OOM neighboured.
    if (rule.Admits(p, clean(pool[i])) && std::any_of(it->second.begin(), it->second.end(), [&](int64_t oom) { return saves(pool[i], oom); })) {
      out = i;
    }
  }
  return out;
}

}  // namespace infrarsi::model_internal

#endif  // INFRARSI_CORE_MODEL_INTERNAL_H_
