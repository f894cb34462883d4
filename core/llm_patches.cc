#include "core/llm_patches.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/llm_priors.h"
#include "core/patch_scope.h"
#include "base/status_macros.h"

namespace infrarsi {

std::string LlmPatchRequestJson(const LlmPatchContext& c, const std::string& model) {
  const SessionSpec& spec = *c.spec;
  std::string phases;
  if (c.doctor != nullptr) {
    std::map<std::string, double> sorted(c.doctor->phases_s().begin(), c.doctor->phases_s().end());
    for (const auto& [phase, s] : sorted) absl::StrAppend(&phases, "- ", phase, ": ", s, " s per step\n");
    absl::StrAppend(&phases, "- whole step (median): ", c.doctor->median_step_time_s(), " s\n");
  }
  std::string files;
  for (const auto& [path, text] : c.files) absl::StrAppend(&files, "=== ", path, " ===\n", text, "\n");
  std::string knobs;
  for (const Knob& k : spec.knobs) {
    absl::StrAppend(&knobs, "- ", k.name, ": [", absl::StrJoin(k.values, ", "), "], baseline ",
                    spec.baseline.at(k.name), "\n");
  }
  const ContractSpec& ct = spec.contract;
  const std::string question = absl::StrCat(
      "You are an expert in training performance. Propose code patches that make one training "
      "step of this job faster without changing what it computes.\n",
      "Workload ", spec.WorkloadSignature(), " on ", spec.gpu_count, " x ", spec.gpu, ".\n",
      "The contract every trial is checked against (it cannot change): ", ct.tokens_per_step,
      " tokens per step; the loss per step must match the baseline's within ", ct.loss_abs_tol,
      " + ", ct.loss_rel_tol, " x |loss|; precision ",
      ct.precision.empty() ? std::string("any") : absl::StrJoin(ct.precision, ", "),
      "; editable files: ", absl::StrJoin(ct.editable, ", "), "; protected files (never change): ",
      absl::StrJoin(ct.protected_files, ", "), ".\n",
      "Time per step by phase (the doctor's profile of the baseline):\n", phases,
      "Launch knobs searched alongside your patches:\n", knobs,
      "What the experience bank knows: ", c.bank.empty() ? std::string("nothing yet") : c.bank, "\n",
      "The editable files at the locked commit:\n", files,
      "Answer with one JSON object only: {\"patches\": [{\"name\": \"short-name\", \"diff\": "
      "\"a unified diff (git format, paths a/ and b/) against the files above\", \"rationale\": "
      "\"why it is faster\", \"prior\": {\"time\": -0.1, \"time_sd\": 0.3}}]}, at most ",
      kMaxLlmPatches, " patches; prior.time is the expected effect on log step time.");
  return absl::StrCat("{\"model\":", JsonQuote(model), ",\"temperature\":0,\"messages\":[",
                      "{\"role\":\"system\",\"content\":", JsonQuote("Answer with JSON only."), "},",
                      "{\"role\":\"user\",\"content\":", JsonQuote(question), "}]}");
}

absl::StatusOr<LlmPatchRound> AdmitLlmPatches(const std::string& body, const SourceRepo* repo,
                                              SessionSpec* spec) {
  ASSIGN_OR_RETURN(const std::string content, LlmAnswerContent(body));
  YAML::Node root;
  try {
    root = YAML::Load(content);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("response content: not JSON: ", e.msg));
  }
  if (!root.IsMap() || !root["patches"] || !root["patches"].IsSequence()) {
    return absl::InvalidArgumentError("response content.patches: missing or not a list");
  }
  LlmPatchRound round;
  round.asked = true;
  SessionSpec work = *spec;
  const size_t before = work.patches.size();
  int admitted = 0;
  // Read as far as the cap: the rest is one outcome (the round is stored
  // with the session), however many there are.
  const size_t proposed = root["patches"].size();
  for (size_t i = 0; i < std::min(proposed, static_cast<size_t>(kMaxLlmProposals)); ++i) {
    const YAML::Node p = root["patches"][i];
    LlmPatchOutcome o;
    o.name = absl::StrCat("proposal ", i + 1);
    if (!p.IsMap() || !p["name"] || !p["name"].IsScalar() || !p["diff"] || !p["diff"].IsScalar()) {
      o.reason = "a proposal needs a name and a diff";
      round.outcomes.push_back(std::move(o));
      continue;
    }
    o.name = absl::StrCat("llm-", p["name"].Scalar().substr(0, 100));
    if (p["rationale"] && p["rationale"].IsScalar()) o.rationale = p["rationale"].Scalar().substr(0, 500);
    if (admitted >= kMaxLlmPatches) {
      o.reason = absl::StrCat("more than ", kMaxLlmPatches, " patches");
      round.outcomes.push_back(std::move(o));
      continue;
    }
    PatchSpec ps;
    ps.name = o.name;
    ps.rationale = o.rationale;
    ps.diff = p["diff"].Scalar();
    if (p["prior"] && p["prior"].IsMap()) {
      double t = NAN, sd = 0.5;
      const YAML::Node pr = p["prior"];
      const bool readable = pr["time"] && pr["time"].IsScalar() &&
                            YAML::convert<double>::decode(pr["time"], t) &&
                            (!pr["time_sd"] || YAML::convert<double>::decode(pr["time_sd"], sd));
      // The limits a spec's own patch priors have.
      if (!readable || !std::isfinite(t) || t < -2 || t > 2 || !std::isfinite(sd) || sd < 1e-3 || sd > 3) {
        o.reason = "prior: time must be in [-2, 2] and time_sd in [0.001, 3]";
        round.outcomes.push_back(std::move(o));
        continue;
      }
      ps.has_prior = true;
      ps.prior_time = t;
      ps.prior_time_sd = sd;
    }
    const absl::Status st = AddCheckedPatch(ps, repo, absl::StrCat("patches[", o.name, "]"), &work);
    if (!st.ok()) {
      o.reason = std::string(st.message());
      round.outcomes.push_back(std::move(o));
      continue;
    }
    const PatchSpec& added = work.patches.back();
    o.accepted = true;
    o.paths = added.paths;
    o.has_prior = added.has_prior;
    o.prior_time = added.prior_time;
    o.prior_time_sd = added.prior_time_sd;
    o.diff = added.diff;
    round.outcomes.push_back(std::move(o));
    ++admitted;
  }
  if (proposed > static_cast<size_t>(kMaxLlmProposals)) {
    LlmPatchOutcome rest;
    rest.name = absl::StrCat("proposals ", kMaxLlmProposals + 1, "-", proposed);
    rest.reason = absl::StrCat(proposed - kMaxLlmProposals, " more proposals not read (at most ",
                               kMaxLlmProposals, " are)");
    round.outcomes.push_back(std::move(rest));
  }
  // Pairs that do not apply one after the other are never combined, as
  // for a spec's own patches.
  if (repo != nullptr && !work.repository.base_commit.empty()) {
    for (size_t j = before; j < work.patches.size(); ++j) {
      for (size_t i = 0; i < j; ++i) {
        auto both = repo->CheckPatch(work.repository.url, work.repository.base_commit,
                                     {work.patches[i].diff}, work.patches[j].diff);
        if (!both.ok()) {
          work.patch_conflicts.emplace_back(work.patches[i].name, work.patches[j].name);
          round.conflicts.emplace_back(work.patches[i].name, work.patches[j].name);
        }
      }
    }
  }
  if (admitted == 0) round.note = "no proposal was admitted";
  *spec = std::move(work);
  return round;
}

