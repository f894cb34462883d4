// The doctor's statistics and the re-verification's: how noisy the baseline
// is, and whether a candidate's speedup can be told from that noise.
#ifndef INFRARSI_CORE_DOCTOR_H_
#define INFRARSI_CORE_DOCTOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

struct DoctorRun {
  std::string agent;
  double step_time_s = 0;               // the run's median timed step
  std::map<int64_t, double> losses;     // by step
  std::map<std::string, double> phases; // median seconds per timed step
};

// Two-sided 95% Student t quantile for `df` degrees of freedom.
double TQuantile975(int df);

// The smallest relative speedup distinguishable from noise at 95% when a
// candidate and the baseline are each run `runs` times: t * cv * sqrt(2/runs).
double NoiseFloor(double cv, int runs);

// Runs in the order they finished. `verify_runs` is what the floor assumes.
v1::DoctorReport BuildDoctorReport(const std::vector<DoctorRun>& runs, int verify_runs);

struct PairedSpeedup {
  int pairs = 0;
  double speedup = 0;  // geometric mean of baseline / candidate
  double ci_low = 0;
  double ci_high = 0;
};
// 95% interval from paired (baseline, candidate) step times.
PairedSpeedup EstimatePairedSpeedup(const std::vector<std::pair<double, double>>& pairs);

// The re-verification's rule for one candidate: its paired speed-up must
// rest on at least two complete A/B pairs, and the 95% interval's lower end
// must clear 1 + noise_floor. `disqualified` (a contract breach seen during
// verification) fails it whatever the timings. `reason` says which rule
// decided, with the figures.
struct CandidateVerdict {
  PairedSpeedup estimate;
  bool cleared = false;
  std::string reason;
};
CandidateVerdict JudgeCandidate(const std::vector<std::pair<double, double>>& pairs,
                                double noise_floor, const std::string& disqualified = "");

// Of the verdicts, the cleared one with the highest lower bound: its index,
// or -1 when none cleared.
int PickPromoted(const std::vector<CandidateVerdict>& verdicts);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_DOCTOR_H_
