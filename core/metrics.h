// Metrics in Prometheus' text exposition format (version 0.0.4): counters,
// gauges and histograms with labels, rendered by MetricsText, and a
// thread-safe Histogram the server observes latencies into. Pure: no I/O.
#ifndef INFRARSI_CORE_METRICS_H_
#define INFRARSI_CORE_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace infrarsi {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A latency histogram (seconds) with fixed upper bounds. Thread-safe.
class Histogram {
 public:
  // Upper bounds in increasing order; +Inf is implied.
  explicit Histogram(std::vector<double> bounds = DefaultLatencyBounds());
  static std::vector<double> DefaultLatencyBounds();  // 1 ms .. 60 s
  void Observe(double seconds);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, +Inf last
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Builds one exposition. Each metric family is declared once (HELP and
// TYPE) and then given samples; label values are escaped. Not thread-safe.
class MetricsText {
 public:
  // type: "counter", "gauge" or "histogram".
  void Family(const std::string& name, const std::string& type, const std::string& help);
  void Sample(const std::string& name, const MetricLabels& labels, double value);
  // A histogram family's _bucket, _sum and _count lines.
  void Histogram(const std::string& name, const MetricLabels& labels,
                 const infrarsi::Histogram::Snapshot& h);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_METRICS_H_
