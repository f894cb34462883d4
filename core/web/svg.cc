#include "core/web/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace infrarsi::web {
namespace {

constexpr int kTitleH = 24;   // title and legend line
constexpr int kBandH = 18;    // the top band of an x-y chart
constexpr int kAxisH = 36;    // x tick labels and the axis label
constexpr int kRowH = 20;     // a row of an interval or bar chart
constexpr int kRightPad = 16;
constexpr double kCharW = 6.6;  // px per character at the charts' font size

std::string F(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string CleanKey(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') out.push_back(c);
    else if (c >= 'A' && c <= 'Z') out.push_back(static_cast<char>(c - 'A' + 'a'));
    else out.push_back('-');
  }
  return out;
}

std::string DataAttrs(const std::vector<std::pair<std::string, std::string>>& data) {
  std::string out;
  for (const auto& [name, value] : data) {
    bool ok = !name.empty();
    for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
    if (ok) absl::StrAppend(&out, " data-", name, "=\"", Escape(value), "\"");
  }
  return out;
}

std::string Tip(const std::string& tip) {
  return tip.empty() ? "" : absl::StrCat("<title>", Escape(tip), "</title>");
}

// A shape centred at (x, y), with `attrs` and `inner` (a tooltip) inside.
std::string ShapeAt(Shape shape, double x, double y, const std::string& color,
                    const std::string& attrs, const std::string& inner) {
  const double r = 4;
  switch (shape) {
    case Shape::kDot:
      return absl::StrCat("<circle cx=\"", F(x), "\" cy=\"", F(y), "\" r=\"", F(r), "\" fill=\"",
                          color, "\"", attrs, ">", inner, "</circle>");
    case Shape::kRing:
      return absl::StrCat("<circle cx=\"", F(x), "\" cy=\"", F(y), "\" r=\"", F(r),
                          "\" fill=\"none\" stroke-width=\"1.5\" stroke=\"", color, "\"", attrs, ">",
                          inner, "</circle>");
    case Shape::kCross:
      return absl::StrCat("<path d=\"M", F(x - r), " ", F(y - r), "L", F(x + r), " ", F(y + r), "M",
                          F(x - r), " ", F(y + r), "L", F(x + r), " ", F(y - r),
                          "\" stroke-width=\"2\" stroke=\"", color, "\"", attrs, ">", inner,
                          "</path>");
    case Shape::kTriangle:
      return absl::StrCat("<path d=\"M", F(x), " ", F(y - r - 1), "L", F(x + r + 1), " ",
                          F(y + r), "L", F(x - r - 1), " ", F(y + r), "Z\" fill=\"", color, "\"",
                          attrs, ">", inner, "</path>");
    case Shape::kSquare:
      return absl::StrCat("<rect x=\"", F(x - r), "\" y=\"", F(y - r), "\" width=\"", F(2 * r),
                          "\" height=\"", F(2 * r), "\" fill=\"", color, "\"", attrs, ">", inner,
                          "</rect>");
    case Shape::kDiamond:
      return absl::StrCat("<path d=\"M", F(x), " ", F(y - r - 1), "L", F(x + r + 1), " ", F(y),
                          "L", F(x), " ", F(y + r + 1), "L", F(x - r - 1), " ", F(y),
                          "Z\" fill=\"", color, "\"", attrs, ">", inner, "</path>");
  }
  return "";
}

// A linear map of [lo, hi] onto [a, b] (pixels).
struct Scale {
  double lo = 0, hi = 1, a = 0, b = 1;
  double operator()(double v) const { return a + (v - lo) / (hi - lo) * (b - a); }
};

// The ticks' span of the finite values (plus `extra`), padded.
std::vector<double> Domain(std::vector<double> values, bool include_zero) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  if (values.empty()) return {};
  double lo = *std::min_element(values.begin(), values.end());
  double hi = *std::max_element(values.begin(), values.end());
  if (include_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  const double pad = (hi - lo) * 0.05;
  if (pad > 0) {
    // Counts, times and sizes never go below zero: neither does the axis.
    if (lo != 0) lo = lo > 0 ? std::max(0.0, lo - pad) : lo - pad;
    hi += pad;
  }
  return NiceTicks(lo, hi, 5);
}

std::string Header(const std::string& id, const std::string& title, int w, int h,
                   const std::string& kind) {
  return absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"", Escape(id),
                      "\" class=\"chart\" data-chart=\"", Escape(id), "\" data-kind=\"", kind,
                      "\" role=\"img\" aria-label=\"", Escape(title), "\" width=\"", w,
                      "\" height=\"", h, "\" viewBox=\"0 0 ", w, " ", h,
                      "\" font-family=\"sans-serif\" font-size=\"11\">", "<text x=\"4\" y=\"15\" "
                      "font-size=\"13\" font-weight=\"bold\">", Escape(title), "</text>");
}

