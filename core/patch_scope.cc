#include "core/patch_scope.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace infrarsi {
namespace {

// "a/x/y" -> "x/y"; "/dev/null" stays; tabs end the path (plain diff dates).
std::string CleanHeaderPath(absl::string_view raw) {
  raw = raw.substr(0, raw.find('\t'));
  raw = absl::StripTrailingAsciiWhitespace(raw);
  if (raw == "/dev/null") return std::string(raw);
  if (absl::StartsWith(raw, "a/") || absl::StartsWith(raw, "b/")) raw.remove_prefix(2);
  return std::string(raw);
}

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
  std::vector<PatchedFile> out;
  PatchedFile cur;
  bool in_file = false;
  std::string minus;
  auto flush = [&] {
    if (in_file && !cur.path.empty()) out.push_back(cur);
    cur = PatchedFile();
    in_file = false;
  };
  for (absl::string_view line : absl::StrSplit(diff, '\n')) {
    if (absl::ConsumePrefix(&line, "diff --git ")) {
      flush();
      in_file = true;
      // "a/x b/x": take the b side (the path after the change).
      const size_t b = line.rfind(" b/");
      cur.path = CleanHeaderPath(b == absl::string_view::npos ? line : line.substr(b + 1));
    } else if (absl::ConsumePrefix(&line, "--- ")) {
      minus = CleanHeaderPath(line);
    } else if (absl::ConsumePrefix(&line, "+++ ")) {
      const std::string plus = CleanHeaderPath(line);
      if (!in_file) {
        flush();
        in_file = true;
      }
      cur.created = minus == "/dev/null";
      cur.deleted = plus == "/dev/null";
      cur.path = cur.deleted ? minus : plus;
    } else if (in_file && (absl::StartsWith(line, "new file mode 120000") ||
                           absl::StartsWith(line, "new mode 120000") ||
                           (absl::StartsWith(line, "index ") && absl::EndsWith(line, " 120000")))) {
      cur.symlink = true;
    } else if (in_file && absl::StartsWith(line, "rename to ")) {
      cur.path = CleanHeaderPath(line.substr(10));
    }
  }
  flush();
  if (out.empty()) return absl::InvalidArgumentError("no file header (---/+++ or diff --git) found");
  return out;
}

absl::Status CheckPatchScope(const std::string& name, const std::vector<PatchedFile>& files,
                             const std::vector<std::string>& editable,
                             const std::vector<std::string>& protected_files) {
  const std::string field = absl::StrCat("patches[", name, "]");
  for (const PatchedFile& f : files) {
    const std::string& p = f.path;
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
      if (absl::EqualsIgnoreCase(bare.substr(0, bare.find_last_not_of('.') + 1), ".git")) {
        return refuse("is inside the repository's .git folder");
      }
    }
    if (f.symlink) return refuse("is a symbolic link, which could escape the editable scope");
    for (const std::string& prot : protected_files) {
      if (GlobMatch(prot, p)) return refuse("is a protected file");
    }
    bool in_scope = false;
    for (const std::string& g : editable) in_scope = in_scope || GlobMatch(g, p);
    if (!in_scope) return refuse("is outside the editable scope");
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
