#include "core/patch_scope.h"

#include <git2.h>

#include <algorithm>
#include <memory>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace infrarsi {
namespace {

bool MatchFrom(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& p,
               size_t i);

bool SegmentMatch(absl::string_view pat, absl::string_view s) {
  size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < pat.size() && (pat[pi] == '?' || pat[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < pat.size() && pat[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < pat.size() && pat[pi] == '*') ++pi;
  return pi == pat.size();
}

bool MatchFrom(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& p,
               size_t i) {
  if (pi == pat.size()) return i == p.size();
  if (pat[pi] == "**") {
    for (size_t k = i; k <= p.size(); ++k) {
      if (MatchFrom(pat, pi + 1, p, k)) return true;
    }
    return false;
  }
  if (i == p.size()) return false;
  return SegmentMatch(pat[pi], p[i]) && MatchFrom(pat, pi + 1, p, i + 1);
}

}  // namespace

bool GlobMatch(const std::string& pattern, const std::string& path) {
  std::vector<std::string> pat = absl::StrSplit(pattern, '/');
  std::vector<std::string> p = absl::StrSplit(path, '/');
  return MatchFrom(pat, 0, p, 0);
}

absl::StatusOr<std::vector<PatchedFile>> ParsePatchedFiles(const std::string& diff) {
  static const bool initialized = [] { return git_libgit2_init() > 0; }();
  if (!initialized) return absl::InternalError("git: libgit2 did not initialize");
  const std::string text = GitStyleDiff(diff);  // plain `diff -u` output too
  git_diff* raw = nullptr;
  if (git_diff_from_buffer(&raw, text.data(), text.size()) != 0) {
    const git_error* e = git_error_last();
    return absl::InvalidArgumentError(
        absl::StrCat("git cannot read the diff: ", e != nullptr && e->message ? e->message : "?"));
  }
  std::unique_ptr<git_diff, void (*)(git_diff*)> parsed(raw, git_diff_free);
  std::vector<PatchedFile> out;
  for (size_t i = 0; i < git_diff_num_deltas(parsed.get()); ++i) {
    const git_diff_delta* d = git_diff_get_delta(parsed.get(), i);
    PatchedFile f;
    f.created = d->status == GIT_DELTA_ADDED;
    f.deleted = d->status == GIT_DELTA_DELETED;
    const char* np = d->new_file.path;
    const char* op = d->old_file.path;
    f.path = f.deleted ? (op != nullptr ? op : "") : (np != nullptr ? np : "");
    f.old_path = f.created ? f.path : (op != nullptr ? op : f.path);
    f.old_mode = f.created ? 0 : static_cast<uint32_t>(d->old_file.mode);
    f.new_mode = f.deleted ? 0 : static_cast<uint32_t>(d->new_file.mode);
    f.symlink = f.old_mode == GIT_FILEMODE_LINK || f.new_mode == GIT_FILEMODE_LINK;
    out.push_back(std::move(f));
  }
  if (out.empty()) return absl::InvalidArgumentError("no file header (---/+++ or diff --git) found");
  return out;
}

namespace {

bool RegularMode(uint32_t mode) {
  return mode == GIT_FILEMODE_BLOB || mode == GIT_FILEMODE_BLOB_EXECUTABLE;
}

// "100644", as git writes modes.
std::string ModeText(uint32_t mode) { return absl::StrFormat("%06o", mode); }

absl::Status CheckPath(const std::string& field, const std::string& p,
                       const std::vector<std::string>& editable,
                       const std::vector<std::string>& protected_files) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", p, "' ", why));
  };
  if (p.empty()) return refuse("is an empty path");
  // A NUL or other control byte would make C string APIs (git, the
  // filesystem) see a different path than the one checked here.
  for (unsigned char c : p) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a path holds a control character (byte ", static_cast<int>(c), ")"));
    }
  }
  if (absl::StartsWith(p, "/")) return refuse("escapes the editable scope (absolute path)");
  for (absl::string_view seg : absl::StrSplit(p, '/')) {
    if (seg == "..") return refuse("escapes the editable scope ('..' in the path)");
    // The repository's own metadata (hooks, config) is never a source
    // file, however a glob reads: git would run what lands there.
    // Trailing dots and spaces are dropped as Windows and macOS do.
    const absl::string_view bare = absl::StripTrailingAsciiWhitespace(seg);
    const absl::string_view name = bare.substr(0, bare.find_last_not_of('.') + 1);
    if (absl::EqualsIgnoreCase(name, ".git")) {
      return refuse("is inside the repository's .git folder");
    }
    // .gitattributes (filter=, export-ignore), .gitmodules (submodule
    // URLs), .gitignore: they change what git does, not what the job
    // computes; only an editable entry naming the exact path admits one.
    if (absl::StartsWithIgnoreCase(name, ".git") &&
        std::find(editable.begin(), editable.end(), p) == editable.end()) {
      return refuse(
          "is one of git's own files (.git*), which change what git does; the contract admits "
          "one only by naming its exact path as editable");
    }
  }
  for (const std::string& prot : protected_files) {
    if (GlobMatch(prot, p)) return refuse("is a protected file");
  }
  bool in_scope = false;
  for (const std::string& g : editable) in_scope = in_scope || GlobMatch(g, p);
  if (!in_scope) return refuse("is outside the editable scope");
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPatchScope(const std::string& name, const std::vector<PatchedFile>& files,
                             const std::vector<std::string>& editable,
                             const std::vector<std::string>& protected_files) {
  const std::string field = absl::StrCat("patches[", name, "]");
  for (const PatchedFile& f : files) {
    RETURN_IF_ERROR(CheckPath(field, f.path, editable, protected_files));
    if (!f.old_path.empty() && f.old_path != f.path) {
      RETURN_IF_ERROR(CheckPath(field, f.old_path, editable, protected_files));
    }
  }
  return CheckPatchFileKinds(name, files);
}

