// What an agent may report: every number checked, the field named, nothing
// half-accepted.
#include "core/agent_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace infrarsi {
namespace {

ReportLimits Limits() {
  ReportLimits l;
  l.max_peak_mem_gib = 80 * 1.1 + 1;
  l.max_steps = 40;
  l.agent_clock = true;
  l.max_wall_s = 100;
  return l;
}

v1::StepMetrics Step(int64_t step, bool warmup, double arrival) {
  v1::StepMetrics m;
  m.set_step(step);
  m.set_warmup(warmup);
  m.set_loss(5.0);
  m.set_tokens(4096);
  m.set_step_time_s(0.5);
  m.set_peak_mem_gib(10);
  m.set_arrival_s(arrival);
  m.set_arrival_error_s(0.001);
  return m;
}

google::protobuf::RepeatedPtrField<v1::StepMetrics> Steps(std::vector<v1::StepMetrics> v) {
  google::protobuf::RepeatedPtrField<v1::StepMetrics> out;
  for (auto& m : v) *out.Add() = std::move(m);
  return out;
}

TEST(AgentReportTest, EveryBadNumberIsRefusedNamingTheField) {
  struct Case {
    std::string field;
    std::function<void(v1::StepMetrics&)> edit;
  };
  const std::vector<Case> cases = {
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(std::nan("")); }},
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(-1); }},
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(0); }},
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(1e-300); }},
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(INFINITY); }},
      {"steps[1].step_time_s", [](v1::StepMetrics& m) { m.set_step_time_s(1e12); }},
      {"steps[1].loss", [](v1::StepMetrics& m) { m.set_loss(-1e300); }},
      {"steps[1].tokens", [](v1::StepMetrics& m) { m.set_tokens(-1); }},
      {"steps[1].peak_mem_gib", [](v1::StepMetrics& m) { m.set_peak_mem_gib(std::nan("")); }},
      {"steps[1].peak_mem_gib", [](v1::StepMetrics& m) { m.set_peak_mem_gib(200); }},
      {"steps[1].peak_mem_gib", [](v1::StepMetrics& m) { m.set_peak_mem_gib(-1); }},
      {"steps[1].phases.fwd", [](v1::StepMetrics& m) { (*m.mutable_phases())["fwd"] = -2; }},
      {"steps[1].optimizer_steps", [](v1::StepMetrics& m) { m.set_optimizer_steps(-1); }},
      {"steps[1].arrival_s", [](v1::StepMetrics& m) { m.set_arrival_s(0); }},
      {"steps[1].arrival_s", [](v1::StepMetrics& m) { m.set_arrival_s(0.5); }},  // before step 0's
      {"steps[1].arrival_error_s", [](v1::StepMetrics& m) { m.set_arrival_error_s(0); }},
      {"steps[1].arrival_error_s", [](v1::StepMetrics& m) { m.set_arrival_error_s(3); }},
      {"steps[1].step", [](v1::StepMetrics& m) { m.set_step(0); }},              // duplicate
      {"steps[1].step", [](v1::StepMetrics& m) { m.set_step(-3); }},
      {"steps[1].warmup", [](v1::StepMetrics& m) { m.set_step(1); }},  // see below
  };
  for (const Case& c : cases) {
    std::vector<v1::StepMetrics> v = {Step(0, true, 1.0), Step(1, false, 1.5), Step(2, false, 2.0)};
    c.edit(v[1]);
    if (c.field == "steps[1].warmup") {  // a warm-up line after a timed one
      v[1].set_warmup(false);
      v[2].set_warmup(true);
      auto got = ValidateSteps(7, Steps(v), {}, Limits(), "steps");
      ASSERT_FALSE(got.ok());
      EXPECT_NE(got.status().message().find("steps[2].warmup"), std::string::npos) << got.status();
      continue;
    }
    auto got = ValidateSteps(7, Steps(v), {}, Limits(), "steps");
    ASSERT_FALSE(got.ok()) << c.field;
    EXPECT_TRUE(absl::IsInvalidArgument(got.status()));
    EXPECT_EQ(got.status().message().rfind(c.field + ":", 0), 0u) << got.status();
  }
  // A NaN loss is evidence (the contract's loss_nan), not a bad report.
  std::vector<v1::StepMetrics> nan = {Step(0, true, 1.0), Step(1, false, 1.5)};
  nan[1].set_loss(std::nan(""));
  EXPECT_TRUE(ValidateSteps(7, Steps(nan), {}, Limits(), "steps").ok());
  // A warm-up line need not time itself (replay's do not).
  std::vector<v1::StepMetrics> untimed = {Step(0, true, 1.0)};
  untimed[0].set_step_time_s(0);
  EXPECT_TRUE(ValidateSteps(7, Steps(untimed), {}, Limits(), "steps").ok());
}

