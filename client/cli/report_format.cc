#include "client/cli/report_format.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/proto_util.h"

namespace infrarsi::client {

std::string ToJson(const google::protobuf::Message& m) { return ToStableJson(m); }

std::string FormatConfig(const google::protobuf::Map<std::string, std::string>& c) {
  std::map<std::string, std::string> sorted(c.begin(), c.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

std::string FormatSummary(const v1::SessionSummary& s) {
  std::string out = absl::StrFormat("%s  %-12s %-22s %s on %s x%d", s.session_id(),
                                    s.stage_name(), s.name(), s.workload_signature(),
                                    s.hardware().gpu(), s.hardware().count());
  if (s.baseline_step_time_s() > 0) {
    absl::StrAppendFormat(&out, "  baseline %.4fs", s.baseline_step_time_s());
  }
  if (!s.not_promoted().empty()) {
    absl::StrAppend(&out, "  nothing promoted: ", s.not_promoted());
    if (s.best_speedup() > 1) {
      absl::StrAppendFormat(&out, " (fastest search trial %.4fs, %.2fx unverified)", s.best_step_time_s(),
                            s.best_speedup());
    }
  } else if (s.promoted()) {
    absl::StrAppendFormat(&out, "  promoted %.4fs (%.2fx verified)", s.best_step_time_s(), s.best_speedup());
  } else if (s.best_speedup() > 0) {
    absl::StrAppendFormat(&out, "  best so far %.4fs (%.2fx, not verified yet)", s.best_step_time_s(),
                          s.best_speedup());
  }
  if (!s.error().empty()) absl::StrAppend(&out, "  error: ", s.error());
  if (!s.notice().empty()) absl::StrAppend(&out, "\n  waiting: ", s.notice());
  return out;
}

std::string FormatReport(const v1::SessionReport& r) {
  std::string out;
  absl::StrAppendFormat(&out, "Session %s (%s), stage %s\n", r.session_id(), r.name(), r.stage());
  absl::StrAppendFormat(&out, "Workload: %s, global batch %d, seq %d, on %s x%d; contract %s\n",
                        r.workload().model(), r.workload().global_batch(),
                        r.workload().seq_len(), r.hardware().gpu(), r.hardware().count(),
                        r.contract_hash());
  if (r.baseline().runs() > 0) {
    absl::StrAppendFormat(&out, "Baseline: %.4f s/step (median of %d runs, CV %.2f%%)  %s\n",
                          r.baseline().step_time_s(), r.baseline().runs(),
                          100.0 * r.baseline().cv(), FormatConfig(r.baseline().config()));
  } else {
    absl::StrAppend(&out, "Baseline: not measured yet (run doctor)\n");
  }
  const bool promoted = r.verification().promoted_rank() > 0;
  const bool finished = r.stage() == "searched" || r.stage() == "applied";
  if (!promoted && finished) {
    // The verdict first: a fastest trial that was not promoted is no result.
    absl::StrAppendFormat(&out, "Nothing promoted: %s\n",
                          r.verification().summary().empty() ? "no candidate cleared the noise floor"
                                                             : r.verification().summary());
  }
  if (r.best().speedup() > 0) {
    absl::StrAppendFormat(&out, "%s %.4f s/step, speedup %.3fx%s  %s\n",
                          promoted   ? "Promoted:"
                          : finished ? "Fastest search trial (not promoted, unverified):"
                                     : "Best so far (not verified yet):",
                          r.best().step_time_s(), r.best().speedup(),
                          r.best().trial_id() ? absl::StrCat(" (trial ", r.best().trial_id(), ")")
                                              : std::string(" (the baseline)"),
                          FormatConfig(r.best().config()));
  }
  int search = 0, doctor = 0, verify = 0;
  for (const auto& t : r.trials()) {
    (t.purpose() == "doctor" ? doctor : t.purpose() == "verify" ? verify : search)++;
  }
  std::map<std::string, int> by(r.failed_trials().count_by_status().begin(),
                                r.failed_trials().count_by_status().end());
  absl::StrAppendFormat(&out,
                        "Trials: %d search + %d doctor + %d verification; %d failed (%s) costing "
                        "%.1f s of %.1f s measured in total\n",
                        search, doctor, verify, r.failed_trials().count(),
                        by.empty() ? "none" : absl::StrJoin(by, ", ", absl::PairFormatter(" ")),
                        r.failed_trials().cost_s(), r.total_cost_s());
  // What the trials ran under on their hosts, each kind once with a count.
  // (each trial's uid and GPUs are its own: grouped as such).
  std::map<std::string, int> isolation;
  for (const auto& t : r.trials()) {
    if (t.isolation().empty()) continue;
    std::string key = t.isolation();
    for (const auto& [field, shown] : {std::pair<std::string, std::string>{"; uid ", "; its own uid"},
                                       {"; GPUs ", "; its slot's GPUs"}}) {
      const size_t at = key.find(field);
      if (at == std::string::npos) continue;
      const size_t end = key.find(';', at + 2);
      key = key.substr(0, at) + shown + (end == std::string::npos ? "" : key.substr(end));
    }
    ++isolation[key];
  }
  for (const auto& [what, n] : isolation) {
    absl::StrAppendFormat(&out, "  isolation (%d trials): %s\n", n, what);
  }
  if (r.infra_cost_s() > 0) {
    absl::StrAppendFormat(&out,
                          "  of which %.1f s in attempts the infrastructure failed (re-run, not "
                          "held against their settings)\n",
                          r.infra_cost_s());
  }
  const v1::Contract& c = r.contract();
  absl::StrAppendFormat(&out,
                        "Contract %s: %d tokens/step, loss within %.3g + %.3g*|loss| of the "
                        "baseline, timing tolerance %.0f%%%s%s%s\n",
                        c.hash(), c.tokens_per_step(), c.loss_abs_tol(), c.loss_rel_tol(),
                        100 * c.timing_tolerance(),
                        c.data_seed_set() ? absl::StrCat(", data seed ", c.data_seed()) : "",
                        c.precision_size() ? absl::StrCat(", precision {", absl::StrJoin(c.precision(), ","), "}") : "",
                        c.protected_files_size()
                            ? absl::StrCat(", protected: ", absl::StrJoin(c.protected_files(), ","))
                            : "");
  const v1::DoctorReport& d = r.doctor();
  if (d.runs() > 0) {
    std::map<std::string, double> phases(d.phases_s().begin(), d.phases_s().end());
    std::vector<std::string> ph;
    for (const auto& [name, secs] : phases) ph.push_back(absl::StrFormat("%s %.4fs", name, secs));
    absl::StrAppendFormat(&out,
                          "Doctor: %d runs, median %.4f s, CV %.2f%%, drift %+.2f%%, noise floor "
                          "%.2f%% (for %d A/B runs; clock resolution %.2f%%)%s%s\n",
                          d.runs(), d.median_step_time_s(), 100 * d.cv(), 100 * d.drift(),
                          100 * d.noise_floor(), d.verify_runs(), 100 * d.resolution_floor(),
                          ph.empty() ? "" : absl::StrCat("; phases: ", absl::StrJoin(ph, ", ")),
                          d.warning().empty() ? "" : absl::StrCat("; warning: ", d.warning()));
    for (const auto& a : d.agents()) {
      if (a.outlier()) {
        absl::StrAppendFormat(&out, "  outlier agent %s: median %.4f s over %d runs\n", a.agent(),
                              a.median_step_time_s(), a.runs());
      }
    }
  }
  if (!r.violations_by_kind().empty()) {
    std::map<std::string, int> v(r.violations_by_kind().begin(), r.violations_by_kind().end());
    absl::StrAppend(&out, "Contract violations (never promoted):");
    for (const auto& [kind, n] : v) {
      absl::StrAppendFormat(&out, " %s %d (%.1f s)", kind, n,
                            r.violation_cost_s_by_kind().at(kind));
    }
    absl::StrAppend(&out, "\n");
  }
  const v1::Verification& ver = r.verification();
  if (ver.candidates_size() > 0 || !ver.summary().empty()) {
    absl::StrAppend(&out, "Verification", ver.round() > 1 ? absl::StrCat(" (round ", ver.round(), ")") : "",
                    ": ", ver.summary(), "\n");
    // How widely the pairs spread against the host as the doctor found it:
    // a busier host, not a slower candidate, is told apart here.
    if (ver.calibrated_pair_spread() > 0) {
      absl::StrAppendFormat(&out, "  pair spread at calibration %.1f%%; per candidate:",
                            100 * ver.calibrated_pair_spread());
      for (const auto& cand : ver.candidates()) {
        absl::StrAppendFormat(&out, " c%d %.1f%%", cand.rank(), 100 * cand.pair_spread());
      }
      absl::StrAppend(&out, "\n");
    }
    for (const auto& cand : ver.candidates()) {
      absl::StrAppendFormat(&out, "  %s candidate %d (trial %d) on %s: %.3fx [%.3f, %.3f] over %d pairs: %s\n",
                            cand.rank() == ver.promoted_rank() ? "*" : " ", cand.rank(),
                            cand.trial_id(), cand.agent(), cand.speedup(), cand.ci_low(),
                            cand.ci_high(), cand.runs(), cand.reason());
      // A re-verified candidate: what its busier round said, and that the
      // verdict above rests on the fresh pairs only.
      if (!cand.earlier_reason().empty()) {
        absl::StrAppendFormat(&out, "      pairs from run %d only; earlier: %s\n", cand.first_run(),
                              cand.earlier_reason());
      }
      // Both clocks, and the whole run, for every verified candidate.
      if (cand.clock() == "agent") {
        absl::StrAppendFormat(&out,
                              "      agent's clock %.3fx [%.3f, %.3f]; as reported %.3fx [%.3f, "
                              "%.3f]; whole run (start to exit) %.3fx [%.3f, %.3f]\n",
                              cand.agent_speedup(), cand.agent_ci_low(), cand.agent_ci_high(),
                              cand.reported_speedup(), cand.reported_ci_low(),
                              cand.reported_ci_high(), cand.whole_run_speedup(),
                              cand.whole_run_ci_low(), cand.whole_run_ci_high());
      } else if (!cand.clock().empty()) {
        absl::StrAppend(&out, "      as reported (a simulated executor: no agent's clock)\n");
      }
    }
  }
  if (!r.recorded().empty()) absl::StrAppend(&out, "Recorded: ", r.recorded(), "\n");
  if (r.integrity_size() > 0) {
    absl::StrAppend(&out, "Integrity checks:\n");
    for (const auto& c : r.integrity()) {
      absl::StrAppendFormat(&out, "  [%s] %s: %s\n", c.ran() ? "ran" : "skipped", c.name(),
                            c.detail());
    }
  }
  if (r.source_audit_size() > 0) {
    absl::StrAppend(&out, "Source paths the promoted patches change:\n");
    for (const auto& a : r.source_audit()) {
      absl::StrAppend(&out, "  ", a.path(), " (patch ", a.patch(), "): ",
                      a.editable_glob().empty() ? "OUTSIDE the editable scope"
                                                : absl::StrCat("inside editable '", a.editable_glob(), "'"),
                      "\n");
    }
  }
  if (r.llm_patches_size() > 0 || !r.llm_patches_note().empty()) {
    absl::StrAppend(&out, "Patches an LLM proposed", r.llm_patches_note().empty() ? "" : absl::StrCat(" (", r.llm_patches_note(), ")"),
                    ":\n");
    for (const auto& p : r.llm_patches()) {
      if (p.accepted()) {
        absl::StrAppendFormat(&out, "  %s: admitted as knob %s (changes %s)%s: %s\n", p.name(), p.knob(),
                              absl::StrJoin(p.paths(), ", "),
                              p.has_prior() ? absl::StrFormat(", prior %+.2f", p.prior_time()) : "",
                              p.rationale());
      } else {
        absl::StrAppendFormat(&out, "  %s: refused: %s\n", p.name(), p.reason());
      }
    }
  }
  for (const auto& b : r.broken_hosts()) {
    absl::StrAppendFormat(
        &out, "Broken host: agent %s failed %d trial(s) that succeeded on other agents%s; first: %s\n",
        b.agent_id(), b.failed(),
        b.failed() >= 2 ? " (quarantined: `infrarsi agents` shows it)" : "", b.first_error());
  }
  for (const auto& n : r.noted_nodes()) {
    absl::StrAppendFormat(&out,
                          "Failing Slurm node: %s failed %d trial(s) (later jobs exclude it); "
                          "first: %s\n",
                          n.node(), n.failed(), n.first_error());
  }
  if (r.failure_costs_size() > 0) {
    absl::StrAppend(&out, "Failed-trial costs (GPU-seconds):\n");
    for (const auto& c : r.failure_costs()) {
      if (c.knob().empty()) {
        absl::StrAppendFormat(&out, "  %-28s %4d trials %10.1f\n", c.failure_class(), c.trials(), c.gpu_s());
      } else {
        absl::StrAppendFormat(&out, "    %-26s %4d trials %10.1f\n",
                              absl::StrCat(c.knob(), c.knob() == "patch" ? " " : "=", c.value()),
                              c.trials(), c.gpu_s());
      }
    }
  }
  if (!r.applied_commit().empty()) absl::StrAppend(&out, "Applied as commit ", r.applied_commit(), "\n");
  const v1::SearchSummary& ss = r.search();
  if (!ss.strategy().empty()) {
    std::map<std::string, int> why(ss.proposals_by_reason().begin(),
                                   ss.proposals_by_reason().end());
    std::string picks;
    for (const auto& [k, n] : why) absl::StrAppend(&picks, picks.empty() ? "" : ", ", k, " ", n);
    absl::StrAppend(&out, "Search: ", ss.strategy(), ", priors ", ss.priors(), ", ",
                    ss.warm_starts(), " bank settings offered, ", ss.related_trials(),
                    " bank trials learned from; proposals: ",
                    picks.empty() ? "none" : picks, "\n");
    if (!ss.stop_reason().empty()) {
      absl::StrAppend(&out, "  stopped: ", ss.stop_reason(), "\n");
    }
    if (ss.knob_effects_size() > 0) {
      int settings = 0;
      for (const auto& e : ss.knob_effects()) settings = std::max(settings, e.time_avg().settings());
      absl::StrAppend(
          &out,
          "  Knob values against the baseline's value: % change of step time and of peak memory\n"
          "  (negative: faster, smaller) with 95% intervals. avg: averaged over the settings the\n"
          "  session ran (up to ", settings, "), each with only this knob changed; at best: at the\n"
          "  fastest of them; prior: what the priors said; revised: the prior revised by the runs.\n");
      absl::StrAppendFormat(&out, "  %-28s %6s %-22s %-22s %16s %-22s %9s  %s\n", "knob value",
                            "trials", "time % avg", "time % at best", "prior / revised",
                            "memory % avg", "GiB", "flag");
      auto pct = [](const v1::PercentEffect& p) {
        if (!p.known()) return std::string("-");
        return absl::StrFormat("%+.1f [%+.1f, %+.1f]", p.pct(), p.low(), p.high());
      };
      for (const auto& e : ss.knob_effects()) {
        const std::string prior =
            e.has_prior() ? absl::StrFormat("%+.0f / %+.0f", 100.0 * std::expm1(e.prior_time()),
                                            e.revised_time_avg().pct())
                          : std::string("-");
        absl::StrAppendFormat(&out, "  %-28s %6d %-22s %-22s %16s %-22s %+9.1f  %s\n",
                              absl::StrCat(e.knob(), "=", e.value()), e.trials(), pct(e.time_avg()),
                              pct(e.time_at_best()), prior, pct(e.mem_avg()), e.memory_price_gib(),
                              absl::StrCat(e.miscalibrated() ? "MISCALIBRATED: " + e.note() : "",
                                           e.confounded_with().empty()
                                               ? ""
                                               : absl::StrCat(e.miscalibrated() ? "; " : "",
                                                              "CONFOUNDED with ", e.confounded_with(),
                                                              ": it only ran beside it, the effect may be "
                                                              "that value's")));
      }
      absl::StrAppend(&out,
                      "  GiB: predicted peak of the baseline with this value, less the baseline's.\n");
      if (ss.memory_sigma() > 0) {
        absl::StrAppendFormat(&out,
                              "  memory model: peaks predicted within a factor of %.2f (1 sd), learned "
                              "from the runs\n",
                              std::exp(ss.memory_sigma()));
      }
    }
  }
  absl::StrAppend(&out, "\n");
  // step_s: as the process reported it; agent_s: the agent's clock over
  // the timed window, per step ("-" for simulated executors).
  absl::StrAppend(&out,
                  "step_s: the trial's step time (median of its timed steps as reported, confirmed "
                  "by the agent's clock); agent_s: the agent's clock over the timed window, per "
                  "step (mean); cost_s: wall seconds on the agent\n");
  absl::StrAppendFormat(&out, "%6s  %-7s %-9s %9s %9s %9s %4s %9s  %-18s %s\n", "trial", "purpose",
                        "status", "step_s", "agent_s", "peak_GiB", "att", "cost_s", "agent",
                        "setting");
  for (const auto& t : r.trials()) {
    absl::StrAppendFormat(
        &out, "%6d  %-7s %-9s %9s %9s %9.1f %4d %9.1f  %-18s %s%s\n", t.id(), t.purpose(),
        t.status(), t.status() == "ok" ? absl::StrFormat("%.4f", t.step_time_s()) : "-",
        t.observed_step_time_s() > 0 ? absl::StrFormat("%.4f", t.observed_step_time_s()) : "-",
        t.peak_mem_gib(), t.attempts(), t.cost_s(), t.agent(), FormatConfig(t.config()),
        t.error().empty() ? "" : absl::StrCat("  [", t.error(), "]"));
    if (!t.slurm().job_id().empty()) {
      const v1::SlurmJob& j = t.slurm();
      absl::StrAppendFormat(&out, "%6s  slurm job %s %s%s%s, queued %.1f s%s\n", "", j.job_id(),
                            j.state(), j.state() == "PENDING" ? " (queued in Slurm)" : "",
                            j.nodes().empty() ? "" : " on " + j.nodes(), j.queued_s(),
                            j.failed_nodes().empty()
                                ? ""
                                : absl::StrCat("; nodes failed: ", absl::StrJoin(j.failed_nodes(), ",")));
    }
  }
  return out;
}

std::string FormatBank(const v1::QueryExperienceResponse& r) {
  std::string out =
      absl::StrFormat("%6s  %-18s %-24s %-8s %-7s %-7s %9s %9s  %s\n", "id", "session", "workload",
                      "gpu", "purpose", "status", "step_s", "peak_GiB", "setting");
  for (const auto& e : r.entries()) {
    absl::StrAppendFormat(&out, "%6d  %-18s %-24s %-8s %-7s %-7s %9.4f %9.1f  %s\n", e.id(),
                          e.session_id(), e.workload_signature(), e.gpu_model(), e.purpose(),
                          e.status(), e.step_time_s(), e.peak_mem_gib(), FormatConfig(e.config()));
  }
  if (!r.next_page_token().empty()) absl::StrAppend(&out, "(more: --page-token ", r.next_page_token(), ")\n");
  return out;
}

std::string FormatAgents(const v1::ListAgentsResponse& r) {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  std::string out = absl::StrFormat("%-16s %-16s %-10s %-16s %9s %6s %6s %6s  %s\n", "agent",
                                    "host", "gpus", "executors", "last seen", "ok", "failed",
                                    "other", "state");
  for (const auto& a : r.agents()) {
    const std::string seen =
        a.last_seen_unix_ms() > 0
            ? absl::StrFormat("%ds ago", std::max<int64_t>(0, (now_ms - a.last_seen_unix_ms()) / 1000))
            : std::string("never");
    std::string state = a.state();
    if (!a.live() && a.state() != "gone") state += " (not heard from)";
    if (!a.state_reason().empty()) state += ": " + a.state_reason();
    absl::StrAppendFormat(&out, "%-16s %-16s %-10s %-16s %9s %6d %6d %6d  %s\n", a.agent_id(),
                          a.host(), absl::StrCat(a.gpu_count(), " x ", a.gpu_model()),
                          absl::StrJoin(a.executors(), ","), seen, a.trials_ok(),
                          a.trials_failed(), a.trials_other(), state);
  }
  if (r.agents().empty()) out += "(no agents)\n";
  return out;
}

}  // namespace infrarsi::client
