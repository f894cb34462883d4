// The report's verification lines: a busier host is told apart from a
// slower candidate by the pair spreads beside the calibrated one.
#include "client/cli/report_format.h"

#include <gtest/gtest.h>

namespace infrarsi::client {
namespace {

TEST(ReportFormatTest, VerificationPrintsThePairSpreadAgainstTheCalibratedOne) {
  v1::SessionReport r;
  v1::Verification* v = r.mutable_verification();
  v->set_summary("no candidate passed verification: the host was busier ...");
  v->set_host_noisier(true);
  v->set_calibrated_pair_spread(0.0668);
  for (const double spread : {0.362, 0.296}) {
    v1::Verification::Candidate* c = v->add_candidates();
    c->set_rank(v->candidates_size());
    c->set_pair_spread(spread);
  }
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("pair spread at calibration 6.7%; per candidate: c1 36.2% c2 29.6%"), std::string::npos)
      << text;
  // Nothing calibrated (a verdict from before the field): no line.
  v->set_calibrated_pair_spread(0);
  EXPECT_EQ(FormatReport(r).find("pair spread"), std::string::npos) << FormatReport(r);
}

// A candidate re-verified after a busier round: the report says which
// round decided, from which pair on, and what the busier round said.
TEST(ReportFormatTest, AReverifiedCandidateShowsItsEarlierRound) {
  v1::SessionReport r;
  v1::Verification* v = r.mutable_verification();
  v->set_summary("promoted candidate 1: speedup 1.305x");
  v->set_round(2);
  v->set_promoted_rank(1);
  v1::Verification::Candidate* c = v->add_candidates();
  c->set_rank(1);
  c->set_first_run(5);
  c->set_earlier_reason("round 1: interval [0.73, 2.30] does not clear; the host was busier");
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("Verification (round 2): promoted candidate 1"), std::string::npos) << text;
  EXPECT_NE(text.find("pairs from run 5 only; earlier: round 1: interval [0.73, 2.30]"),
            std::string::npos)
      << text;
  // A first round's verdict reads as before.
  v->set_round(1);
  c->clear_earlier_reason();
  EXPECT_NE(FormatReport(r).find("Verification: promoted"), std::string::npos) << FormatReport(r);
  EXPECT_EQ(FormatReport(r).find("earlier:"), std::string::npos) << FormatReport(r);
}

}  // namespace
}  // namespace infrarsi::client
