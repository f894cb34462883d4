// What a unified diff touches, and whether it stays inside the editable
// scope. Pure text inspection: applying patches is the agent's job.
#ifndef INFRARSI_CORE_PATCH_SCOPE_H_
#define INFRARSI_CORE_PATCH_SCOPE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

struct PatchedFile {
  std::string path;       // repository-relative, as the diff names it
  bool symlink = false;   // the diff creates or keeps a symbolic link (mode 120000)
  bool deleted = false;
  bool created = false;
};

// The files a unified (git-style or plain) diff changes. INVALID_ARGUMENT
// when the text has no file header at all.
absl::StatusOr<std::vector<PatchedFile>> ParsePatchedFiles(const std::string& diff);

// `diff` with a "diff --git" header before each file that lacks one (plain
// `diff -u` output), which libgit2's parser requires; new and deleted files
// (/dev/null sides) get their mode lines. Git-style diffs come back as they
// are.
std::string GitStyleDiff(const std::string& diff);

// Glob match on '/'-separated paths: '*' and '?' stay within one segment,
// '**' spans segments ("model/**" matches everything below model/).
bool GlobMatch(const std::string& pattern, const std::string& path);

// Refuses, naming the patch and the path, a file that escapes the scope
// (absolute, '..' segment, symbolic link), touches a protected file, or lies
// outside every editable glob.
absl::Status CheckPatchScope(const std::string& patch_name, const std::vector<PatchedFile>& files,
                             const std::vector<std::string>& editable,
                             const std::vector<std::string>& protected_files);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_PATCH_SCOPE_H_