TEST(AgentReportTest, ResentStepsAreDroppedOnlyWhenUnchanged) {
  const ReportLimits l = Limits();
  auto first = ValidateSteps(7, Steps({Step(0, true, 1.0), Step(1, false, 1.5)}), {}, l, "steps");
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  // The reply was lost: the agent sends them again with the next one.
  auto again = ValidateSteps(7, Steps({Step(0, true, 1.0), Step(1, false, 1.5), Step(2, false, 2.0)}),
                             *first, l, "steps");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].step, 2);
  // The same step with other numbers is a lie about what was stored.
  v1::StepMetrics changed = Step(1, false, 1.5);
  changed.set_step_time_s(0.1);
  auto lie = ValidateSteps(7, Steps({changed}), *first, l, "steps");
  ASSERT_FALSE(lie.ok());
  EXPECT_NE(lie.status().message().find("steps[0].step: step 1 was already reported"),
            std::string::npos)
      << lie.status();
  // Going back before the last stored step is out of order.
  auto late = ValidateSteps(7, Steps({Step(3, false, 3.0)}), *first, l, "steps");
  ASSERT_TRUE(late.ok());
  std::vector<storage::StepRecord> stored = *first;
  stored.insert(stored.end(), late->begin(), late->end());
  auto back = ValidateSteps(7, Steps({Step(2, false, 3.5)}), stored, l, "steps");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("must be reported in order"), std::string::npos);
}

// A report checked against the stored tail only is judged as against every
// stored step: resends, order, warm-up, arrivals and the cap.
TEST(AgentReportTest, TheTailJudgesAsTheWholeTrialDoes) {
  ReportLimits l = Limits();
  l.max_steps = 8;
  std::vector<v1::StepMetrics> first;
  for (int i = 0; i < 6; ++i) first.push_back(Step(i, i == 0, 1.0 + i));
  auto all = ValidateSteps(7, Steps(first), {}, l, "steps");
  ASSERT_TRUE(all.ok()) << all.status();
  auto judge = [&](const std::vector<v1::StepMetrics>& next) {
    // What Storage::ListStepTail returns: from the report's first step, or
    // the last stored one.
    const int64_t from = std::min<int64_t>(FirstStepOf(Steps(next)), all->back().step);
    storage::Storage::StepTail tail;
    tail.count = static_cast<int64_t>(all->size());
    for (const auto& r : *all) {
      if (r.step >= from) tail.steps.push_back(r);
    }
    EXPECT_LT(tail.steps.size(), all->size());
    const auto whole = ValidateSteps(7, Steps(next), *all, l, "steps");
    const auto on_tail = ValidateStepsOnTail(7, Steps(next), tail, l, "steps");
    EXPECT_EQ(whole.status(), on_tail.status());
    if (whole.ok() && on_tail.ok()) {
      EXPECT_EQ(whole->size(), on_tail->size());
    }
    return on_tail.status();
  };
  EXPECT_TRUE(judge({Step(4, false, 5.0), Step(5, false, 6.0), Step(6, false, 7.0)}).ok());
  EXPECT_FALSE(judge({Step(6, true, 7.0)}).ok());                        // warm-up after timed
  EXPECT_FALSE(judge({Step(6, false, 5.5)}).ok());                       // arrived earlier
  EXPECT_FALSE(judge({Step(3, false, 7.0)}).ok());                       // out of order
  EXPECT_FALSE(judge({Step(6, false, 7.0), Step(7, false, 8.0), Step(8, false, 9.0)}).ok());
}

TEST(AgentReportTest, StepsPerTrialAreCapped) {
  ReportLimits l = Limits();
  std::vector<v1::StepMetrics> many;
  for (int i = 0; i < 41; ++i) many.push_back(Step(i, i == 0, 1.0 + i));
  auto got = ValidateSteps(7, Steps(many), {}, l, "outcome.steps");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message().rfind("outcome.steps: trial 7 may report at most 40", 0), 0u)
      << got.status();
  many.pop_back();
  EXPECT_TRUE(ValidateSteps(7, Steps(many), {}, l, "outcome.steps").ok());
}

