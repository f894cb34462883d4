// SearchHistory: a session's trials as its search learns from them, kept
// between proposals and brought up to date from the trials written since
// its last read, always what a full read (SearchHistoryOf) would give.
#include "core/search_history.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/report.h"
#include "core/trial_status.h"
#include "storage/sqlite_storage.h"

namespace infrarsi {
namespace {

namespace ts = trial_status;

std::shared_ptr<const SessionSpec> Spec(const std::string& pp_default = "1") {
  auto spec = std::make_shared<SessionSpec>();
  spec->executor_kind = SessionSpec::ExecutorKind::kSim;
  spec->sim.cluster.gpu.memory_gib = 80;
  spec->gpu_count = 8;
  spec->knobs = {{"tp", {"1", "2", "4"}}, {"mb", {"1", "2"}}, {"pp", {"1", "2"}}};
  spec->baseline = {{"tp", "1"}, {"mb", "1"}, {"pp", pp_default}};
  return spec;
}

class SearchHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = storage::SqliteStorage::Create({.path = ":memory:"});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    for (const char* id : {"s", "other"}) {
      storage::SessionRecord rec;
      rec.id = id;
      rec.stage = "running";
      ASSERT_TRUE(db_->InsertSession(rec).ok());
    }
  }
  SearchHistory::ReadChanged Reader(const std::string& session = "s") {
    return [this, session](int64_t after_rev) {
      reads_.push_back(after_rev);
      return db_->ListTrialsChangedSince(session, after_rev);
    };
  }
  // The history must be what a full read gives, bit for bit.
  void ExpectAsFullRead(const SearchHistory& h, const SessionSpec& spec) {
    auto all = db_->ListTrials("s");
    ASSERT_TRUE(all.ok()) << all.status();
    double gpu_s = 0;
    auto full = SearchHistoryOf(spec, *all, &gpu_s);
    ASSERT_TRUE(full.ok()) << full.status();
    ASSERT_EQ(h.observations().size(), full->size());
    ASSERT_EQ(h.space_indices().size(), full->size());
    for (size_t i = 0; i < full->size(); ++i) {
      const Observation &a = h.observations()[i], &b = (*full)[i];
      EXPECT_EQ(a.config, b.config) << i;
      EXPECT_EQ(a.status, b.status) << i;
      EXPECT_EQ(a.step_time_s, b.step_time_s) << i;
      EXPECT_EQ(a.peak_mem_gib, b.peak_mem_gib) << i;
      // Kept once per trial for the search (SearchContext::history_index).
      EXPECT_EQ(h.space_indices()[i], IndexOf(spec, b.config)) << i;
    }
    EXPECT_EQ(h.GpuSeconds(), gpu_s);  // the same sum in the same order
  }
  // Stores a finished search trial of session "s" at `config`.
  int64_t InsertOk(const std::string& config) {
    storage::TrialRecord t;
    t.session_id = "s";
    t.purpose = trial_purpose::kSearch;
    t.config = config;
    t.status = ts::kOk;
    absl::StatusOr<int64_t> id = db_->InsertTrial(t);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  std::unique_ptr<storage::Storage> db_;
  std::vector<int64_t> reads_;
};

// Random writes as a session makes them (trials queued, leased, finished,
// pruned, re-run for verification; costs growing; another session's trials
// beside), and after each few an update: always a full read's history,
// from only the trials that changed.
TEST_F(SearchHistoryTest, AfterEveryWriteItIsWhatAFullReadGives) {
  const auto spec = Spec();
  std::mt19937 rng(7);
  auto pick = [&](std::vector<std::string> from) { return from[rng() % from.size()]; };
  SearchHistory h;
  std::vector<int64_t> ids;
  for (int round = 0; round < 60; ++round) {
    std::set<int64_t> written;
    const int writes = 1 + static_cast<int>(rng() % 4);
    for (int w = 0; w < writes; ++w) {
      if (ids.empty() || rng() % 3 == 0) {
        storage::TrialRecord t;
        t.session_id = rng() % 5 == 0 ? "other" : "s";
        t.purpose = rng() % 6 == 0 ? trial_purpose::kVerify : trial_purpose::kSearch;
        // Some settings name only some knobs (the rest read as the baseline's).
        t.config = rng() % 2 ? "{\"tp\":\"" + pick({"1", "2", "4"}) + "\",\"mb\":\"2\"}"
                             : "{\"tp\":\"" + pick({"1", "2", "4"}) + "\"}";
        t.status = ts::kQueued;
        auto id = db_->InsertTrial(t);
        ASSERT_TRUE(id.ok()) << id.status();
        if (t.session_id == "s") {
          ids.push_back(*id);
          written.insert(*id);
        }
      } else {
        storage::TrialRecord t = *db_->GetTrial(ids[rng() % ids.size()]);
        t.status = pick({ts::kLeased, ts::kRunning, ts::kOk, ts::kOom, ts::kPruned, "violation"});
        t.step_time_s = 1.0 + 0.001 * static_cast<double>(rng() % 1000);
        t.peak_mem_gib = 60.0 + static_cast<double>(rng() % 40);  // pruned above 80: an OOM
        t.cost_s += 0.1 * static_cast<double>(rng() % 1000);
        t.lost_s = rng() % 4 == 0 ? 3.5 : 0;
        ASSERT_TRUE(db_->UpdateTrial(t).ok());
        written.insert(t.id);
      }
    }
    ASSERT_TRUE(h.Update(spec, Reader()).ok());
    ExpectAsFullRead(h, *spec);
    if (HasFailure()) return;
    EXPECT_EQ(h.last_read(), written.size()) << "round " << round;
  }
  // Only the first update read from the start.
  EXPECT_EQ(std::count(reads_.begin(), reads_.end(), 0), 1);
  ASSERT_TRUE(h.Update(spec, Reader()).ok());
  EXPECT_EQ(h.last_read(), 0u);  // nothing changed since
}

// The stored settings are decoded under the spec they are read for: a
// session's replaced spec (another baseline) decodes them all afresh.
TEST_F(SearchHistoryTest, AnotherSpecDecodesEverySettingAfresh) {
  InsertOk(R"({"tp":"2"})");
  SearchHistory h;
  ASSERT_TRUE(h.Update(Spec("1"), Reader()).ok());
  ASSERT_EQ(h.observations().size(), 1u);
  EXPECT_EQ(h.observations()[0].config.at("pp"), "1");
  ASSERT_TRUE(h.Update(Spec("2"), Reader()).ok());
  ASSERT_EQ(h.observations().size(), 1u);
  EXPECT_EQ(h.observations()[0].config.at("pp"), "2");
  EXPECT_EQ(reads_, (std::vector<int64_t>{0, 0}));
}

// What a read of the changes cannot apply in place makes it read all: a
// trial new to it below one it has, a trial turned into a verification
// re-run.
TEST_F(SearchHistoryTest, WhatCannotBeAppliedInPlaceIsReadAgainWhole) {
  const auto spec = Spec();
  std::vector<storage::TrialRecord> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].id = 10 * (i + 1);
    rows[i].rev = i + 1;
    rows[i].session_id = "s";
    rows[i].purpose = trial_purpose::kSearch;
    rows[i].config = R"({"tp":"1"})";
    rows[i].status = ts::kOk;
    rows[i].cost_s = 1;
  }
  std::vector<storage::TrialRecord> stored = {rows[0], rows[2]};
  std::vector<int64_t> reads;
  auto read = [&](int64_t after) -> absl::StatusOr<std::vector<storage::TrialRecord>> {
    reads.push_back(after);
    std::vector<storage::TrialRecord> out;
    for (const auto& t : stored) {
      if (t.rev > after) out.push_back(t);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return out;
  };
  SearchHistory h;
  ASSERT_TRUE(h.Update(spec, read).ok());
  EXPECT_EQ(h.observations().size(), 2u);
  stored.push_back(rows[1]);  // id 20 shows up after id 30 was read
  stored.back().rev = 4;
  stored.back().config = R"({"tp":"4"})";
  ASSERT_TRUE(h.Update(spec, read).ok());
  ASSERT_EQ(h.observations().size(), 3u);
  EXPECT_EQ(h.observations()[1].config.at("tp"), "4");  // in id order
  EXPECT_EQ(reads, (std::vector<int64_t>{0, 3, 0}));
  stored[0].purpose = trial_purpose::kVerify;
  stored[0].rev = 5;
  ASSERT_TRUE(h.Update(spec, read).ok());
  EXPECT_EQ(h.observations().size(), 2u);
  EXPECT_EQ(h.GpuSeconds(), 3 * 8);
  EXPECT_EQ(reads, (std::vector<int64_t>{0, 3, 0, 4, 0}));
  EXPECT_EQ(h.rev(), 5);
}