std::string Empty(const std::string& id, const std::string& title, int w,
                  const std::string& kind, const std::string& text) {
  const int h = 60;
  return absl::StrCat(Header(id, title, w, h, kind), "<text class=\"empty\" x=\"", w / 2,
                      "\" y=\"42\" text-anchor=\"middle\" fill=\"#888\">", Escape(text),
                      "</text></svg>");
}

// Legend entries right-aligned on the title line.
std::string Legend(int w, const std::vector<std::pair<std::string, std::pair<Shape, std::string>>>& items) {
  std::string out;
  double x = w - kRightPad;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    const std::string& name = it->first;
    x -= kCharW * static_cast<double>(name.size()) + 18;
    absl::StrAppend(&out, "<g class=\"legend\">",
                    ShapeAt(it->second.first, x + 5, 11, it->second.second, "", ""),
                    "<text x=\"", F(x + 13), "\" y=\"15\">", Escape(name), "</text></g>");
  }
  return out;
}

std::string XAxis(const Scale& sx, const std::vector<double>& ticks, double y0, double y_top,
                  const std::string& label, double label_x) {
  std::string out;
  const std::vector<std::string> labels = TickLabels(ticks);
  for (size_t i = 0; i < ticks.size(); ++i) {
    const double x = sx(ticks[i]);
    absl::StrAppend(&out, "<line x1=\"", F(x), "\" y1=\"", F(y_top), "\" x2=\"", F(x),
                    "\" y2=\"", F(y0), "\" stroke=\"#eee\"/>", "<text x=\"", F(x), "\" y=\"",
                    F(y0 + 13), "\" text-anchor=\"middle\" fill=\"#444\">", Escape(labels[i]),
                    "</text>");
  }
  absl::StrAppend(&out, "<line x1=\"", F(sx.a), "\" y1=\"", F(y0), "\" x2=\"", F(sx.b), "\" y2=\"",
                  F(y0), "\" stroke=\"#444\"/>", "<text class=\"axis-label\" x=\"", F(label_x),
                  "\" y=\"", F(y0 + 29), "\" text-anchor=\"middle\">", Escape(label), "</text>");
  return out;
}

}  // namespace

std::string Escape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string Exact(double v) {
  if (!std::isfinite(v)) return "";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (lo > hi) std::swap(lo, hi);
  if (lo == hi) {
    const double w = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= w;
    hi += w;
  }
  target = std::max(target, 1);
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  const double first = std::floor(lo / step) * step;
  const double last = std::ceil(hi / step) * step;
  std::vector<double> ticks;
  for (int i = 0; first + i * step <= last + step * 1e-9 && i < 1000; ++i) {
    double t = first + i * step;
    if (std::fabs(t) < step * 1e-9) t = 0;  // no "-0" or 1e-17
    ticks.push_back(t);
  }
  return ticks;
}

