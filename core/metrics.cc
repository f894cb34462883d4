#include "core/metrics.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace infrarsi {
namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string Labels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", EscapeLabel(labels[i].second), "\"");
  }
  return out + "}";
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.9g", v);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

std::vector<double> Histogram::DefaultLatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void Histogram::Observe(double seconds) {
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

void MetricsText::Family(const std::string& name, const std::string& type,
                         const std::string& help) {
  absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void MetricsText::Sample(const std::string& name, const MetricLabels& labels, double value) {
  absl::StrAppend(&out_, name, Labels(labels), " ", Number(value), "\n");
}

void MetricsText::Histogram(const std::string& name, const MetricLabels& labels,
                            const infrarsi::Histogram::Snapshot& h) {
  for (size_t i = 0; i < h.cumulative.size(); ++i) {
    MetricLabels with = labels;
    with.emplace_back("le", i < h.bounds.size() ? Number(h.bounds[i]) : "+Inf");
    Sample(name + "_bucket", with, static_cast<double>(h.cumulative[i]));
  }
  Sample(name + "_sum", labels, h.sum);
  Sample(name + "_count", labels, static_cast<double>(h.count));
}

}  // namespace infrarsi
