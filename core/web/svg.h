// Charts as SVG text, drawn on the server (or into a report file) so that
// no page fetches a charting library or anything else at view time. Three
// kinds cover the dashboard: an x-y chart (points, lines, reference lines),
// an interval chart (one row per label: an estimate, its interval, named
// markers and raw dots) and a bar chart (one row per label).
//
// Every mark carries its figures in data-* attributes (full precision) and
// a <title> tooltip, so a browser test can read back what was drawn and a
// person can hover for it. Every text is escaped: labels come from specs
// and agents, which the viewer does not control.
//
// Thread safety: free functions and value types; no shared state.
#ifndef INFRARSI_CORE_WEB_SVG_H_
#define INFRARSI_CORE_WEB_SVG_H_

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace infrarsi::web {

// Text for HTML or SVG content and attribute values: & < > " ' escaped.
std::string Escape(absl::string_view text);

// A number for an attribute: "%.17g" (round-trips a double); "" when not
// finite, so that no "nan" ever reaches a page.
std::string Exact(double v);

// Ticks covering [lo, hi], about `target` of them, at 1, 2 or 5 x 10^k.
// lo > hi swaps them; lo == hi widens to a unit around it; non-finite
// input gives none.
std::vector<double> NiceTicks(double lo, double hi, int target = 5);

// A short label for a tick value ("0.25", "1.5k", "2e-05").
std::string TickLabel(double v);
// Labels for a whole axis: TickLabel's, with as many decimals as it takes
// for neighbouring ticks to read differently (1.1135, 1.114, 1.1145).
std::vector<std::string> TickLabels(const std::vector<double>& ticks);

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

enum class Shape { kDot, kRing, kCross, kTriangle, kSquare, kDiamond };

// One drawn point. `data` becomes data-<name>="<value>" attributes (names:
// lowercase letters, digits and '-'; others are dropped).
struct Mark {
  double x = 0, y = 0;
  std::string tip;
  std::vector<std::pair<std::string, std::string>> data;
};

struct Series {
  std::string name;   // in the legend
  std::string key;    // data-series and a CSS class suffix ([a-z0-9-])
  std::string color;  // a CSS colour
  Shape shape = Shape::kDot;
  std::vector<Mark> marks;
  bool line = false;  // joins the marks in order
  bool step = false;  // ... as a step line (horizontal, then vertical)
  bool dashed = false;
  bool no_marks = false;  // the line only
};

struct RefLine {
  bool vertical = false;  // x = at; else y = at
  double at = 0;
  std::string label;
  std::string color = "#888";
};

// A grey segment between two points (e.g. a prediction and a measurement).
struct Segment {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

struct XyChart {
  std::string id;  // the <svg>'s id and data-chart
  std::string title, x_label, y_label;
  int width = 640, height = 300;
  std::vector<Series> series;
  std::vector<RefLine> refs;
  std::vector<Segment> segments;
  // Marks drawn in a band above the plot, at their x (their y is not
  // known: a trial that failed has no step time). Tips say why.
  std::vector<Series> top_band;
  std::string empty_text = "no data yet";
  std::string Render() const;
};

struct IntervalRow {
  std::string label;
  double value = kNone, low = kNone, high = kNone;  // the estimate
  std::vector<double> dots;  // raw values, small and grey
  // Named markers: the i-th name of IntervalChart::marker_names.
  std::vector<double> markers;
  std::string tip;
  std::string color;  // of the estimate; "" for the default
  std::vector<std::pair<std::string, std::string>> data;
};

struct IntervalChart {
  std::string id, title, x_label;
  std::string value_name = "estimate";  // the legend's name of the value
  std::vector<std::string> marker_names;
  int width = 640;  // the height follows the rows
  std::vector<IntervalRow> rows;
  std::vector<RefLine> refs;  // vertical
  std::string empty_text = "no data yet";
  std::string Render() const;
};

struct BarRow {
  std::string label;
  double value = 0;
  std::string tip;
  std::vector<std::pair<std::string, std::string>> data;
};

struct BarChart {
  std::string id, title, x_label;
  std::string color = "#c0504d";
  int width = 640;
  std::vector<BarRow> rows;
  std::string empty_text = "nothing to show";
  std::string Render() const;
};

}  // namespace infrarsi::web

#endif  // INFRARSI_CORE_WEB_SVG_H_
