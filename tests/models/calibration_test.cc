// The simulator against published throughput it was not built on
// (tests/models/calibration.h): every pass-set row within 10% or listed as
// a known miss with its reason, and every configuration that ran fits.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "tests/models/calibration.h"

namespace infrarsi::models::sim {
namespace {

class CalibrationTest : public ::testing::TestWithParam<CalibrationRow> {};

TEST_P(CalibrationTest, RanSoFitsAndLandsWithin10PercentOrIsAListedMiss) {
  const CalibrationRow& row = GetParam();
  ASSERT_TRUE(row.pass_set || row.fit_only) << "only pass-set and fit-only rows are checked";
  const SimResult r = Simulate(row.model, row.cluster, row.knobs);
  ASSERT_EQ(r.status, Status::kOk) << row.note << ": " << r.message;
  EXPECT_LE(r.peak_mem_gib, row.cluster.gpu.memory_gib);
  if (!row.pass_set) return;
  const double err = CalibrationError(row, r);
  if (row.miss.empty()) {
    EXPECT_LE(std::abs(err), 0.10) << "simulated / published - 1 = " << err;
  } else {
    EXPECT_GT(std::abs(err), 0.10)
        << "listed as a miss (" << row.miss << ") but now within 10% (" << err
        << "): take it off KnownMisses()";
  }
}

std::vector<CalibrationRow> Checked() {
  std::vector<CalibrationRow> out;
  for (const CalibrationRow& r : CalibrationSet()) {
    if (r.pass_set || r.fit_only) out.push_back(r);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Published, CalibrationTest, ::testing::ValuesIn(Checked()),
                         [](const ::testing::TestParamInfo<CalibrationRow>& i) {
                           std::string n;
                           for (char c : i.param.name) n += std::isalnum(c) ? c : '_';
                           return n;
                         });

TEST(CalibrationSetTest, StatesItsSourcesAndCoversWhatTheIssueNamed) {
  const std::vector<CalibrationRow> rows = CalibrationSet();
  std::set<std::string> names, gpus;
  int pass = 0, fsdp = 0, mla = 0, swa = 0, head_dim = 0, uneven = 0;
  for (const CalibrationRow& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_TRUE(names.insert(r.name).second) << "row names are unique";
    EXPECT_FALSE(r.source.empty());
    if (!r.pass_set) {
      EXPECT_FALSE(r.note.empty()) << "a row out of the pass set says why";
    }
    // Every row ran, so every row is checked for fitting: a row neither in
    // the pass set nor fit-only would escape that check.
    EXPECT_TRUE(r.pass_set || r.fit_only) << "a configuration that ran is checked for fitting";
    EXPECT_TRUE(r.miss.empty() || r.pass_set) << "misses are pass-set rows";
    EXPECT_GT(r.tokens_per_s_per_gpu + r.tflops_per_gpu, 0);
    pass += r.pass_set;
    if (!r.pass_set) continue;
    gpus.insert(r.cluster.gpu.name);
    fsdp += r.knobs.sharding == Sharding::kZero3;
    mla += r.model.kv_lora_rank > 0 && r.model.shared_expert_ffn > 0;
    swa += r.model.window > 0;
    head_dim += r.model.head_dim > 0;
    uneven += r.knobs.pp_first_layers > 0 || r.knobs.pp_last_layers > 0;
  }
  for (const auto& [name, why] : KnownMisses()) {
    EXPECT_TRUE(names.count(name)) << name << " is listed as a miss but is not a row";
    EXPECT_FALSE(why.empty());
  }
  EXPECT_GE(pass, 15);
  EXPECT_GT(fsdp, 0);
  EXPECT_GT(mla, 0);
  EXPECT_GT(swa, 0);
  EXPECT_GT(head_dim, 0);
  EXPECT_GT(uneven, 0);
  for (const char* g : {"GB200", "GB300", "B200", "H100"}) EXPECT_TRUE(gpus.count(g)) << g;
}

}  // namespace
}  // namespace infrarsi::models::sim
