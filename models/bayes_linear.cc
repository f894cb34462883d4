#include "models/bayes_linear.h"

#include <cmath>

namespace infrarsi::models {

void BayesLinear::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                      const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                      double noise_var) {
  noise_var_ = noise_var;
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  Eigen::MatrixXd a = x.transpose() * x / noise_var;
  a.diagonal() += prior_prec;
  precision_llt_.compute(a);
  const Eigen::VectorXd b = x.transpose() * y / noise_var + prior_prec.cwiseProduct(prior_mean);
  mean_ = precision_llt_.solve(b);
}

double BayesLinear::Variance(const Eigen::VectorXd& x) const {
  // x' A^-1 x = |L^-1 x|^2 with A = L L'.
  const Eigen::VectorXd v = precision_llt_.matrixL().solve(x);
  return noise_var_ + v.squaredNorm();
}

void BayesLogistic::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& labels,
                        const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                        int iterations) {
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  w_ = prior_mean;
  for (int it = 0; it < iterations; ++it) {
    const Eigen::VectorXd eta = x * w_;
    const Eigen::VectorXd p = eta.unaryExpr([](double e) { return 1.0 / (1.0 + std::exp(-e)); });
    const Eigen::VectorXd s = p.cwiseProduct((1.0 - p.array()).matrix()).cwiseMax(1e-9);
    // Newton step on the log posterior.
    Eigen::MatrixXd h = x.transpose() * s.asDiagonal() * x;
    h.diagonal() += prior_prec;
    const Eigen::VectorXd g = x.transpose() * (labels - p) - prior_prec.cwiseProduct(w_ - prior_mean);
    const Eigen::VectorXd step = h.ldlt().solve(g);
    w_ += step;
    if (step.norm() < 1e-6) break;
  }
}

double BayesLogistic::Probability(const Eigen::VectorXd& x) const {
  return 1.0 / (1.0 + std::exp(-x.dot(w_)));
}

}  // namespace infrarsi::models
