// SearchDriver: proposals made outside every lock, one at a time per
// session, written back through a fake SessionWriter.
#include "core/search_driver.h"

#include <gtest/gtest.h>

#include <map>

namespace infrarsi {
namespace {

class FakeWriter : public SessionWriter {
 public:
  SearchDriver* driver = nullptr;
  std::map<std::string, Window> windows;
  std::map<std::string, int> settled_with_proposal, stopped;
  std::map<std::string, std::string> stop_reason;
  std::vector<storage::TrialRecord> trials;
  absl::Status read_error;
  bool proposing_seen_at_settle = false;

  absl::StatusOr<Window> OpenWindow(const std::string& id, bool) override {
    Window w = windows[id];
    if (w.state == Window::State::kSettled) driver->EndProposal(id);
    return w;
  }
  std::vector<int64_t> reads_after;  // each read's after_rev
  absl::StatusOr<std::vector<storage::TrialRecord>> ReadTrials(const std::string&,
                                                               int64_t after_rev) override {
    reads_after.push_back(after_rev);
    if (!read_error.ok()) return read_error;
    std::vector<storage::TrialRecord> changed;
    for (const storage::TrialRecord& t : trials) {
      if (t.rev > after_rev) changed.push_back(t);
    }
    return changed;
  }
  absl::Status Settle(const std::string& id, const Proposal* p, const std::string& stop) override {
    proposing_seen_at_settle = driver->IsProposing(id);
    driver->EndProposal(id);
    if (p != nullptr) ++settled_with_proposal[id];
    if (!stop.empty()) {
      ++stopped[id];
      stop_reason[id] = stop;
    }
    return absl::OkStatus();
  }
};

class CountingOptimizer : public Optimizer {
 public:
  int calls = 0;
  int last_n = 0;
  double last_stop_below = -1;
  ProposalMemo* last_memo = nullptr;
  size_t last_history = 0;
  Proposal Propose(const SearchContext& ctx, const std::vector<Observation>& history, int n,
                   uint64_t) override {
    ++calls;
    last_history = history.size();
    last_n = n;
    last_stop_below = ctx.stop_below;
    last_memo = ctx.memo;
    Proposal p;
    p.configs.resize(static_cast<size_t>(n));
    p.reasons.resize(static_cast<size_t>(n), "random");
    return p;
  }
  std::string Name() const override { return "counting"; }
};

class SearchDriverTest : public ::testing::Test {
 protected:
  SearchDriverTest() : driver_(SearchDriver::Options{&writer_, &optimizer_}) {
    writer_.driver = &driver_;
  }
  SessionWriter::Window Open(int room, double max_gpu_hours = 0) {
    auto in = std::make_shared<SearchInputs>();
    in->spec.max_gpu_hours = max_gpu_hours;
    in->spec.gpu_count = 8;
    SessionWriter::Window w;
    w.state = SessionWriter::Window::State::kOpen;
    w.room = room;
    w.inputs = in;
    return w;
  }
  FakeWriter writer_;
  CountingOptimizer optimizer_;
  SearchDriver driver_;
};

TEST_F(SearchDriverTest, ProposesForPendingSessionsAndClearsTheirMarks) {
  writer_.windows["a"] = Open(3);
  writer_.windows["b"] = Open(1);
  driver_.MarkPending("a");
  driver_.MarkPending("b");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 2);
  EXPECT_EQ(writer_.settled_with_proposal["a"], 1);
  EXPECT_EQ(writer_.settled_with_proposal["b"], 1);
  EXPECT_TRUE(writer_.proposing_seen_at_settle) << "the mark lasts until the writer settles";
  EXPECT_FALSE(driver_.IsProposing("a"));
  // Nothing pending any more: a second call proposes nothing.
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 2);
}

