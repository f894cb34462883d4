#include "models/bayes_linear.h"

#include <cmath>
#include <vector>

namespace infrarsi::models {

namespace {

// Below this size the blocked kernels cost more than they save.
constexpr Eigen::Index kBlock = 32;

// l <- l^-1 for lower-triangular l (its upper part is not read):
// [A 0; B C]^-1 = [A^-1 0; -C^-1 B A^-1  C^-1].
void InvertLowerInPlace(Eigen::Ref<Eigen::MatrixXd> l) {
  const Eigen::Index n = l.rows();
  if (n <= kBlock) {
    l.triangularView<Eigen::Lower>() =
        l.triangularView<Eigen::Lower>().solve(Eigen::MatrixXd::Identity(n, n));
    return;
  }
  const Eigen::Index h = n / 2;
  auto a = l.topLeftCorner(h, h);
  auto b = l.bottomLeftCorner(n - h, h);
  auto c = l.bottomRightCorner(n - h, n - h);
  InvertLowerInPlace(a);
  InvertLowerInPlace(c);
  const Eigen::MatrixXd ba = b * a.triangularView<Eigen::Lower>();
  b.noalias() = -(c.triangularView<Eigen::Lower>() * ba);
}

// The lower triangle of l' l for lower-triangular l, in place:
// [A 0; B C]' [A 0; B C] = [A'A + B'B  B'C; C'B  C'C].
void LowerGramInPlace(Eigen::Ref<Eigen::MatrixXd> l) {
  const Eigen::Index n = l.rows();
  if (n <= kBlock) {
    // Column j upwards from the diagonal: each entry reads only entries
    // below it in its column and in column i >= j, not yet overwritten.
    for (Eigen::Index j = 0; j < n; ++j) {
      for (Eigen::Index i = j; i < n; ++i) l(i, j) = l.col(i).tail(n - i).dot(l.col(j).tail(n - i));
    }
    return;
  }
  const Eigen::Index h = n / 2;
  auto a = l.topLeftCorner(h, h);
  auto b = l.bottomLeftCorner(n - h, h);
  auto c = l.bottomRightCorner(n - h, n - h);
  LowerGramInPlace(a);
  a.selfadjointView<Eigen::Lower>().rankUpdate(b.transpose());
  b = c.triangularView<Eigen::Lower>().transpose() * b;
  LowerGramInPlace(c);
}

}  // namespace

Eigen::MatrixXd InverseFromCholesky(const Eigen::LLT<Eigen::MatrixXd>& llt) {
  Eigen::MatrixXd m = llt.matrixLLT();
  InvertLowerInPlace(m);
  LowerGramInPlace(m);
  m.triangularView<Eigen::StrictlyUpper>() = m.transpose();
  return m;
}

Eigen::VectorXd SparseRows::Times(const Eigen::VectorXd& w) const {
  Eigen::VectorXd out(rows());
  for (Eigen::Index i = 0; i < rows(); ++i) {
    double s = 0;
    for (int a = start_[static_cast<size_t>(i)]; a < start_[static_cast<size_t>(i) + 1]; ++a) {
      s += val_[static_cast<size_t>(a)] * w[col_[static_cast<size_t>(a)]];
    }
    out[i] = s;
  }
  return out;
}

Eigen::VectorXd SparseRows::QuadraticForms(const Eigen::MatrixXd& s) const {
  Eigen::VectorXd out(rows());
  for (Eigen::Index i = 0; i < rows(); ++i) {
    const int begin = start_[static_cast<size_t>(i)], end = start_[static_cast<size_t>(i) + 1];
    // sum_a v_a (s_aa v_a / 2 + sum_{b > a} s_ab v_b), doubled.
    double q = 0;
    for (int a = begin; a < end; ++a) {
      const double* col = s.col(col_[static_cast<size_t>(a)]).data();
      double t = 0.5 * col[col_[static_cast<size_t>(a)]] * val_[static_cast<size_t>(a)];
      for (int b = a + 1; b < end; ++b) t += col[col_[static_cast<size_t>(b)]] * val_[static_cast<size_t>(b)];
      q += val_[static_cast<size_t>(a)] * t;
    }
    out[i] = 2.0 * q;
  }
  return out;
}

RowPattern::RowPattern(const Eigen::MatrixXd& x) : x_(x) {
  // Column-major storage: count each row's non-zeros column by column, then
  // fill, so columns ascend within each row.
  std::vector<int> count(static_cast<size_t>(x.rows()) + 1, 0);
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    const double* c = x.col(j).data();
    for (Eigen::Index i = 0; i < x.rows(); ++i) count[static_cast<size_t>(i) + 1] += c[i] != 0.0;
  }
  for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  const int nnz = count.back();
  if (static_cast<Eigen::Index>(nnz) * 2 > x.size()) return;
  rows_.emplace(x.cols());
  SparseRows& r = *rows_;
  r.start_ = count;
  r.col_.resize(static_cast<size_t>(nnz));
  r.val_.resize(static_cast<size_t>(nnz));
  for (Eigen::Index j = 0; j < x.cols(); ++j) {
    const double* c = x.col(j).data();
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      if (c[i] == 0.0) continue;
      const size_t at = static_cast<size_t>(count[static_cast<size_t>(i)]++);
      r.col_[at] = static_cast<int>(j);
      r.val_[at] = c[i];
    }
  }
}

