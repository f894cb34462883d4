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

}  // namespace
}  // namespace infrarsi::client
