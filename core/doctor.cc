#include "core/doctor.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_format.h"
#include "models/stats.h"

namespace infrarsi {

double TQuantile975(int df) {
  static const double kTable[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                  2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                  2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                  2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return kTable[1];
  if (df <= 30) return kTable[df];
  return 1.96 + 2.4 / df;  // close to the exact quantile beyond 30
}

double NoiseFloor(double cv, int runs) {
  runs = std::max(runs, 2);
  return TQuantile975(2 * runs - 2) * cv * std::sqrt(2.0 / runs);
}

v1::DoctorReport BuildDoctorReport(const std::vector<DoctorRun>& runs, int verify_runs) {
  v1::DoctorReport r;
  r.set_runs(static_cast<int>(runs.size()));
  r.set_verify_runs(verify_runs);
  if (runs.empty()) return r;
  std::vector<double> times;
  for (const DoctorRun& d : runs) times.push_back(d.step_time_s);
  const double median = models::Median(times);
  const double cv = models::CoefficientOfVariation(times);
  r.set_median_step_time_s(median);
  r.set_cv(cv);
  if (runs.size() >= 2) {
    const size_t half = runs.size() / 2;
    std::vector<double> early(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(half));
    std::vector<double> late(times.end() - static_cast<std::ptrdiff_t>(half), times.end());
    r.set_drift((models::Median(late) - models::Median(early)) / median);
  }
  // Phases: the median over runs of each run's per-step phase time.
  std::map<std::string, std::vector<double>> phases;
  for (const DoctorRun& d : runs) {
    for (const auto& [name, secs] : d.phases) phases[name].push_back(secs);
  }
  for (const auto& [name, v] : phases) (*r.mutable_phases_s())[name] = models::Median(v);
  // Agents: a slow host shows as a median far from everyone else's.
  std::map<std::string, std::vector<double>> by_agent;
  for (const DoctorRun& d : runs) by_agent[d.agent].push_back(d.step_time_s);
  // A slow host inflates the CV it is judged by; the median absolute
  // deviation is not moved by it.
  std::vector<double> deviations;
  for (double t : times) deviations.push_back(std::fabs(t - median));
  const double robust_cv = 1.4826 * models::Median(deviations) / median;
  const double band = std::max(3.0 * robust_cv, 0.02);
  for (const auto& [agent, v] : by_agent) {
    v1::DoctorReport::AgentStat* a = r.add_agents();
    a->set_agent(agent);
    a->set_runs(static_cast<int>(v.size()));
    a->set_median_step_time_s(models::Median(v));
    a->set_outlier(by_agent.size() > 1 && std::fabs(models::Median(v) / median - 1.0) > band);
  }
  r.set_noise_floor(NoiseFloor(cv, verify_runs));
  // The reference trajectory: per step, the median over runs.
  std::map<int64_t, std::vector<double>> losses;
  for (const DoctorRun& d : runs) {
    for (const auto& [step, loss] : d.losses) losses[step].push_back(loss);
  }
  int64_t expect = 0;
  for (const auto& [step, v] : losses) {
    if (step != expect++) break;  // only a contiguous prefix can be indexed by step
    r.add_reference_losses(models::Median(v));
  }
  return r;
}

PairedSpeedup EstimatePairedSpeedup(const std::vector<std::pair<double, double>>& pairs) {
  PairedSpeedup p;
  std::vector<double> logs;
  for (const auto& [base, cand] : pairs) {
    if (base > 0 && cand > 0) logs.push_back(std::log(base / cand));
  }
  p.pairs = static_cast<int>(logs.size());
  if (logs.empty()) return p;
  const double mean = models::Mean(logs);
  const double se = logs.size() > 1 ? models::SampleStdDev(logs) / std::sqrt(logs.size()) : 0.0;
  const double t = TQuantile975(static_cast<int>(logs.size()) - 1);
  p.speedup = std::exp(mean);
  // One pair gives no spread: its interval is unknown, so it stays at 0..inf
  // for the purpose of clearing a floor.
  p.ci_low = logs.size() > 1 ? std::exp(mean - t * se) : 0.0;
  p.ci_high = logs.size() > 1 ? std::exp(mean + t * se) : 1e300;
  return p;
}

CandidateVerdict JudgeCandidate(const std::vector<std::pair<double, double>>& pairs,
                                double noise_floor, const std::string& disqualified) {
  CandidateVerdict v;
  std::vector<std::pair<double, double>> complete;
  for (const auto& p : pairs) {
    if (p.first > 0 && p.second > 0) complete.push_back(p);
  }
  v.estimate = EstimatePairedSpeedup(complete);
  const PairedSpeedup& e = v.estimate;
  if (!disqualified.empty()) {
    v.reason = disqualified;
  } else if (e.pairs < 2) {
    v.reason = "fewer than two complete A/B pairs";
  } else {
    v.cleared = e.ci_low > 1.0 + noise_floor;
    v.reason = absl::StrFormat("interval [%.4f, %.4f] %s the noise floor %.4f", e.ci_low, e.ci_high,
                               v.cleared ? "clears" : "does not clear", 1.0 + noise_floor);
  }
  return v;
}

int PickPromoted(const std::vector<CandidateVerdict>& verdicts) {
  int best = -1;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    if (verdicts[i].cleared &&
        (best < 0 || verdicts[i].estimate.ci_low > verdicts[static_cast<size_t>(best)].estimate.ci_low)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace infrarsi