Eigen::MatrixXd RowPattern::Gram(const Eigen::VectorXd* w, const Eigen::VectorXd& diag,
                                 const std::vector<Eigen::Index>* rows) const {
  const Eigen::Index d = x_.cols();
  Eigen::MatrixXd g = Eigen::MatrixXd::Zero(d, d);
  if (!rows_ && x_.rows() > 0) {
    if (w == nullptr && rows == nullptr) {
      g.selfadjointView<Eigen::Lower>().rankUpdate(x_.transpose());
    } else {
      Eigen::MatrixXd xs = rows != nullptr ? Eigen::MatrixXd(x_(*rows, Eigen::all)) : x_;
      if (w != nullptr) {
        for (Eigen::Index k = 0; k < xs.rows(); ++k) {
          xs.row(k) *= std::sqrt((*w)[rows != nullptr ? (*rows)[static_cast<size_t>(k)] : k]);
        }
      }
      if (xs.rows() > 0) g.selfadjointView<Eigen::Lower>().rankUpdate(xs.transpose());
    }
  } else if (rows_) {
    const std::vector<int>& start = rows_->start_;
    const std::vector<int>& cols = rows_->col_;
    const std::vector<double>& val = rows_->val_;
    const size_t n = rows != nullptr ? rows->size() : start.size() - 1;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = rows != nullptr ? static_cast<size_t>((*rows)[k]) : k;
      const double wi = w == nullptr ? 1.0 : (*w)[static_cast<Eigen::Index>(i)];
      for (int a = start[i]; a < start[i + 1]; ++a) {
        double* col = g.col(cols[static_cast<size_t>(a)]).data();
        const double va = wi * val[static_cast<size_t>(a)];
        // Columns ascend within a row, so this fills the lower triangle.
        for (int b = a; b < start[i + 1]; ++b) {
          col[cols[static_cast<size_t>(b)]] += va * val[static_cast<size_t>(b)];
        }
      }
    }
  }
  g.diagonal() += diag;
  g.triangularView<Eigen::StrictlyUpper>() = g.transpose();
  return g;
}

Eigen::VectorXd RowPattern::QuadraticForms(const Eigen::MatrixXd& cov) const {
  if (!rows_) return (x_ * cov).cwiseProduct(x_).rowwise().sum();
  return rows_->QuadraticForms(cov);
}

void BayesLinear::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                      const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                      double noise_var, bool covariance) {
  noise_var_ = noise_var;
  gram_ = RowPattern(x).Gram(nullptr, Eigen::VectorXd::Zero(x.cols()));
  xty_ = x.transpose() * y;
  Refit(prior_mean, prior_var, covariance);
}

void BayesLinear::Refit(const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                        bool covariance) {
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  // (X'X / s2 + P) w = X'y / s2 + P m.
  Eigen::MatrixXd a = gram_ / noise_var_;
  a.diagonal() += prior_prec;
  precision_llt_.compute(a);
  mean_ = precision_llt_.solve(xty_ / noise_var_ + prior_prec.cwiseProduct(prior_mean));
  covariance_.resize(0, 0);
  if (covariance) ComputeCovariance();
}

void BayesLinear::ComputeCovariance() {
  if (covariance_.size() == 0) covariance_ = InverseFromCholesky(precision_llt_);
}

double BayesLinear::Variance(const Eigen::VectorXd& x) const {
  // x' A^-1 x = |L^-1 x|^2 with A = L L'.
  const Eigen::VectorXd v = precision_llt_.matrixL().solve(x);
  return noise_var_ + v.squaredNorm();
}

double BayesLinear::MeanVariance(const Eigen::VectorXd& x) const {
  return precision_llt_.matrixL().solve(x).squaredNorm();
}

void BayesLinear::PredictBatch(const Eigen::MatrixXd& x, Eigen::VectorXd* mean,
                               Eigen::VectorXd* var) const {
  *mean = x * mean_;
  Eigen::MatrixXd own;
  *var = RowPattern(x).QuadraticForms(Covariance(&own)).array() + noise_var_;
}

