#include "client/protected_files.h"

#include <git2.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace infrarsi::client {

absl::StatusOr<std::string> GitBlobHash(const std::string& path) {
  git_libgit2_init();
  git_oid oid;
  const int rc = git_odb_hashfile(&oid, path.c_str(), GIT_OBJECT_BLOB);
  git_libgit2_shutdown();
  if (rc != 0) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  char buf[GIT_OID_HEXSZ + 1];
  git_oid_tostr(buf, sizeof(buf), &oid);
  return std::string(buf);
}

std::vector<std::string> ChangedProtectedFiles(
    const std::string& workdir, const google::protobuf::Map<std::string, std::string>& expected) {
  std::vector<std::string> changed;
  for (const auto& [rel, hash] : expected) {
    auto now = GitBlobHash((std::filesystem::path(workdir) / rel).string());
    if (!now.ok() || *now != hash) changed.push_back(rel);
  }
  return changed;
}

}  // namespace infrarsi::client
