#include "core/metrics.h"

#include <gtest/gtest.h>

namespace infrarsi {
namespace {

// The text format as Prometheus parses it: HELP/TYPE once, escaped label
// values, cumulative buckets ending in +Inf, _sum and _count.
TEST(MetricsTextTest, CountersGaugesAndHistogramsInTheTextFormat) {
  Histogram h({0.01, 0.1});
  h.Observe(0.005);
  h.Observe(0.05);
  h.Observe(0.05);
  h.Observe(3);
  MetricsText t;
  t.Family("x_total", "counter", "Things.");
  t.Sample("x_total", {{"method", "a\"b\\c\nd"}}, 7);
  t.Family("lat_seconds", "histogram", "Latency.");
  t.Histogram("lat_seconds", {{"m", "x"}}, h.Take());
  EXPECT_EQ(t.text(),
            "# HELP x_total Things.\n# TYPE x_total counter\n"
            "x_total{method=\"a\\\"b\\\\c\\nd\"} 7\n"
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{m=\"x\",le=\"0.01\"} 1\n"
            "lat_seconds_bucket{m=\"x\",le=\"0.1\"} 3\n"
            "lat_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{m=\"x\"} 3.105\n"
            "lat_seconds_count{m=\"x\"} 4\n");
}

}  // namespace
}  // namespace infrarsi