void BayesLinear::PredictBatch(const SparseRows& x, Eigen::VectorXd* mean, Eigen::VectorXd* var) const {
  *mean = x.Times(mean_);
  Eigen::MatrixXd own;
  *var = x.QuadraticForms(Covariance(&own)).array() + noise_var_;
}

const Eigen::MatrixXd& BayesLinear::Covariance(Eigen::MatrixXd* own) const {
  if (covariance_.size() > 0) return covariance_;
  *own = InverseFromCholesky(precision_llt_);
  return *own;
}

double BayesLinear::WeightSd(int j) const {
  if (covariance_.size() > 0) return std::sqrt(covariance_(j, j));
  // e_j' A^-1 e_j = |L^-1 e_j|^2 with A = L L'.
  return std::sqrt(MeanVariance(Eigen::VectorXd::Unit(precision_llt_.rows(), j)));
}

void BayesLogistic::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& labels,
                        const Eigen::VectorXd& prior_mean, const Eigen::VectorXd& prior_var,
                        const Eigen::VectorXd* weights, int iterations,
                        const Eigen::VectorXd* start) {
  const Eigen::VectorXd prior_prec = prior_var.cwiseInverse();
  const bool warm = start != nullptr && start->size() == x.cols() && x.rows() > 0;
  w_ = warm ? *start : prior_mean;
  factorizations_ = 0;
  if (x.rows() == 0) return;
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(x.rows());
  const Eigen::VectorXd& rw = weights != nullptr ? *weights : ones;
  // Log posterior at w, given eta = x w (log(1 + e^eta) computed stably).
  auto objective = [&](const Eigen::VectorXd& w, const Eigen::VectorXd& eta) {
    double f = 0;
    for (Eigen::Index i = 0; i < eta.size(); ++i) {
      const double e = eta[i];
      const double softplus = e > 0 ? e + std::log1p(std::exp(-e)) : std::log1p(std::exp(e));
      f += rw[i] * (labels[i] * e - softplus);
    }
    return f - 0.5 * (w - prior_mean).cwiseProduct(prior_prec).dot(w - prior_mean);
  };
  const RowPattern pattern(x);
  Eigen::VectorXd eta = x * w_;
  double f = objective(w_, eta);
  Eigen::LLT<Eigen::MatrixXd> llt;
  // 1e-3 on the logit scale is far below what the data can tell apart. A
  // start near the mode keeps its first curvature after a step under 0.05
  // (a few percent of a logit's curvature at most; each kept step that does
  // not shrink fourfold refreshes it).
  NewtonSteps steps(1e-3, 1e-6, warm ? 0.05 : 0.0);
  for (int it = 0; it < iterations; ++it) {
    const Eigen::VectorXd p = eta.unaryExpr([](double e) { return 1.0 / (1.0 + std::exp(-e)); });
    const Eigen::VectorXd g =
        x.transpose() * rw.cwiseProduct(labels - p) - prior_prec.cwiseProduct(w_ - prior_mean);
    // Newton step on the log posterior (curvature floored so the Hessian
    // stays well-conditioned where the model is sure), damped by
    // backtracking: a full step from far away can overshoot where the
    // classes separate, and undamped Newton then diverges.
    if (steps.Refresh()) {
      const Eigen::VectorXd c =
          rw.cwiseProduct(p.cwiseProduct((1.0 - p.array()).matrix()).cwiseMax(1e-6));
      llt.compute(pattern.Gram(&c, prior_prec));
      ++factorizations_;
    }
    const Eigen::VectorXd step = llt.solve(g);
    const Eigen::VectorXd x_step = x * step;
    const double slope = g.dot(step);
    double t = 1.0;
    Eigen::VectorXd next_eta = eta + x_step;
    double next_f = objective(w_ + step, next_eta);
    while (next_f < f + 1e-4 * t * slope && t > 1e-6) {
      t *= 0.5;
      next_eta = eta + t * x_step;
      next_f = objective(w_ + t * step, next_eta);
    }
    w_ += t * step;
    eta = std::move(next_eta);
    const double change = f - next_f;
    f = next_f;
    if (steps.Step((t * step).lpNorm<Eigen::Infinity>(), t == 1.0)) break;
    if (steps.LastFresh() && std::fabs(change) < 1e-8 * (1 + std::fabs(f))) break;
  }
}

double BayesLogistic::Probability(const Eigen::VectorXd& x) const {
  return 1.0 / (1.0 + std::exp(-x.dot(w_)));
}

}  // namespace infrarsi::models
