#include "client/cli/local_apply.h"

#include "absl/strings/str_cat.h"
#include "core/apply_plan.h"
#include "core/committer.h"
#include "base/status_macros.h"
#include "server/git_committer.h"

namespace infrarsi::client {

absl::StatusOr<LocalApply> ApplyLocally(RpcClient& client, const std::string& session_id,
                                        const std::string& repo, const std::string& branch,
                                        bool dry_run, bool record) {
  v1::ApplyRequest req;
  req.set_session_id(session_id);
  req.set_branch(branch);
  req.set_dry_run(dry_run);
  LocalApply out;
  ASSIGN_OR_RETURN(out.plan, client.Apply(req));
  // The server's plan is held to the rules its patches met at Init before
  // anything is written to the caller's clone.
  if (absl::Status st = CheckApplyPlan(out.plan); !st.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the server's apply plan is refused, nothing was written: ", st.message()));
  }
  CommitRequest cr;
  cr.repo_path = repo;
  cr.branch = branch;
  cr.message = ShowControlChars(out.plan.message());
  cr.base_commit = out.plan.base_commit();
  for (const auto& p : out.plan.patches()) cr.patches.emplace_back(p.name(), p.diff());
  for (const auto& f : out.plan.new_files()) cr.files.emplace_back(f.path(), f.content());
  cr.dry_run = dry_run;
  cr.author_name = out.plan.author_name();
  cr.author_email = out.plan.author_email();
  cr.author_time_unix_s = out.plan.author_time_unix_s();
  // The commit is made in the caller's own clone, by the caller.
  server::GitCommitter git;
  auto made = git.Commit(cr);
  if (!made.ok()) {
    // Named as the CLI's flags are.
    std::string msg(made.status().message());
    if (msg.rfind("repo_path: ", 0) == 0) msg = "--repo: " + msg.substr(11);
    if (msg.rfind("branch: ", 0) == 0) msg = "--branch: " + msg.substr(8);
    return absl::Status(made.status().code(), msg);
  }
  out.commit = made->commit;
  out.existed = made->existed;
  out.note = made->note;
  out.changed = made->changed_paths;
  out.change_kinds = made->change_kinds;
  out.base = made->base_commit;
  if (dry_run || !record) return out;
  // Already recorded as another commit: say so rather than record twice.
  if (!out.plan.commit().empty() && out.plan.commit() != out.commit) {
    return absl::FailedPreconditionError(absl::StrCat("session ", session_id,
                                                      " was already applied as commit ",
                                                      out.plan.commit()));
  }
  req.set_commit(out.commit);
  RETURN_IF_ERROR(client.Apply(req).status());
  return out;
}

}  // namespace infrarsi::client
