#include "models/tobit.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "models/bayes_linear.h"

namespace infrarsi::models {
namespace {

double Pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }
double UpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }  // 1 - Phi(z)

// phi(z) / (1 - Phi(z)), stable far in the tail where both vanish.
double InverseMills(double z) {
  const double tail = UpperTail(z);
  if (z > 8.0 || tail < 1e-300) return z + 1.0 / z;  // asymptotic expansion
  return Pdf(z) / tail;
}

}  // namespace

void CensoredLinear::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                         const Eigen::VectorXd& censored, const Eigen::VectorXd& prior_mean,
                         const Eigen::VectorXd& prior_var, double sigma,
                         const Eigen::VectorXd* weights, int iterations,
                         const Eigen::VectorXd* start, const RowPattern* given_pattern) {
  sigma_ = sigma;
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  const Eigen::Index n = x.rows();
  w_ = start != nullptr ? *start : prior_mean;
  const double s2 = sigma * sigma;
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(n);
  const Eigen::VectorXd& rw = weights != nullptr ? *weights : ones;
  Eigen::VectorXd grad_r(n), curv(n);  // d loglik / d mu, -d2 loglik / d mu2
  auto derivatives = [&](const Eigen::VectorXd& mu) {
    for (Eigen::Index i = 0; i < n; ++i) {
      const double z = (y[i] - mu[i]) / sigma;
      if (censored[i] > 0.5) {
        // log(1 - Phi(z)), z = (c - mu)/sigma: gradient lambda/sigma,
        // curvature lambda (lambda - z) / sigma^2, in (0, 1/sigma^2).
        const double lam = InverseMills(z);
        grad_r[i] = lam / sigma;
        curv[i] = std::clamp(lam * (lam - z), 1e-12, 1.0) / s2;
      } else {
        grad_r[i] = z / sigma;
        curv[i] = 1.0 / s2;
      }
    }
  };
  std::optional<RowPattern> own_pattern;
  const RowPattern& pattern = given_pattern != nullptr ? *given_pattern : own_pattern.emplace(x);
  // An observed row's curvature is its weight / sigma^2 wherever w is, so
  // those rows' part of the negative Hessian (with the prior's) is summed
  // once; each step adds only the censored rows' (about half the rows
  // the search fits, so half of each step's Gram product).
  std::vector<Eigen::Index> observed, cens;
  for (Eigen::Index i = 0; i < n; ++i) (censored[i] > 0.5 ? cens : observed).push_back(i);
  const Eigen::VectorXd observed_curv = rw / s2;
  const Eigen::MatrixXd fixed = pattern.Gram(&observed_curv, prior_prec, &observed);
  const Eigen::VectorXd no_diag = Eigen::VectorXd::Zero(x.cols());
  auto hessian = [&]() -> Eigen::MatrixXd {
    if (cens.empty()) return fixed;
    const Eigen::VectorXd wc = rw.cwiseProduct(curv);
    Eigen::MatrixXd h = pattern.Gram(&wc, no_diag, &cens);
    h += fixed;
    return h;
  };
  bool converged = false;
  for (int it = 0; it < iterations && !converged; ++it) {
    derivatives(x * w_);
    const Eigen::VectorXd g =
        x.transpose() * rw.cwiseProduct(grad_r) - prior_prec.cwiseProduct(w_ - prior_mean);
    hessian_llt_.compute(hessian());
    const Eigen::VectorXd step = hessian_llt_.solve(g);
    w_ += step;
    converged = step.lpNorm<Eigen::Infinity>() < 1e-3;  // 0.1% of memory: below its noise
  }
  if (!converged) {
    // The curvature at the mode, for the uncertainties (after a converged
    // step, the last iteration's: its point is within 1e-3 of the mode).
    derivatives(x * w_);
    hessian_llt_.compute(hessian());
  }
  covariance_ = InverseFromCholesky(hessian_llt_);
}

double CensoredLinear::Sd(const Eigen::VectorXd& x) const {
  const Eigen::VectorXd v = hessian_llt_.matrixL().solve(x);
  return std::sqrt(sigma_ * sigma_ + v.squaredNorm());
}

double CensoredLinear::MeanVariance(const Eigen::VectorXd& x) const {
  return hessian_llt_.matrixL().solve(x).squaredNorm();
}

double CensoredLinear::ProbabilityBelow(const Eigen::VectorXd& x, double threshold) const {
  return 1.0 - UpperTail((threshold - Mean(x)) / Sd(x));
}

Eigen::VectorXd CensoredLinear::MeanVarianceBatch(const Eigen::MatrixXd& x) const {
  return RowPattern(x).QuadraticForms(covariance_);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelowBatch(const Eigen::MatrixXd& x,
                                                      double threshold) const {
  return ProbabilityBelow(x * w_, RowPattern(x).QuadraticForms(covariance_), threshold);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelowBatch(const SparseRows& x, double threshold) const {
  return ProbabilityBelow(x.Times(w_), x.QuadraticForms(covariance_), threshold);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelow(const Eigen::VectorXd& mu, const Eigen::VectorXd& q,
                                                 double threshold) const {
  Eigen::VectorXd p(mu.size());
  for (Eigen::Index i = 0; i < mu.size(); ++i) {
    const double sd = std::sqrt(sigma_ * sigma_ + q[i]);
    p[i] = 1.0 - UpperTail((threshold - mu[i]) / sd);
  }
  return p;
}

double CensoredLinear::WeightSd(int j) const {
  return std::sqrt(covariance_(j, j));
}

}  // namespace infrarsi::models
