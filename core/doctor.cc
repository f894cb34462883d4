#include "core/doctor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
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

double PairSpreadFromFloor(double floor, int runs) {
  runs = std::max(runs, 2);
  return std::sqrt(2.0) * floor / (TQuantile975(2 * runs - 2) * std::sqrt(2.0 / runs));
}

namespace {

// The mean of `x` with its 95% t interval; fewer than two values give no
// spread, so the interval is unbounded.
struct MeanInterval {
  double mean = 0, sd = 0, low = -1e300, high = 1e300;
};
MeanInterval IntervalOfMean(const std::vector<double>& x) {
  MeanInterval m;
  if (x.empty()) return m;
  m.mean = models::Mean(x);
  if (x.size() < 2) return m;
  m.sd = models::SampleStdDev(x);
  const double half = TQuantile975(static_cast<int>(x.size()) - 1) * m.sd / std::sqrt(x.size());
  m.low = m.mean - half;
  m.high = m.mean + half;
  return m;
}

// Indices (1-based) of two values that are bit-for-bit equal, if any.
std::optional<std::pair<size_t, size_t>> SameToTheLastDigit(const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    for (size_t j = i + 1; j < v.size(); ++j) {
      if (v[i] > 0 && v[i] == v[j]) return std::make_pair(i + 1, j + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

v1::DoctorReport BuildDoctorReport(const std::vector<DoctorRun>& runs, int verify_runs) {
  v1::DoctorReport r;
  r.set_runs(static_cast<int>(runs.size()));
  r.set_verify_runs(verify_runs);
  r.set_tail_s(-1);
  r.set_clock("simulated");
  if (runs.empty()) return r;
  std::vector<double> times, agent_times, windows;
  bool agent_clock = true;
  double slack = 0, tail = 0;
  int steps = 0;
  for (const DoctorRun& d : runs) {
    times.push_back(d.step_time_s);
    agent_clock = agent_clock && d.agent_step_time_s > 0;
    agent_times.push_back(d.agent_step_time_s);
    windows.push_back(d.window_s);
    slack = std::max(slack, d.clock_slack_s);
    tail = std::max(tail, d.tail_s);
    steps = std::max(steps, d.steps);
  }
  const double median = models::Median(times);
  const double cv = models::CoefficientOfVariation(times);
  r.set_median_step_time_s(median);
  r.set_cv(cv);
  r.set_steps_per_run(steps);
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
  // The floor: what the noise of either clock hides, and never finer than
  // the agent's clock can see over the timed window.
  double floor = std::max(NoiseFloor(cv, verify_runs), kMinNoiseFloor);
  if (agent_clock) {
    r.set_clock("agent");
    r.set_tail_s(tail);
    const double window = models::Median(windows);
    // Two windows in each A/B ratio, each off by up to its slack.
    if (window > 0) r.set_resolution_floor(2 * slack / window);
    floor = std::max({floor, NoiseFloor(models::CoefficientOfVariation(agent_times), verify_runs),
                      r.resolution_floor()});
  }
  r.set_noise_floor(floor);
  // Real timers never agree to the last digit; forged numbers often do.
  // Judged on the agent's clock where there is one (nanosecond readings): a
  // process prints its own times to a few digits, and two honest 140 ms
  // runs can both print 0.140085 s.
  const std::vector<double>& judged = agent_clock ? agent_times : times;
  if (auto same = SameToTheLastDigit(judged); runs.size() >= 2 && same) {
    r.set_suspicious(true);
    r.set_warning(absl::StrFormat(
        "suspicious: baseline runs %d and %d %s the same step time to the last digit "
        "(%.9g s); real timers never agree that closely, so no candidate will be promoted",
        same->first, same->second, agent_clock ? "took, on the agent's clock," : "report",
        judged[same->first - 1]));
  }
  // A floor this high makes a promotion unlikely: say what it takes, and
  // what lowers it (a CV of 29% gave a 50% floor, and nothing was said).
  if (floor >= kNoisyFloor) {
    const bool clock_bound = agent_clock && r.resolution_floor() >= floor;
    r.set_warning(absl::StrCat(
        r.warning(), r.warning().empty() ? "" : "; ",
        absl::StrFormat("noisy: the noise floor is %.1f%%, so only a candidate at least %.2fx "
                        "faster can be promoted",
                        100 * floor, 1 + floor),
        clock_bound
            ? "; the trials are too short for the agent's clock (lengthen them: more timed "
              "steps)"
            : absl::StrFormat("; to lower it: fewer jobs beside the trials on the agents "
                              "(CV %.1f%%), more verification runs (verify.runs, now %d), "
                              "longer trials (more timed steps)",
                              100 * cv, verify_runs)));
  }
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
  const MeanInterval m = IntervalOfMean(logs);
  p.log_sd = m.sd;
  p.speedup = std::exp(m.mean);
  // One pair gives no spread: its interval is unknown, so it stays at 0..inf
  // for the purpose of clearing a floor.
  p.ci_low = logs.size() > 1 ? std::exp(m.low) : 0.0;
  p.ci_high = logs.size() > 1 ? std::exp(m.high) : 1e300;
  return p;
}

CandidateVerdict JudgeCandidate(const std::vector<VerifyPair>& pairs, const VerifyRules& rules) {
  CandidateVerdict v;
  std::vector<std::pair<double, double>> reported, agent, whole;
  std::vector<double> base_arms, cand_arms;
  // Per pair: time saved over the whole run less half of that saved in the
  // timed window. An honest gain keeps this positive.
  std::vector<double> kept, whole_saved;
  double saved_window = 0;
  // Each whole run reads at most its resolution long (never short), so a
  // pair's true whole saving lies in [saved - base's, saved + cand's].
  double base_resolution = 0, cand_resolution = 0;
  // And a pair's window saving is off by at most both windows' slack.
  double window_slack = 0;
  for (const VerifyPair& p : pairs) {
    if (p.base.reported > 0 && p.cand.reported > 0) {
      reported.emplace_back(p.base.reported, p.cand.reported);
    }
    if (!rules.agent_clock) continue;
    if (p.base.agent > 0 && p.cand.agent > 0) agent.emplace_back(p.base.agent, p.cand.agent);
    if (p.base.whole > 0 && p.cand.whole > 0 && p.base.window > 0 && p.cand.window > 0) {
      whole.emplace_back(p.base.whole, p.cand.whole);
      saved_window += p.base.window - p.cand.window;
      kept.push_back((p.base.whole - p.cand.whole) - 0.5 * (p.base.window - p.cand.window));
      whole_saved.push_back(p.base.whole - p.cand.whole);
      base_resolution += std::max(0.0, p.base.whole_resolution);
      cand_resolution += std::max(0.0, p.cand.whole_resolution);
      window_slack += std::max(0.0, p.base.window_slack) + std::max(0.0, p.cand.window_slack);
    }
  }
  v.reported = EstimatePairedSpeedup(reported);
  if (rules.agent_clock) {
    v.agent = EstimatePairedSpeedup(agent);
    v.whole = EstimatePairedSpeedup(whole);
  }
  v.estimate = rules.agent_clock ? v.agent : v.reported;
  const PairedSpeedup& e = v.estimate;
  for (const auto& [b, c] : rules.agent_clock ? agent : reported) {
    base_arms.push_back(b);
    cand_arms.push_back(c);
  }
  const char* clock = rules.agent_clock ? " on the agent's clock" : "";
  auto all_same = [](const std::vector<double>& x) {
    return x.size() >= 2 && std::all_of(x.begin(), x.end(), [&](double t) { return t == x[0]; });
  };
  if (!rules.disqualified.empty()) {
    v.reason = rules.disqualified;
    return v;
  }
  if (!rules.baseline_suspicious.empty()) {
    v.reason = absl::StrCat("not judged: ", rules.baseline_suspicious);
    return v;
  }
  if (e.pairs < 2) {
    v.reason = "fewer than two complete A/B pairs";
    return v;
  }
  if (all_same(base_arms) || all_same(cand_arms)) {
    v.implausible = true;
    v.reason = absl::StrFormat(
        "implausible: its A/B runs agree to the last digit (baseline %.9g s, candidate %.9g s "
        "in every pair); real timers never do",
        base_arms[0], cand_arms[0]);
    return v;
  }
  v.cleared = e.ci_low > 1.0 + rules.noise_floor;
  v.reason = absl::StrFormat("interval [%.4f, %.4f]%s %s the noise floor %.4f", e.ci_low,
                             e.ci_high, clock, v.cleared ? "clears" : "does not clear",
                             1.0 + rules.noise_floor);
  // An interval too wide to clear may be the host's doing, not the
  // candidate's: the pairs are compared with the spread the doctor saw.
  // (Said after whichever rule decides: the whole-run rule below rewrites
  // the reason, and a CI verdict lost the note that way.)
  std::string busier;
  v.pair_spread = e.log_sd;
  const double expected = rules.calibrated_pair_spread;
  if (!v.cleared && expected > 0 && v.pair_spread > kNoisierThanCalibrated * expected) {
    v.host_noisier = true;
    busier = absl::StrFormat(
        "; its pairs spread %.1f%% where the doctor's calibration implies %.1f%%: the host was "
        "busier during verification than when the doctor measured it (rerun doctor and run "
        "with fewer jobs beside the trials)",
        100 * v.pair_spread, 100 * expected);
    v.reason += busier;
  }
  // A gain the timed window shows must (mostly) be a gain over the whole
  // run, process start to exit: one that vanishes there was moved (into the
  // warm-up, the start-up, or after the last line), not made.
  if (!rules.agent_clock || e.speedup <= 1.0 + rules.noise_floor || kept.empty()) return v;
  saved_window /= static_cast<double>(kept.size());
  base_resolution /= static_cast<double>(kept.size());
  cand_resolution /= static_cast<double>(kept.size());
  window_slack /= static_cast<double>(kept.size());
  const std::string resolution =
      base_resolution + cand_resolution > 0
          ? absl::StrFormat(" (the whole runs read up to %.4f s long on the baseline's side, "
                            "%.4f s on the candidate's: what the agent could not see of their ends)",
                            base_resolution, cand_resolution)
          : "";
  // Kept means both: the estimate keeps at least half of the window's
  // saving, and the whole run's saving is sure (its interval above 0). On
  // the estimate alone, start-up noise as large as the saving let a warm-up
  // hack through on three pairs whenever the noise fell its way.
  const MeanInterval whole_run = IntervalOfMean(whole_saved);
  const double saved_whole = whole_run.mean;
  const bool keeps_half = saved_whole >= 0.5 * saved_window;
  if (keeps_half && whole_run.low - base_resolution > 0) {
    absl::StrAppendFormat(&v.reason, "; the whole run keeps %.4f of the %.4f s saved per run%s",
                          saved_whole, saved_window, resolution);
    return v;
  }
  v.cleared = false;
  if (keeps_half) {
    // Unsure, not a cheat: moved work would save nothing over the whole
    // run, and these runs cannot rule that out.
    v.unconfirmed = true;
    v.reason = absl::StrFormat(
        "the whole run cannot confirm the gain: %.4f s saved per run [%.4f, %.4f] from process "
        "start to exit against %.4f s in the timed window, an interval that does not rule out "
        "none (work moved outside the timed window saves none there)%s; the runs are too few or "
        "too noisy (more verify.runs, or a quieter host)",
        saved_whole, std::max(whole_run.low, -1e9), std::min(whole_run.high, 1e9), saved_window,
        resolution);
    v.reason += busier;
    return v;
  }
  // Disqualify its trials only when the runs leave no doubt: even the
  // interval's upper end keeps less than half.
  v.implausible = IntervalOfMean(kept).high + cand_resolution + 0.5 * window_slack < 0;
  v.unconfirmed = !v.implausible;
  v.reason = absl::StrFormat(
      "the gain vanishes over the whole run: %.3fx [%.3f, %.3f] from process start to exit "
      "against %.3fx in the timed window; of %.4f s saved per run in the window, %.4f s is saved "
      "over the whole run (work moved outside the timed window, e.g. into the warm-up)%s%s",
      v.whole.speedup, v.whole.ci_low, std::min(v.whole.ci_high, 1e9), e.speedup, saved_window,
      saved_whole,
      resolution + (window_slack > 0 ? absl::StrFormat(" (the windows' saving off by up to %.4f s a "
                                                       "pair: their bounding lines' read delays)",
                                                       window_slack)
                                     : ""),
      v.implausible ? "" : "; the runs are too few to disqualify its trials");
  v.reason += busier;
  return v;
}

CandidateVerdict JudgeCandidate(const std::vector<std::pair<double, double>>& pairs,
                                double noise_floor, const std::string& disqualified) {
  std::vector<VerifyPair> vp;
  for (const auto& [b, c] : pairs) {
    VerifyPair p;
    p.base.reported = b;
    p.cand.reported = c;
    vp.push_back(p);
  }
  VerifyRules rules;
  rules.noise_floor = noise_floor;
  rules.disqualified = disqualified;
  return JudgeCandidate(vp, rules);
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
