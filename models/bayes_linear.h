// Small Bayesian models over binary (one-hot and interaction) features, for
// the search: a conjugate Gaussian linear model (step time) and a MAP
// logistic model (does a setting launch). Pure Eigen; thread-compatible.
//
// Both are fitted once per proposal on up to thousands of trials, so they
// use one rank-k update per Gram product (sparse where rows are, SYRK
// where not) and batch predictions over a candidate pool's sparse rows
// (SparseRows) against a covariance computed once per fit.
#ifndef INFRARSI_MODELS_BAYES_LINEAR_H_
#define INFRARSI_MODELS_BAYES_LINEAR_H_

#include <Eigen/Dense>
#include <optional>
#include <vector>

namespace infrarsi::models {

// Rows of a design matrix by their non-zeros (compressed sparse rows), as
// the search encodes a candidate pool: a proposal predicts a thousand or
// more settings whose codes set a few dozen of a few hundred features.
// Thread-compatible.
class SparseRows {
 public:
  explicit SparseRows(Eigen::Index cols) : cols_(cols) {}
  // Appends entry (current row, col) = val. Precondition: cols are
  // distinct within a row, 0 <= col < cols().
  void Add(int col, double val) {
    col_.push_back(col);
    val_.push_back(val);
  }
  // Ends the current row (a row with no Add is all zeros).
  void EndRow() { start_.push_back(static_cast<int>(col_.size())); }
  void Reserve(size_t rows, size_t entries) {
    start_.reserve(rows + 1);
    col_.reserve(entries);
    val_.reserve(entries);
  }
  Eigen::Index rows() const { return static_cast<Eigen::Index>(start_.size()) - 1; }
  Eigen::Index cols() const { return cols_; }
  // X w. Precondition: w.size() == cols().
  Eigen::VectorXd Times(const Eigen::VectorXd& w) const;
  // x_i' s x_i for every row. Precondition: s is cols() x cols() and
  // symmetric (each unordered pair of a row's entries is summed once).
  Eigen::VectorXd QuadraticForms(const Eigen::MatrixXd& s) const;

 private:
  friend class RowPattern;
  Eigen::Index cols_;
  std::vector<int> start_{0};  // row i's entries: [start_[i], start_[i + 1])
  std::vector<int> col_;
  std::vector<double> val_;
};

// The inverse of A = L L' from its Cholesky factor, as LAPACK's potri
// computes it: L^-1 by blocks, then L^-T L^-1. A third of the flops of
// solving A X = I (which treats the identity as a dense right-hand side),
// and each fit of the search needs one for its batch predictions.
// Precondition: `llt` succeeded. Returns the whole symmetric matrix.
Eigen::MatrixXd InverseFromCholesky(const Eigen::LLT<Eigen::MatrixXd>& llt);

// When Newton's method refactors its Hessian (the launch and memory
// models' fits). A factorization is kept while the steps it gives shrink
// at least fourfold each (the curvature has settled near the mode): a step
// then costs a few matrix-vector products instead of a Gram product and a
// Cholesky factorization. The first two steps are fresh (but see warm_keep). A kept
// factorization converges linearly, not quadratically: by default its
// steps must be below `tolerance` squared to stop the fit, the accuracy a
// fresh step below `tolerance` leaves (the launch model's mode, to its
// gradient); `kept_tolerance` sets another (the memory model stops at a
// point within 1e-3 of its mode either way and reads its uncertainties
// from a fresh factorization there). A fit started near its mode (the last
// proposal's) may keep the first factorization too: `warm_keep` > 0 keeps
// it after a first step shorter than that. Thread-compatible.
class NewtonSteps {
 public:
  explicit NewtonSteps(double tolerance) : NewtonSteps(tolerance, tolerance * tolerance) {}
  NewtonSteps(double tolerance, double kept_tolerance, double warm_keep = 0)
      : tolerance_(tolerance), kept_tolerance_(kept_tolerance), warm_keep_(warm_keep) {}
  // Whether this iteration computes a fresh Hessian.
  bool Refresh() const { return refresh_; }
  // Records the step this iteration took (its infinity norm); `full`: no
  // line search shortened it. Returns whether the fit has converged.
  bool Step(double norm, bool full = true) {
    const bool fresh = refresh_;
    const bool settled = steps_ < 1 ? norm < warm_keep_ : norm < 0.25 * last_;
    refresh_ = !full || !settled;
    last_ = norm;
    ++steps_;
    last_fresh_ = fresh;
    return norm < (fresh ? tolerance_ : kept_tolerance_);
  }
  // Whether the last step used a Hessian computed for it.
  bool LastFresh() const { return last_fresh_; }

