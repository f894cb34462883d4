#include "core/model_optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "core/planner.h"
#include "models/bayes_linear.h"
#include "models/tobit.h"

namespace infrarsi {
namespace {

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
    int on[64];
    int n_on = 0;
    for (size_t k = 0; k < spec_.knobs.size() && n_on < 64; ++k) {
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

int Hamming(const Config& a, const Config& b) {
  int d = 0;
  for (const auto& [k, v] : a) d += b.at(k) != v;
  return d;
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
double NormalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }

bool InFlight(const std::string& s) { return s == "queued" || s == "leased" || s == "running"; }
bool Ran(const Observation& o) { return o.status == "ok" && o.step_time_s > 0; }

Eigen::MatrixXd Stack(const std::vector<Eigen::VectorXd>& rows, Eigen::Index cols) {
  Eigen::MatrixXd m(static_cast<Eigen::Index>(rows.size()), cols);
  for (size_t i = 0; i < rows.size(); ++i) m.row(static_cast<Eigen::Index>(i)) = rows[i];
  return m;
}
// Past `cap` rows, the run and memory models (iterative fits) see a
// weighted subsample: the newest rows of each class (rare: failures or
// OOMs; common: the rest), each weighted to stand for its whole class, so
// a proposal's cost stays bounded however long the session.
struct Sample {
  std::vector<size_t> rows;
  Eigen::VectorXd weights;
};
Sample Subsample(const std::vector<bool>& rare, size_t cap) {
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

Eigen::VectorXd Vec(const std::vector<double>& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()));
}

// The three models fitted to one history.
class Models {
 public:
  Models(const SearchContext& ctx, const Planner& planner, const std::vector<Observation>& history,
         const ModelOptimizer::Options& o, const Priors* priors)
      : spec_(*ctx.spec), f_(spec_), planner_(planner) {
    const int d = f_.dim();
    const bool memory = planner_.capacity_gib > 0;
    const bool estimate = static_cast<bool>(planner_.memory_estimate_gib);
    mem_dim_ = d + (estimate ? 1 : 0);
    if (estimate) base_estimate_ = std::log(std::max(planner_.memory_estimate_gib(spec_.baseline), 1e-3));

    std::vector<Eigen::VectorXd> xs_ok, xs_all, xs_mem;
    std::vector<double> ys, launched, mem_y, mem_cens;
    double base_time = 0, base_peak = 0;
    for (const Observation& h : history) {
      if (InFlight(h.status)) continue;
      const Eigen::VectorXd x = f_.Encode(h.config);
      const bool oom = h.status == "oom";
      xs_all.push_back(x);
      // Without a capacity, an OOM is just a failure to run.
      launched.push_back(Ran(h) || (oom && memory) ? 1.0 : 0.0);
      if (Ran(h)) {
        xs_ok.push_back(x);
        ys.push_back(std::log(h.step_time_s));
        if (h.config == spec_.baseline) base_time = h.step_time_s;
      }
      if (!memory) continue;
      if (oom) {
        xs_mem.push_back(MemX(h.config));
        mem_y.push_back(std::log(planner_.capacity_gib));
        mem_cens.push_back(1.0);
      } else if (h.peak_mem_gib > 0 && !InFlight(h.status)) {
        xs_mem.push_back(MemX(h.config));
        mem_y.push_back(std::log(h.peak_mem_gib));
        mem_cens.push_back(0.0);
        if (h.config == spec_.baseline) base_peak = h.peak_mem_gib;
      }
    }
    // Step time: knob effects are a few tens of percent each (main effects
    // wider than interactions); the intercept centres on the baseline.
    const double y_mean =
        ys.empty() ? 0.0 : std::accumulate(ys.begin(), ys.end(), 0.0) / static_cast<double>(ys.size());
    Eigen::VectorXd mean = Eigen::VectorXd::Zero(d), var(d);
    mean[0] = base_time > 0 ? std::log(base_time) : y_mean;
    for (int i = 0; i < d; ++i) var[i] = i == 0 ? 0.25 : (f_.is_main(i) ? 0.5 : 0.1);
    // Memory: the same shape of prior, tighter (memory is less noisy and
    // knob effects on it are more nearly additive in log space).
    Eigen::VectorXd mmean = Eigen::VectorXd::Zero(mem_dim_), mvar(mem_dim_);
    for (int i = 0; i < mem_dim_; ++i) mvar[i] = i == 0 ? 1.0 : (f_.is_main(i) ? 0.25 : 0.02);
    if (estimate) {
      mmean[d] = 1.0;  // trust the textbook estimate's proportions...
      mvar[d] = 0.1;   // ...within about 30%
    }
    mmean[0] = base_peak > 0       ? std::log(base_peak)
               : estimate          ? base_estimate_
               : planner_.capacity_gib > 0 ? std::log(planner_.capacity_gib) - 0.7
                                   : 0.0;
    if (priors != nullptr) {
      for (const Knob& k : spec_.knobs) {
        for (const std::string& v : k.values) {
          const int i = f_.MainIndex(k.name, v);
          if (i < 0) continue;
          const Effect e = priors->EffectOf(spec_, k.name, v);
          mean[i] = e.time;
          var[i] = e.time_sd * e.time_sd;
          // With a textbook estimate, the prior speaks for what it misses.
          mmean[i] = estimate ? 0.0 : e.mem;
          mvar[i] = estimate ? 0.05 : e.mem_sd * e.mem_sd;
        }
      }
    }
    best_ = ys.empty() ? mean[0] : *std::min_element(ys.begin(), ys.end());
    time_.Fit(Stack(xs_ok, d), Vec(ys), mean, var, o.time_noise_var);

    // Launching: most settings launch; learn the failing values and pairs.
    Eigen::VectorXd lmean = Eigen::VectorXd::Zero(d), lvar(d);
    lmean[0] = 3.0;
    for (int i = 0; i < d; ++i) lvar[i] = i == 0 ? 2.0 : (f_.is_main(i) ? 4.0 : 1.0);
    fit_launch_ = std::find(launched.begin(), launched.end(), 0.0) != launched.end();
    if (fit_launch_) {
      std::vector<bool> rare;
      for (double l : launched) rare.push_back(l == 0.0);
      const Sample sub = Subsample(rare, static_cast<size_t>(o.max_fit_rows));
      launch_.Fit(Stack(Pick(xs_all, sub.rows), d), Vec(Pick(launched, sub.rows)), lmean, lvar,
                  &sub.weights);
    }
    if (memory) {
      std::vector<bool> rare;
      for (double c : mem_cens) rare.push_back(c == 1.0);
      const Sample sub = Subsample(rare, static_cast<size_t>(o.max_fit_rows));
      memory_.emplace();
      memory_->Fit(Stack(Pick(xs_mem, sub.rows), mem_dim_), Vec(Pick(mem_y, sub.rows)),
                   Vec(Pick(mem_cens, sub.rows)), mmean, mvar, o.memory_sigma, &sub.weights);
    }
  }

