#include "core/verification.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/doctor.h"
#include "base/proto_util.h"
#include "base/status_macros.h"
#include "core/trial_status.h"

namespace infrarsi {
namespace {
namespace ts = trial_status;

// Queues A/B pairs `first_run`..`last_run` of candidate `rank`, each pair in
// a random order, both arms pinned to the host that measured the candidate.
void AppendPairs(const std::string& session_id, int rank, const std::string& baseline,
                 const std::string& config, const std::string& agent, int first_run,
                 int last_run, std::mt19937_64& order, int64_t now_ms,
                 std::vector<storage::TrialRecord>* runs) {
  for (int run = first_run; run <= last_run; ++run) {
    const bool base_first = (order() & 1) == 0;
    for (int k = 0; k < 2; ++k) {
      const bool is_base = (k == 0) == base_first;
      storage::TrialRecord t;
      t.session_id = session_id;
      t.purpose = trial_purpose::kVerify;
      t.config = is_base ? baseline : config;
      t.status = ts::kQueued;
      t.tag = absl::StrCat("c", rank, "/r", run, "/", is_base ? "base" : "cand");
      t.pin_agent = agent;  // same host for both arms
      t.created_ms = now_ms;
      runs->push_back(std::move(t));
    }
  }
}
}  // namespace

absl::StatusOr<VerificationPlan> PlanVerification(const SessionSpec& spec,
                                                  const std::string& session_id,
                                                  double baseline_step_time_s,
                                                  const v1::DoctorReport& doctor,
                                                  const std::string& search_stop,
                                                  const std::vector<storage::TrialRecord>& trials,
                                                  int64_t now_ms) {
  // The fastest search trials that beat the baseline are run again,
  // interleaved with the baseline in random A/B order on one agent.
  std::vector<const storage::TrialRecord*> ok;
  for (const auto& t : trials) {
    if (t.purpose == trial_purpose::kSearch && t.status == ts::kOk && t.step_time_s < baseline_step_time_s) {
      ok.push_back(&t);
    }
  }
  std::sort(ok.begin(), ok.end(), [](const auto* a, const auto* b) {
    return std::tie(a->step_time_s, a->id) < std::tie(b->step_time_s, b->id);
  });
  if (ok.size() > static_cast<size_t>(spec.verify.candidates)) {
    ok.resize(static_cast<size_t>(spec.verify.candidates));
  }
  VerificationPlan plan;
  v1::Verification& v = plan.verification;
  v.set_noise_floor(doctor.noise_floor());
  v.set_search_stop(search_stop);
  if (ok.empty()) {
    v.set_summary(spec.verify.candidates == 0 ? "verification disabled (verify.candidates: 0)"
                                              : "no setting beat the baseline");
    return plan;
  }
  std::mt19937_64 order(spec.seed * 31 + static_cast<uint64_t>(trials.size()));
  const std::string baseline = EncodeConfigJson(spec.baseline);
  for (size_t r = 0; r < ok.size(); ++r) {
    v1::Verification::Candidate* c = v.add_candidates();
    c->set_rank(static_cast<int>(r) + 1);
    c->set_trial_id(ok[r]->id);
    ASSIGN_OR_RETURN(Config cfg, DecodeConfigJson(ok[r]->config));
    CopyConfig(cfg, c->mutable_config());
    c->set_agent(ok[r]->agent);
    AppendPairs(session_id, c->rank(), baseline, ok[r]->config, ok[r]->agent, 1, spec.verify.runs,
                order, now_ms, &plan.runs);
  }
  v.set_round(1);
  return plan;
}

VerificationDecision DecideVerification(const SessionSpec& spec, const v1::DoctorReport& doctor,
                                        const v1::Verification& plan,
                                        const std::vector<storage::TrialRecord>& trials,
                                        int64_t now_ms) {
  VerificationDecision out;
  // rank -> run -> both arms' times on every clock; a failed arm stays 0.
  std::map<int, std::map<int, VerifyPair>> arms;
  std::map<int, std::string> disqualified;
  std::map<int, std::vector<int64_t>> cand_trials;  // each candidate's own verify runs
  std::map<int, std::vector<int64_t>> cand_ok;      // those of them that ran clean
  for (const auto& t : trials) {
    if (t.purpose != trial_purpose::kVerify) continue;
    if (IsInFlightStatus(t.status)) return out;  // not done yet
    int rank = 0, run = 0;
    char arm[8] = {0};
    if (std::sscanf(t.tag.c_str(), "c%d/r%d/%7s", &rank, &run, arm) != 3) continue;
    const bool is_base = std::string(arm) == "base";
    ArmTimes times;
    if (t.status == ts::kOk) {
      times.reported = t.step_time_s;
      if (t.observed_steps > 0) {
        times.window = t.observed_window_s;
        times.agent = t.observed_window_s / t.observed_steps;
        times.whole = t.cost_s;
        times.whole_resolution = t.wall_resolution_s;
        times.window_slack = t.clock_slack_s;
      }
    }
    (is_base ? arms[rank][run].base : arms[rank][run].cand) = times;
    if (!is_base) cand_trials[rank].push_back(t.id);
    if (!is_base && t.status == ts::kOk) cand_ok[rank].push_back(t.id);
    if (t.status == ts::kViolation && !is_base && !disqualified.count(rank)) {
      disqualified[rank] = absl::StrCat("a verification run broke the contract (", t.violation,
                                        "): ", t.error);
    }
  }
  out.done = true;
  out.verification = plan;
  v1::Verification& v = out.verification;
  VerifyRules rules;
  rules.noise_floor = doctor.noise_floor();
  rules.agent_clock = spec.Executor().agent_clock;
  if (doctor.verify_runs() > 0 && rules.noise_floor > 0) {
    rules.calibrated_pair_spread = PairSpreadFromFloor(rules.noise_floor, doctor.verify_runs());
    v.set_calibrated_pair_spread(rules.calibrated_pair_spread);
  }
  if (doctor.suspicious()) rules.baseline_suspicious = doctor.warning();
  std::vector<CandidateVerdict> verdicts;
  std::map<int, std::vector<int64_t>> unconfirmed;  // by rank
  bool host_noisier = false;
  for (auto& c : *v.mutable_candidates()) {
    // A re-verified candidate is judged on its latest round's pairs only:
    // pooling them with the busier round's would let two chances share
    // one interval.
    std::vector<VerifyPair> pairs;
    for (const auto& [run, p] : arms[c.rank()]) {
      if (run >= c.first_run()) pairs.push_back(p);
    }
    rules.disqualified = disqualified[c.rank()];
    verdicts.push_back(JudgeCandidate(pairs, rules));
    const CandidateVerdict& verdict = verdicts.back();
    host_noisier = host_noisier || verdict.host_noisier;
    auto cap = [](double x) { return std::min(x, 1e9); };
    c.set_runs(verdict.estimate.pairs);
    c.set_speedup(verdict.estimate.speedup);
    c.set_ci_low(verdict.estimate.ci_low);
    c.set_ci_high(cap(verdict.estimate.ci_high));
    c.set_cleared(verdict.cleared);
    c.set_reason(verdict.reason);
    c.set_pair_spread(verdict.pair_spread);
    c.set_clock(rules.agent_clock ? "agent" : "reported");
    c.set_reported_speedup(verdict.reported.speedup);
    c.set_reported_ci_low(verdict.reported.ci_low);
    c.set_reported_ci_high(cap(verdict.reported.ci_high));
    c.set_agent_speedup(verdict.agent.speedup);
    c.set_agent_ci_low(verdict.agent.ci_low);
    c.set_agent_ci_high(cap(verdict.agent.ci_high));
    c.set_whole_run_speedup(verdict.whole.speedup);
    c.set_whole_run_ci_low(verdict.whole.ci_low);
    c.set_whole_run_ci_high(cap(verdict.whole.ci_high));
    // A gain no valid rerun confirmed (the whole run did not keep it, or a
    // rerun broke the contract) leaves the bank's results: the search trial
    // and the candidate's clean reruns, which show the same gain. Not a
    // violation of their own: a busy host can break an honest rerun.
    // (Held until no round follows: a re-verified candidate's is decided
    // by its fresh pairs.)
    if (verdict.unconfirmed || !disqualified[c.rank()].empty()) {
      unconfirmed[c.rank()].push_back(c.trial_id());
      for (const int64_t id : cand_ok[c.rank()]) unconfirmed[c.rank()].push_back(id);
    }
    // A candidate whose own numbers cannot be true is not a result: its
    // search trial and its runs leave the bank's results with it.
    if (verdict.implausible) {
      std::vector<int64_t> ids = cand_trials[c.rank()];
      ids.push_back(c.trial_id());
      for (const auto& t : trials) {
        if (std::find(ids.begin(), ids.end(), t.id) == ids.end() || t.status != ts::kOk) continue;
        out.implausible.push_back(
            {t.id, absl::StrCat("implausible: verification found ", verdict.reason)});
      }
    }
  }
  const int pick = PickPromoted(verdicts);
  const int promoted = pick < 0 ? 0 : v.candidates(pick).rank();
  // Nothing promoted, and candidates whose pairs said the host got busier
  // than the doctor found it: they get a round of fresh pairs (at most
  // spec.verify.busier_retries rounds) instead of a verdict that reads as
  // "no faster". Nothing else of this round is final until then.
  std::vector<std::string> names;  // the candidates re-verified
  const int round = std::max(1, plan.round());
  if (promoted == 0) {
    std::mt19937_64 order(spec.seed * 31 + static_cast<uint64_t>(trials.size()) +
                          static_cast<uint64_t>(round));
    const std::string baseline = EncodeConfigJson(spec.baseline);
    for (size_t i = 0; i < verdicts.size(); ++i) {
      // A busier host is retried; a candidate whose numbers cannot be true
      // or whose rerun broke the contract is not, whatever the spread.
      const CandidateVerdict& verdict = verdicts[i];
      if (!verdict.host_noisier || verdict.implausible || round > spec.verify.busier_retries ||
          !disqualified[v.candidates(static_cast<int>(i)).rank()].empty()) {
        continue;
      }
      auto& c = *v.mutable_candidates(static_cast<int>(i));
      const auto search = std::find_if(trials.begin(), trials.end(), [&](const storage::TrialRecord& t) {
        return t.id == c.trial_id();
      });
      if (search == trials.end()) continue;  // its search trial is gone: nothing to rerun
      int last = 0;
      for (const auto& [run, p] : arms[c.rank()]) last = std::max(last, run);
      absl::StrAppend(c.mutable_earlier_reason(), c.earlier_reason().empty() ? "" : "; ", "round ",
                      round, ": ", c.reason());
      c.set_first_run(last + 1);
      c.set_reason(absl::StrFormat(
          "re-verifying on %d fresh A/B pairs (round %d): round %d's pairs spread %.1f%%, the "
          "host as calibrated %.1f%%",
          spec.verify.runs, round + 1, round, 100 * c.pair_spread(),
          100 * rules.calibrated_pair_spread));
      AppendPairs(search->session_id, c.rank(), baseline, search->config, c.agent(), last + 1,
                  last + spec.verify.runs, order, now_ms, &out.retry_runs);
      names.push_back(absl::StrCat("c", c.rank()));
      unconfirmed.erase(c.rank());
    }
  }
  for (const auto& [rank, ids] : unconfirmed) {
    out.unconfirmed.insert(out.unconfirmed.end(), ids.begin(), ids.end());
  }
  if (!names.empty()) {
    v.set_round(round + 1);
    v.set_summary(absl::StrCat("round ", round, ": the host was busier than when the doctor "
                               "calibrated it; re-verifying ", absl::StrJoin(names, ", "),
                               " on fresh pairs"));
    return out;
  }
  v.set_promoted_rank(promoted);
  v.set_decided_unix_ms(now_ms);
  if (promoted > 0) {
    const auto& c = v.candidates(promoted - 1);
    out.promoted_trial_id = c.trial_id();
    v.set_summary(absl::StrFormat(
        "promoted candidate %d: speedup %.3fx%s, 95%% interval [%.3f, %.3f] over %d A/B pairs",
        promoted, c.speedup(), rules.agent_clock ? " on the agent's clock" : "", c.ci_low(),
        c.ci_high(), c.runs()));
  } else if (!rules.baseline_suspicious.empty()) {
    v.set_summary(absl::StrCat("nothing promoted: ", rules.baseline_suspicious));
  } else if (host_noisier) {
    v.set_host_noisier(true);
    v.set_summary(
        "no candidate passed verification: the host was busier during verification than when "
        "the doctor calibrated it (see each candidate's reason)");
  } else {
    v.set_summary("no candidate passed verification (see each candidate's reason)");
  }
  return out;
}

}  // namespace infrarsi
