// The dashboard in a real browser: headless Chromium (Debian's, through
// ChromeDriver) against infrarsi-server with tokens, real replay agents and
// the CLI. It logs in through the form, reads a finished session's page and
// checks every drawn figure against `infrarsi report --json`, sorts and
// filters the trial table by clicking and typing, follows a running session
// until it finishes without reloading, opens the agents and bank pages and
// the file `report --html` wrote (offline), and saves screenshots of each
// into $INFRARSI_SCREENSHOT_DIR (default: build/screenshots).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "tests/integration/end_to_end_fixture.h"
#include "tests/testing/webdriver.h"

namespace infrarsi {
namespace {

using google::protobuf::Value;

double Num(const Value& v) {
  if (v.has_number_value()) return v.number_value();
  double d = std::nan("");
  if (v.has_string_value() && !absl::SimpleAtod(v.string_value(), &d)) return std::nan("");
  return d;
}
const Value& Field(const Value& v, const std::string& name) {
  static const Value kNull;
  const auto& f = v.struct_value().fields();
  auto it = f.find(name);
  return it == f.end() ? kNull : it->second;
}

class DashboardBrowserTest : public EndToEndTest {
 protected:
  void SetUp() override {
    EndToEndTest::SetUp();
    if (const std::string missing = testing::Browser::MissingBinaries(); !missing.empty()) {
      GTEST_SKIP() << "Chromium is not installed here (" << missing
                   << "); deploy/install_deps.sh --tests installs chromium and chromium-driver";
    }
    const char* env = std::getenv("INFRARSI_SCREENSHOT_DIR");
    shots_ = env != nullptr && *env ? env : INFRARSI_SCREENSHOT_DIR;
    e2e_fs::create_directories(shots_);
    auto b = testing::Browser::Start(dir_, 1400, 2400);
    ASSERT_TRUE(b.ok()) << b.status();
    browser_ = std::move(*b);
  }
  void TearDown() override {
    browser_.reset();
    EndToEndTest::TearDown();
  }
  Value Js(const std::string& script, const std::vector<std::string>& args = {}) {
    auto v = browser_->Execute(script, args);
    EXPECT_TRUE(v.ok()) << v.status() << "\nin: " << script;
    return v.ok() ? *v : Value();
  }
  void Shot(const std::string& name) {
    auto png = browser_->Screenshot();
    ASSERT_TRUE(png.ok()) << png.status();
    const std::string path = shots_ + "/" + name + ".png";
    std::ofstream(path, std::ios::binary) << *png;
    std::cout << "screenshot: " << path << "\n";
  }
  v1::SessionReport ReportJson(const std::string& token_file, const std::string& id) {
    std::string out, err;
    EXPECT_EQ(Cli({"--token-file", token_file, "report", id, "--json"}, &out, &err), 0) << err;
    v1::SessionReport r;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(out, &r).ok()) << out.substr(0, 300);
    return r;
  }
  // What the page drew, read back from the DOM.
  Value Drawn() {
    return Js(R"JS(
      const q = (s) => Array.from(document.querySelectorAll(s));
      const fig = (id) => { const e = document.getElementById(id); return e ? e.dataset.value : null; };
      const box = (id) => { const e = document.getElementById(id); return e ? e.getBoundingClientRect().width : 0; };
      const rows = (id) => q('#' + id + ' g.row').map(g => ({label: g.dataset.label, value: g.dataset.value,
                                                              low: g.dataset.low, high: g.dataset.high}));
      const charts = {};
      q('svg.chart').forEach(s => charts[s.id] = box(s.id));
      return {
        stage: fig('fig-stage'), baseline: fig('fig-baseline'), best: fig('fig-best-step'),
        speedup: fig('fig-speedup'), promoted: fig('fig-promoted'), cost: fig('fig-cost'),
        floor: fig('fig-noise-floor'), charts: charts,
        trials: q('#trials tbody tr').map(r => ({id: r.dataset.id, step: r.dataset.step, status: r.dataset.status})),
        history: q('#chart-history .mark:not(.band)').map(m => ({trial: m.dataset.trial, x: m.dataset.x, y: m.dataset.y})),
        best_line: (q('#chart-history path.s-best')[0] || {dataset: {}}).dataset.minY,
        doctor_floor: (q('#chart-doctor g.ref text').map(t => t.textContent).filter(t => t.includes('floor'))[0] || ''),
        overlaps: (() => {
          // Every pair of text boxes in a chart that overprint each other.
          const out = [];
          q('svg.chart').forEach(s => {
            const ts = Array.from(s.querySelectorAll('text')).filter(t => t.textContent.trim() !== '')
                .map(t => ({t: t.textContent, b: t.getBoundingClientRect()})).filter(x => x.b.width > 0);
            for (let i = 0; i < ts.length; ++i) for (let j = i + 1; j < ts.length; ++j) {
              const a = ts[i].b, b = ts[j].b;
              const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
              const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
              if (w > 1 && h > 1) out.push(s.id + ': "' + ts[i].t + '" over "' + ts[j].t + '"');
            }
          });
          return out;
        })(),
        failed: q('#chart-history .mark.band').filter(m => m.dataset.class).length,
        measured: q('#chart-memory .mark.s-measured').length,
        predicted: q('#chart-memory .mark.s-predicted').length,
        capacity: (q('#chart-memory g.ref')[0] || {dataset: {}}).dataset.at,
        knobs: rows('chart-knob-time'), verify: rows('chart-verify'), fails: rows('chart-fail-class'),
        checks: q('#checks tbody tr').length,
        live: document.getElementById('content').dataset.live,
      };)JS");
  }
  // Every figure the page drew equals the report's.
  void ExpectMatches(const Value& d, const v1::SessionReport& r) {
    EXPECT_EQ(Field(d, "stage").string_value(), r.stage());
    EXPECT_DOUBLE_EQ(Num(Field(d, "baseline")), r.baseline().step_time_s());
    EXPECT_DOUBLE_EQ(Num(Field(d, "best")), r.best().step_time_s());
    EXPECT_DOUBLE_EQ(Num(Field(d, "speedup")), r.best().speedup());
    EXPECT_EQ(Field(d, "promoted").string_value(), r.verification().promoted_rank() > 0 ? "1" : "0");
    EXPECT_DOUBLE_EQ(Num(Field(d, "cost")), r.total_cost_s());
    EXPECT_DOUBLE_EQ(Num(Field(d, "floor")), r.doctor().noise_floor());
    for (const char* id : {"chart-history", "chart-memory", "chart-knob-time", "chart-knob-mem",
                           "chart-doctor", "chart-verify", "chart-fail-class", "chart-fail-knob",
                           "chart-fail-patch"}) {
      EXPECT_GT(Num(Field(Field(d, "charts"), id)), 100) << id << " is not drawn";
    }
    const auto& rows = Field(d, "trials").list_value().values();
    ASSERT_EQ(rows.size(), static_cast<size_t>(r.trials_size()));
    std::map<std::string, double> step;
    int ok = 0, failed = 0, measured = 0, predicted = 0;
    for (int i = 0; i < r.trials_size(); ++i) {
      const v1::TrialView& t = r.trials(i);
      EXPECT_EQ(Field(rows[i], "id").string_value(), std::to_string(t.id()));
      EXPECT_EQ(Field(rows[i], "status").string_value(), t.status());
      EXPECT_DOUBLE_EQ(Num(Field(rows[i], "step")), t.step_time_s()) << "trial " << t.id();
      step[std::to_string(t.id())] = t.step_time_s();
      const bool ran = t.status() == "ok" && t.step_time_s() > 0;
      ok += ran;
      failed += !t.failure_class().empty();
      measured += ran && t.peak_mem_gib() > 0;
      predicted += ran && t.peak_mem_gib() > 0 && t.predicted_peak_mem_gib() > 0;
    }
    const auto& history = Field(d, "history").list_value().values();
    EXPECT_EQ(static_cast<int>(history.size()), ok);
    for (const Value& m : history) {
      EXPECT_DOUBLE_EQ(Num(Field(m, "y")), step[Field(m, "trial").string_value()]);
      // One numbering: the chart's x is the table's trial id.
      EXPECT_EQ(Num(Field(m, "x")), Num(Field(m, "trial")));
    }
    // Best so far is over the search's trials: never below the fastest one
    // (a doctor run is the baseline, not a find).
    double fastest_search = 0;
    for (const auto& t : r.trials()) {
      if (t.purpose() == "search" && t.status() == "ok" && t.step_time_s() > 0 &&
          (fastest_search == 0 || t.step_time_s() < fastest_search)) {
        fastest_search = t.step_time_s();
      }
    }
    if (fastest_search > 0) {
      EXPECT_DOUBLE_EQ(Num(Field(d, "best_line")), fastest_search);
    }
    // The floor labelled as the card states it.
    if (r.doctor().noise_floor() > 0) {
      EXPECT_EQ(Field(d, "doctor_floor").string_value(),
                absl::StrFormat("noise floor %.2f%%", 100 * r.doctor().noise_floor()));
    }
    for (const Value& o : Field(d, "overlaps").list_value().values()) {
      ADD_FAILURE() << "labels overprint: " << o.string_value();
    }
    EXPECT_EQ(Num(Field(d, "failed")), failed);
    EXPECT_EQ(Num(Field(d, "measured")), measured);
    EXPECT_EQ(Num(Field(d, "predicted")), predicted);
    if (r.search().capacity_gib() > 0 && measured > 0) {
      EXPECT_DOUBLE_EQ(Num(Field(d, "capacity")), r.search().capacity_gib());
    }
    const auto& knobs = Field(d, "knobs").list_value().values();
    ASSERT_EQ(knobs.size(), static_cast<size_t>(r.search().knob_effects_size()));
    for (int i = 0; i < r.search().knob_effects_size(); ++i) {
      const v1::KnobEffect& k = r.search().knob_effects(i);
      EXPECT_EQ(Field(knobs[i], "label").string_value(), k.knob() + "=" + k.value());
      if (!k.time_avg().known() || k.trials() == 0) continue;
      EXPECT_DOUBLE_EQ(Num(Field(knobs[i], "value")), k.time_avg().pct());
      EXPECT_DOUBLE_EQ(Num(Field(knobs[i], "low")), k.time_avg().low());
      EXPECT_DOUBLE_EQ(Num(Field(knobs[i], "high")), k.time_avg().high());
    }
    const auto& verify = Field(d, "verify").list_value().values();
    ASSERT_EQ(verify.size(), static_cast<size_t>(r.verification().candidates_size()));
    for (int i = 0; i < r.verification().candidates_size(); ++i) {
      const auto& c = r.verification().candidates(i);
      EXPECT_DOUBLE_EQ(Num(Field(verify[i], "value")), c.speedup());
      if (c.runs() > 0) {
        EXPECT_DOUBLE_EQ(Num(Field(verify[i], "low")), c.ci_low());
        EXPECT_DOUBLE_EQ(Num(Field(verify[i], "high")), c.ci_high());
      }
    }
    std::vector<double> class_costs;
    for (const auto& f : r.failure_costs()) {
      if (f.knob().empty()) class_costs.push_back(f.gpu_s());
    }
    const auto& fails = Field(d, "fails").list_value().values();
    ASSERT_EQ(fails.size(), class_costs.size());
    for (int i = 0; i < fails.size(); ++i) EXPECT_DOUBLE_EQ(Num(Field(fails[i], "value")), class_costs[i]);
    EXPECT_EQ(Num(Field(d, "checks")), r.integrity_size());
  }

