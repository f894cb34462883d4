#include "core/web/pages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/web/svg.h"

namespace infrarsi::web {
namespace {

constexpr char kStyle[] = R"css(
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1b1f24;background:#fff;font-size:14px}
nav{background:#1f4e79;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:center}
nav a{color:#fff;text-decoration:none;font-weight:600}
nav .who{margin-left:auto;opacity:.85;font-size:12px}
nav form{margin:0}
nav button{background:none;border:1px solid #fff8;color:#fff;border-radius:4px;cursor:pointer}
main{padding:12px 20px;max-width:1400px}
h1{font-size:20px;margin:8px 0}
h2{font-size:16px;margin:20px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
table{border-collapse:collapse;font-size:12.5px}
th,td{border-bottom:1px solid #e3e3e3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f7;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
dl.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:6px 16px;margin:8px 0}
dl.figures div{background:#f6f8fa;border-radius:6px;padding:6px 10px}
dl.figures dt{font-size:11px;color:#57606a;text-transform:uppercase;letter-spacing:.03em}
dl.figures dd{margin:2px 0 0;font-size:17px;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{border:1px solid #e3e3e3;border-radius:6px;background:#fff}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600;background:#ddd}
.st-searched,.st-applied,.ok{background:#dafbe1;color:#116329}
.st-running,.st-verifying,.st-doctoring{background:#ddf4ff;color:#0550ae}
.st-failed,.st-cancelled,.bad{background:#ffebe9;color:#a40e26}
.notice{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;border-radius:6px;margin:6px 0}
.error{background:#ffebe9;border:1px solid #a40e26;padding:6px 10px;border-radius:6px;margin:6px 0}
.muted{color:#57606a;font-size:12px}
.filters{margin:6px 0;display:flex;gap:8px;align-items:center}
code{font-size:12px}
td.cfg{font-family:monospace;font-size:11.5px;max-width:420px}
)css";

constexpr char kScript[] = R"js(
(function(){
  // Sortable tables: click a header; numbers sort by data-sort.
  function sortTable(table, col, dir){
    const body = table.tBodies[0]; if(!body) return;
    const rows = Array.from(body.rows);
    rows.sort(function(a,b){
      const x = a.cells[col], y = b.cells[col];
      const xs = x ? (x.dataset.sort !== undefined ? x.dataset.sort : x.textContent) : '';
      const ys = y ? (y.dataset.sort !== undefined ? y.dataset.sort : y.textContent) : '';
      const xn = parseFloat(xs), yn = parseFloat(ys);
      let c;
      if (!isNaN(xn) && !isNaN(yn) && String(xn) !== 'NaN') c = xn - yn; else c = xs.localeCompare(ys);
      return dir * c;
    });
    rows.forEach(function(r){ body.appendChild(r); });
    table.dataset.sortCol = col; table.dataset.sortDir = dir;
  }
  function applyFilter(table){
    const id = table.id;
    const text = document.getElementById(id + '-filter');
    const status = document.getElementById(id + '-status');
    const q = text ? text.value.toLowerCase() : '';
    const s = status ? status.value : '';
    let shown = 0;
    Array.from(table.tBodies[0] ? table.tBodies[0].rows : []).forEach(function(r){
      const ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) && (!s || r.dataset.status === s);
      r.style.display = ok ? '' : 'none';
      if (ok) shown++;
    });
    const count = document.getElementById(id + '-count');
    if (count) count.textContent = shown + ' shown';
  }
  const state = {};  // table id -> {col, dir, q, s}: kept across live updates
  function wire(root){
    root.querySelectorAll('table.sortable').forEach(function(table){
      Array.from(table.tHead ? table.tHead.rows[0].cells : []).forEach(function(th, i){
        th.addEventListener('click', function(){
          const dir = (table.dataset.sortCol == i && table.dataset.sortDir == 1) ? -1 : 1;
          sortTable(table, i, dir);
          state[table.id] = Object.assign(state[table.id] || {}, {col: i, dir: dir});
        });
      });
      const st = state[table.id];
      ['filter','status'].forEach(function(k){
        const el = document.getElementById(table.id + '-' + k);
        if (!el) return;
        if (st && st[k] !== undefined) el.value = st[k];
        el.addEventListener('input', function(){
          state[table.id] = Object.assign(state[table.id] || {}, {[k]: el.value});
          applyFilter(table);
        });
      });
      if (st && st.col !== undefined) sortTable(table, st.col, st.dir);
      applyFilter(table);
    });
  }
  function live(){
    const content = document.getElementById('content');
    if (!content || content.dataset.live !== '1' || !content.dataset.src) return;
    const status = document.getElementById('live-status');
    setTimeout(function(){
      fetch(content.dataset.src, {credentials: 'same-origin', cache: 'no-store'})
        .then(function(r){ if (!r.ok) throw new Error('HTTP ' + r.status); return r.text(); })
        .then(function(html){
          const t = document.createElement('template');
          t.innerHTML = html.trim();
          const next = t.content.firstElementChild;
          if (!next || next.id !== 'content') throw new Error('unexpected answer');
          content.replaceWith(next);
          wire(next);
          const s = document.getElementById('live-status');
          if (s) s.textContent = (next.dataset.live === '1' ? 'live, updated ' : 'finished, updated ') +
                                  new Date().toLocaleTimeString();
          live();
        })
        .catch(function(e){ if (status) status.textContent = 'live updates paused: ' + e.message; live(); });
    }, 2000);
  }
  document.addEventListener('DOMContentLoaded', function(){ wire(document); live(); });
})();
)js";

std::string Fmt(const char* format, double v) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string Seconds(double s) {
  if (!std::isfinite(s) || s <= 0) return "–";
  if (s < 1) return Fmt("%.1f ms", s * 1000);
  if (s < 100) return Fmt("%.3g s", s);
  if (s < 7200) return Fmt("%.0f s", s);
  return Fmt("%.1f h", s / 3600);
}

std::string When(int64_t unix_ms) {
  if (unix_ms <= 0) return "–";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string StageBadge(const std::string& stage) {
  return absl::StrCat("<span class=\"badge st-", Escape(stage), "\">", Escape(stage), "</span>");
}

std::string ConfigText(const google::protobuf::Map<std::string, std::string>& config) {
  std::map<std::string, std::string> sorted(config.begin(), config.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : sorted) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrJoin(parts, " ");
}

// A figure of the summary: <dd id=... data-value=...>.
std::string Figure(const std::string& id, const std::string& name, const std::string& text,
                   const std::string& value) {
  return absl::StrCat("<div><dt>", Escape(name), "</dt><dd id=\"", id, "\" data-value=\"",
                      Escape(value), "\">", text, "</dd></div>");
}

std::string Td(const std::string& text, const std::string& cls = "") {
  return absl::StrCat("<td", cls.empty() ? "" : absl::StrCat(" class=\"", cls, "\""), ">",
                      Escape(text), "</td>");
}
// A number cell: shown formatted, sorted by its exact value.
std::string TdNum(double v, const std::string& shown) {
  return absl::StrCat("<td class=\"num\" data-sort=\"", std::isfinite(v) ? Exact(v) : "", "\">",
                      Escape(shown), "</td>");
}

std::string Page(const std::string& title, const std::string& body, const PageStyle& style,
                 const std::string& active) {
  std::string nav;
  if (!style.standalone) {
    auto link = [&](const char* href, const char* name, const char* key) {
      return absl::StrCat("<a href=\"", href, "\"", active == key ? " aria-current=\"page\"" : "",
                          ">", name, "</a>");
    };
    nav = absl::StrCat("<nav><span>InfraRSI</span>", link("/", "Sessions", "sessions"),
                       link("/agents", "Agents", "agents"), link("/bank", "Bank", "bank"));
    if (!style.who.empty()) {
      absl::StrAppend(&nav, "<span class=\"who\">", Escape(style.who),
                      "</span><form method=\"post\" action=\"/logout\"><button>log out</button></form>");
    }
    absl::StrAppend(&nav, "</nav>");
  }
  const std::string script = style.standalone
                                 ? absl::StrCat("<script>", kScript, "</script>")
                                 : "<script src=\"/static/dashboard.js\"></script>";
  return absl::StrCat("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
                      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
                      "<title>", Escape(title), "</title><style>", kStyle, "</style>", script,
                      "</head><body>", nav, "<main>", body, "</main></body></html>\n");
}

// ----------------------------------------------------------------- charts

struct ClassStyle {
  const char* name;
  Shape shape;
  const char* color;
};
ClassStyle StyleOfClass(const std::string& cls) {
  if (cls == "oom") return {"OOM", Shape::kCross, "#d62728"};
  if (cls == "timeout") return {"timeout", Shape::kDiamond, "#8c564b"};
  if (cls == "launcher") return {"launcher", Shape::kTriangle, "#ff7f0e"};
  if (cls == "crash") return {"crash", Shape::kSquare, "#7f0000"};
  if (cls.rfind("violation", 0) == 0) return {"violation", Shape::kDiamond, "#c2185b"};
  return {"other", Shape::kSquare, "#555"};
}

bool InFlight(const std::string& status) {
  return status == "queued" || status == "leased" || status == "running";
}

std::string TrialTip(const v1::TrialView& t) {
  std::string tip = absl::StrCat("trial ", t.id(), " (", t.purpose(), ", ", t.status(), ")");
  if (t.step_time_s() > 0) absl::StrAppend(&tip, "\nstep ", Fmt("%.4g", t.step_time_s()), " s");
  if (t.peak_mem_gib() > 0) absl::StrAppend(&tip, "\npeak ", Fmt("%.1f", t.peak_mem_gib()), " GiB");
  if (!t.failure_class().empty()) absl::StrAppend(&tip, "\n", t.failure_class());
  if (!t.error().empty()) absl::StrAppend(&tip, ": ", t.error().substr(0, 160));
  absl::StrAppend(&tip, "\n", ConfigText(t.config()));
  return tip;
}

std::string HistoryChart(const v1::SessionReport& r) {
  XyChart c;
  c.id = "chart-history";
  c.title = "Step time of every trial, in order";
  // One numbering everywhere: the trial ids of the table and the A/B chart.
  c.x_label = "trial id";
  c.y_label = "step time (s)";
  c.width = 680;
  Series doctor{"doctor", "doctor", "#8c8c8c", Shape::kDot, {}};
  Series search{"search", "search", "#1f77b4", Shape::kDot, {}};
  Series verify{"verify", "verify", "#9467bd", Shape::kRing, {}};
  Series best{"best so far", "best", "#2ca02c", Shape::kDot, {}};
  best.line = best.step = best.no_marks = true;
  std::map<std::string, Series> failed;
  Series flight{"in flight", "in-flight", "#999", Shape::kRing, {}};
  double best_so_far = 0;
  for (const v1::TrialView& t : r.trials()) {
    const double i = static_cast<double>(t.id());
    Mark m{i, t.step_time_s(), TrialTip(t),
           {{"trial", absl::StrCat(t.id())}, {"status", t.status()}}};
    if (t.status() == "ok" && t.step_time_s() > 0) {
      Series& s = t.purpose() == "doctor" ? doctor : t.purpose() == "verify" ? verify : search;
      s.marks.push_back(m);
      // Best so far among the search's trials (a doctor run is the
      // baseline, not a find).
      if (t.purpose() == "search" && (best_so_far == 0 || t.step_time_s() < best_so_far)) {
        best_so_far = t.step_time_s();
      }
    } else if (!t.failure_class().empty()) {
      const ClassStyle st = StyleOfClass(t.failure_class());
      Series& s = failed[st.name];
      if (s.name.empty()) s = Series{st.name, absl::StrCat("failed-", st.name), st.color, st.shape, {}};
      m.data.push_back({"class", t.failure_class()});
      s.marks.push_back(m);
    } else if (InFlight(t.status())) {
      flight.marks.push_back(m);
    }
    if (best_so_far > 0) best.marks.push_back(Mark{i, best_so_far, "", {}});
  }
  c.series = {best, doctor, search, verify};
  for (auto& [name, s] : failed) c.top_band.push_back(std::move(s));
  if (!flight.marks.empty()) c.top_band.push_back(flight);
  if (r.baseline().step_time_s() > 0) {
    c.refs.push_back(RefLine{false, r.baseline().step_time_s(), "baseline", "#555"});
  }
  return c.Render();
}

// Why a memory panel is empty: nothing ran yet, or (a finished session)
// nothing its trials ran stated a peak.
std::string MemoryEmptyText(const v1::SessionReport& r) {
  const bool finished = r.stage() == "searched" || r.stage() == "applied" ||
                        r.stage() == "failed" || r.stage() == "cancelled";
  return finished ? "no trial reported its peak memory (its executor or log reader states none), "
                    "so there is no memory model"
                  : "not measured yet: no trial has reported its peak memory";
}

std::string MemoryChart(const v1::SessionReport& r) {
  XyChart c;
  c.id = "chart-memory";
  c.title = "Step time against peak memory";
  c.x_label = "peak memory per GPU (GiB)";
  c.y_label = "step time (s)";
  c.width = 680;
  c.empty_text = MemoryEmptyText(r);
  Series measured{"measured", "measured", "#1f77b4", Shape::kDot, {}};
  Series predicted{"memory model", "predicted", "#ff7f0e", Shape::kRing, {}};
  Series oom{"OOM (peak above capacity)", "oom", "#d62728", Shape::kCross, {}};
  const double capacity = r.search().capacity_gib();
  for (const v1::TrialView& t : r.trials()) {
    const std::vector<std::pair<std::string, std::string>> data = {{"trial", absl::StrCat(t.id())}};
    if (t.status() == "ok" && t.step_time_s() > 0 && t.peak_mem_gib() > 0) {
      measured.marks.push_back(Mark{t.peak_mem_gib(), t.step_time_s(), TrialTip(t), data});
      if (t.predicted_peak_mem_gib() > 0) {
        predicted.marks.push_back(Mark{t.predicted_peak_mem_gib(), t.step_time_s(),
                                       absl::StrCat("trial ", t.id(), ": model predicts ",
                                                    Fmt("%.1f", t.predicted_peak_mem_gib()),
                                                    " GiB, measured ", Fmt("%.1f", t.peak_mem_gib())),
                                       data});
        c.segments.push_back(Segment{t.peak_mem_gib(), t.step_time_s(), t.predicted_peak_mem_gib(),
                                     t.step_time_s()});
      }
    } else if (t.status() == "oom") {
      // Censored: the true peak lies above the capacity; drawn at the
      // model's prediction where there is one.
      const double x = t.predicted_peak_mem_gib() > 0 ? t.predicted_peak_mem_gib() : capacity;
      if (x > 0) {
        oom.marks.push_back(Mark{x, kNone,
                                 absl::StrCat(TrialTip(t), "\nmodel predicts ",
                                              Fmt("%.1f", t.predicted_peak_mem_gib()), " GiB"),
                                 data});
      }
    }
  }
  if (measured.marks.empty()) return XyChart{c.id, c.title, c.x_label, c.y_label, c.width, c.height,
                                             {}, {}, {}, {}, c.empty_text}.Render();
  c.series = {measured, predicted};
  c.top_band = {oom};
  if (capacity > 0) c.refs.push_back(RefLine{true, capacity, Fmt("capacity %.0f GiB", capacity), "#d62728"});
  return c.Render();
}

double PercentOfLog(double log_effect) { return 100.0 * (std::exp(log_effect) - 1.0); }

std::string KnobCharts(const v1::SessionReport& r) {
  IntervalChart time;
  time.id = "chart-knob-time";
  time.title = "Each knob value's effect on step time (vs the baseline's value)";
  time.x_label = "step time change (%), 95% interval";
  time.value_name = "from the runs";
  time.empty_text = "not measured yet: no search trial has finished";
  IntervalChart mem;
  mem.id = "chart-knob-mem";
  mem.title = "Each knob value's effect on peak memory";
  mem.x_label = "peak memory change (%), 95% interval";
  mem.value_name = "memory model";
  mem.empty_text = MemoryEmptyText(r);
  const bool priors = !r.search().knob_effects().empty() && r.search().knob_effects(0).has_prior();
  if (priors) {
    time.marker_names = {"prior", "revised"};
    mem.marker_names = {"prior"};
  }
  for (const v1::KnobEffect& k : r.search().knob_effects()) {
    const std::string label = absl::StrCat(k.knob(), "=", k.value());
    const std::vector<std::pair<std::string, std::string>> data = {{"knob", k.knob()},
                                                                   {"knob-value", k.value()}};
    IntervalRow t{label, kNone, kNone, kNone, {}, {}, "", "", data};
    // Before a search trial ran with it, a value has no effect to draw (not
    // "no change").
    if (k.time_avg().known() && k.trials() > 0) {
      t.value = k.time_avg().pct();
      t.low = k.time_avg().low();
      t.high = k.time_avg().high();
    }
    if (priors) {
      t.markers = {PercentOfLog(k.prior_time()),
                   k.revised_time_avg().known() ? k.revised_time_avg().pct() : kNone};
    }
    t.tip = absl::StrCat(label, ": ", Fmt("%+.1f%%", t.value), " [", Fmt("%+.1f", t.low), ", ",
                         Fmt("%+.1f", t.high), "] over ", k.time_avg().settings(), " settings, ",
                         k.trials(), " trials ran with it",
                         k.miscalibrated() ? absl::StrCat("; prior miscalibrated: ", k.note()) : "");
    if (k.miscalibrated()) t.color = "#d62728";
    time.rows.push_back(std::move(t));
    IntervalRow m{label, kNone, kNone, kNone, {}, {}, "", "", data};
    if (k.mem_avg().known() && k.trials() > 0) {
      m.value = k.mem_avg().pct();
      m.low = k.mem_avg().low();
      m.high = k.mem_avg().high();
    }
    if (priors) m.markers = {PercentOfLog(k.prior_mem())};
    m.tip = absl::StrCat(label, ": ", Fmt("%+.1f%%", m.value), " [", Fmt("%+.1f", m.low), ", ",
                         Fmt("%+.1f", m.high), "]; price ", Fmt("%+.1f", k.memory_price_gib()),
                         " GiB at the baseline");
    mem.rows.push_back(std::move(m));
  }
  time.refs.push_back(RefLine{true, 0, "no change", "#555"});
  mem.refs.push_back(RefLine{true, 0, "no change", "#555"});
  return absl::StrCat(time.Render(), mem.Render());
}

std::string DoctorChart(const v1::SessionReport& r) {
  const v1::DoctorReport& d = r.doctor();
  IntervalChart c;
  c.id = "chart-doctor";
  c.title = "The doctor's baseline runs per agent";
  c.x_label = "step time (s)";
  c.value_name = "agent median";
  c.empty_text = "the doctor has not run";
  std::map<std::string, std::vector<double>> runs;
  for (const v1::TrialView& t : r.trials()) {
    if (t.purpose() == "doctor" && t.status() == "ok" && t.step_time_s() > 0) {
      runs[t.agent()].push_back(t.step_time_s());
    }
  }
  std::set<std::string> seen;
  for (const auto& a : d.agents()) {
    IntervalRow row{a.agent(), a.median_step_time_s(), kNone, kNone, runs[a.agent()], {},
                    absl::StrCat(a.agent(), ": ", a.runs(), " runs, median ",
                                 Fmt("%.4g", a.median_step_time_s()), " s",
                                 a.outlier() ? " (outlier)" : ""),
                    a.outlier() ? "#d62728" : "", {{"runs", absl::StrCat(a.runs())}}};
    c.rows.push_back(std::move(row));
    seen.insert(a.agent());
  }
  for (auto& [agent, xs] : runs) {  // runs of agents the verdict does not list (yet)
    if (!seen.count(agent)) c.rows.push_back(IntervalRow{agent, kNone, kNone, kNone, xs, {}, "", "", {}});
  }
  if (d.median_step_time_s() > 0) {
    c.refs.push_back(RefLine{true, d.median_step_time_s(), "median", "#555"});
    if (d.noise_floor() > 0) {
      // Labelled as the card states the floor; the line is where a
      // candidate's step time must be to clear it.
      c.refs.push_back(RefLine{true, d.median_step_time_s() / (1 + d.noise_floor()),
                               Fmt("noise floor %.2f%%", 100 * d.noise_floor()), "#2ca02c"});
    }
  }
  return c.Render();
}

std::string VerifyChart(const v1::SessionReport& r) {
  const v1::Verification& v = r.verification();
  IntervalChart c;
  c.id = "chart-verify";
  c.title = "A/B verification of the top candidates against the baseline";
  c.x_label = "speed-up (baseline / candidate), 95% interval";
  c.value_name = "speed-up";
  c.empty_text = "no candidate verified yet";
  for (const auto& cand : v.candidates()) {
    const bool promoted = cand.rank() == v.promoted_rank();
    IntervalRow row{absl::StrCat("c", cand.rank(), " (trial ", cand.trial_id(), ")",
                                 promoted ? " promoted" : ""),
                    cand.speedup(), cand.ci_low(), cand.ci_high(), {}, {},
                    absl::StrCat("c", cand.rank(), ": ", Fmt("%.3fx", cand.speedup()), " [",
                                 Fmt("%.3f", cand.ci_low()), ", ", Fmt("%.3f", cand.ci_high()),
                                 "] over ", cand.runs(), " pairs; ", cand.reason(), "\n",
                                 ConfigText(cand.config())),
                    promoted ? "#2ca02c" : cand.cleared() ? "#1f77b4" : "#999",
                    {{"rank", absl::StrCat(cand.rank())},
                     {"cleared", cand.cleared() ? "1" : "0"},
                     {"promoted", promoted ? "1" : "0"}}};
    if (cand.runs() == 0) row.low = row.high = kNone;
    c.rows.push_back(std::move(row));
  }
  c.refs.push_back(RefLine{true, 1.0, "baseline", "#555"});
  if (v.noise_floor() > 0) {
    c.refs.push_back(RefLine{true, 1.0 + v.noise_floor(), Fmt("1 + floor (%.3f)", 1.0 + v.noise_floor()),
                             "#2ca02c"});
  }
  return c.Render();
}

std::string FailureCharts(const v1::SessionReport& r) {
  BarChart by_class{"chart-fail-class", "Failed-trial cost by class", "GPU-seconds", "#c0504d", 440, {}, "no trial failed"};
  BarChart by_knob{"chart-fail-knob", "Failed-trial cost by knob value", "GPU-seconds", "#e08050", 440, {}, "no trial failed"};
  BarChart by_patch{"chart-fail-patch", "Failed-trial cost by patch", "GPU-seconds", "#b07aa1", 440, {}, "no failed trial had a patch on"};
  for (const auto& f : r.failure_costs()) {
    const std::string tip = absl::StrCat(f.trials(), " trials, ", Fmt("%.0f", f.gpu_s()), " GPU-s");
    const std::vector<std::pair<std::string, std::string>> data = {
        {"class", f.failure_class()}, {"trials", absl::StrCat(f.trials())}};
    if (f.knob().empty()) {
      by_class.rows.push_back(BarRow{f.failure_class(), f.gpu_s(), tip, data});
    } else if (f.knob() == "patch") {
      by_patch.rows.push_back(BarRow{absl::StrCat(f.failure_class(), ": ", f.value()), f.gpu_s(), tip, data});
    } else if (by_knob.rows.size() < 16) {
      by_knob.rows.push_back(
          BarRow{absl::StrCat(f.failure_class(), ": ", f.knob(), "=", f.value()), f.gpu_s(), tip, data});
    }
  }
  return absl::StrCat(by_class.Render(), by_knob.Render(), by_patch.Render());
}

std::string ContractSection(const v1::SessionReport& r) {
  const v1::Contract& c = r.contract();
  std::string out = "<h2 id=\"contract-heading\">Contract and its checks</h2><div class=\"charts\"><table id=\"contract\"><tbody>";
  auto row = [&](const std::string& k, const std::string& v) {
    absl::StrAppend(&out, "<tr><th>", Escape(k), "</th><td>", Escape(v), "</td></tr>");
  };
  row("hash", c.hash());
  row("workload", c.workload_signature());
  row("tokens per step", c.tokens_per_step() > 0 ? absl::StrCat(c.tokens_per_step()) : "–");
  row("timed steps", c.timed_steps() > 0 ? absl::StrCat(c.timed_steps()) : "as the baseline");
  row("data seed", c.data_seed_set() ? absl::StrCat(c.data_seed()) : "not set");
  row("loss tolerance", absl::StrCat("abs ", Fmt("%g", c.loss_abs_tol()), ", rel ", Fmt("%g", c.loss_rel_tol())));
  row("timing tolerance", Fmt("%g", c.timing_tolerance()));
  row("precision", c.precision().empty() ? "any" : absl::StrJoin(c.precision(), ", "));
  row("optimizer step in the timed window", c.optimizer_in_window() ? "required" : "not required");
  row("editable", absl::StrJoin(c.editable(), ", "));
  row("protected", absl::StrJoin(c.protected_files(), ", "));
  row("patches", absl::StrJoin(c.patches(), ", "));
  row("repository", c.repository());
  row("base commit", c.base_commit());
  row("recorded", r.recorded());
  absl::StrAppend(&out, "</tbody></table><table id=\"checks\"><thead><tr><th>check</th><th>ran</th><th>what it checked</th></tr></thead><tbody>");
  for (const auto& k : r.integrity()) {
    absl::StrAppend(&out, "<tr data-ran=\"", k.ran() ? "1" : "0", "\">", Td(k.name()),
                    "<td><span class=\"badge ", k.ran() ? "ok" : "bad", "\">",
                    k.ran() ? "ran" : "skipped", "</span></td>", Td(k.detail()), "</tr>");
  }
  absl::StrAppend(&out, "</tbody></table></div>");
  if (!r.violations_by_kind().empty()) {
    absl::StrAppend(&out, "<h3>Trials that broke the contract</h3><table id=\"violations\"><thead><tr><th>kind</th><th class=\"num\">trials</th><th class=\"num\">cost (s)</th></tr></thead><tbody>");
    std::map<std::string, int> kinds(r.violations_by_kind().begin(), r.violations_by_kind().end());
    for (const auto& [kind, n] : kinds) {
      const auto it = r.violation_cost_s_by_kind().find(kind);
      const double cost = it == r.violation_cost_s_by_kind().end() ? 0 : it->second;
      absl::StrAppend(&out, "<tr>", Td(kind), TdNum(n, absl::StrCat(n)), TdNum(cost, Fmt("%.1f", cost)), "</tr>");
    }
    absl::StrAppend(&out, "</tbody></table>");
  }
  if (!r.source_audit().empty()) {
    absl::StrAppend(&out, "<h3>Source paths the promoted change touches</h3><table id=\"source-audit\"><thead><tr><th>path</th><th>patch</th><th>editable glob</th></tr></thead><tbody>");
    for (const auto& p : r.source_audit()) {
      absl::StrAppend(&out, "<tr>", Td(p.path()), Td(p.patch()),
                      Td(p.editable_glob().empty() ? "OUTSIDE THE SCOPE" : p.editable_glob()), "</tr>");
    }
    absl::StrAppend(&out, "</tbody></table>");
  }
  if (r.llm_patches_size() > 0 || !r.llm_patches_note().empty()) {
    absl::StrAppend(&out, "<h3>Patches an LLM proposed</h3>");
    if (!r.llm_patches_note().empty()) {
      absl::StrAppend(&out, "<p class=\"muted\" id=\"llm-note\">", Escape(r.llm_patches_note()), "</p>");
    }
    absl::StrAppend(&out, "<table id=\"llm-patches\"><thead><tr><th>patch</th><th>verdict</th><th>files</th>"
                          "<th>rationale / reason</th></tr></thead><tbody>");
    for (const auto& p : r.llm_patches()) {
      absl::StrAppend(&out, "<tr data-accepted=\"", p.accepted() ? "1" : "0", "\">", Td(p.name()), "<td><span class=\"badge ",
                      p.accepted() ? "ok\">admitted" : "bad\">refused", "</span></td>", Td(absl::StrJoin(p.paths(), ", ")),
                      Td(p.accepted() ? p.rationale() : p.reason()), "</tr>");
    }
    absl::StrAppend(&out, "</tbody></table>");
  }
  if (!r.broken_hosts().empty()) {
    absl::StrAppend(&out, "<h3>Broken hosts</h3><table id=\"broken-hosts\"><tbody>");
    for (const auto& b : r.broken_hosts()) {
      absl::StrAppend(&out, "<tr>", Td(b.agent_id()), TdNum(b.failed(), absl::StrCat(b.failed(), " failed")),
                      Td(b.first_error()), "</tr>");
    }
    absl::StrAppend(&out, "</tbody></table>");
  }
  return out;
}

std::string TrialTable(const v1::SessionReport& r) {
  std::set<std::string> statuses;
  for (const auto& t : r.trials()) statuses.insert(t.status());
  std::string out = absl::StrCat(
      "<h2>Trials</h2><div class=\"filters\"><input id=\"trials-filter\" type=\"search\" "
      "placeholder=\"filter: any text, e.g. micro_batch=4\" size=\"40\" aria-label=\"filter trials\">"
      "<select id=\"trials-status\" aria-label=\"status\"><option value=\"\">every status</option>");
  for (const std::string& s : statuses) {
    absl::StrAppend(&out, "<option value=\"", Escape(s), "\">", Escape(s), "</option>");
  }
  absl::StrAppend(&out,
                  "</select><span id=\"trials-count\" class=\"muted\"></span></div>"
                  "<table id=\"trials\" class=\"sortable\"><thead><tr><th class=\"num\">id</th>"
                  "<th>purpose</th><th>status</th><th>failure</th><th class=\"num\">step time (s)</th>"
                  "<th class=\"num\">peak (GiB)</th><th class=\"num\">model peak (GiB)</th>"
                  "<th>agent</th><th class=\"num\">attempts</th><th class=\"num\">cost (s)</th>"
                  "<th>why / tag</th><th>setting</th><th>error / note</th><th>output</th></tr></thead><tbody>");
  // Each trial's kept output (the server's /sessions/<id>/trials/<n>/...).
  const std::string base = absl::StrCat("/sessions/", Escape(r.session_id()), "/trials/");
  for (const auto& t : r.trials()) {
    absl::StrAppend(
        &out, "<tr data-id=\"", t.id(), "\" data-status=\"", Escape(t.status()), "\" data-step=\"",
        Exact(t.step_time_s()), "\">", TdNum(t.id(), absl::StrCat(t.id())), Td(t.purpose()),
        Td(t.status()), Td(t.failure_class()),
        TdNum(t.step_time_s() > 0 ? t.step_time_s() : kNone,
              t.step_time_s() > 0 ? Fmt("%.5g", t.step_time_s()) : "–"),
        TdNum(t.peak_mem_gib() > 0 ? t.peak_mem_gib() : kNone,
              t.peak_mem_gib() > 0 ? Fmt("%.1f", t.peak_mem_gib()) : "–"),
        TdNum(t.predicted_peak_mem_gib() > 0 ? t.predicted_peak_mem_gib() : kNone,
              t.predicted_peak_mem_gib() > 0 ? Fmt("%.1f", t.predicted_peak_mem_gib()) : "–"),
        Td(t.agent()), TdNum(t.attempts(), absl::StrCat(t.attempts())),
        TdNum(t.cost_s(), Fmt("%.1f", t.cost_s())), Td(t.tag()), Td(ConfigText(t.config()), "cfg"),
        Td(absl::StrCat(t.error(), t.error().empty() || t.note().empty() ? "" : "; ", t.note())),
        "<td class=\"out\"><a href=\"", base, t.id(), "/stdout\">stdout</a> <a href=\"", base, t.id(),
        "/stderr\">stderr</a></td></tr>");
  }
  absl::StrAppend(&out, "</tbody></table>");
  return out;
}

}  // namespace

const char* const kDashboardScript = kScript;

bool StageIsLive(const std::string& stage) {
  return stage != "searched" && stage != "applied" && stage != "failed" && stage != "cancelled";
}

std::string LoginPage(const std::string& error) {
  std::string body =
      "<h1>Log in</h1><p>Paste an API token (<code>infrarsi-server token create</code> makes "
      "one). It is kept in a session cookie this browser sends only to this server.</p>";
  if (!error.empty()) absl::StrAppend(&body, "<div class=\"error\" id=\"login-error\">", Escape(error), "</div>");
  absl::StrAppend(&body,
                  "<form method=\"post\" action=\"/login\"><input id=\"token\" name=\"token\" "
                  "type=\"password\" size=\"60\" autocomplete=\"off\" aria-label=\"token\"> "
                  "<button id=\"login\" type=\"submit\">Log in</button></form>");
  PageStyle style;
  return Page("InfraRSI: log in", body, style, "login");
}

std::string ErrorPage(int code, const std::string& message, const PageStyle& style) {
  return Page(absl::StrCat("InfraRSI: ", code),
              absl::StrCat("<h1>", code, "</h1><div class=\"error\" id=\"error\">", Escape(message),
                           "</div>"),
              style, "");
}

std::string SessionListPage(const v1::ListSessionsResponse& sessions, const PageStyle& style) {
  std::string body = absl::StrCat(
      "<h1>Sessions</h1><div class=\"filters\"><input id=\"sessions-filter\" type=\"search\" "
      "placeholder=\"filter\" aria-label=\"filter sessions\"><span id=\"sessions-count\" "
      "class=\"muted\"></span></div><table id=\"sessions\" class=\"sortable\"><thead><tr>"
      "<th>session</th><th>name</th><th>stage</th><th>workload</th><th>hardware</th>"
      "<th class=\"num\">baseline (s)</th><th class=\"num\">best speed-up</th><th>promoted</th>"
      "<th class=\"num\">trials</th><th class=\"num\">cost (s)</th><th>created</th></tr></thead><tbody>");
  for (const v1::SessionSummary& s : sessions.sessions()) {
    absl::StrAppend(
        &body, "<tr data-id=\"", Escape(s.session_id()), "\" data-status=\"", Escape(s.stage_name()),
        "\"><td><a href=\"/sessions/", Escape(s.session_id()), "\">", Escape(s.session_id()),
        "</a></td>", Td(s.name()), "<td>", StageBadge(s.stage_name()), "</td>",
        Td(absl::StrCat(s.workload().model(), ", batch ", s.workload().global_batch(), ", seq ",
                        s.workload().seq_len())),
        Td(absl::StrCat(s.hardware().count(), " x ", s.hardware().gpu())),
        TdNum(s.baseline_step_time_s() > 0 ? s.baseline_step_time_s() : kNone,
              s.baseline_step_time_s() > 0 ? Fmt("%.4g", s.baseline_step_time_s()) : "–"),
        TdNum(s.best_speedup() > 0 ? s.best_speedup() : kNone,
              s.best_speedup() > 0 ? Fmt(s.promoted() ? "%.3fx" : "%.3fx unverified", s.best_speedup()) : "–"),
        "<td>",
        s.promoted()                ? std::string("<span class=\"badge ok\">promoted</span>")
        : !s.not_promoted().empty() ? absl::StrCat("<span class=\"not-promoted\" title=\"", Escape(s.not_promoted()),
                                                   "\">nothing promoted</span>")
                                    : std::string("not yet"),
        "</td>",
        TdNum(s.trials_done(), absl::StrCat(s.trials_done(), " / ", s.trials_planned())),
        TdNum(s.cost_s(), Fmt("%.0f", s.cost_s())), Td(When(s.created_unix_ms())), "</tr>");
  }
  absl::StrAppend(&body, "</tbody></table>");
  if (sessions.sessions().empty()) absl::StrAppend(&body, "<p class=\"muted\">No session yet.</p>");
  if (!sessions.next_page_token().empty()) {
    absl::StrAppend(&body, "<p><a id=\"next-page\" href=\"/?page_token=", Escape(sessions.next_page_token()),
                    "\">older sessions</a></p>");
  }
  return Page("InfraRSI: sessions", body, style, "sessions");
}

std::string SessionContent(const v1::SessionReport& r, const v1::SessionSummary& s) {
  const bool live = StageIsLive(r.stage());
  const v1::Verification& v = r.verification();
  std::string out = absl::StrCat("<div id=\"content\" data-live=\"", live ? "1" : "0",
                                 "\" data-stage=\"", Escape(r.stage()), "\" data-src=\"/sessions/",
                                 Escape(r.session_id()), "/content\">");
  absl::StrAppend(&out, "<h1>", Escape(r.name()), " <span class=\"muted\">", Escape(r.session_id()),
                  "</span> ", StageBadge(r.stage()), "</h1>");
  absl::StrAppend(&out, "<p class=\"muted\">", Escape(r.workload().model()), ", global batch ",
                  r.workload().global_batch(), ", sequence ", r.workload().seq_len(), " on ",
                  r.hardware().count(), " x ", Escape(r.hardware().gpu()), "; search: ",
                  Escape(r.search().strategy()), ", priors ", Escape(r.search().priors()), "</p>");
  if (!s.notice().empty()) absl::StrAppend(&out, "<div class=\"notice\" id=\"notice\">", Escape(s.notice()), "</div>");
  if (!s.error().empty()) absl::StrAppend(&out, "<div class=\"error\" id=\"session-error\">", Escape(s.error()), "</div>");
  const bool promoted = v.promoted_rank() > 0;
  if (!s.not_promoted().empty()) {
    // The verdict before any figure: the fastest trial below is no result.
    absl::StrAppend(&out, "<div class=\"notice\" id=\"not-promoted\">Nothing promoted: ",
                    Escape(s.not_promoted()), "</div>");
  }
  absl::StrAppend(&out, "<dl class=\"figures\" id=\"summary\">");
  absl::StrAppend(&out, Figure("fig-stage", "stage", Escape(r.stage()), r.stage()));
  absl::StrAppend(&out, Figure("fig-baseline", "baseline step time",
                               Escape(Seconds(r.baseline().step_time_s())), Exact(r.baseline().step_time_s())));
  absl::StrAppend(&out, Figure("fig-best-step", promoted ? "promoted step time" : "fastest trial (unverified)",
                               Escape(Seconds(r.best().step_time_s())), Exact(r.best().step_time_s())));
  absl::StrAppend(&out, Figure("fig-speedup", promoted ? "speed-up (verified A/B)" : "speed-up (unverified)",
                               Escape(r.best().speedup() > 0 ? Fmt("%.3fx", r.best().speedup()) : "–"),
                               Exact(r.best().speedup())));
  absl::StrAppend(&out, Figure("fig-promoted", "promoted",
                               promoted ? absl::StrCat("<span class=\"badge ok\">c", v.promoted_rank(), "</span>")
                                        : "no",
                               promoted ? "1" : "0"));
  absl::StrAppend(&out, Figure("fig-trials", "search trials",
                               absl::StrCat(s.trials_done(), " / ", s.trials_planned()),
                               absl::StrCat(s.trials_done())));
  absl::StrAppend(&out, Figure("fig-noise-floor", "noise floor",
                               Escape(r.doctor().noise_floor() > 0 ? Fmt("%.2f%%", 100 * r.doctor().noise_floor()) : "–"),
                               Exact(r.doctor().noise_floor())));
  absl::StrAppend(&out, Figure("fig-cost", "cost (wall s on agents)", Escape(Seconds(r.total_cost_s())),
                               Exact(r.total_cost_s())));
  absl::StrAppend(&out, Figure("fig-failed-cost", "of it failed trials",
                               Escape(Seconds(r.failed_trials().cost_s())), Exact(r.failed_trials().cost_s())));
  if (!r.applied_commit().empty()) {
    absl::StrAppend(&out, Figure("fig-commit", "applied commit", Escape(r.applied_commit().substr(0, 12)),
                                 r.applied_commit()));
  }
  absl::StrAppend(&out, "</dl>");
  if (!r.best().config().empty()) {
    absl::StrAppend(&out, "<p>", promoted ? "Promoted setting" : "Fastest setting (not promoted)",
                    ": <code id=\"best-config\">", Escape(ConfigText(r.best().config())), "</code></p>");
  }
  if (!v.summary().empty()) absl::StrAppend(&out, "<p id=\"verdict\">", Escape(v.summary()), "</p>");
  absl::StrAppend(&out, "<h2>Search</h2><div class=\"charts\">", HistoryChart(r), MemoryChart(r), "</div>");
  if (!r.search().stop_reason().empty()) {
    absl::StrAppend(&out, "<p class=\"muted\">Stopped: ", Escape(r.search().stop_reason()), "</p>");
  }
  absl::StrAppend(&out, "<h2>Knob effects</h2><div class=\"charts\">", KnobCharts(r), "</div>");
  absl::StrAppend(&out, "<h2>Doctor and verification</h2><div class=\"charts\">", DoctorChart(r),
                  VerifyChart(r), "</div>");
  const v1::DoctorReport& d = r.doctor();
  if (d.runs() > 0) {
    absl::StrAppend(&out, "<p class=\"muted\">Doctor: ", d.runs(), " runs, median ",
                    Escape(Seconds(d.median_step_time_s())), ", cv ", Fmt("%.2f%%", 100 * d.cv()),
                    ", drift ", Fmt("%+.2f%%", 100 * d.drift()), ", clock ", Escape(d.clock()),
                    d.warning().empty() ? "" : absl::StrCat("; ", Escape(d.warning())), "</p>");
    if (!d.phases_s().empty()) {
      absl::StrAppend(&out, "<table id=\"phases\"><thead><tr><th>phase</th><th class=\"num\">s per step</th></tr></thead><tbody>");
      std::map<std::string, double> phases(d.phases_s().begin(), d.phases_s().end());
      for (const auto& [phase, sec] : phases) {
        absl::StrAppend(&out, "<tr>", Td(phase), TdNum(sec, Fmt("%.4g", sec)), "</tr>");
      }
      absl::StrAppend(&out, "</tbody></table>");
    }
  }
  absl::StrAppend(&out, "<h2>What failures cost</h2><div class=\"charts\">", FailureCharts(r), "</div>");
  absl::StrAppend(&out, ContractSection(r));
  absl::StrAppend(&out, TrialTable(r));
  absl::StrAppend(&out, "</div>");
  return out;
}

std::string SessionPage(const v1::SessionReport& report, const v1::SessionSummary& summary,
                        const PageStyle& style) {
  std::string body = SessionContent(report, summary);
  if (style.standalone) {
    // A file: nothing to poll.
    const std::string live = "data-live=\"1\"";
    if (const size_t at = body.find(live); at != std::string::npos) body.replace(at, live.size(), "data-live=\"0\"");
    if (const size_t at = body.find(" data-src=\""); at != std::string::npos) {
      body.erase(at, body.find('"', at + 11) + 1 - at);
    }
    absl::StrAppend(&body, "<p class=\"muted\" id=\"generated\">Written by infrarsi report --html; "
                           "stage ", Escape(report.stage()), " when written.</p>");
  } else {
    body = absl::StrCat("<p class=\"muted\"><span id=\"live-status\">",
                        StageIsLive(report.stage()) ? "live: updates every 2 s" : "finished",
                        "</span> · <a href=\"/sessions/", Escape(report.session_id()),
                        "/report.json\">report as JSON</a></p>", body);
  }
  return Page(absl::StrCat("InfraRSI: ", report.name(), " (", report.session_id(), ")"), body,
              style, "sessions");
}

std::string AgentsPage(const v1::ListAgentsResponse& agents, int64_t now_ms, const PageStyle& style) {
  std::string body =
      "<h1>Agents</h1><table id=\"agents\" class=\"sortable\"><thead><tr><th>agent</th><th>host</th>"
      "<th>GPUs</th><th>executors</th><th>team</th><th>state</th><th>live</th>"
      "<th class=\"num\">last seen (s ago)</th><th class=\"num\">ok</th><th class=\"num\">failed</th>"
      "<th class=\"num\">other</th></tr></thead><tbody>";
  for (const v1::AgentInfo& a : agents.agents()) {
    const double ago = a.last_seen_unix_ms() > 0 ? static_cast<double>(now_ms - a.last_seen_unix_ms()) / 1000 : kNone;
    absl::StrAppend(
        &body, "<tr data-id=\"", Escape(a.agent_id()), "\" data-status=\"", Escape(a.state()), "\">",
        Td(a.agent_id()), Td(a.host()), Td(absl::StrCat(a.gpu_count(), " x ", a.gpu_model())),
        Td(absl::StrJoin(a.executors(), ", ")), Td(a.team().empty() ? "shared" : a.team()),
        Td(a.state_reason().empty() ? a.state() : absl::StrCat(a.state(), ": ", a.state_reason())),
        "<td>", a.live() ? "<span class=\"badge ok\">live</span>" : "<span class=\"badge bad\">silent</span>",
        "</td>", TdNum(ago, Fmt("%.0f", ago)), TdNum(a.trials_ok(), absl::StrCat(a.trials_ok())),
        TdNum(a.trials_failed(), absl::StrCat(a.trials_failed())),
        TdNum(a.trials_other(), absl::StrCat(a.trials_other())), "</tr>");
  }
  absl::StrAppend(&body, "</tbody></table>");
  if (agents.agents().empty()) absl::StrAppend(&body, "<p class=\"muted\">No agent registered.</p>");
  return Page("InfraRSI: agents", body, style, "agents");
}

std::string BankPage(const v1::QueryExperienceResponse& entries, const v1::QueryExperienceRequest& q,
                     const PageStyle& style) {
  auto input = [](const char* name, const std::string& value, const char* placeholder) {
    return absl::StrCat("<input name=\"", name, "\" value=\"", Escape(value), "\" placeholder=\"",
                        placeholder, "\" aria-label=\"", name, "\">");
  };
  auto select = [](const char* name, const std::string& value, std::vector<std::string> options) {
    std::string out = absl::StrCat("<select name=\"", name, "\" aria-label=\"", name, "\">");
    for (const std::string& o : options) {
      absl::StrAppend(&out, "<option value=\"", Escape(o), "\"", o == value ? " selected" : "", ">",
                      o.empty() ? "any" : Escape(o), "</option>");
    }
    return absl::StrCat(out, "</select>");
  };
  std::string body = absl::StrCat(
      "<h1>Experience bank</h1><form class=\"filters\" method=\"get\" action=\"/bank\">",
      input("workload", q.workload_signature(), "workload signature"), input("gpu", q.gpu_model(), "GPU"),
      select("status", q.status(), {"", "ok", "oom", "failed", "timeout", "violation", "cancelled"}),
      select("purpose", q.purpose(), {"", "doctor", "search", "verify"}),
      select("order", q.order(), {"newest", "oldest", "fastest"}),
      "<button type=\"submit\">query</button></form>",
      "<table id=\"bank\" class=\"sortable\"><thead><tr><th class=\"num\">entry</th><th>session</th>"
      "<th class=\"num\">trial</th><th>workload</th><th>GPUs</th><th>purpose</th><th>status</th>"
      "<th class=\"num\">step time (s)</th><th class=\"num\">peak (GiB)</th><th class=\"num\">cost (s)</th>"
      "<th>setting</th><th>recorded</th></tr></thead><tbody>");
  for (const v1::ExperienceEntry& e : entries.entries()) {
    absl::StrAppend(
        &body, "<tr data-id=\"", e.id(), "\" data-status=\"", Escape(e.status()), "\">",
        TdNum(e.id(), absl::StrCat(e.id())), "<td><a href=\"/sessions/", Escape(e.session_id()), "\">",
        Escape(e.session_id()), "</a></td>", TdNum(e.trial_id(), absl::StrCat(e.trial_id())),
        Td(e.workload_signature()), Td(absl::StrCat(e.gpu_count(), " x ", e.gpu_model())),
        Td(e.purpose()), Td(e.status()),
        TdNum(e.step_time_s() > 0 ? e.step_time_s() : kNone, e.step_time_s() > 0 ? Fmt("%.5g", e.step_time_s()) : "–"),
        TdNum(e.peak_mem_gib() > 0 ? e.peak_mem_gib() : kNone, e.peak_mem_gib() > 0 ? Fmt("%.1f", e.peak_mem_gib()) : "–"),
        TdNum(e.cost_s(), Fmt("%.1f", e.cost_s())), Td(ConfigText(e.config()), "cfg"),
        Td(When(e.created_unix_ms())), "</tr>");
  }
  absl::StrAppend(&body, "</tbody></table>");
  if (entries.entries().empty()) absl::StrAppend(&body, "<p class=\"muted\">No entry matches.</p>");
  if (!entries.next_page_token().empty()) {
    // The same filters, the next page.
    std::string href = "/bank?";
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"workload", q.workload_signature()}, {"gpu", q.gpu_model()}, {"status", q.status()},
             {"purpose", q.purpose()}, {"order", q.order()}, {"page_token", entries.next_page_token()}}) {
      if (v.empty()) continue;
      std::string enc;
      for (unsigned char c : v) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') enc.push_back(static_cast<char>(c));
        else {
          char hex[4];
          std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned>(c));
          enc += hex;
        }
      }
      absl::StrAppend(&href, k, "=", enc, "&");
    }
    href.pop_back();
    absl::StrAppend(&body, "<p><a id=\"next-page\" href=\"", Escape(href), "\">more</a></p>");
  }
  return Page("InfraRSI: bank", body, style, "bank");
}

}  // namespace infrarsi::web
