#include "core/model_optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "models/bayes_linear.h"

namespace infrarsi {
namespace {

// One-hot coding against the baseline (whose values are the reference), plus
// all pairwise products: feature 0 is the intercept.
class Features {
 public:
  explicit Features(const SessionSpec& spec) : spec_(spec) {
    int next = 1;
    for (const Knob& k : spec.knobs) {
      std::map<std::string, int> idx;
      for (const std::string& v : k.values) {
        if (v != spec.baseline.at(k.name)) idx[v] = next++;
      }
      main_.push_back(std::move(idx));
    }
    main_count_ = next;
    for (size_t a = 0; a < main_.size(); ++a) {
      for (size_t b = a + 1; b < main_.size(); ++b) {
        for (const auto& [va, ia] : main_[a]) {
          for (const auto& [vb, ib] : main_[b]) pair_[{ia, ib}] = next++;
        }
      }
    }
    dim_ = next;
  }
  int dim() const { return dim_; }
  bool is_main(int i) const { return i < main_count_; }
  // (knob, value) of each main-effect feature.
  std::map<int, std::pair<std::string, std::string>> MainFeatures() const {
    std::map<int, std::pair<std::string, std::string>> out;
    for (size_t k = 0; k < main_.size(); ++k) {
      for (const auto& [v, i] : main_[k]) out[i] = {spec_.knobs[k].name, v};
    }
    return out;
  }

  Eigen::VectorXd Encode(const Config& c) const {
    Eigen::VectorXd x = Eigen::VectorXd::Zero(dim_);
    x[0] = 1.0;
    std::vector<int> on;
    for (size_t k = 0; k < spec_.knobs.size(); ++k) {
      auto it = main_[k].find(c.at(spec_.knobs[k].name));
      if (it != main_[k].end()) on.push_back(it->second);
    }
    for (size_t a = 0; a < on.size(); ++a) {
      x[on[a]] = 1.0;
      for (size_t b = a + 1; b < on.size(); ++b) x[pair_.at({on[a], on[b]})] = 1.0;
    }
    return x;
  }

