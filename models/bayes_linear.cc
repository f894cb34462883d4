#include "models/bayes_linear.h"

#include <cmath>

namespace infrarsi::models {

Eigen::MatrixXd WeightedGram(const Eigen::MatrixXd& x, const Eigen::VectorXd* w,
                             const Eigen::VectorXd& diag) {
  const Eigen::Index d = x.cols();
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(d, d);
  if (x.rows() > 0) {
    if (w == nullptr) {
      g.selfadjointView<Eigen::Lower>().rankUpdate(x.transpose());
    } else {
      const Eigen::MatrixXd xs = w->cwiseSqrt().asDiagonal() * x;
      g.selfadjointView<Eigen::Lower>().rankUpdate(xs.transpose());
    }
  }
  g.diagonal() += diag;
  g.triangularView<Eigen::StrictlyUpper>() = g.transpose();
  return g;
}

void BayesLinear::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                      const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                      double noise_var) {
  noise_var_ = noise_var;
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  // (X'X / s2 + P) w = X'y / s2 + P m, scaled by s2.
  Eigen::MatrixXd a = WeightedGram(x, nullptr, prior_prec * noise_var);
  precision_llt_.compute(a / noise_var);
  const Eigen::VectorXd b = x.transpose() * y / noise_var + prior_prec.cwiseProduct(prior_mean);
  mean_ = precision_llt_.solve(b);
}

double BayesLinear::Variance(const Eigen::VectorXd& x) const {
  // x' A^-1 x = |L^-1 x|^2 with A = L L'.
  const Eigen::VectorXd v = precision_llt_.matrixL().solve(x);
  return noise_var_ + v.squaredNorm();
}

void BayesLinear::PredictBatch(const Eigen::MatrixXd& x, Eigen::VectorXd* mean,
                               Eigen::VectorXd* var) const {
  *mean = x * mean_;
  const Eigen::MatrixXd v = precision_llt_.matrixL().solve(x.transpose());
  *var = v.colwise().squaredNorm().transpose().array() + noise_var_;
}

double BayesLinear::WeightSd(int j) const {
  Eigen::VectorXd e = Eigen::VectorXd::Zero(mean_.size());
  e[j] = 1.0;
  return std::sqrt(precision_llt_.solve(e)[j]);
}

void BayesLogistic::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& labels,
                        const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                        const Eigen::VectorXd* weights, int iterations) {
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  w_ = prior_mean;
  if (x.rows() == 0) return;
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(x.rows());
  const Eigen::VectorXd& rw = weights != nullptr ? *weights : ones;
  for (int it = 0; it < iterations; ++it) {
    const Eigen::VectorXd eta = x * w_;
    const Eigen::VectorXd p = eta.unaryExpr([](double e) { return 1.0 / (1.0 + std::exp(-e)); });
    const Eigen::VectorXd g =
        x.transpose() * rw.cwiseProduct(labels - p) - prior_prec.cwiseProduct(w_ - prior_mean);
    // Newton step on the log posterior (curvature floored so the Hessian
    // stays well-conditioned where the model is sure).
    const Eigen::VectorXd c =
        rw.cwiseProduct(p.cwiseProduct((1.0 - p.array()).matrix()).cwiseMax(1e-6));
    const Eigen::VectorXd step = WeightedGram(x, &c, prior_prec).llt().solve(g);
    w_ += step;
    if (step.lpNorm<Eigen::Infinity>() < 1e-4) break;
  }
}

double BayesLogistic::Probability(const Eigen::VectorXd& x) const {
  return 1.0 / (1.0 + std::exp(-x.dot(w_)));
}

}  // namespace infrarsi::models
