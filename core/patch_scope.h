// What a unified diff touches, and whether it stays inside the editable
// scope. Pure text inspection: applying patches is the agent's job.
#ifndef INFRARSI_CORE_PATCH_SCOPE_H_
#define INFRARSI_CORE_PATCH_SCOPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

// One file a diff changes, as libgit2 (the parser that applies it) reads it.
struct PatchedFile {
  std::string path;       // repository-relative: the path after the change
  bool symlink = false;   // either side is a symbolic link (mode 120000)
  bool deleted = false;
  bool created = false;
  // The path before the change (a rename's source; else == path).
  std::string old_path = std::string();
  // Git's modes of both sides (0 for the missing side of a created or
  // deleted file). Default: a regular file, unchanged (for callers that
  // check a path alone).
  uint32_t old_mode = 0100644;
  uint32_t new_mode = 0100644;
};

// The files a unified (git-style or plain) diff changes, read by libgit2's
// own parser (git_diff_from_buffer over GitStyleDiff(diff)): the modes and
// paths it reports are the ones `git apply` acts on, in whatever spelling
// the header uses ("new file mode 0120000" is a link too). INVALID_ARGUMENT
// when git cannot read the text or it changes no file.
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
// (absolute, '..' segment), is not a regular file on either side (a
// symbolic link, a gitlink, any mode but 100644 and 100755) or changes its
// mode, is git's own (.git/, or a .git* file such as .gitattributes or
// .gitmodules, unless an editable entry names that exact path), touches a
// protected file, or lies outside every editable glob. A rename is held to
// the rules on both of its paths.
absl::Status CheckPatchScope(const std::string& patch_name, const std::vector<PatchedFile>& files,
                             const std::vector<std::string>& editable,
                             const std::vector<std::string>& protected_files);

// The part of CheckPatchScope that needs no contract: every file is a
// regular file on both sides and keeps its mode. What an agent and the CLI
// hold a patch to before they apply it.
absl::Status CheckPatchFileKinds(const std::string& patch_name,
                                 const std::vector<PatchedFile>& files);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_PATCH_SCOPE_H_
