// Content hashes of protected files, as git computes a blob's id (SHA-1), so
// the server (at Init) and the agent (around every trial) agree.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_PROTECTED_FILES_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_PROTECTED_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/map.h"

namespace infrarsi::client {

// The git blob id of a file's content. NOT_FOUND if it cannot be read,
// INVALID_ARGUMENT if it is not a regular file.
absl::StatusOr<std::string> GitBlobHash(const std::string& path);

// Workdir-relative paths whose current hash differs from `expected`, or
// that are missing, not regular files, or reached through a link that
// leads out of `workdir` (none of those is followed or waited on).
// Thread-safe.
std::vector<std::string> ChangedProtectedFiles(
    const std::string& workdir, const google::protobuf::Map<std::string, std::string>& expected);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_PROTECTED_FILES_H_
