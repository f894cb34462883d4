// TrialQueue: work filed by requirement, leased oldest first among what the
// asking agent fits, never scanned past work it cannot run.
#include "core/trial_queue.h"

#include <gtest/gtest.h>

#include "tests/core/requirement_testing.h"

namespace infrarsi {
namespace {

storage::TrialRecord Trial(int64_t id, const std::string& session) {
  storage::TrialRecord t;
  t.id = id;
  t.session_id = session;
  t.status = "queued";
  return t;
}

using ::infrarsi::testing::Req;

TEST(TrialQueueTest, OldestAmongFittingRequirements) {
  TrialQueue q;
  q.Put(Trial(5, "a"), Req("h200"));
  q.Put(Trial(2, "b"), Req("a100"));
  q.Put(Trial(7, "c"), Req("h200", 8));
  q.Put(Trial(3, "a"), Req("h200"));
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.requirements(), 3u);
  auto h200_one_gpu = [](const TrialQueue::Requirement& r) {
    return r.gpu_model == "h200" && r.gpu_count <= 1;
  };
  auto any = [](const storage::TrialRecord&) { return true; };
  EXPECT_EQ(q.Oldest(h200_one_gpu, any), 3);
  auto all = [](const TrialQueue::Requirement&) { return true; };
  EXPECT_EQ(q.Oldest(all, any), 2);
  // The per-trial check skips a trial and goes on in id order, across
  // requirements.
  auto not_three = [](const storage::TrialRecord& t) { return t.id != 3 && t.id != 2; };
  EXPECT_EQ(q.Oldest(all, not_three), 5);
  auto none = [](const TrialQueue::Requirement&) { return false; };
  EXPECT_FALSE(q.Oldest(none, any).has_value());
}

TEST(TrialQueueTest, UnfitRequirementsAreNeverScanned) {
  TrialQueue q;
  for (int64_t i = 1; i <= 5000; ++i) q.Put(Trial(i, "big"), Req("a100"));
  q.Put(Trial(6000, "small"), Req("h200"));
  int fits_calls = 0, accept_calls = 0;
  auto got = q.Oldest(
      [&](const TrialQueue::Requirement& r) {
        ++fits_calls;
        return r.gpu_model == "h200";
      },
      [&](const storage::TrialRecord&) {
        ++accept_calls;
        return true;
      });
  EXPECT_EQ(got, 6000);
  EXPECT_EQ(fits_calls, 2);    // once per requirement
  EXPECT_EQ(accept_calls, 1);  // not once per unrunnable trial
}

TEST(TrialQueueTest, PutRefilesAndRemoveForgets) {
  TrialQueue q;
  storage::TrialRecord t = Trial(1, "a");
  q.Put(t, Req("h200"));
  t.refused_by = "agt-1";
  q.Put(t, Req("h100"));  // refiled, not duplicated
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.requirements(), 1u);
  ASSERT_NE(q.Find(1), nullptr);
  EXPECT_EQ(q.Find(1)->refused_by, "agt-1");
  q.Put(Trial(2, "b"), Req("h100"));
  q.Put(Trial(3, "a"), Req("h100"));
  q.RemoveSession("a");
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.Find(1), nullptr);
  q.Remove(2);
  q.Remove(99);  // unknown: ignored
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.requirements(), 0u);
}

}  // namespace
}  // namespace infrarsi