TEST(AgentReportTest, TheOutcomeIsCheckedAgainstBothClocks) {
  auto stored = *ValidateSteps(7, Steps({Step(0, true, 1.0), Step(1, false, 1.5)}), {}, Limits(),
                               "steps");
  v1::TrialOutcome o;
  o.set_status("ok");
  o.set_clock("agent");
  o.set_poll_interval_s(0.001);
  o.set_wall_s(1.6);
  o.set_peak_mem_gib(10);
  EXPECT_TRUE(ValidateOutcome(o, stored, Limits()).ok());
  o.set_wall_resolution_s(1.6);  // never seen to end: as coarse as the run
  EXPECT_TRUE(ValidateOutcome(o, stored, Limits()).ok());
  struct Case {
    std::string field;
    std::function<void(v1::TrialOutcome&)> edit;
  };
  const std::vector<Case> cases = {
      {"outcome.clock", [](v1::TrialOutcome& x) { x.set_clock("simulated"); }},
      {"outcome.poll_interval_s", [](v1::TrialOutcome& x) { x.set_poll_interval_s(0); }},
      {"outcome.poll_interval_s", [](v1::TrialOutcome& x) { x.set_poll_interval_s(5); }},
      {"outcome.wall_s", [](v1::TrialOutcome& x) { x.set_wall_s(std::nan("")); }},
      {"outcome.wall_s", [](v1::TrialOutcome& x) { x.set_wall_s(1.2); }},    // before its last line
      {"outcome.wall_s", [](v1::TrialOutcome& x) { x.set_wall_s(500); }},    // longer than leased
      {"outcome.wall_resolution_s", [](v1::TrialOutcome& x) { x.set_wall_resolution_s(-0.1); }},
      {"outcome.wall_resolution_s", [](v1::TrialOutcome& x) { x.set_wall_resolution_s(1.7); }},
      {"outcome.wall_resolution_s",
       [](v1::TrialOutcome& x) { x.set_wall_resolution_s(std::numeric_limits<double>::infinity()); }},
      {"outcome.peak_mem_gib", [](v1::TrialOutcome& x) { x.set_peak_mem_gib(std::nan("")); }},
      {"outcome.peak_mem_gib", [](v1::TrialOutcome& x) { x.set_peak_mem_gib(1e9); }},
  };
  for (const Case& c : cases) {
    v1::TrialOutcome bad = o;
    c.edit(bad);
    const absl::Status st = ValidateOutcome(bad, stored, Limits());
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << c.field;
    EXPECT_EQ(st.message().rfind(c.field + ":", 0), 0u) << st;
  }
  // An out-of-memory trial may say what it needed: past the capacity.
  v1::TrialOutcome oom = o;
  oom.set_status("oom");
  oom.set_peak_mem_gib(350);
  EXPECT_TRUE(ValidateOutcome(oom, stored, Limits()).ok());
  oom.set_status("ok");
  EXPECT_FALSE(ValidateOutcome(oom, stored, Limits()).ok());
  // A simulated executor's outcome carries no agent clock.
  ReportLimits sim = Limits();
  sim.agent_clock = false;
  o.set_clock("simulated");
  EXPECT_TRUE(ValidateOutcome(o, stored, sim).ok());
  o.set_clock("agent");
  EXPECT_FALSE(ValidateOutcome(o, stored, sim).ok());
}

TEST(AgentReportTest, ArrivalsReachTheContractsEvidence) {
  v1::TrialOutcome o;
  o.set_clock("agent");
  o.set_poll_interval_s(0.002);
  o.set_wall_s(3.0);
  for (int i = 0; i < 3; ++i) *o.add_steps() = Step(i, i == 0, 1.0 + 0.5 * i);
  const TrialEvidence e = EvidenceOfOutcome(o);
  EXPECT_TRUE(e.agent_clock);
  EXPECT_DOUBLE_EQ(e.poll_interval_s, 0.002);
  ASSERT_EQ(e.steps.size(), 3u);
  EXPECT_DOUBLE_EQ(e.steps[2].arrival_s, 2.0);
  const AgentClockTiming t = TimeOnAgentClock(e);
  ASSERT_TRUE(t.valid);
  EXPECT_EQ(t.window_steps, 2);
  EXPECT_DOUBLE_EQ(t.observed_s, 1.0);
  EXPECT_DOUBLE_EQ(t.reported_s, 1.0);
  EXPECT_DOUBLE_EQ(t.tail_s, 1.0);
}

// Per-step phases were 45% of the database as 17-digit JSON: they are
// stored with six significant digits and without zero-valued phases.
TEST(AgentReportTest, PhasesAreStoredCompactly) {
  v1::StepMetrics m = Step(3, false, 1.0);
  (*m.mutable_phases())["forward"] = 0.123456789012345;
  (*m.mutable_phases())["backward"] = 0.25;
  (*m.mutable_phases())["optimizer"] = 0;
  (*m.mutable_phases())["comm"] = 0;
  const storage::StepRecord r = StepRecordOf(7, m, true);
  EXPECT_EQ(r.phases, R"({"backward":0.25,"forward":0.123457})");
  auto back = DecodeDoubleMapJson(r.phases);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 2u);
  EXPECT_DOUBLE_EQ(back->at("forward"), 0.123457);
  // The same report encodes the same way (a resent step must match).
  EXPECT_EQ(StepRecordOf(7, m, true).phases, r.phases);
}

}  // namespace
}  // namespace infrarsi
