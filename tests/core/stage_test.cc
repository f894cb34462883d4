// The stage table: every stage's name round-trips, and its traits agree
// with one another (what leases is active, what is finished is not).
#include "core/stage.h"

#include <gtest/gtest.h>

#include "core/trial_status.h"

namespace infrarsi {
namespace {

TEST(StageTest, TraitsAreConsistent) {
  int stages = 0;
  for (int i = v1::Stage_MIN; i <= v1::Stage_MAX; ++i) {
    if (!v1::Stage_IsValid(i) || i == v1::STAGE_UNSPECIFIED) continue;
    const auto stage = static_cast<v1::Stage>(i);
    const StageTraits& t = TraitsOf(stage);
    ++stages;
    EXPECT_EQ(t.stage, stage) << "stage " << i << " has no row in the table";
    EXPECT_EQ(StageFromName(StageName(stage)), stage);
    EXPECT_EQ(&TraitsOf(std::string(t.name)), &t);
    EXPECT_TRUE(!t.leasing || t.active) << t.name << ": what leases stays in memory";
    EXPECT_TRUE(!t.finished || !t.active) << t.name;
    EXPECT_TRUE(!t.terminal || t.finished) << t.name;
    EXPECT_TRUE(!t.leasing || std::string(t.awaits_purpose) != "") << t.name;
    EXPECT_TRUE(t.resume == StageResume::kNone || t.leasing) << t.name;
  }
  EXPECT_EQ(stages, 9);
  EXPECT_EQ(StageFromName("bogus"), v1::STAGE_UNSPECIFIED);
  EXPECT_FALSE(TraitsOf("bogus").active);
}

TEST(StageTest, WhatEachStageWaitsFor) {
  EXPECT_STREQ(TraitsOf(v1::STAGE_DOCTORING).awaits_purpose, trial_purpose::kDoctor);
  EXPECT_STREQ(TraitsOf(v1::STAGE_RUNNING).awaits_purpose, trial_purpose::kSearch);
  EXPECT_STREQ(TraitsOf(v1::STAGE_VERIFYING).awaits_purpose, trial_purpose::kVerify);
  EXPECT_EQ(StageNamesWhere(&StageTraits::active),
            (std::vector<std::string>{"initialized", "doctoring", "doctored", "running",
                                      "verifying"}));
  EXPECT_EQ(StageNamesWhere(&StageTraits::finished),
            (std::vector<std::string>{"searched", "applied", "cancelled", "failed"}));
  EXPECT_TRUE(IsFinishedStage(v1::STAGE_SEARCHED));
  EXPECT_FALSE(IsTerminalStage(v1::STAGE_SEARCHED));
}

}  // namespace
}  // namespace infrarsi
