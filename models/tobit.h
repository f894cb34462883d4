// A right-censored Gaussian regression (Tobit model) for peak memory.
//
// A trial that runs observes its peak memory y; an out-of-memory trial only
// tells that the peak exceeded the device's capacity c. With
// y = x'w + e, e ~ N(0, sigma^2), w ~ N(prior_mean, diag(prior_var)), the
// log posterior is
//   sum_observed log phi((y - x'w)/sigma) + sum_censored log(1 - Phi((c - x'w)/sigma))
//   - 1/2 sum_j (w_j - m_j)^2 / v_j,
// which is concave in w, so Newton's method finds its mode. The search works
// in log GiB, so knob effects are relative (a value that halves activation
// memory shifts the log peak, whatever the model size).
//
// Pure Eigen; thread-compatible.
#ifndef INFRARSI_MODELS_TOBIT_H_
#define INFRARSI_MODELS_TOBIT_H_

#include <Eigen/Dense>
#include <vector>

#include "models/bayes_linear.h"

namespace infrarsi::models {

// 1 - Phi(z) for the standard normal, by erfc: no cancellation in the far
// upper tail, where 1 - Phi(z) computed as such rounds to 0 from z = 8.3.
double UpperTail(double z);
// phi(z) / (1 - Phi(z)), the hazard of a censored row, stable far in the
// tail where both vanish.
double InverseMills(double z);

class CensoredLinear {
 public:
  // Rows of `x` are trials. `y` holds the observed value where
  // censored[i] == 0 and the censoring threshold (the value exceeded) where
  // censored[i] == 1. `sigma` is the residual sd. `weights` (optional):
  // each row counts that many times. Newton's method starts at the prior
  // mean (Refit: from a fit's weights), or at `start` where given (a
  // caller's guess near the mode, such as the mode of the same problem
  // with a row fewer: the posterior is concave, so the mode is the same,
  // to the fit's tolerance, and fewer factorizations find it; a start that
  // does not converge within `iterations` is dropped for the default one).
  // `pattern` (optional): RowPattern(x), where the caller has it (a refit
  // of the same rows), else found here.
  // Precondition: sizes agree (`start`: x.cols()).
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& censored,
           const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var, double sigma,
           const Eigen::VectorXd* weights = nullptr, int iterations = 30,
           const RowPattern* pattern = nullptr, const Eigen::VectorXd* start = nullptr);
  // Fit again with another residual sd, from the last fit's weights (or
  // `start`, as in Fit), on its rows: the observed rows' curvature is
  // 1/sigma^2 whatever the weights, so their Gram product is kept from
  // that fit and rescaled.
  // Precondition: Fit was called with this `x` (and `pattern`, if given:
  // RowPattern(x)), unchanged since.
  void Refit(const Eigen::MatrixXd& x, double sigma, int iterations = 30,
             const RowPattern* pattern = nullptr, const Eigen::VectorXd* start = nullptr);
  // Hessian factorizations the last Fit or Refit made (what a good start
  // saves; the search's proposals pay about a millisecond for each).
  int factorizations() const { return factorizations_; }
  // Posterior mode's prediction and its predictive sd (Laplace approximation
  // around the mode, plus the residual sd).
  double Mean(const Eigen::VectorXd& x) const { return x.dot(w_); }
  double Sd(const Eigen::VectorXd& x) const;
  // Posterior (Laplace) variance of x'w alone, without the residual: how
  // sure the model is of a contrast between two settings.
  double MeanVariance(const Eigen::VectorXd& x) const;
  // MeanVariance of every row of `x`, or of the rows a pattern was found in.
  Eigen::VectorXd MeanVarianceBatch(const Eigen::MatrixXd& x) const;
  Eigen::VectorXd MeanVarianceBatch(const RowPattern& x) const { return x.QuadraticForms(covariance_); }
  Eigen::VectorXd MeanVarianceBatch(const SparseRows& x) const { return x.QuadraticForms(covariance_); }
  // P(y <= threshold) for a new trial at x: the probability that it fits.
  // `doubt_scale` scales the weights' posterior variance in it (MeanVariance;
  // the residual's stays whole): a caller's recalibration of a doubt its
  // wide priors overstate, with the fit (its mode) unchanged. `residual_sd`
  // (where >= 0) is counted instead of the fit's own residual sd: the
  // caller's estimate of how far a new setting's peak scatters about the
  // mean.
  double ProbabilityBelow(const Eigen::VectorXd& x, double threshold, double doubt_scale = 1.0,
                          double residual_sd = -1) const;
  // ProbabilityBelow for every row of `x`.
  Eigen::VectorXd ProbabilityBelowBatch(const Eigen::MatrixXd& x, double threshold) const;
  Eigen::VectorXd ProbabilityBelowBatch(const SparseRows& x, double threshold, double doubt_scale = 1.0) const;
  // The same from each row's Mean and MeanVariance (`q`), found once for
  // several thresholds or scales.
  Eigen::VectorXd ProbabilityBelow(const Eigen::VectorXd& mu, const Eigen::VectorXd& q, double threshold,
                                   double doubt_scale = 1.0, double residual_sd = -1) const;
  const Eigen::VectorXd& weights() const { return w_; }
  // Posterior sd of weight j (Laplace).
  double WeightSd(int j) const;

 private:
  // Newton's method from `start` (if given, else w_) on the stored
  // problem; sets w_, the Hessian's factor at the mode and the covariance.
  void Solve(const Eigen::MatrixXd& x, const RowPattern& pattern, int iterations,
             const Eigen::VectorXd* start);

  Eigen::VectorXd w_;
  Eigen::LLT<Eigen::MatrixXd> hessian_llt_;  // negative Hessian at the mode
  Eigen::MatrixXd covariance_;               // its inverse
  double sigma_ = 1.0;
  int factorizations_ = 0;
  // The last Fit's problem, for Refit.
  Eigen::VectorXd y_, rw_, prior_mean_, prior_prec_;
  std::vector<Eigen::Index> observed_, censored_;  // rows of each kind
  std::vector<bool> is_censored_;                  // by row
  Eigen::MatrixXd observed_gram_;  // X_o' diag(rw_o) X_o
};

}  // namespace infrarsi::models

#endif  // INFRARSI_MODELS_TOBIT_H_