  struct Prediction {
    double mu = 0, sd = 1;  // log step time
    double p_fit = 1, p_launch = 1;
    double ei = 0;          // expected improvement of log time over the best
    double Score() const { return ei * p_fit * p_launch; }
  };
  std::vector<Prediction> PredictAll(const std::vector<Config>& cs) const {
    const Eigen::Index n = static_cast<Eigen::Index>(cs.size());
    std::vector<Prediction> out(cs.size());
    if (n == 0) return out;
    Eigen::MatrixXd x(n, f_.dim());
    for (Eigen::Index i = 0; i < n; ++i) f_.EncodeInto(cs[static_cast<size_t>(i)], x.row(i));
    Eigen::VectorXd mu, var;
    time_.PredictBatch(x, &mu, &var);
    Eigen::VectorXd launch;
    if (fit_launch_) launch = x * launch_.weights();
    Eigen::VectorXd fit;
    if (memory_) {
      Eigen::MatrixXd xm(n, mem_dim_);
      for (Eigen::Index i = 0; i < n; ++i) xm.row(i) = MemX(cs[static_cast<size_t>(i)]);
      fit = memory_->ProbabilityBelowBatch(xm, std::log(planner_.capacity_gib));
    }
    for (Eigen::Index i = 0; i < n; ++i) {
      Prediction& p = out[static_cast<size_t>(i)];
      p.mu = mu[i];
      p.sd = std::sqrt(var[i]);
      const double z = (best_ - p.mu) / p.sd;
      p.ei = (best_ - p.mu) * NormalCdf(z) + p.sd * NormalPdf(z);
      if (fit_launch_) p.p_launch = 1.0 / (1.0 + std::exp(-launch[i]));
      if (memory_) p.p_fit = fit[i];
    }
    return out;
  }
  // Predicted peak memory (GiB); 0 without a memory model.
  double PeakGib(const Config& c) const { return memory_ ? std::exp(memory_->Mean(MemX(c))) : 0; }

