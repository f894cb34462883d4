#include "models/tobit.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "models/bayes_linear.h"

namespace infrarsi::models {
namespace {

double Pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }

// P(y <= threshold) for y ~ N(mu, residual_sd^2 + doubt_scale * q).
double Below(double mu, double q, double threshold, double doubt_scale, double residual_sd) {
  return 1.0 - UpperTail((threshold - mu) / std::sqrt(residual_sd * residual_sd + doubt_scale * q));
}

}  // namespace

double UpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

double InverseMills(double z) {
  const double tail = UpperTail(z);
  if (z > 8.0 || tail < 1e-300) return z + 1.0 / z;  // asymptotic expansion
  return Pdf(z) / tail;
}

void CensoredLinear::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                         const Eigen::VectorXd& censored, const Eigen::VectorXd& prior_mean,
                         const Eigen::VectorXd& prior_var, double sigma,
                         const Eigen::VectorXd* weights, int iterations,
                         const RowPattern* given_pattern, const Eigen::VectorXd* start) {
  sigma_ = sigma;
  const Eigen::Index n = x.rows();
  y_ = y;
  rw_ = weights != nullptr ? *weights : Eigen::VectorXd::Ones(n);
  prior_mean_ = prior_mean;
  prior_prec_ = prior_var.cwiseInverse();
  w_ = prior_mean;
  observed_.clear();
  censored_.clear();
  is_censored_.assign(static_cast<size_t>(n), false);
  for (Eigen::Index i = 0; i < n; ++i) {
    is_censored_[static_cast<size_t>(i)] = censored[i] > 0.5;
    (censored[i] > 0.5 ? censored_ : observed_).push_back(i);
  }
  std::optional<RowPattern> own_pattern;
  const RowPattern& pattern = given_pattern != nullptr ? *given_pattern : own_pattern.emplace(x);
  // An observed row's curvature is its weight / sigma^2 wherever w is, so
  // those rows' part of the negative Hessian is summed once (and only
  // rescaled by a Refit); each step adds only the censored rows' (about
  // half the rows the search fits, so half of each step's Gram product).
  observed_gram_ = pattern.Gram(&rw_, Eigen::VectorXd::Zero(x.cols()), &observed_);
  Solve(x, pattern, iterations, start);
}

void CensoredLinear::Refit(const Eigen::MatrixXd& x, double sigma, int iterations,
                           const RowPattern* given_pattern, const Eigen::VectorXd* start) {
  sigma_ = sigma;
  std::optional<RowPattern> own_pattern;
  const RowPattern& pattern = given_pattern != nullptr ? *given_pattern : own_pattern.emplace(x);
  Solve(x, pattern, iterations, start);
}

void CensoredLinear::Solve(const Eigen::MatrixXd& x, const RowPattern& pattern, int iterations,
                           const Eigen::VectorXd* start) {
  const double sigma = sigma_, s2 = sigma * sigma;
  const Eigen::Index n = x.rows();
  Eigen::VectorXd grad_r(n), curv(n);  // d loglik / d mu, -d2 loglik / d mu2
  auto derivatives = [&](const Eigen::VectorXd& mu) {
    for (Eigen::Index i = 0; i < n; ++i) {
      const double z = (y_[i] - mu[i]) / sigma;
      if (is_censored_[static_cast<size_t>(i)]) {
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
  Eigen::MatrixXd fixed = observed_gram_ / s2;
  fixed.diagonal() += prior_prec_;
  const Eigen::VectorXd no_diag = Eigen::VectorXd::Zero(x.cols());
  auto hessian = [&]() -> Eigen::MatrixXd {
    if (censored_.empty()) return fixed;
    const Eigen::VectorXd wc = rw_.cwiseProduct(curv);
    Eigen::MatrixXd h = pattern.Gram(&wc, no_diag, &censored_);
    h += fixed;
    return h;
  };
  // Newton's method, keeping the curvature while the steps shrink
  // fourfold (NewtonSteps). Steps are lengths in log memory: below 1e-3,
  // 0.1% of memory and under its noise, the fit stops, on a kept curvature
  // too (the uncertainties are read from a fresh one below).
  constexpr double kTolerance = 1e-3;
  factorizations_ = 0;
  // From `start` where given; a start that does not converge is dropped
  // for w_ as the caller left it (Newton's method has no line search here).
  const bool warm = start != nullptr && start->size() == x.cols();
  const Eigen::VectorXd fallback = warm ? w_ : Eigen::VectorXd();
  if (warm) w_ = *start;
  bool converged = false, last_fresh = true;
  for (int attempt = warm ? 0 : 1; attempt < 2 && !converged; ++attempt) {
    if (attempt == 1 && warm) w_ = fallback;
    NewtonSteps steps(kTolerance, kTolerance);
    for (int it = 0; it < iterations && !converged; ++it) {
      derivatives(x * w_);
      const Eigen::VectorXd g =
          x.transpose() * rw_.cwiseProduct(grad_r) - prior_prec_.cwiseProduct(w_ - prior_mean_);
      if (steps.Refresh()) {
        hessian_llt_.compute(hessian());
        ++factorizations_;
      }
      const Eigen::VectorXd step = hessian_llt_.solve(g);
      w_ += step;
      converged = steps.Step(step.lpNorm<Eigen::Infinity>());
    }
    last_fresh = steps.LastFresh();
  }
  if (!converged || !last_fresh) {
    // The curvature at the mode, for the uncertainties (after a converged
    // step from a fresh factor, that factor's: its point is within the
    // tolerance of the mode).
    derivatives(x * w_);
    hessian_llt_.compute(hessian());
    ++factorizations_;
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

double CensoredLinear::ProbabilityBelow(const Eigen::VectorXd& x, double threshold, double doubt_scale,
                                        double residual_sd) const {
  return Below(Mean(x), MeanVariance(x), threshold, doubt_scale, residual_sd >= 0 ? residual_sd : sigma_);
}

Eigen::VectorXd CensoredLinear::MeanVarianceBatch(const Eigen::MatrixXd& x) const {
  return RowPattern(x).QuadraticForms(covariance_);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelowBatch(const Eigen::MatrixXd& x,
                                                      double threshold) const {
  return ProbabilityBelow(x * w_, RowPattern(x).QuadraticForms(covariance_), threshold);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelowBatch(const SparseRows& x, double threshold,
                                                      double doubt_scale) const {
  return ProbabilityBelow(x.Times(w_), x.QuadraticForms(covariance_), threshold, doubt_scale);
}

Eigen::VectorXd CensoredLinear::ProbabilityBelow(const Eigen::VectorXd& mu, const Eigen::VectorXd& q,
                                                 double threshold, double doubt_scale, double residual_sd) const {
  const double s = residual_sd >= 0 ? residual_sd : sigma_;
  Eigen::VectorXd p(mu.size());
  for (Eigen::Index i = 0; i < mu.size(); ++i) p[i] = Below(mu[i], q[i], threshold, doubt_scale, s);
  return p;
}

double CensoredLinear::WeightSd(int j) const {
  return std::sqrt(covariance_(j, j));
}

}  // namespace infrarsi::models
