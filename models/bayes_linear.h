// Small Bayesian models over binary (one-hot and interaction) features, for
// the search: a conjugate Gaussian linear model (step time) and a MAP
// logistic model (does a setting run). Pure Eigen; thread-compatible.
#ifndef INFRARSI_MODELS_BAYES_LINEAR_H_
#define INFRARSI_MODELS_BAYES_LINEAR_H_

#include <Eigen/Dense>
#include <vector>

namespace infrarsi::models {

// y = x'w + e, e ~ N(0, noise_var), w ~ N(prior_mean, diag(prior_var)).
class BayesLinear {
 public:
  // Rows of `x` are observations. prior_var has one entry per column.
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& prior_mean,
           const Eigen::VectorXd& prior_var, double noise_var);
  double Mean(const Eigen::VectorXd& x) const { return x.dot(mean_); }
  // Predictive variance of a new observation at x.
  double Variance(const Eigen::VectorXd& x) const;
  const Eigen::VectorXd& weights() const { return mean_; }

 private:
  Eigen::VectorXd mean_;
  Eigen::LLT<Eigen::MatrixXd> precision_llt_;
  double noise_var_ = 1.0;
};

// P(label = 1 | x) = sigmoid(x'w), w ~ N(prior_mean, diag(prior_var)),
// fitted to its posterior mode by Newton's method (IRLS).
class BayesLogistic {
 public:
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& labels,
           const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
           int iterations = 25);
  double Probability(const Eigen::VectorXd& x) const;
  const Eigen::VectorXd& weights() const { return w_; }

 private:
  Eigen::VectorXd w_;
};

}  // namespace infrarsi::models

#endif  // INFRARSI_MODELS_BAYES_LINEAR_H_