absl::Status CheckPatchFileKinds(const std::string& name, const std::vector<PatchedFile>& files) {
  const std::string field = absl::StrCat("patches[", name, "]");
  for (const PatchedFile& f : files) {
    auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", f.path, "' ", why));
    };
    // Only regular files, on both sides: a link could point anywhere (and
    // the search would run and apply would commit it), a gitlink names
    // another repository.
    if (f.symlink) return refuse("is a symbolic link, which could escape the editable scope");
    for (uint32_t mode : {f.old_mode, f.new_mode}) {
      if (mode == 0 || RegularMode(mode)) continue;
      if (mode == GIT_FILEMODE_COMMIT) {
        return refuse("is a gitlink (mode 160000, another repository), not a source file");
      }
      return refuse(absl::StrCat("has mode ", ModeText(mode),
                                 ": only regular files (100644, 100755) may be patched"));
    }
    if (f.old_mode != 0 && f.new_mode != 0 && f.old_mode != f.new_mode) {
      return refuse(absl::StrCat("changes its mode (", ModeText(f.old_mode), " -> ",
                                 ModeText(f.new_mode), "); a patch may change content only"));
    }
  }
  return absl::OkStatus();
}

std::string GitStyleDiff(const std::string& diff) {
  std::vector<std::string> lines = absl::StrSplit(diff, '\n');
  std::string out;
  bool in_git_header = false;  // a "diff --git" line covers the next ---/+++ pair
  auto side = [](const std::string& line) {
    std::string p = line.substr(4);
    const size_t tab = p.find('\t');  // diff -u appends a timestamp
    if (tab != std::string::npos) p = p.substr(0, tab);
    return p;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (absl::StartsWith(line, "diff --git ")) in_git_header = true;
    if (absl::StartsWith(line, "--- ") && i + 1 < lines.size() && absl::StartsWith(lines[i + 1], "+++ ")) {
      if (!in_git_header) {
        const std::string from = side(line), to = side(lines[i + 1]);
        auto strip = [](const std::string& p) {
          return absl::StartsWith(p, "a/") || absl::StartsWith(p, "b/") ? p.substr(2) : p;
        };
        const std::string path = strip(from == "/dev/null" ? to : from);
        absl::StrAppend(&out, "diff --git a/", path, " b/", from == "/dev/null" || to == "/dev/null" ? path : strip(to), "\n");
        if (from == "/dev/null") absl::StrAppend(&out, "new file mode 100644\n");
        if (to == "/dev/null") absl::StrAppend(&out, "deleted file mode 100644\n");
        absl::StrAppend(&out, "--- ", from == "/dev/null" ? from : "a/" + path, "\n");
        absl::StrAppend(&out, "+++ ", to == "/dev/null" ? to : "b/" + strip(to), "\n");
        ++i;
        continue;
      }
      in_git_header = false;
    }
    out += line;
    if (i + 1 < lines.size()) out += '\n';
  }
  return out;
}

}  // namespace infrarsi
