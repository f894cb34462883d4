// core/web: the charts' arithmetic and escaping, and the pages' contracts
// (every hook a test or script relies on, nothing fetched from elsewhere,
// nothing a spec or agent wrote reaching the page unescaped).
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/web/pages.h"
#include "core/web/svg.h"

namespace infrarsi::web {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SvgTest, EscapeCoversEveryCharacterThatEndsAnAttributeOrTag) {
  EXPECT_EQ(Escape("<a href=\"x\" b='y'>&</a>"),
            "&lt;a href=&quot;x&quot; b=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  EXPECT_EQ(Escape("plain text 1.5"), "plain text 1.5");
}

TEST(SvgTest, ExactRoundTripsAndNeverWritesNan) {
  EXPECT_EQ(Exact(std::nan("")), "");
  EXPECT_EQ(Exact(INFINITY), "");
  const double v = 0.1 + 0.2;
  EXPECT_EQ(std::stod(Exact(v)), v);
}

TEST(SvgTest, NiceTicksCoverTheRangeInRoundSteps) {
  EXPECT_EQ(NiceTicks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  const auto t = NiceTicks(0.27, 1.83, 5);
  ASSERT_GE(t.size(), 2u);
  EXPECT_LE(t.front(), 0.27);
  EXPECT_GE(t.back(), 1.83);
  EXPECT_NEAR(t[1] - t[0], 0.5, 1e-12);
  EXPECT_EQ(NiceTicks(5, 1, 4), NiceTicks(1, 5, 4)) << "reversed bounds";
  const auto flat = NiceTicks(3, 3);
  ASSERT_GE(flat.size(), 2u);
  EXPECT_LT(flat.front(), 3);
  EXPECT_GT(flat.back(), 3);
  EXPECT_TRUE(NiceTicks(std::nan(""), 1).empty());
  for (double x : NiceTicks(-1, 1, 4)) EXPECT_NE(TickLabel(x), "-0");
  EXPECT_EQ(TickLabel(25000), "25k");
  EXPECT_EQ(TickLabel(0.25), "0.25");
  // Close ticks keep reading differently.
  EXPECT_EQ(TickLabels({1.1135, 1.114, 1.1145}), (std::vector<std::string>{"1.1135", "1.1140", "1.1145"}));
  EXPECT_EQ(TickLabels({0, 0.5, 1}), (std::vector<std::string>{"0", "0.5", "1"}));
}

TEST(SvgTest, XyChartDrawsFiniteMarksOnlyAndEscapesWhatItWasGiven) {
  XyChart c;
  c.id = "chart-x";
  c.title = "t <b>";
  Series s{"pts", "pts", "#123", Shape::kDot, {}};
  s.marks = {Mark{1, 2, "<script>alert(1)</script>", {{"trial", "7"}, {"Bad Name", "x"}}},
             Mark{2, std::nan(""), "", {}}, Mark{3, 4, "", {}}};
  Series fail{"OOM", "oom", "#f00", Shape::kCross, {}};
  fail.marks = {Mark{2.5, kNone, "oom", {}}};
  c.series = {s};
  c.top_band = {fail};
  c.refs = {RefLine{false, 3, "baseline \"x\"", "#555"}};
  const std::string svg = c.Render();
  EXPECT_EQ(Count(svg, "class=\"mark s-pts\""), 2) << "the NaN mark is skipped";
  EXPECT_EQ(Count(svg, "class=\"mark band s-oom\""), 1);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_NE(svg.find("data-trial=\"7\""), std::string::npos);
  EXPECT_EQ(svg.find("Bad Name"), std::string::npos) << "a data name outside [a-z0-9-] is dropped";
  EXPECT_NE(svg.find("data-at=\"3\""), std::string::npos);
  // Positive data: no axis below zero.
  EXPECT_EQ(svg.find(">-"), std::string::npos) << svg;
  XyChart empty;
  empty.id = "chart-e";
  EXPECT_NE(empty.Render().find("no data yet"), std::string::npos);
}

TEST(SvgTest, IntervalAndBarChartsCarryTheirFigures) {
  IntervalChart c;
  c.id = "chart-i";
  c.marker_names = {"prior"};
  c.rows = {IntervalRow{"mbs=4", -12.5, -20, -5, {1, 2}, {-10}, "tip", "", {}},
            IntervalRow{"unknown", kNone, kNone, kNone, {}, {}, "", "", {}}};
  const std::string svg = c.Render();
  EXPECT_NE(svg.find("data-label=\"mbs=4\" data-value=\"-12.5\" data-low=\"-20\" data-high=\"-5\""),
            std::string::npos) << svg;
  EXPECT_NE(svg.find("data-marker=\"prior\" data-x=\"-10\""), std::string::npos);
  EXPECT_EQ(Count(svg, "class=\"dot\""), 2);
  EXPECT_EQ(Count(svg, "class=\"estimate\""), 1) << "the unknown row has no estimate";
  IntervalChart none;
  none.id = "chart-n";
  none.rows = {IntervalRow{"x", kNone, kNone, kNone, {}, {}, "", "", {}}};
  EXPECT_NE(none.Render().find("no data yet"), std::string::npos);
  BarChart b;
  b.id = "chart-b";
  b.rows = {BarRow{"oom", 120, "", {}}, BarRow{"crash", 30, "", {}}};
  const std::string bars = b.Render();
  EXPECT_EQ(Count(bars, "class=\"bar\""), 2);
  EXPECT_NE(bars.find("data-label=\"oom\" data-value=\"120\""), std::string::npos);
}

// A finished session with every section filled.
v1::SessionReport Finished() {
  v1::SessionReport r;
  r.set_session_id("ses-abc");
  r.set_name("<script>alert('x')</script>");
  r.set_stage("searched");
  r.mutable_workload()->set_model("gpt");
  r.mutable_hardware()->set_gpu("H200");
  r.mutable_hardware()->set_count(8);
  r.mutable_baseline()->set_step_time_s(1.0);
  r.mutable_best()->set_step_time_s(0.5);
  r.mutable_best()->set_speedup(2.0);
  (*r.mutable_best()->mutable_config())["mbs"] = "4";
  r.set_total_cost_s(123.5);
  auto add = [&](int id, const std::string& purpose, const std::string& status, double t, double mem,
                 double pred, const std::string& cls) {
    v1::TrialView* v = r.add_trials();
    v->set_id(id);
    v->set_purpose(purpose);
    v->set_status(status);
    v->set_step_time_s(t);
    v->set_peak_mem_gib(mem);
    v->set_predicted_peak_mem_gib(pred);
    v->set_failure_class(cls);
    v->set_agent("agent-1");
    (*v->mutable_config())["mbs"] = std::to_string(id);
  };
  add(1, "doctor", "ok", 1.0, 40, 41, "");
  add(2, "doctor", "ok", 1.01, 40, 41, "");
  add(3, "search", "ok", 0.5, 60, 58, "");
  add(4, "search", "oom", 0, 0, 150, "oom");
  add(5, "search", "violation", 0.1, 30, 31, "violation:tokens_per_step");
  add(6, "verify", "ok", 0.51, 60, 58, "");
  r.mutable_search()->set_capacity_gib(141);
  v1::KnobEffect* k = r.mutable_search()->add_knob_effects();
  k->set_knob("mbs");
  k->set_value("4");
  k->set_trials(2);
  k->mutable_time_avg()->set_known(true);
  k->mutable_time_avg()->set_pct(-30);
  k->mutable_time_avg()->set_low(-40);
  k->mutable_time_avg()->set_high(-20);
  k->mutable_mem_avg()->set_known(true);
  k->mutable_mem_avg()->set_pct(50);
  k->mutable_mem_avg()->set_low(40);
  k->mutable_mem_avg()->set_high(60);
  auto* doc = r.mutable_doctor();
  doc->set_runs(2);
  doc->set_median_step_time_s(1.005);
  doc->set_noise_floor(0.02);
  auto* a = doc->add_agents();
  a->set_agent("agent-1");
  a->set_runs(2);
  a->set_median_step_time_s(1.005);
  auto* v = r.mutable_verification();
  v->set_noise_floor(0.02);
  v->set_promoted_rank(1);
  auto* c = v->add_candidates();
  c->set_rank(1);
  c->set_trial_id(3);
  c->set_runs(3);
  c->set_speedup(1.96);
  c->set_ci_low(1.9);
  c->set_ci_high(2.02);
  c->set_cleared(true);
  auto* f = r.add_failure_costs();
  f->set_failure_class("oom");
  f->set_trials(1);
  f->set_gpu_s(80);
  auto* fk = r.add_failure_costs();
  fk->set_failure_class("oom");
  fk->set_knob("mbs");
  fk->set_value("8");
  fk->set_trials(1);
  fk->set_gpu_s(80);
  auto* fp = r.add_failure_costs();
  fp->set_failure_class("violation:tokens_per_step");
  fp->set_knob("patch");
  fp->set_value("shrink-batch");
  fp->set_trials(1);
  fp->set_gpu_s(8);
  auto* ic = r.add_integrity();
  ic->set_name("agent clock");
  ic->set_ran(false);
  ic->set_detail("simulated");
  r.mutable_contract()->set_tokens_per_step(32768);
  auto* ok = r.add_llm_patches();
  ok->set_name("llm-fused");
  ok->set_accepted(true);
  ok->set_rationale("one kernel");
  ok->add_paths("model.py");
  auto* no = r.add_llm_patches();
  no->set_name("llm-<b>data</b>");
  no->set_reason("patches[llm-data]: data.py is protected");
  return r;
}

// Issue 32 item 15: before any search trial, every knob value was drawn at
// "no change" under "from the runs". A value no search trial ran with has
// no effect drawn, and a chart with none says it was not measured yet.
TEST(PagesTest, AKnobValueNoTrialRanWithIsNotDrawnAsNoChange) {
  v1::SessionReport r = Finished();
  r.set_stage("running");
  for (v1::KnobEffect& k : *r.mutable_search()->mutable_knob_effects()) k.set_trials(0);
  const std::string page = SessionPage(r, v1::SessionSummary(), PageStyle{false, "x"});
  EXPECT_EQ(page.find("data-label=\"mbs=4\" data-value=\"-30\""), std::string::npos);
  EXPECT_NE(page.find("not measured yet: no search trial has finished"), std::string::npos);
}

TEST(PagesTest, ASessionPageHasEveryPlotFigureAndTrialAndEscapesTheSpec) {
  const v1::SessionReport r = Finished();
  v1::SessionSummary s;
  s.set_trials_done(3);
  s.set_trials_planned(10);
  const std::string page = SessionPage(r, s, PageStyle{false, "team a · reader"});
  for (const char* id : {"chart-history", "chart-memory", "chart-knob-time", "chart-knob-mem",
                         "chart-doctor", "chart-verify", "chart-fail-class", "chart-fail-knob",
                         "chart-fail-patch"}) {
    EXPECT_NE(page.find(absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"", id, "\"")),
              std::string::npos) << id;
  }
  EXPECT_EQ(page.find("<script>alert"), std::string::npos) << "the session's name reached the page raw";
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)"), std::string::npos);
  EXPECT_NE(page.find("id=\"fig-speedup\" data-value=\"2\""), std::string::npos);
  EXPECT_NE(page.find("id=\"fig-cost\" data-value=\"123.5\""), std::string::npos);
  EXPECT_NE(page.find("id=\"fig-promoted\" data-value=\"1\""), std::string::npos);
  EXPECT_EQ(Count(page, "<tr data-id="), 6);
  // The history: 4 ok trials drawn, 2 failures in the band by class, the
  // best so far; the memory plot: 3 measured ok trials with their 3
  // predictions, the OOM at its predicted peak, the capacity.
  EXPECT_EQ(Count(page, "class=\"mark s-doctor\"") + Count(page, "class=\"mark s-search\"") +
                Count(page, "class=\"mark s-verify\""), 4);
  EXPECT_EQ(Count(page, "class=\"mark band s-failed-oom\""), 1);
  EXPECT_EQ(Count(page, "class=\"mark band s-failed-violation\""), 1);
  EXPECT_NE(page.find("data-series=\"best\""), std::string::npos);
  EXPECT_EQ(Count(page, "class=\"mark s-measured\""), 4);
  EXPECT_EQ(Count(page, "class=\"mark s-predicted\""), 4);
  EXPECT_NE(page.find("class=\"mark band s-oom\" data-series=\"oom\" data-x=\"150\""), std::string::npos);
  EXPECT_NE(page.find("data-at=\"141\""), std::string::npos);
  EXPECT_NE(page.find("data-label=\"mbs=4\" data-value=\"-30\" data-low=\"-40\" data-high=\"-20\""),
            std::string::npos);
  EXPECT_NE(page.find("data-rank=\"1\" data-cleared=\"1\" data-promoted=\"1\""), std::string::npos);
  EXPECT_NE(page.find("data-at=\"1.02\""), std::string::npos) << "the 1 + floor line";
  EXPECT_NE(page.find("data-label=\"violation:tokens_per_step: shrink-batch\""), std::string::npos);
  // A finished session does not poll; the script comes from this server.
  EXPECT_NE(page.find("id=\"content\" data-live=\"0\""), std::string::npos);
  EXPECT_NE(page.find("<script src=\"/static/dashboard.js\"></script>"), std::string::npos);
  EXPECT_NE(page.find("team a · reader"), std::string::npos);
  // The LLM's proposals: the admitted one with its files, the refused one
  // with its reason, its name escaped.
  EXPECT_EQ(Count(page, "<tr data-accepted=\"1\">"), 1);
  EXPECT_EQ(Count(page, "<tr data-accepted=\"0\">"), 1);
  EXPECT_NE(page.find("data.py is protected"), std::string::npos);
  EXPECT_NE(page.find("llm-&lt;b&gt;data&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(page.find("<b>data</b>"), std::string::npos);
}

TEST(PagesTest, AStandaloneReportRefersToNothingOutsideItself) {
  v1::SessionReport r = Finished();
  r.set_stage("running");  // even a live session's file does not poll
  const std::string page = SessionPage(r, v1::SessionSummary(), PageStyle{true, ""});
  EXPECT_NE(page.find("id=\"content\" data-live=\"0\""), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("<nav>"), std::string::npos);
  EXPECT_NE(page.find("function sortTable"), std::string::npos) << "the script is inline";
  // No link or load to anywhere: the only URL is SVG's namespace name,
  // which is never fetched.
  std::regex url(R"((href|src|action)=\"[a-z]+:)");
  EXPECT_FALSE(std::regex_search(page, url));
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
}

TEST(PagesTest, LiveStagesListsAgentsAndTheBank) {
  EXPECT_TRUE(StageIsLive("running"));
  EXPECT_TRUE(StageIsLive("initialized"));
  EXPECT_FALSE(StageIsLive("searched"));
  EXPECT_FALSE(StageIsLive("cancelled"));
  v1::ListSessionsResponse l;
  auto* s = l.add_sessions();
  s->set_session_id("ses-1");
  s->set_name("n\"><img src=x onerror=alert(1)>");
  s->set_stage_name("running");
  s->set_best_speedup(1.5);
  s->set_promoted(true);
  s->set_cost_s(42);
  l.set_next_page_token("tok&x");
  const std::string list = SessionListPage(l, PageStyle{});
  EXPECT_EQ(list.find("<img"), std::string::npos);
  EXPECT_NE(list.find("href=\"/sessions/ses-1\""), std::string::npos);
  EXPECT_NE(list.find("1.500x"), std::string::npos);
  EXPECT_NE(list.find("href=\"/?page_token=tok&amp;x\""), std::string::npos);
  v1::ListAgentsResponse a;
  auto* ag = a.add_agents();
  ag->set_agent_id("agt-1");
  ag->set_host("<h1>");
  ag->set_live(true);
  ag->set_last_seen_unix_ms(1000);
  const std::string agents = AgentsPage(a, 6000, PageStyle{});
  EXPECT_EQ(agents.find("<h1>&lt;"), std::string::npos);
  EXPECT_NE(agents.find("&lt;h1&gt;"), std::string::npos);
  EXPECT_NE(agents.find("data-sort=\"5\""), std::string::npos) << "last seen 5 s ago";
  v1::QueryExperienceRequest q;
  q.set_status("ok");
  q.set_gpu_model("H 200");
  v1::QueryExperienceResponse e;
  e.add_entries()->set_session_id("ses-1");
  e.set_next_page_token("p2");
  const std::string bank = BankPage(e, q, PageStyle{});
  EXPECT_NE(bank.find("<option value=\"ok\" selected>"), std::string::npos);
  EXPECT_NE(bank.find("href=\"/bank?gpu=H%20200&amp;status=ok&amp;page_token=p2\""), std::string::npos) << bank;
}

}  // namespace
}  // namespace infrarsi::web
