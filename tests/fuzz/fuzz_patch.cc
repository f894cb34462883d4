// Unified diffs from a spec: ParsePatchedFiles, the scope check and the
// git-header normalisation must never crash, and what the scope check
// accepts never escapes it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/patch_scope.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string diff(reinterpret_cast<const char*>(data), size);
  (void)infrarsi::GitStyleDiff(diff);
  auto files = infrarsi::ParsePatchedFiles(diff);
  if (!files.ok()) return 0;
  const absl::Status scope =
      infrarsi::CheckPatchScope("p", *files, {"model/**", "train.py"}, {"data.py"});
  if (scope.ok()) {
    for (const auto& f : *files) {
      // Accepted paths are relative, have no ".." segment and no control
      // byte, are not protected and not symbolic links (as libgit2 read them).
      if (f.path.empty() || f.path[0] == '/' || f.path == "data.py" || f.symlink) __builtin_trap();
      // Only regular files, on both sides, keeping their mode.
      for (uint32_t mode : {f.old_mode, f.new_mode}) {
        if (mode != 0 && mode != 0100644 && mode != 0100755) __builtin_trap();
      }
      if (f.old_mode != 0 && f.new_mode != 0 && f.old_mode != f.new_mode) __builtin_trap();
      size_t start = 0;
      while (true) {
        const size_t slash = f.path.find('/', start);
        if (f.path.substr(start, slash == std::string::npos ? std::string::npos : slash - start) == "..") {
          __builtin_trap();
        }
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
      for (unsigned char c : f.path) {
        if (c < 0x20 || c == 0x7f) __builtin_trap();
      }
    }
  }
  return 0;
}
