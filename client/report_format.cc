#include "client/report_format.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi::client {

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

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
  if (s.best_speedup() > 0) {
    absl::StrAppendFormat(&out, "  best %.4fs (%.2fx)", s.best_step_time_s(), s.best_speedup());
  }
  if (!s.error().empty()) absl::StrAppend(&out, "  error: ", s.error());
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
  if (r.best().speedup() > 0) {
    absl::StrAppendFormat(&out, "Best:     %.4f s/step, speedup %.3fx%s  %s\n",
                          r.best().step_time_s(), r.best().speedup(),
                          r.best().trial_id() ? absl::StrCat(" (trial ", r.best().trial_id(), ")")
                                              : std::string(" (the baseline)"),
                          FormatConfig(r.best().config()));
  }
  int search = 0, doctor = 0;
  for (const auto& t : r.trials()) (t.purpose() == "doctor" ? doctor : search)++;
  std::map<std::string, int> by(r.failed_trials().count_by_status().begin(),
                                r.failed_trials().count_by_status().end());
  absl::StrAppendFormat(&out,
                        "Trials: %d search + %d doctor; %d failed (%s) costing %.1f s of %.1f s "
                        "measured in total\n",
                        search, doctor, r.failed_trials().count(),
                        by.empty() ? "none" : absl::StrJoin(by, ", ", absl::PairFormatter(" ")),
                        r.failed_trials().cost_s(), r.total_cost_s());
  if (!r.applied_commit().empty()) absl::StrAppend(&out, "Applied as commit ", r.applied_commit(), "\n");
  absl::StrAppend(&out, "\n");
  absl::StrAppendFormat(&out, "%6s  %-7s %-9s %9s %9s %4s %9s  %-18s %s\n", "trial", "purpose",
                        "status", "step_s", "peak_GiB", "att", "cost_s", "agent", "setting");
  for (const auto& t : r.trials()) {
    absl::StrAppendFormat(
        &out, "%6d  %-7s %-9s %9s %9.1f %4d %9.1f  %-18s %s%s\n", t.id(), t.purpose(),
        t.status(), t.status() == "ok" ? absl::StrFormat("%.4f", t.step_time_s()) : "-",
        t.peak_mem_gib(), t.attempts(), t.cost_s(), t.agent(), FormatConfig(t.config()),
        t.error().empty() ? "" : absl::StrCat("  [", t.error(), "]"));
  }
  return out;
}

std::string FormatBank(const v1::QueryExperienceResponse& r) {
  std::string out = absl::StrFormat("%6s  %-18s %-24s %-8s %-7s %9s %9s  %s\n", "id", "session",
                                    "workload", "gpu", "status", "step_s", "peak_GiB", "setting");
  for (const auto& e : r.entries()) {
    absl::StrAppendFormat(&out, "%6d  %-18s %-24s %-8s %-7s %9.4f %9.1f  %s\n", e.id(),
                          e.session_id(), e.workload_signature(), e.gpu_model(), e.status(),
                          e.step_time_s(), e.peak_mem_gib(), FormatConfig(e.config()));
  }
  if (!r.next_page_token().empty()) absl::StrAppend(&out, "(more: --page-token ", r.next_page_token(), ")\n");
  return out;
}

}  // namespace infrarsi::client