std::string EncodeLlmPatchRound(const LlmPatchRound& r) {
  std::string out = absl::StrCat("{\"asked\":", r.asked ? "true" : "false", ",\"note\":", JsonQuote(r.note),
                                 ",\"outcomes\":[");
  for (size_t i = 0; i < r.outcomes.size(); ++i) {
    const LlmPatchOutcome& o = r.outcomes[i];
    std::vector<std::string> paths;
    for (const std::string& p : o.paths) paths.push_back(JsonQuote(p));
    absl::StrAppend(&out, i ? "," : "", "{\"name\":", JsonQuote(o.name), ",\"rationale\":",
                    JsonQuote(o.rationale), ",\"accepted\":", o.accepted ? "true" : "false",
                    ",\"reason\":", JsonQuote(o.reason), ",\"paths\":[", absl::StrJoin(paths, ","),
                    "],\"has_prior\":", o.has_prior ? "true" : "false", ",\"prior_time\":", o.prior_time,
                    ",\"prior_time_sd\":", o.prior_time_sd, ",\"diff\":", JsonQuote(o.diff), "}");
  }
  absl::StrAppend(&out, "],\"conflicts\":[");
  for (size_t i = 0; i < r.conflicts.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "[", JsonQuote(r.conflicts[i].first), ",",
                    JsonQuote(r.conflicts[i].second), "]");
  }
  absl::StrAppend(&out, "]}");
  return out;
}

