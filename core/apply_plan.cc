#include "core/apply_plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/log_readers.h"
#include "core/patch_scope.h"
#include "base/status_macros.h"

namespace infrarsi {

void BuildApplyPlan(const ApplyInputs& in, v1::ApplyResponse* out) {
  const SessionSpec& spec = *in.spec;
  const v1::Verification::Candidate& cand = in.promoted;
  const double speedup = cand.speedup();
  const std::string path = absl::StrCat("infrarsi/", in.session_name, ".launch.yaml");
  const std::vector<const PatchSpec*> patches = spec.PatchesOn(in.config);
  // Typed YAML: strings double-quoted, booleans and numbers as such (a
  // bare `on` or `no` would read back as a boolean, a bare `1e3` as a
  // number), the exact command line the promoted trial ran.
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "session_id" << YAML::Value << YAML::DoubleQuoted << in.session_id;
  y << YAML::Key << "workload" << YAML::Value << YAML::DoubleQuoted << in.workload_signature;
  y << YAML::Key << "hardware" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "gpu"
    << YAML::Value << YAML::DoubleQuoted << spec.gpu << YAML::Key << "count" << YAML::Value
    << spec.gpu_count << YAML::EndMap;
  y << YAML::Key << "baseline_step_time_s" << YAML::Value << absl::StrFormat("%.6f", in.baseline_step_time_s);
  y << YAML::Key << "speedup" << YAML::Value << absl::StrFormat("%.4f", speedup);
  y << YAML::Key << "speedup_ci95" << YAML::Value << YAML::Flow << YAML::BeginSeq
    << absl::StrFormat("%.4f", cand.ci_low()) << absl::StrFormat("%.4f", cand.ci_high())
    << YAML::EndSeq;
  y << YAML::Key << "contract_hash" << YAML::Value << YAML::DoubleQuoted << in.contract_hash;
  y << YAML::Key << "setting" << YAML::Value << YAML::BeginMap;
  for (const Knob& k : spec.knobs) {
    auto it = in.config.find(k.name);
    const std::string v = it == in.config.end() ? "" : it->second;
    const bool patch_knob = std::any_of(spec.patches.begin(), spec.patches.end(),
                                        [&](const PatchSpec& p) { return p.knob == k.name; });
    int64_t as_int = 0;
    double as_double = 0;
    y << YAML::Key << k.name << YAML::Value;
    if (v == "true" || v == "false" || (patch_knob && (v == "on" || v == "off"))) {
      y << (v == "true" || v == "on");
    } else if (absl::SimpleAtoi(v, &as_int)) {
      y << as_int;
    } else if (absl::SimpleAtod(v, &as_double) && std::isfinite(as_double) &&
               v.find_first_not_of("0123456789.eE+-") == std::string::npos) {
      y << v;  // a plain decimal: YAML reads it as the number it is
    } else {
      y << YAML::DoubleQuoted << v;
    }
  }
  y << YAML::EndMap;
  y << YAML::Key << "patches" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const PatchSpec* p : patches) y << YAML::DoubleQuoted << p->name;
  y << YAML::EndSeq;
  // The process the promoted trial ran ("{knob}" filled in); none for
  // replayed or simulated sessions.
  y << YAML::Key << "command" << YAML::Value;
  if (spec.Executor().runs_code) {
    const std::vector<std::string> argv = SubstituteCommand(spec.process.argv, in.config);
    y << YAML::Flow << YAML::BeginSeq;
    for (const std::string& a : argv) y << YAML::DoubleQuoted << a;
    y << YAML::EndSeq;
    y << YAML::Key << "workdir" << YAML::Value << YAML::DoubleQuoted << spec.process.workdir;
  } else {
    y << YAML::Null;
  }
  y << YAML::EndMap;
  const std::string file = absl::StrCat(
      "# Launch setting promoted by InfraRSI. Generated; edit the session, not this file.\n",
      y.c_str(), "\n");
  std::string patch_lines;
  for (const PatchSpec* p : patches) {
    absl::StrAppend(&patch_lines, "  ", p->name, ": ",
                    p->rationale.empty() ? "(no rationale)" : p->rationale, " [",
                    absl::StrJoin(p->paths, ", "), "]\n");
  }
  const v1::Contract& c = in.contract;
  // Only what ran: a replayed or simulated session ran no process to time,
  // and a log reader whose lines state no tokens checked the contract's
  // figure only through the loss (core/integrity.cc says the same).
  const bool process = spec.Executor().runs_code;
  const ReaderTraits* reader = process && !spec.process.metrics.UsesHarness()
                                   ? ReaderTraitsOf(spec.process.metrics.reader)
                                   : nullptr;
  const bool tokens_checked = !process || spec.process.metrics.UsesHarness() ||
                              (reader != nullptr && reader->tokens);
  std::string checks = absl::StrFormat(
      "tokens/step %d%s, loss within %.3g + %.3g*|loss| of the baseline, %s",
      c.tokens_per_step(),
      tokens_checked ? "" : " (not stated by the log: checked through the loss only)",
      c.loss_abs_tol(), c.loss_rel_tol(),
      process ? absl::StrFormat("timing on the agent's clock (tolerance %.0f%%)",
                                100 * c.timing_tolerance())
              : absl::StrCat("timing not checked (the ", spec.ExecutorName(),
                             " executor runs no process to time)"));
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
  out->set_message(ShowControlChars(message));
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

absl::Status CheckApplyPlan(const v1::ApplyResponse& plan) {
  for (int i = 0; i < plan.patches_size(); ++i) {
    const auto& p = plan.patches(i);
    const std::string field = absl::StrCat("plan.patches[", i, "]");
    auto files = ParsePatchedFiles(p.diff());
    if (!files.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", files.status().message()));
    }
    // The scope is the whole repository but git's own files: the CLI does
    // not take the server's word for the contract's.
    if (absl::Status st = CheckPatchScope(p.name(), *files, {"**"}, {}); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", st.message()));
    }
  }
  for (int i = 0; i < plan.new_files_size(); ++i) {
    const std::string& path = plan.new_files(i).path();
    const std::string field = absl::StrCat("plan.new_files[", i, "]");
    const PatchedFile f{path};
    if (absl::Status st = CheckPatchScope("", {f}, {"infrarsi/**"}, {}); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", ShowControlChars(path), "' is not a plain path below infrarsi/ (",
          absl::StripPrefix(st.message(), "patches[]: "), ")"));
    }
  }
  return absl::OkStatus();
}

std::string ShowControlChars(absl::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    const unsigned char next = i + 1 < message.size() ? static_cast<unsigned char>(message[i + 1]) : 0;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {
      absl::StrAppendFormat(&out, "\\u%04x", next);
      ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

}  // namespace infrarsi
