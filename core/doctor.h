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
  double step_time_s = 0;               // the run's median timed step, as reported
  std::map<int64_t, double> losses;     // by step
  std::map<std::string, double> phases; // median seconds per timed step
  int steps = 0;                        // metrics lines, warm-up included
  // Agent's clock (runs of a real process; all 0 otherwise): the timed
  // window per step, the window's length, the clock's resolution, and how
  // long the process ran after its last line.
  double agent_step_time_s = 0;
  double window_s = 0;
  double clock_slack_s = 0;
  double tail_s = 0;
};

// The floor never goes below this (0.1%): what a step timer can be trusted
// to tell apart at all.
inline constexpr double kMinNoiseFloor = 0.001;
// A floor from which the doctor warns that a promotion is unlikely (a
// candidate must then be 10% faster), saying what lowers it.
inline constexpr double kNoisyFloor = 0.10;

// Two-sided 95% Student t quantile for `df` degrees of freedom.
double TQuantile975(int df);

// The smallest relative speedup distinguishable from noise at 95% when a
// candidate and the baseline are each run `runs` times: t * cv * sqrt(2/runs).
double NoiseFloor(double cv, int runs);

// Runs in the order they finished. `verify_runs` is what the floor assumes.
// The floor is the larger of the reported and the agent's clocks' (the
// verdict is made on the agent's), and never below what the agent's clock
// can resolve over the timed window nor kMinNoiseFloor. Runs that agree to
// the last digit make the report `suspicious`, with a warning.
v1::DoctorReport BuildDoctorReport(const std::vector<DoctorRun>& runs, int verify_runs);

struct PairedSpeedup {
  int pairs = 0;
  double speedup = 0;  // geometric mean of baseline / candidate
  double ci_low = 0;
  double ci_high = 0;
  double log_sd = 0;  // sample sd of log(baseline / candidate); 0 below two pairs
};
// 95% interval from paired (baseline, candidate) step times.
PairedSpeedup EstimatePairedSpeedup(const std::vector<std::pair<double, double>>& pairs);

// One verification arm's times; <= 0: missing (the arm failed).
struct ArmTimes {
  double reported = 0;  // median timed step, as the process reported it
  double agent = 0;     // the timed window on the agent's clock, per step
  double window = 0;    // the timed window's length on the agent's clock
  double whole = 0;     // the whole run on the agent's clock: start to exit
  // How much longer than the run `whole` may read (never shorter): what
  // the agent could not see of its ends (TrialOutcome.wall_resolution_s).
  double whole_resolution = 0;
  // How far `window` may be off either way: the read delays of the two
  // lines that bound it (TrialRecord::clock_slack_s).
  double window_slack = 0;
};
struct VerifyPair {
  ArmTimes base, cand;
};

struct VerifyRules {
  double noise_floor = 0;
  // The trials ran a real process: the verdict is on the agent's clock,
  // and the gain must hold over the whole run.
  bool agent_clock = false;
  // Set when a verification run broke the contract: fails it whatever the
  // timings.
  std::string disqualified;
  // Set when the doctor's baseline runs were implausible: no verdict.
  std::string baseline_suspicious;
  // How widely an honest pair spreads on the host as the doctor
  // calibrated it (PairSpreadFromFloor of the doctor's floor and
  // verify_runs); 0: not compared.
  double calibrated_pair_spread = 0;
};

// The spread (standard deviation of log(baseline / candidate)) of one A/B
// pair that a noise floor of `floor` for `runs` runs implies:
// sqrt(2) * cv, with cv from inverting NoiseFloor. The floor is never below
// the host's noise, so neither is this.
double PairSpreadFromFloor(double floor, int runs);

// A candidate's pairs spread more than this many times what the doctor's
// floor implies: the host got busier after the doctor calibrated it. On
// honest noise, with the doctor's CV itself estimated from five runs, that
// happens on 2.8-3.9% of verdicts at 2-8 pairs (simulated:
// DoctorStatsTest.TheBusierHostMessageIsRareOnHonestNoiseAndCommonOnLoad).
inline constexpr double kNoisierThanCalibrated = 3.0;

// The re-verification's rule for one candidate: its paired speed-up (on the
// agent's clock for real processes) must rest on at least two complete A/B
// pairs and the 95% interval's lower end must clear 1 + noise_floor; its
// runs must not agree to the last digit (real timers never do); and, on the
// agent's clock, at least half of the time it saves per run in the timed
// window must be saved over the whole run (else the work moved, e.g. into
// the warm-up). The whole runs' resolutions widen both ends of that rule:
// a saving confirms only once the baseline arms' resolution is taken off
// it, and a candidate is implausible only if it keeps too little even with
// its own arms' resolution added (late reads of its ends, not moved work,
// can hide a saving; a batch system's lag judged honest trials cheats), and
// the windows' slack (their bounding lines' read delays) with it.
// `reason` says which rule decided, with the figures.
struct CandidateVerdict {
  PairedSpeedup estimate;  // on the verdict's clock
  PairedSpeedup reported, agent, whole;
  bool cleared = false;
  bool implausible = false;  // not promoted: its numbers cannot be true
  // Not promoted: on the agent's clock its timed-window gain mostly
  // vanished over the whole run, but too few runs to say it beyond doubt.
  // Not a cheat's verdict; its gain is unconfirmed.
  bool unconfirmed = false;
  // Not cleared, and its pairs spread kNoisierThanCalibrated times what the
  // doctor's floor implies: the verdict says the host was busier than at
  // calibration, not that the candidate is no faster.
  bool host_noisier = false;
  double pair_spread = 0;  // sd of log(baseline / candidate) over its pairs
  std::string reason;
};
CandidateVerdict JudgeCandidate(const std::vector<VerifyPair>& pairs, const VerifyRules& rules);
// Simulated executors: (baseline, candidate) step times as reported.
CandidateVerdict JudgeCandidate(const std::vector<std::pair<double, double>>& pairs,
                                double noise_floor, const std::string& disqualified = "");

// Of the verdicts, the cleared one with the highest lower bound: its index,
// or -1 when none cleared.
int PickPromoted(const std::vector<CandidateVerdict>& verdicts);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_DOCTOR_H_