// A failed read or a setting that does not decode leaves nothing
// half-applied: the history is empty and the next update reads it all.
TEST_F(SearchHistoryTest, AFailedUpdateLeavesItEmptyForAWholeRead) {
  const auto spec = Spec();
  InsertOk(R"({"tp":"2"})");
  SearchHistory h;
  ASSERT_TRUE(h.Update(spec, Reader()).ok());
  const int64_t bad = InsertOk("{not json");
  const absl::Status st = h.Update(spec, Reader());
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(h.observations().empty());
  EXPECT_EQ(h.rev(), 0);
  EXPECT_EQ(h.GpuSeconds(), 0);
  // Mended, it is read whole again.
  storage::TrialRecord fixed = *db_->GetTrial(bad);
  fixed.config = R"({"tp":"4"})";
  ASSERT_TRUE(db_->UpdateTrial(fixed).ok());
  reads_.clear();
  ASSERT_TRUE(h.Update(spec, Reader()).ok());
  EXPECT_EQ(reads_, (std::vector<int64_t>{0}));
  ExpectAsFullRead(h, *spec);
  EXPECT_EQ(h.observations().size(), 2u);
  // A read that fails empties it too.
  SearchHistory::ReadChanged failing = [](int64_t) -> absl::StatusOr<std::vector<storage::TrialRecord>> {
    return absl::UnavailableError("sqlite: busy");
  };
  EXPECT_EQ(h.Update(spec, failing).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(h.observations().empty());
}

}  // namespace
}  // namespace infrarsi
