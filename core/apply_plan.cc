#include "core/apply_plan.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace infrarsi {

void BuildApplyPlan(const ApplyInputs& in, v1::ApplyResponse* out) {
  const SessionSpec& spec = *in.spec;
  const v1::Verification::Candidate& cand = in.promoted;
  const double speedup = cand.speedup();
  const std::string path = absl::StrCat("infrarsi/", in.session_name, ".launch.yaml");
  std::string file = absl::StrCat(
      "# Launch setting promoted by InfraRSI. Generated; edit the session, not this file.\n",
      "session_id: ", in.session_id, "\n", "workload: ", in.workload_signature, "\n",
      "hardware: ", spec.gpu, " x", spec.gpu_count, "\n",
      absl::StrFormat("baseline_step_time_s: %.6f\nspeedup: %.4f\nspeedup_ci95: [%.4f, %.4f]\n",
                      in.baseline_step_time_s, speedup, cand.ci_low(), cand.ci_high()),
      "contract_hash: ", in.contract_hash, "\n", "setting:\n");
  for (const Knob& k : spec.knobs) {
    auto it = in.config.find(k.name);
    absl::StrAppend(&file, "  ", k.name, ": ", it == in.config.end() ? "" : it->second, "\n");
  }
  const std::vector<const PatchSpec*> patches = spec.PatchesOn(in.config);
  std::string patch_lines;
  if (!patches.empty()) {
    absl::StrAppend(&file, "patches:\n");
    for (const PatchSpec* p : patches) {
      absl::StrAppend(&file, "  - ", p->name, "\n");
      absl::StrAppend(&patch_lines, "  ", p->name, ": ",
                      p->rationale.empty() ? "(no rationale)" : p->rationale, " [",
                      absl::StrJoin(p->paths, ", "), "]\n");
    }
  }
  const v1::Contract& c = in.contract;
  std::string checks = absl::StrFormat(
      "tokens/step %d, loss within %.3g + %.3g*|loss| of the baseline, timing on the agent's "
      "clock (tolerance %.0f%%)",
      c.tokens_per_step(), c.loss_abs_tol(), c.loss_rel_tol(), 100 * c.timing_tolerance());
  if (c.data_seed_set()) absl::StrAppend(&checks, ", data seed ", c.data_seed());
  if (c.precision_size() > 0) {
    absl::StrAppend(&checks, ", precision in {", absl::StrJoin(c.precision(), ", "), "}");
  }
  if (c.protected_files_size() > 0) {
    absl::StrAppend(&checks, ", protected files unchanged (",
                    absl::StrJoin(c.protected_files(), ", "), ")");
  }
  // Every path the commit changes: the patches' files and the launch file.
  std::set<std::string> paths = {path};
  for (const PatchSpec* p : patches) paths.insert(p->paths.begin(), p->paths.end());
  std::string message = absl::StrFormat(
      "infrarsi: promote %s for %s (%.2fx)\n\n"
      "Session: %s\nWorkload: %s on %s x%d\n"
      "Baseline: %.4f s/step (median of %d runs, CV %.2f%%, noise floor %.2f%%)\n"
      "Speedup: %.3fx, 95%% interval [%.3f, %.3f] over %d interleaved A/B pairs (trial %d)\n"
      "Setting: %s\nContract %s checks passed: %s\nSource paths changed: %s\n",
      patches.empty() ? "launch setting" : "launch setting and patches", in.session_name,
      speedup, in.session_id, in.workload_signature, spec.gpu, spec.gpu_count,
      in.baseline_step_time_s, in.baseline_runs, 100.0 * in.baseline_cv, 100.0 * in.noise_floor,
      speedup, cand.ci_low(), cand.ci_high(), cand.runs(), in.trial_id, ConfigKey(in.config),
      in.contract_hash, checks, absl::StrJoin(paths, ", "));
  if (!patch_lines.empty()) absl::StrAppend(&message, "Patches:\n", patch_lines);
  if (!spec.repository.base_commit.empty()) {
    absl::StrAppend(&message, "Tuned on: ", spec.repository.base_commit, "\n");
  }
  out->set_message(message);
  out->set_base_commit(spec.repository.base_commit);
  for (const std::string& p : paths) out->add_files(p);
  for (const PatchSpec* p : patches) {
    v1::ApplyResponse::Patch* ap = out->add_patches();
    ap->set_name(p->name);
    ap->set_diff(p->diff);
  }
  v1::ApplyResponse::File* f = out->add_new_files();
  f->set_path(path);
  f->set_content(file);
  out->set_author_name(kApplyAuthorName);
  out->set_author_email(kApplyAuthorEmail);
  out->set_author_time_unix_s(in.decided_unix_s);
}

}  // namespace infrarsi
