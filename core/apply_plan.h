// What `apply` commits: the promoted launch setting (a launch file) and its
// patches, with a message that carries the verdict and the contract checks.
// The server builds the plan and commits nowhere; the CLI makes the commit
// in the caller's own clone. Pure and deterministic: the same session gives
// the same plan, author time included, so a retried commit is the same
// commit.
#ifndef INFRARSI_CORE_APPLY_PLAN_H_
#define INFRARSI_CORE_APPLY_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

struct ApplyInputs {
  const SessionSpec* spec = nullptr;        // required
  std::string session_id, session_name, workload_signature, contract_hash;
  double baseline_step_time_s = 0, baseline_cv = 0, noise_floor = 0;
  int baseline_runs = 0;
  v1::Verification::Candidate promoted;     // the promoted candidate
  int64_t trial_id = 0;                     // its search trial
  Config config;                            // its setting
  v1::Contract contract;
  int64_t decided_unix_s = 0;               // when the verification decided (author time)
};

// Fills `out` (all but commit, branch, dry_run, note).
void BuildApplyPlan(const ApplyInputs& in, v1::ApplyResponse* out);

// Holds a plan, as a server sent it, to the rules a patch faces at Init
// before the CLI writes anything: each patch read by libgit2 changes only
// regular files, keeps their modes, and stays out of .git and git's own
// files (.gitmodules, .gitattributes); each new file is a plain path below
// infrarsi/ (no link, '..', absolute path or control byte). INVALID_ARGUMENT
// naming the field and path otherwise. A hostile server cannot make apply
// commit a link to ~/.ssh or a submodule with an ext:: URL.
absl::Status CheckApplyPlan(const v1::ApplyResponse& plan);

// `text` without control characters (ESC, OSC and the rest, C1 too): C0
// bytes and DEL written out as "\x1b", C1 (UTF-8 C2 80 to C2 9F) as
// "\u009b", so a log, a commit or a terminal shows them and never obeys
// them. Newlines and tabs stay; other UTF-8 passes. Commit messages carry
// none; the CLI prints everything through it. Pure.
std::string ShowControlChars(absl::string_view text);

inline constexpr char kApplyAuthorName[] = "InfraRSI";
inline constexpr char kApplyAuthorEmail[] = "infrarsi@localhost";

}  // namespace infrarsi

#endif  // INFRARSI_CORE_APPLY_PLAN_H_