std::string TickLabel(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0) return "0";
  if (a >= 1e4 && a < 1e6) {
    std::snprintf(buf, sizeof(buf), "%gk", v / 1e3);
  } else if (a >= 1e6 || a < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

std::vector<std::string> TickLabels(const std::vector<double>& ticks) {
  std::vector<std::string> out;
  for (double t : ticks) out.push_back(TickLabel(t));
  // Distinct, and each true to its tick (a label that rounds 1.1135 to
  // "1.113" misplaces it by a fifth of a step).
  const double step = ticks.size() > 1 ? std::fabs(ticks[1] - ticks[0]) : 0;
  auto distinct = [&ticks, step](const std::vector<std::string>& l) {
    for (size_t i = 0; i < l.size(); ++i) {
      if (i > 0 && l[i] == l[i - 1]) return false;
      const double back = std::strtod(l[i].c_str(), nullptr) *
                          (absl::EndsWith(l[i], "k") ? 1e3 : 1.0);
      if (step > 0 && std::fabs(back - ticks[i]) > step * 1e-3) return false;
    }
    return true;
  };
  for (int decimals = 1; !distinct(out) && decimals <= 9; ++decimals) {
    for (size_t i = 0; i < ticks.size(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.*f", decimals, ticks[i]);
      out[i] = buf;
    }
  }
  return out;
}

std::string XyChart::Render() const {
  std::vector<double> xs, ys;
  size_t n = 0;
  for (const Series& s : series) {
    for (const Mark& m : s.marks) {
      if (!std::isfinite(m.x) || !std::isfinite(m.y)) continue;
      xs.push_back(m.x);
      ys.push_back(m.y);
      ++n;
    }
  }
  for (const Series& s : top_band) {
    for (const Mark& m : s.marks) {
      if (std::isfinite(m.x)) xs.push_back(m.x), ++n;
    }
  }
  if (n == 0) return Empty(id, title, width, "xy", empty_text);
  for (const RefLine& r : refs) (r.vertical ? xs : ys).push_back(r.at);
  for (const Segment& g : segments) {
    xs.insert(xs.end(), {g.x1, g.x2});
    ys.insert(ys.end(), {g.y1, g.y2});
  }
  if (ys.empty()) ys.push_back(0);
  const std::vector<double> xt = Domain(xs, false);
  const std::vector<double> yt = Domain(ys, true);
  const double left = 56;
  const double band_top = kTitleH;
  const bool band = !top_band.empty();
  const double top = band_top + (band ? kBandH : 0) + 4;
  const double bottom = height - kAxisH;
  const Scale sx{xt.front(), xt.back(), left, static_cast<double>(width - kRightPad)};
  const Scale sy{yt.front(), yt.back(), bottom, top};
  std::string out = Header(id, title, width, height, "xy");
  // Legend.
  std::vector<std::pair<std::string, std::pair<Shape, std::string>>> legend;
  for (const Series& s : series) {
    if (!s.name.empty()) legend.push_back({s.name, {s.no_marks ? Shape::kSquare : s.shape, s.color}});
  }
  for (const Series& s : top_band) {
    if (!s.name.empty() && !s.marks.empty()) legend.push_back({s.name, {s.shape, s.color}});
  }
  absl::StrAppend(&out, Legend(width, legend));
  // Axes and grid.
  const std::vector<std::string> ylabels = TickLabels(yt);
  for (size_t i = 0; i < yt.size(); ++i) {
    const double t = yt[i];
    const double y = sy(t);
    absl::StrAppend(&out, "<line x1=\"", F(left), "\" y1=\"", F(y), "\" x2=\"", F(sx.b), "\" y2=\"",
                    F(y), "\" stroke=\"#eee\"/><text x=\"", F(left - 4), "\" y=\"",
                    // The lowest label sits above the x axis, clear of its first tick's label.
                    F(i == 0 ? y - 1 : y + 4),
                    "\" text-anchor=\"end\" fill=\"#444\">", Escape(ylabels[i]), "</text>");
  }
  absl::StrAppend(&out, XAxis(sx, xt, bottom, top, x_label, (left + sx.b) / 2));
  absl::StrAppend(&out, "<line x1=\"", F(left), "\" y1=\"", F(top), "\" x2=\"", F(left),
                  "\" y2=\"", F(bottom), "\" stroke=\"#444\"/>",
                  "<text class=\"axis-label\" transform=\"translate(12,", F((top + bottom) / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">", Escape(y_label), "</text>");
  if (band) {
    absl::StrAppend(&out, "<rect x=\"", F(left), "\" y=\"", F(band_top), "\" width=\"",
                    F(sx.b - left), "\" height=\"", kBandH,
                    "\" fill=\"#fbeaea\"/><text x=\"", F(left - 4), "\" y=\"", F(band_top + 13),
                    "\" text-anchor=\"end\" fill=\"#a33\">no time</text>");
  }
  for (const RefLine& r : refs) {
    if (!std::isfinite(r.at)) continue;
    if (r.vertical) {
      const double x = sx(r.at);
      absl::StrAppend(&out, "<g class=\"ref\" data-at=\"", Exact(r.at), "\"><line x1=\"", F(x),
                      "\" y1=\"", F(top), "\" x2=\"", F(x), "\" y2=\"", F(bottom), "\" stroke=\"",
                      r.color, "\" stroke-dasharray=\"5 3\"/><text x=\"", F(x - 3), "\" y=\"",
                      F(top + 10), "\" text-anchor=\"end\" fill=\"", r.color, "\">",
                      Escape(r.label), "</text></g>");
    } else {
      const double y = sy(r.at);
      absl::StrAppend(&out, "<g class=\"ref\" data-at=\"", Exact(r.at), "\"><line x1=\"", F(left),
                      "\" y1=\"", F(y), "\" x2=\"", F(sx.b), "\" y2=\"", F(y), "\" stroke=\"",
                      r.color, "\" stroke-dasharray=\"5 3\"/><text x=\"", F(sx.b - 2), "\" y=\"",
                      F(y - 3), "\" text-anchor=\"end\" fill=\"", r.color, "\">", Escape(r.label),
                      "</text></g>");
    }
  }
  for (const Segment& g : segments) {
    if (!std::isfinite(g.x1) || !std::isfinite(g.x2) || !std::isfinite(g.y1) || !std::isfinite(g.y2)) {
      continue;
    }
    absl::StrAppend(&out, "<line class=\"segment\" x1=\"", F(sx(g.x1)), "\" y1=\"", F(sy(g.y1)),
                    "\" x2=\"", F(sx(g.x2)), "\" y2=\"", F(sy(g.y2)), "\" stroke=\"#bbb\"/>");
  }
  for (const Series& s : series) {
    const std::string key = CleanKey(s.key.empty() ? s.name : s.key);
    if (s.line) {
      std::string d;
      double prev_y = 0;
      double min_y = kNone;  // for readers of the page (and its tests)
      bool first = true;
      for (const Mark& m : s.marks) {
        if (!std::isfinite(m.x) || !std::isfinite(m.y)) continue;
        const double x = sx(m.x), y = sy(m.y);
        min_y = std::isfinite(min_y) ? std::min(min_y, m.y) : m.y;
        if (first) {
          absl::StrAppend(&d, "M", F(x), " ", F(y));
        } else if (s.step) {
          absl::StrAppend(&d, "L", F(x), " ", F(prev_y), "L", F(x), " ", F(y));
        } else {
          absl::StrAppend(&d, "L", F(x), " ", F(y));
        }
        prev_y = y;
        first = false;
      }
      if (!d.empty()) {
        absl::StrAppend(&out, "<path class=\"line s-", key, "\" data-series=\"", key,
                        "\" data-min-y=\"", Exact(min_y), "\" d=\"", d,
                        "\" fill=\"none\" stroke=\"", s.color, "\" stroke-width=\"1.5\"",
                        s.dashed ? " stroke-dasharray=\"4 3\"" : "", "/>");
      }
    }
    if (s.no_marks) continue;
    for (const Mark& m : s.marks) {
      if (!std::isfinite(m.x) || !std::isfinite(m.y)) continue;
      const std::string attrs =
          absl::StrCat(" class=\"mark s-", key, "\" data-series=\"", key, "\" data-x=\"",
                       Exact(m.x), "\" data-y=\"", Exact(m.y), "\"", DataAttrs(m.data));
      absl::StrAppend(&out, ShapeAt(s.shape, sx(m.x), sy(m.y), s.color, attrs, Tip(m.tip)));
    }
  }
  for (const Series& s : top_band) {
    const std::string key = CleanKey(s.key.empty() ? s.name : s.key);
    for (const Mark& m : s.marks) {
      if (!std::isfinite(m.x)) continue;
      const std::string attrs = absl::StrCat(" class=\"mark band s-", key, "\" data-series=\"", key,
                                             "\" data-x=\"", Exact(m.x), "\"", DataAttrs(m.data));
      absl::StrAppend(&out, ShapeAt(s.shape, sx(m.x), band_top + kBandH / 2.0, s.color, attrs,
                                    Tip(m.tip)));
    }
  }
  absl::StrAppend(&out, "</svg>");
  return out;
}

namespace {

double LabelWidth(const std::vector<std::string>& labels) {
  size_t longest = 4;
  for (const std::string& l : labels) longest = std::max(longest, l.size());
  return std::min(240.0, kCharW * static_cast<double>(longest) + 12);
}

const char* const kMarkerColors[] = {"#e69f00", "#009e73", "#cc79a7", "#56b4e9"};
const Shape kMarkerShapes[] = {Shape::kDiamond, Shape::kTriangle, Shape::kSquare, Shape::kRing};

}  // namespace

std::string IntervalChart::Render() const {
  std::vector<double> xs;
  for (const IntervalRow& r : rows) {
    xs.insert(xs.end(), {r.value, r.low, r.high});
    xs.insert(xs.end(), r.dots.begin(), r.dots.end());
    xs.insert(xs.end(), r.markers.begin(), r.markers.end());
  }
  bool any = false;
  for (double x : xs) any = any || std::isfinite(x);
  if (rows.empty() || !any) return Empty(id, title, width, "interval", empty_text);
  for (const RefLine& r : refs) xs.push_back(r.at);
  std::vector<std::string> labels;
  for (const IntervalRow& r : rows) labels.push_back(r.label);
  const double left = LabelWidth(labels);
  // Very wide intervals (a knob value seen once) are clipped to the axis
  // fitted to the estimates, so they do not squeeze every other row.
  std::vector<double> core_xs;
  for (const IntervalRow& r : rows) {
    core_xs.push_back(r.value);
    core_xs.insert(core_xs.end(), r.dots.begin(), r.dots.end());
    core_xs.insert(core_xs.end(), r.markers.begin(), r.markers.end());
  }
  for (const RefLine& r : refs) core_xs.push_back(r.at);
  {
    double lo = kNone, hi = kNone;
    for (double x : core_xs) {
      if (!std::isfinite(x)) continue;
      lo = std::isfinite(lo) ? std::min(lo, x) : x;
      hi = std::isfinite(hi) ? std::max(hi, x) : x;
    }
    if (std::isfinite(lo)) {
      const double span = std::max(hi - lo, 1e-9);
      const double min_x = lo - 0.5 * span, max_x = hi + 0.5 * span;
      std::vector<double> kept;
      for (double x : xs) {
        if (std::isfinite(x)) kept.push_back(std::clamp(x, min_x, max_x));
      }
      xs = std::move(kept);
    }
  }
  const std::vector<double> xt0 = Domain(xs, false);
  const Scale sx0{xt0.front(), xt0.back(), left, static_cast<double>(width - kRightPad)};
  // Reference labels: in order of position, each right of its line where
  // that is free, else left, else one line higher (no two overprint).
  std::vector<int> ref_row(refs.size(), 0);
  std::vector<bool> ref_right(refs.size(), true);
  {
    std::vector<size_t> order;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (std::isfinite(refs[i].at)) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return refs[a].at < refs[b].at; });
    std::vector<std::vector<std::pair<double, double>>> taken;  // per row: [x0, x1]
    auto free_at = [&](int row, double x0, double x1) {
      if (static_cast<size_t>(row) >= taken.size()) return true;
      for (const auto& [a, b] : taken[static_cast<size_t>(row)]) {
        if (x0 < b + 4 && a < x1 + 4) return false;
      }
      return true;
    };
    for (size_t i : order) {
      const double x = sx0(refs[i].at);
      const double w = kCharW * static_cast<double>(refs[i].label.size());
      for (int row = 0;; ++row) {
        const double rx0 = x + 3, rx1 = x + 3 + w;
        const double lx0 = x - 3 - w, lx1 = x - 3;
        const bool right_fits = rx1 <= width && free_at(row, rx0, rx1);
        const bool left_fits = lx0 >= 0 && free_at(row, lx0, lx1);
        if (right_fits || left_fits || row > 4) {
          ref_right[i] = right_fits || !left_fits;
          ref_row[i] = row;
          if (taken.size() <= static_cast<size_t>(row)) taken.resize(static_cast<size_t>(row) + 1);
          taken[static_cast<size_t>(row)].push_back(ref_right[i] ? std::make_pair(rx0, rx1)
                                                                 : std::make_pair(lx0, lx1));
          break;
        }
      }
    }
  }
  int ref_rows = 1;
  for (int r : ref_row) ref_rows = std::max(ref_rows, r + 1);
  const double top = kTitleH + 6 + 12.0 * (ref_rows - 1);
  const double bottom = top + kRowH * static_cast<double>(rows.size());
  const int h = static_cast<int>(bottom) + kAxisH;
  const std::vector<double>& xt = xt0;
  const Scale& sx = sx0;
  std::string out = Header(id, title, width, h, "interval");
  std::vector<std::pair<std::string, std::pair<Shape, std::string>>> legend = {
      {value_name, {Shape::kDot, "#1f4e79"}}};
  for (size_t i = 0; i < marker_names.size() && i < 4; ++i) {
    legend.push_back({marker_names[i], {kMarkerShapes[i], kMarkerColors[i]}});
  }
  absl::StrAppend(&out, Legend(width, legend));
  absl::StrAppend(&out, XAxis(sx, xt, bottom, top, x_label, (left + sx.b) / 2));
  for (size_t i = 0; i < refs.size(); ++i) {
    const RefLine& r = refs[i];
    if (!std::isfinite(r.at)) continue;
    const double x = sx(r.at);
    const bool right = ref_right[i];
    const double label_y = top - 1 - 12.0 * ref_row[i];
    absl::StrAppend(&out, "<g class=\"ref\" data-at=\"", Exact(r.at), "\"><line x1=\"", F(x),
                    "\" y1=\"", F(label_y - 3), "\" x2=\"", F(x), "\" y2=\"", F(bottom), "\" stroke=\"",
                    r.color, "\" stroke-dasharray=\"5 3\"/><text x=\"", F(right ? x + 3 : x - 3),
                    "\" y=\"", F(label_y), "\" text-anchor=\"", right ? "start" : "end", "\" fill=\"",
                    r.color, "\">", Escape(r.label), "</text></g>");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const IntervalRow& r = rows[i];
    const double y = top + kRowH * (static_cast<double>(i) + 0.5);
    absl::StrAppend(&out, "<g class=\"row\" data-label=\"", Escape(r.label), "\" data-value=\"",
                    Exact(r.value), "\" data-low=\"", Exact(r.low), "\" data-high=\"",
                    Exact(r.high), "\"", DataAttrs(r.data), ">", Tip(r.tip));
    if (i % 2 == 0) {
      absl::StrAppend(&out, "<rect x=\"0\" y=\"", F(y - kRowH / 2.0), "\" width=\"", width,
                      "\" height=\"", kRowH, "\" fill=\"#f6f8fa\"/>");
    }
    absl::StrAppend(&out, "<text x=\"", F(left - 6), "\" y=\"", F(y + 4),
                    "\" text-anchor=\"end\">", Escape(r.label), "</text>");
    for (double d : r.dots) {
      if (!std::isfinite(d)) continue;
      absl::StrAppend(&out, "<circle class=\"dot\" data-x=\"", Exact(d), "\" cx=\"", F(sx(d)),
                      "\" cy=\"", F(y), "\" r=\"2.5\" fill=\"#999\" fill-opacity=\"0.7\"/>");
    }
    const std::string color = r.color.empty() ? "#1f4e79" : r.color;
    if (std::isfinite(r.low) && std::isfinite(r.high)) {
      // An end past the axis is drawn to its edge without a cap: it goes on.
      const double lo = std::max(r.low, xt.front()), hi = std::min(r.high, xt.back());
      absl::StrAppend(&out, "<line class=\"interval\" x1=\"", F(sx(lo)), "\" y1=\"", F(y),
                      "\" x2=\"", F(sx(hi)), "\" y2=\"", F(y), "\" stroke=\"", color,
                      "\" stroke-width=\"2\"/>");
      for (double e : {r.low, r.high}) {
        if (e < xt.front() || e > xt.back()) continue;
        absl::StrAppend(&out, "<line x1=\"", F(sx(e)), "\" y1=\"", F(y - 4), "\" x2=\"", F(sx(e)),
                        "\" y2=\"", F(y + 4), "\" stroke=\"", color, "\" stroke-width=\"2\"/>");
      }
    }
    for (size_t m = 0; m < r.markers.size() && m < 4; ++m) {
      if (!std::isfinite(r.markers[m])) continue;
      const std::string name = m < marker_names.size() ? marker_names[m] : "marker";
      absl::StrAppend(&out, ShapeAt(kMarkerShapes[m], sx(r.markers[m]), y, kMarkerColors[m],
                                    absl::StrCat(" class=\"marker\" data-marker=\"",
                                                 Escape(name), "\" data-x=\"",
                                                 Exact(r.markers[m]), "\""),
                                    ""));
    }
    if (std::isfinite(r.value)) {
      absl::StrAppend(&out, ShapeAt(Shape::kDot, sx(r.value), y, color, " class=\"estimate\"", ""));
    }
    absl::StrAppend(&out, "</g>");
  }
  absl::StrAppend(&out, "</svg>");
  return out;
}

std::string BarChart::Render() const {
  bool any = false;
  std::vector<double> xs = {0};
  std::vector<std::string> labels;
  for (const BarRow& r : rows) {
    any = any || std::isfinite(r.value);
    xs.push_back(r.value);
    labels.push_back(r.label);
  }
  if (!any) return Empty(id, title, width, "bar", empty_text);
  const double left = LabelWidth(labels);
  const double top = kTitleH + 6;
  const double bottom = top + kRowH * static_cast<double>(rows.size());
  const int h = static_cast<int>(bottom) + kAxisH;
  const std::vector<double> xt = Domain(xs, true);
  const Scale sx{xt.front(), xt.back(), left, static_cast<double>(width - kRightPad)};
  std::string out = Header(id, title, width, h, "bar");
  absl::StrAppend(&out, XAxis(sx, xt, bottom, top, x_label, (left + sx.b) / 2));
  for (size_t i = 0; i < rows.size(); ++i) {
    const BarRow& r = rows[i];
    const double y = top + kRowH * static_cast<double>(i);
    absl::StrAppend(&out, "<g class=\"row\" data-label=\"", Escape(r.label), "\" data-value=\"",
                    Exact(r.value), "\"", DataAttrs(r.data), ">", Tip(r.tip), "<text x=\"",
                    F(left - 6), "\" y=\"", F(y + kRowH / 2.0 + 4), "\" text-anchor=\"end\">",
                    Escape(r.label), "</text>");
    if (std::isfinite(r.value)) {
      const double x0 = sx(0), x1 = sx(r.value);
      absl::StrAppend(&out, "<rect class=\"bar\" x=\"", F(std::min(x0, x1)), "\" y=\"", F(y + 3),
                      "\" width=\"", F(std::max(std::fabs(x1 - x0), 1.0)), "\" height=\"",
                      kRowH - 6, "\" fill=\"", color, "\"/>");
    }
    absl::StrAppend(&out, "</g>");
  }
  absl::StrAppend(&out, "</svg>");
  return out;
}

}  // namespace infrarsi::web