LlmPatchRound DecodeLlmPatchRound(const std::string& json) {
  LlmPatchRound r;
  try {
    const YAML::Node n = YAML::Load(json);
    if (!n.IsMap()) return r;
    if (n["asked"]) r.asked = n["asked"].as<bool>();
    if (n["note"]) r.note = n["note"].as<std::string>();
    if (n["outcomes"] && n["outcomes"].IsSequence()) {
      for (const auto& o : n["outcomes"]) {
        LlmPatchOutcome x;
        x.name = o["name"].as<std::string>("");
        x.rationale = o["rationale"].as<std::string>("");
        x.accepted = o["accepted"].as<bool>(false);
        x.reason = o["reason"].as<std::string>("");
        if (o["paths"] && o["paths"].IsSequence()) {
          for (const auto& p : o["paths"]) x.paths.push_back(p.as<std::string>());
        }
        x.has_prior = o["has_prior"].as<bool>(false);
        x.prior_time = o["prior_time"].as<double>(0);
        x.prior_time_sd = o["prior_time_sd"].as<double>(0.5);
        x.diff = o["diff"].as<std::string>("");
        r.outcomes.push_back(std::move(x));
      }
    }
    if (n["conflicts"] && n["conflicts"].IsSequence()) {
      for (const auto& c : n["conflicts"]) {
        if (c.IsSequence() && c.size() == 2) r.conflicts.emplace_back(c[0].as<std::string>(), c[1].as<std::string>());
      }
    }
  } catch (const YAML::Exception&) {
    // Written by this code; a record that does not read is no round.
    return LlmPatchRound();
  }
  return r;
}

absl::Status RestoreLlmPatches(const LlmPatchRound& round, SessionSpec* spec) {
  for (const LlmPatchOutcome& o : round.outcomes) {
    if (!o.accepted) continue;
    PatchSpec ps;
    ps.name = o.name;
    ps.rationale = o.rationale;
    ps.diff = o.diff;
    ps.has_prior = o.has_prior;
    ps.prior_time = o.prior_time;
    ps.prior_time_sd = o.prior_time_sd;
    RETURN_IF_ERROR(AddCheckedPatch(std::move(ps), nullptr, absl::StrCat("patches[", o.name, "]"), spec));
  }
  for (const auto& c : round.conflicts) spec->patch_conflicts.push_back(c);
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> EditableFilesForLlm(const SessionSpec& spec,
                                                                     const SourceRepo* repo) {
  std::vector<std::pair<std::string, std::string>> out;
  if (repo == nullptr) return out;
  auto files = repo->ListFiles(spec.repository.url, spec.repository.base_commit);
  if (!files.ok()) return out;
  size_t total = 0;
  for (const std::string& f : *files) {
    // In scope exactly as a patch changing it would be.
    if (!CheckPatchScope("", {PatchedFile{f}}, spec.contract.editable, spec.contract.protected_files).ok()) {
      continue;
    }
    auto text = repo->ReadFile(spec.repository.url, spec.repository.base_commit, f, 64 << 10);
    if (!text.ok() || total + text->size() > kMaxLlmContextBytes) continue;
    total += text->size();
    out.emplace_back(f, *std::move(text));
  }
  return out;
}

}  // namespace infrarsi