  const Features& features() const { return f_; }
  const models::BayesLinear& time() const { return time_; }
  const std::optional<models::CensoredLinear>& memory() const { return memory_; }

 private:
  Eigen::VectorXd MemX(const Config& c) const {
    Eigen::VectorXd x = f_.Encode(c, mem_dim_ - f_.dim());
    if (mem_dim_ > f_.dim()) {
      x[f_.dim()] = std::log(std::max(planner_.memory_estimate_gib(c), 1e-3)) - base_estimate_;
    }
    return x;
  }

  const SessionSpec& spec_;
  Features f_;
  const Planner& planner_;
  int mem_dim_ = 0;
  double base_estimate_ = 0;
  double best_ = 0;
  models::BayesLinear time_;
  bool fit_launch_ = false;
  models::BayesLogistic launch_;
  std::optional<models::CensoredLinear> memory_;
};

}  // namespace

Proposal ModelOptimizer::Propose(const SearchContext& ctx, const std::vector<Observation>& history,
                                 int n, uint64_t seed) {
  Proposal out;
  if (n <= 0) return out;
  const SessionSpec& spec = *ctx.spec;
  const Planner planner = PlannerFor(spec);
  std::mt19937_64 rng(seed);
  std::set<std::string> seen;
  for (const Observation& o : history) seen.insert(ConfigKey(o.config));
  auto launches = [&](const Config& c) {
    return !planner.launch_check || planner.launch_check(c).empty();
  };
  auto take = [&](const Config& c, const std::string& why) {
    for (const Config& p : out.configs) {
      if (p == c) return;
    }
    out.configs.push_back(c);
    out.reasons.push_back(why);
    seen.insert(ConfigKey(c));
  };

  // Start: the bank's settings, kept at least two knobs apart.
  int warm_used = 0;
  for (const Config& w : ctx.warm_starts) {
    for (const Observation& o : history) warm_used += o.config == w;
  }
  for (const Config& w : ctx.warm_starts) {
    if (static_cast<int>(out.configs.size()) >= n || warm_used >= options_.max_warm_starts) break;
    if (seen.count(ConfigKey(w)) || !launches(w)) continue;
    bool close = false;
    for (const Config& p : out.configs) close = close || Hamming(p, w) < 2;
    if (close) continue;
    take(w, "bank");
    ++warm_used;
  }
  if (static_cast<int>(out.configs.size()) >= n) return out;

  // Candidates: every untried setting that launches, or a sample plus the
  // neighbourhood of the best settings seen.
  std::vector<Config> pool;
  std::vector<std::string> why;
  const int64_t size = spec.SpaceSize();
  if (size <= options_.max_enumerate) {
    for (int64_t i = 0; i < size; ++i) {
      Config c = ConfigAt(spec, i);
      if (!seen.count(ConfigKey(c)) && launches(c)) pool.push_back(std::move(c));
    }
  } else {
    std::set<std::string> pooled = seen;
    std::uniform_int_distribution<int64_t> pick(0, size - 1);
    for (int i = 0; i < options_.pool_size; ++i) {
      Config c = ConfigAt(spec, pick(rng));
      if (pooled.insert(ConfigKey(c)).second && launches(c)) pool.push_back(std::move(c));
    }
    std::vector<const Observation*> ok;
    for (const Observation& o : history) {
      if (Ran(o)) ok.push_back(&o);
    }
    std::sort(ok.begin(), ok.end(),
              [](const auto* a, const auto* b) { return a->step_time_s < b->step_time_s; });
    for (size_t i = 0; i < ok.size() && i < 5; ++i) {
      for (const Knob& k : spec.knobs) {
        for (const std::string& v : k.values) {
          Config c = ok[i]->config;
          c[k.name] = v;
          if (pooled.insert(ConfigKey(c)).second && launches(c)) pool.push_back(std::move(c));
        }
      }
    }
  }
  if (pool.empty()) return out;
  why.assign(pool.size(), "model");

  // Distinct settings measured (the doctor's baseline repeats count once).
  std::set<std::string> measured;
  for (const Observation& o : history) {
    if (!InFlight(o.status)) measured.insert(ConfigKey(o.config));
  }
  const int finished = static_cast<int>(measured.size());
  std::vector<double> score(pool.size(), 0.0);
  const bool informed = ctx.priors != nullptr || warm_used > 0;
  const int initial = informed ? 0 : options_.initial_designs;
  if (finished < initial + 1) {
    // Cold start: far from everything tried (space-filling).
    for (size_t i = 0; i < pool.size(); ++i) {
      int dmin = 1 << 20;
      for (const Observation& o : history) dmin = std::min(dmin, Hamming(pool[i], o.config));
      for (const Config& c : out.configs) dmin = std::min(dmin, Hamming(pool[i], c));
      score[i] = dmin + std::uniform_real_distribution<double>(0, 0.5)(rng);
      why[i] = "space-filling";
    }
  } else {
    const Models m(ctx, planner, history, options_, ctx.priors);
    std::vector<Models::Prediction> pred = m.PredictAll(pool);
    for (size_t i = 0; i < pool.size(); ++i) score[i] = pred[i].Score();
    // Memory-saver pairing: the best predicted speed-ups that would not fit
    // get the values the memory model prices cheapest (one, then two).
    if (m.memory()) {
      std::vector<std::pair<double, std::pair<std::string, std::string>>> savers;
      const double base_peak = m.PeakGib(spec.baseline);
      for (const Knob& k : spec.knobs) {
        for (const std::string& v : k.values) {
          Config c = spec.baseline;
          if (c[k.name] == v) continue;
          c[k.name] = v;
          const double price = m.PeakGib(c) - base_peak;
          if (price < 0) savers.push_back({price, {k.name, v}});
        }
      }
      std::sort(savers.begin(), savers.end());
      std::vector<size_t> by_ei(pool.size());
      std::iota(by_ei.begin(), by_ei.end(), 0);
      std::sort(by_ei.begin(), by_ei.end(),
                [&](size_t a, size_t b) { return pred[a].ei > pred[b].ei; });
      std::set<std::string> pooled;
      for (const Config& c : pool) pooled.insert(ConfigKey(c));
      const size_t base_pool = pool.size();
      std::vector<Config> extra;
      for (size_t r = 0, paired = 0; r < by_ei.size() && paired < 20; ++r) {
        const size_t i = by_ei[r];
        if (i >= base_pool || pred[i].p_fit >= 0.5) continue;
        ++paired;
        for (size_t a = 0; a < savers.size() && a < 4; ++a) {
          for (size_t b = a; b < savers.size() && b < 4; ++b) {
            Config c = pool[i];
            c[savers[a].second.first] = savers[a].second.second;
            c[savers[b].second.first] = savers[b].second.second;
            if (c == pool[i] || seen.count(ConfigKey(c)) || !pooled.insert(ConfigKey(c)).second ||
                !launches(c)) {
              continue;
            }
            extra.push_back(std::move(c));
          }
        }
      }
      for (const Models::Prediction& p : m.PredictAll(extra)) {
        pred.push_back(p);
        score.push_back(p.Score());
        why.push_back("model+memory-saver");
      }
      pool.insert(pool.end(), extra.begin(), extra.end());
    }
    out.expected_gain = score.empty() ? 0 : *std::max_element(score.begin(), score.end());
  }
  // Take the best, keeping a batch's picks at least two knobs apart.
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  for (size_t i : order) {
    if (static_cast<int>(out.configs.size()) >= n) break;
    bool close = false;
    for (const Config& c : out.configs) close = close || Hamming(c, pool[i]) < 2;
    if (!close) take(pool[i], why[i]);
  }
  for (size_t i : order) {  // small spaces may not allow the spacing
    if (static_cast<int>(out.configs.size()) >= n) break;
    take(pool[i], why[i]);
  }
  return out;
}

std::vector<KnobEffectEstimate> ExplainKnobs(const SearchContext& ctx,
                                             const std::vector<Observation>& history,
                                             const ModelOptimizer::Options& options) {
  const SessionSpec& spec = *ctx.spec;
  const Planner planner = PlannerFor(spec);
  const Models cold(ctx, planner, history, options, nullptr);
  std::optional<Models> revised;
  if (ctx.priors != nullptr) revised.emplace(ctx, planner, history, options, ctx.priors);
  const Models& post = revised ? *revised : cold;
  std::vector<KnobEffectEstimate> out;
  const Features& f = cold.features();
  const double base_peak = post.PeakGib(spec.baseline);
  for (const Knob& k : spec.knobs) {
    for (const std::string& v : k.values) {
      const int i = f.MainIndex(k.name, v);
      if (i < 0) continue;
      KnobEffectEstimate e;
      e.knob = k.name;
      e.value = v;
      e.has_prior = ctx.priors != nullptr;
      if (e.has_prior) {
        const Effect p = ctx.priors->EffectOf(spec, k.name, v);
        e.prior_time = p.time;
        e.prior_time_sd = p.time_sd;
        e.prior_mem = p.mem;
        e.prior_mem_sd = p.mem_sd;
      }
      e.time = cold.time().weights()[i];
      e.time_sd = cold.time().WeightSd(i);
      e.revised_time = post.time().weights()[i];
      if (cold.memory()) {
        e.mem = cold.memory()->weights()[i];
        e.mem_sd = cold.memory()->WeightSd(i);
        e.revised_mem = post.memory()->weights()[i];
        Config c = spec.baseline;
        c[k.name] = v;
        e.memory_price_gib = post.PeakGib(c) - base_peak;
      }
      for (const Observation& o : history) e.trials += Ran(o) && o.config.at(k.name) == v;
      if (e.has_prior) {
        const double dt = e.time - e.prior_time;
        const double st = std::sqrt(e.time_sd * e.time_sd + e.prior_time_sd * e.prior_time_sd);
        char buf[160];
        if (e.trials > 0 && std::fabs(dt) > 2 * st) {
          e.miscalibrated = true;
          std::snprintf(buf, sizeof(buf), "time: prior %+.2f, runs %+.2f +- %.2f", e.prior_time,
                        e.time, e.time_sd);
          e.note = buf;
        }
        // With a textbook estimate the memory prior covers only its residue.
        if (cold.memory() && !planner.memory_estimate_gib && e.trials > 0) {
          const double dm = e.mem - e.prior_mem;
          const double sm = std::sqrt(e.mem_sd * e.mem_sd + e.prior_mem_sd * e.prior_mem_sd);
          if (std::fabs(dm) > 2 * sm) {
            e.miscalibrated = true;
            std::snprintf(buf, sizeof(buf), "%smemory: prior %+.2f, runs %+.2f +- %.2f",
                          e.note.empty() ? "" : "; ", e.prior_mem, e.mem, e.mem_sd);
            e.note += buf;
          }
        }
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace infrarsi