 private:
  double tolerance_, kept_tolerance_, warm_keep_;
  double last_ = 0;
  int steps_ = 0;
  bool refresh_ = true;
  bool last_fresh_ = true;
};

// The non-zeros of each row of a design matrix, found once per fit. The
// search's rows are one-hot codes with a few dozen of a few hundred entries
// set, so products that touch only the non-zeros are an order of magnitude
// cheaper than dense ones; dense matrices fall back to BLAS-style kernels.
// Holds a reference to `x`: it must outlive the pattern.
class RowPattern {
 public:
  explicit RowPattern(const Eigen::MatrixXd& x);
  // X' diag(w) X + diag(d); w: none means all ones. `rows` (optional,
  // ascending): only those rows of X count, as if the others were zero.
  Eigen::MatrixXd Gram(const Eigen::VectorXd* w, const Eigen::VectorXd& diag,
                       const std::vector<Eigen::Index>* rows = nullptr) const;
  // x_i' cov x_i for every row.
  Eigen::VectorXd QuadraticForms(const Eigen::MatrixXd& cov) const;

 private:
  const Eigen::MatrixXd& x_;
  // Set where at most half the entries are non-zero: below that, touching
  // only the non-zeros does fewer operations than the dense kernels by
  // more than their SIMD advantage (the searches' rows hold 20-45%; see
  // search_bench --latency for what a proposal costs).
  std::optional<SparseRows> rows_;
};

// y = x'w + e, e ~ N(0, noise_var), w ~ N(prior_mean, diag(prior_var)).
class BayesLinear {
 public:
  // Rows of `x` are observations. prior_var has one entry per column.
  // `covariance`: whether to invert the posterior precision now (about a
  // third of a fit's cost at the search's sizes); without it, WeightSd
  // solves with the factor, and the batch predictions invert it on each
  // call until ComputeCovariance (for a fit that is refitted first).
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& prior_mean,
           const Eigen::VectorXd& prior_var, double noise_var, bool covariance = true);
  // Fit again on the last Fit's rows and targets with another prior: X'X
  // and X'y are kept from that fit, so a refit costs the factorization
  // alone (the search refits with each knob's own prior scale).
  // Precondition: Fit was called; sizes agree with it.
  void Refit(const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var, bool covariance = true);
  // Inverts the posterior precision, where a fit left it (no-op otherwise).
  void ComputeCovariance();
  double Mean(const Eigen::VectorXd& x) const { return x.dot(mean_); }
  // Predictive variance of a new observation at x.
  double Variance(const Eigen::VectorXd& x) const;
  // Posterior variance of x'w alone (no observation noise): how sure the
  // model is of a contrast, such as one knob value against another.
  double MeanVariance(const Eigen::VectorXd& x) const;
  // Means and predictive variances of every row of `x`.
  void PredictBatch(const Eigen::MatrixXd& x, Eigen::VectorXd* mean, Eigen::VectorXd* var) const;
  void PredictBatch(const SparseRows& x, Eigen::VectorXd* mean, Eigen::VectorXd* var) const;
  const Eigen::VectorXd& weights() const { return mean_; }
  // Posterior sd of weight j.
  double WeightSd(int j) const;

 private:
  Eigen::VectorXd mean_;
  Eigen::LLT<Eigen::MatrixXd> precision_llt_;
  // covariance_, or where it was not computed, the factor's inverse made
  // into `own`.
  const Eigen::MatrixXd& Covariance(Eigen::MatrixXd* own) const;

  Eigen::MatrixXd covariance_;  // posterior covariance of the weights; empty: not computed
  double noise_var_ = 1.0;
  Eigen::MatrixXd gram_;  // X'X of the last Fit, for Refit
  Eigen::VectorXd xty_;   // X'y of the last Fit
};

// P(label = 1 | x) = sigmoid(x'w), w ~ N(prior_mean, diag(prior_var)),
// fitted to its posterior mode by Newton's method.
class BayesLogistic {
 public:
  // `weights` (optional): each row counts that many times (a subsample
  // standing for a larger history). Newton's method starts at the prior
  // mean, or at `start` where given with x.cols() entries (a guess near
  // the mode, such as the last fit's: the posterior is concave and the
  // steps damped, so the mode is the same to the fit's tolerance, found
  // with fewer factorizations).
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& labels,
           const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
           const Eigen::VectorXd* weights = nullptr, int iterations = 30,
           const Eigen::VectorXd* start = nullptr);
  double Probability(const Eigen::VectorXd& x) const;
  const Eigen::VectorXd& weights() const { return w_; }
  // Hessian factorizations the last Fit made.
  int factorizations() const { return factorizations_; }

 private:
  Eigen::VectorXd w_;
  int factorizations_ = 0;
};

}  // namespace infrarsi::models

#endif  // INFRARSI_MODELS_BAYES_LINEAR_H_
