// `infrarsi apply`: the server returns the promoted change as a plan; this
// commits it with libgit2 into the caller's own clone (as the caller: the
// server writes into no repository) and records the commit on the server.
// The commit is the same on every try (fixed author, time and message): a
// retry after a crash between the commit and the record finds the branch
// already at that commit and records it; it never makes a second one.
#ifndef INFRARSI_CLIENT_CLI_LOCAL_APPLY_H_
#define INFRARSI_CLIENT_CLI_LOCAL_APPLY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/rpc_client.h"

namespace infrarsi::client {

struct LocalApply {
  v1::ApplyResponse plan;               // as the server sent it
  std::string commit;                   // empty on a dry run
  bool existed = false;                 // the branch already held it (a retry)
  std::string note;                     // HEAD had moved and the patches re-applied
  std::vector<std::string> changed;     // every path the commit changes
  std::map<std::string, char> change_kinds;  // A, M or D per changed path
  std::string base;                     // the commit it goes on top of (HEAD)
};

// `record` false stops after the commit (what a crash would leave; tests).
absl::StatusOr<LocalApply> ApplyLocally(RpcClient& client, const std::string& session_id,
                                        const std::string& repo, const std::string& branch,
                                        bool dry_run, bool record = true);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_CLI_LOCAL_APPLY_H_
