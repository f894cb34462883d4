#include "client/agent/executors/protected_files.h"

#include <git2.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace infrarsi::client {
namespace {

// Protected files are source files and small harnesses; a larger one is
// not what Init locked.
constexpr size_t kMaxProtectedFileBytes = 64 << 20;

std::string BlobId(const std::string& content) {
  git_libgit2_init();
  git_oid oid;
  const int rc = git_odb_hash(&oid, content.data(), content.size(), GIT_OBJECT_BLOB);
  git_libgit2_shutdown();
  if (rc != 0) return "";
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return std::string(buf);
}

}  // namespace

absl::StatusOr<std::string> GitBlobHash(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadRegularFile(path, kMaxProtectedFileBytes, "protected"));
  return BlobId(content);
}

std::vector<std::string> ChangedProtectedFiles(
    const std::string& workdir, const google::protobuf::Map<std::string, std::string>& expected) {
  std::vector<std::string> changed;
  for (const auto& [rel, hash] : expected) {
    // The trial's user may have put links or FIFOs in the tree; the agent,
    // perhaps root, must neither follow them out nor wait on them.
    auto content = ReadRegularFileWithin(workdir, rel, kMaxProtectedFileBytes, "protected");
    if (!content.ok() || BlobId(*content) != hash) changed.push_back(rel);
  }
  return changed;
}

}  // namespace infrarsi::client