 private:
  const SessionSpec& spec_;
  std::vector<std::map<std::string, int>> main_;
  std::map<std::pair<int, int>, int> pair_;
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

}  // namespace

std::vector<Config> ModelOptimizer::Propose(const SessionSpec& spec,
                                            const std::vector<Observation>& history, int n,
                                            uint64_t seed) {
  std::vector<Config> out;
  if (n <= 0) return out;
  std::mt19937_64 rng(seed);
  std::set<std::string> tried;
  for (const Observation& o : history) tried.insert(ConfigKey(o.config));

  // Candidates: every untried setting, or a sample plus the neighbourhood
  // of the best settings seen.
  std::vector<Config> pool;
  const int64_t size = spec.SpaceSize();
  if (size <= options_.max_enumerate) {
    for (int64_t i = 0; i < size; ++i) {
      Config c = ConfigAt(spec, i);
      if (!tried.count(ConfigKey(c))) pool.push_back(std::move(c));
    }
  } else {
    std::set<std::string> seen = tried;
    std::uniform_int_distribution<int64_t> pick(0, size - 1);
    for (int i = 0; i < options_.pool_size; ++i) {
      Config c = ConfigAt(spec, pick(rng));
      if (seen.insert(ConfigKey(c)).second) pool.push_back(std::move(c));
    }
    std::vector<const Observation*> ok;
    for (const Observation& o : history) {
      if (o.status == "ok" && o.step_time_s > 0) ok.push_back(&o);
    }
    std::sort(ok.begin(), ok.end(),
              [](const auto* a, const auto* b) { return a->step_time_s < b->step_time_s; });
    for (size_t i = 0; i < ok.size() && i < 5; ++i) {
      for (const Knob& k : spec.knobs) {
        for (const std::string& v : k.values) {
          Config c = ok[i]->config;
          c[k.name] = v;
          if (seen.insert(ConfigKey(c)).second) pool.push_back(std::move(c));
        }
      }
    }
  }
  if (pool.empty()) return out;

  int finished = 0;
  for (const Observation& o : history) finished += !InFlight(o.status);
  std::vector<double> score(pool.size(), 0.0);
  const int initial = options_.priors ? 0 : options_.initial_designs;
  if (finished < initial + 1) {
    // Cold start: far from everything tried (space-filling).
    for (size_t i = 0; i < pool.size(); ++i) {
      int dmin = 1 << 20;
      for (const Observation& o : history) dmin = std::min(dmin, Hamming(pool[i], o.config));
      score[i] = dmin + std::uniform_real_distribution<double>(0, 0.5)(rng);
    }
  } else {
    const Features f(spec);
    const int d = f.dim();
    std::vector<Eigen::VectorXd> xs_ok, xs_all;
    std::vector<double> ys, labels;
    for (const Observation& o : history) {
      if (InFlight(o.status)) continue;
      Eigen::VectorXd x = f.Encode(o.config);
      const bool ran = o.status == "ok" && o.step_time_s > 0;
      xs_all.push_back(x);
      labels.push_back(ran ? 1.0 : 0.0);
      if (ran) {
        xs_ok.push_back(x);
        ys.push_back(std::log(o.step_time_s));
      }
    }
    auto stack = [d](const std::vector<Eigen::VectorXd>& rows) {
      Eigen::MatrixXd m(static_cast<Eigen::Index>(rows.size()), d);
      for (size_t i = 0; i < rows.size(); ++i) m.row(static_cast<Eigen::Index>(i)) = rows[i];
      return m;
    };
    // Step time: knob effects are a few tens of percent each (main effects
    // wider than interactions); the intercept centres on what was seen.
    const double y_mean =
        ys.empty() ? 0.0 : std::accumulate(ys.begin(), ys.end(), 0.0) / static_cast<double>(ys.size());
    Eigen::VectorXd mean = Eigen::VectorXd::Zero(d), var(d);
    mean[0] = y_mean;
    for (int i = 0; i < d; ++i) var[i] = i == 0 ? 0.25 : (f.is_main(i) ? 0.5 : 0.1);
    Eigen::VectorXd lmean = Eigen::VectorXd::Zero(d), lvar(d);
    lmean[0] = 1.5;
    for (int i = 0; i < d; ++i) lvar[i] = i == 0 ? 2.0 : 4.0;
    if (options_.priors) {
      for (const auto& [i, kv] : f.MainFeatures()) {
        const Effect e = options_.priors->EffectOf(spec, kv.first, kv.second);
        mean[i] = e.time;
        var[i] = e.time_sd * e.time_sd;
        lmean[i] = e.fit;
        lvar[i] = e.fit_sd * e.fit_sd;
      }
      // The intercept is the baseline's own time: centre it there.
      mean[0] = history.front().step_time_s > 0 ? std::log(history.front().step_time_s) : y_mean;
    }
    models::BayesLinear time;
    time.Fit(stack(xs_ok), Eigen::Map<Eigen::VectorXd>(ys.data(), static_cast<Eigen::Index>(ys.size())),
             mean, var, 0.01);
    // Runs at all: start from "most settings run", learn the failing
    // values and pairs (launcher rules, OOM corners) as they show up.
    models::BayesLogistic runs;
    runs.Fit(stack(xs_all),
             Eigen::Map<Eigen::VectorXd>(labels.data(), static_cast<Eigen::Index>(labels.size())),
             lmean, lvar);
    const double best = ys.empty() ? y_mean : *std::min_element(ys.begin(), ys.end());
    for (size_t i = 0; i < pool.size(); ++i) {
      const Eigen::VectorXd x = f.Encode(pool[i]);
      const double mu = time.Mean(x);
      const double s = std::sqrt(time.Variance(x));
      const double z = (best - mu) / s;
      const double ei = (best - mu) * NormalCdf(z) + s * NormalPdf(z);
      score[i] = ei * runs.Probability(x);
    }
  }
  // Take the best, keeping a batch's picks at least two knobs apart.
  std::vector<size_t> order(pool.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  for (size_t i : order) {
    if (static_cast<int>(out.size()) >= n) break;
    bool close = false;
    for (const Config& c : out) close = close || Hamming(c, pool[i]) < 2;
    if (!close) out.push_back(pool[i]);
  }
  for (size_t i : order) {  // small spaces may not allow the spacing
    if (static_cast<int>(out.size()) >= n) break;
    if (std::find(out.begin(), out.end(), pool[i]) == out.end()) out.push_back(pool[i]);
  }
  return out;
}

}  // namespace infrarsi