  std::string shots_;
  std::unique_ptr<testing::Browser> browser_;
};

TEST_F(DashboardBrowserTest, LoginFinishedAndRunningSessionsAgentsBankAndTheOfflineReport) {
  const std::string db = dir_ + "/infrarsi.db";
  const std::string admin = ServerTokenCommand(db, {"create", "--role", "admin", "--name", "ops"});
  const std::string agent_tok = ServerTokenCommand(db, {"create", "--role", "agent", "--name", "pool"});
  const std::string team = ServerTokenCommand(db, {"create", "--role", "submitter", "--team", "llm"});
  StartServer();
  StartAgent("replay", "H200", 1, {"--token-file", TokenFile(agent_tok)});
  StartAgent("replay", "H200", 1, {"--token-file", TokenFile(agent_tok)});
  const std::string tf = TokenFile(team);
  const std::string spec = H200Spec(/*max_trials=*/24, /*doctor=*/3, /*candidates=*/2, /*runs=*/3);
  std::string out, err;
  ASSERT_EQ(Cli({"--token-file", tf, "session", "create", spec}, &out, &err), 0) << err;
  const std::string done(absl::StripAsciiWhitespace(out));
  ASSERT_EQ(Cli({"--token-file", tf, "doctor", done}, &out, &err), 0) << err;
  ASSERT_EQ(Cli({"--token-file", tf, "run", done}, &out, &err), 0) << err;

  // Logging in through the form: the browser is sent there, types the
  // token, and lands on the sessions it may see.
  ASSERT_TRUE(browser_->Navigate(dashboard_).ok());
  EXPECT_EQ(Js("return location.pathname;").string_value(), "/login");
  ASSERT_TRUE(browser_->Type("#token", "irt_wrong").ok());
  ASSERT_TRUE(browser_->ClickAndLoad("#login").ok());
  EXPECT_NE(Js("return document.getElementById('login-error').textContent;").string_value().find("token"),
            std::string::npos) << "a wrong token is refused saying why";
  ASSERT_TRUE(browser_->Type("#token", team).ok());
  ASSERT_TRUE(browser_->ClickAndLoad("#login").ok());
  EXPECT_EQ(Js("return location.pathname;").string_value(), "/");
  EXPECT_EQ(Js("return document.cookie;").string_value(), "") << "the token cookie must be HttpOnly";

  // The finished session: every figure as the report has it.
  const v1::SessionReport report = ReportJson(tf, done);
  ASSERT_EQ(report.stage(), "searched");
  const Value row = Js("const r = document.querySelector('#sessions tr[data-id=\"' + arguments[0] + '\"]');"
                       "return r ? Array.from(r.cells).map(c => c.dataset.sort || c.textContent) : null;",
                       {testing::JsonString(done)});
  ASSERT_TRUE(row.has_list_value()) << "the session list lacks " << done;
  EXPECT_DOUBLE_EQ(Num(row.list_value().values(9)), report.total_cost_s()) << "the list's cost";
  Shot("dashboard-sessions");
  ASSERT_TRUE(browser_->ClickAndLoad(absl::StrCat("a[href=\"/sessions/", done, "\"]")).ok());
  const Value drawn = Drawn();
  ExpectMatches(drawn, report);
  EXPECT_EQ(Field(drawn, "live").string_value(), "0");
  Shot("dashboard-session-finished");

  // The table sorts by a click and filters as one types.
  ASSERT_TRUE(browser_->Click("#trials th:nth-child(5)").ok());  // step time
  const Value sorted = Js("return Array.from(document.querySelectorAll('#trials tbody tr'))"
                          ".map(r => parseFloat(r.cells[4].dataset.sort)).filter(x => !isNaN(x));");
  ASSERT_GT(sorted.list_value().values_size(), 3);
  for (int i = 1; i < sorted.list_value().values_size(); ++i) {
    EXPECT_LE(sorted.list_value().values(i - 1).number_value(), sorted.list_value().values(i).number_value());
  }
  ASSERT_TRUE(browser_->Type("#trials-filter", "micro_batch=16").ok());
  const Value shown = Js("return Array.from(document.querySelectorAll('#trials tbody tr'))"
                         ".filter(r => r.style.display !== 'none').map(r => r.textContent);");
  ASSERT_GT(shown.list_value().values_size(), 0);
  int with = 0;
  for (const auto& t : report.trials()) with += t.config().at("micro_batch") == "16";
  EXPECT_EQ(shown.list_value().values_size(), with);
  for (const Value& t : shown.list_value().values()) {
    EXPECT_NE(t.string_value().find("micro_batch=16"), std::string::npos);
  }

  // A running session: its agents are drained, so its search waits.
  ASSERT_EQ(Cli({"--token-file", tf, "session", "create", spec}, &out, &err), 0) << err;
  const std::string live(absl::StripAsciiWhitespace(out));
  ASSERT_EQ(Cli({"--token-file", tf, "doctor", live}, &out, &err), 0) << err;
  const std::string admin_tf = TokenFile(admin);
  ASSERT_EQ(Cli({"--token-file", admin_tf, "agents", "--json"}, &out, &err), 0) << err;
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &agents).ok()) << out;
  ASSERT_EQ(agents.agents_size(), 2);
  for (const auto& a : agents.agents()) {
    ASSERT_EQ(Cli({"--token-file", admin_tf, "agents", "drain", a.agent_id()}, &out, &err), 0) << err;
  }
  ASSERT_NE(Cli({"--token-file", tf, "--wait-s", "0.2", "run", live}, &out, &err), 0)
      << "run cannot finish with every agent drained";
  ASSERT_TRUE(browser_->Navigate(dashboard_ + "sessions/" + live).ok());
  Value now = Drawn();
  EXPECT_EQ(Field(now, "stage").string_value(), "running");
  EXPECT_EQ(Field(now, "live").string_value(), "1");
  EXPECT_NE(Js("const n = document.getElementById('notice'); return n ? n.textContent : '';").string_value(),
            "") << "a waiting session says why";
  Js("window.__loadedOnce = true; return 0;");
  Shot("dashboard-session-running");
  // Work flows again: the page follows without a reload to the end.
  for (const auto& a : agents.agents()) {
    ASSERT_EQ(Cli({"--token-file", admin_tf, "agents", "resume", a.agent_id()}, &out, &err), 0) << err;
  }
  auto finished = browser_->ExecuteAsync(R"JS(
      const done = arguments[arguments.length - 1];
      const check = () => {
        const c = document.getElementById('content');
        if (c && c.dataset.live === '0') { done(c.dataset.stage); return true; }
        return false;
      };
      if (!check()) new MutationObserver((_, obs) => { if (check()) obs.disconnect(); })
          .observe(document.body, {childList: true, subtree: true});)JS",
                                          240000);
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_EQ(finished->string_value(), "searched");
  EXPECT_TRUE(Js("return window.__loadedOnce === true;").bool_value()) << "the page was reloaded";
  ExpectMatches(Drawn(), ReportJson(tf, live));

  // Agents and the bank, as the admin (a new login).
  ASSERT_TRUE(browser_->ClickAndLoad("nav button").ok());  // log out
  EXPECT_EQ(Js("return location.pathname;").string_value(), "/login");
  ASSERT_TRUE(browser_->Type("#token", admin).ok());
  ASSERT_TRUE(browser_->ClickAndLoad("#login").ok());
  ASSERT_TRUE(browser_->Navigate(dashboard_ + "agents").ok());
  EXPECT_EQ(Js("return document.querySelectorAll('#agents tbody tr').length;").number_value(), 2);
  Shot("dashboard-agents");
  ASSERT_TRUE(browser_->Navigate(dashboard_ + "bank?status=ok&order=fastest").ok());
  const Value bank = Js("return Array.from(document.querySelectorAll('#bank tbody tr'))"
                        ".map(r => [r.dataset.status, parseFloat(r.cells[7].dataset.sort)]);");
  ASSERT_GT(bank.list_value().values_size(), 10);
  for (int i = 0; i < bank.list_value().values_size(); ++i) {
    const auto& e = bank.list_value().values(i).list_value();
    EXPECT_EQ(e.values(0).string_value(), "ok");
    if (i > 0) {
      EXPECT_LE(bank.list_value().values(i - 1).list_value().values(1).number_value(),
                e.values(1).number_value());
    }
  }
  Shot("dashboard-bank");

  // The offline report: one file, the same figures, nothing loaded.
  const std::string html = dir_ + "/review.html";
  ASSERT_EQ(Cli({"--token-file", tf, "report", done, "--html", html}, &out, &err), 0) << err;
  EXPECT_EQ(out, "") << "--html alone writes the file, not the text report";
  ASSERT_TRUE(browser_->Navigate("file://" + html).ok());
  ExpectMatches(Drawn(), report);
  EXPECT_EQ(Js("return performance.getEntriesByType('resource').length;").number_value(), 0)
      << "the report file loaded something";
  Shot("report-html");
}

}  // namespace
}  // namespace infrarsi