TEST_F(SearchDriverTest, OnlyTheNamedSessionAndBusyOnesStayPending) {
  writer_.windows["a"] = Open(1);
  writer_.windows["b"] = Open(1);
  driver_.MarkPending("a");
  driver_.MarkPending("b");
  ASSERT_TRUE(driver_.ProposePending("b", true).ok());
  EXPECT_EQ(writer_.settled_with_proposal.count("a"), 0u);
  writer_.windows["a"].state = SessionWriter::Window::State::kBusy;
  ASSERT_TRUE(driver_.ProposePending("", false).ok());
  EXPECT_EQ(optimizer_.calls, 1) << "a busy session is not proposed for";
  EXPECT_FALSE(driver_.IsProposing("a"));
  writer_.windows["a"] = Open(1);
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(writer_.settled_with_proposal["a"], 1) << "it stayed pending";
}

TEST_F(SearchDriverTest, AReadErrorLeavesTheSessionPending) {
  writer_.windows["a"] = Open(2);
  writer_.read_error = absl::UnavailableError("disk");
  driver_.MarkPending("a");
  EXPECT_EQ(driver_.ProposePending("", true).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(driver_.IsProposing("a"));
  writer_.read_error = absl::OkStatus();
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(writer_.settled_with_proposal["a"], 1);
}

TEST_F(SearchDriverTest, ASpentGpuHourBudgetStopsTheSearch) {
  writer_.windows["a"] = Open(2, /*max_gpu_hours=*/1.0);
  storage::TrialRecord t;
  t.purpose = "search";
  t.status = "ok";
  t.config = "{}";
  t.cost_s = 500;  // x 8 GPUs = 4000 GPU-seconds > 3600
  t.rev = 1;
  writer_.trials = {t};
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 0);
  EXPECT_EQ(writer_.stopped["a"], 1);
  EXPECT_EQ(writer_.stop_reason["a"], "GPU-hour budget spent (1.11 of 1.00 GPU-hours)");
}

// The optimizer is told the gain under which the window's stop rule ends
// the search (it probes untried values before it).
TEST_F(SearchDriverTest, TheProposalIsToldTheGainTheStopReads) {
  writer_.windows["a"] = Open(1);
  writer_.windows["a"].stop_below = 0.02;
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 1);
  EXPECT_DOUBLE_EQ(optimizer_.last_stop_below, 0.02);
}

// The proposal gets the session's memo the window carries.
TEST_F(SearchDriverTest, TheProposalGetsTheWindowsMemo) {
  writer_.windows["a"] = Open(1);
  auto memo = std::make_shared<ProposalMemo>();
  writer_.windows["a"].memo = memo;
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 1);
  EXPECT_EQ(optimizer_.last_memo, memo.get());
}

// The window's history is kept between proposals: the next proposal reads
// only the trials written since the last one's read; a window without one
// reads them all.
TEST_F(SearchDriverTest, TheWindowsHistoryReadsOnlyWhatChanged) {
  writer_.windows["a"] = Open(1);
  writer_.windows["a"].history = std::make_shared<SearchHistory>();
  storage::TrialRecord t;
  t.purpose = "search";
  t.status = "ok";
  t.config = "{}";
  for (int i = 1; i <= 3; ++i) {
    t.id = t.rev = i;
    writer_.trials.push_back(t);
  }
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.last_history, 3u);
  writer_.trials[0].rev = 4;  // rewritten
  t.id = t.rev = 5;           // and one more
  writer_.trials.push_back(t);
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.last_history, 4u);
  EXPECT_EQ(writer_.reads_after, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(writer_.windows["a"].history->last_read(), 2u);
  EXPECT_EQ(driver_.TrialsRead(), 3 + 2);
  writer_.windows["a"].history = nullptr;
  driver_.MarkPending("a");
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.last_history, 4u);
  EXPECT_EQ(writer_.reads_after.back(), 0);
}

TEST_F(SearchDriverTest, ASettledWindowProposesNothing) {
  driver_.MarkPending("a");  // its window: kSettled by default
  ASSERT_TRUE(driver_.ProposePending("", true).ok());
  EXPECT_EQ(optimizer_.calls, 0);
  EXPECT_FALSE(driver_.IsProposing("a"));
}

}  // namespace
}  // namespace infrarsi
