#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace infrarsi {

ScopedFd::~ScopedFd() {
  if (fd >= 0) close(fd);
}

namespace {

absl::Status OpenError(const std::string& field, const std::string& path) {
  const int e = errno;
  const std::string why = absl::StrCat(field, ": cannot open ", path, ": ", std::strerror(e));
  if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(why);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(why);
  if (e == ELOOP) return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " is a link"));
  return absl::InvalidArgumentError(why);
}

// The rest of a read once `fd` (owned by the caller) is open.
absl::StatusOr<std::string> ReadOpened(int fd, const std::string& path, size_t max_bytes,
                                       const std::string& field) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " is not a regular file (devices, FIFOs and folders are refused)"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " is ", st.st_size,
                                                   " bytes, more than the limit of ", max_bytes));
  }
  // The size may change under us: never read past the bound either way.
  std::string out;
  out.resize(max_bytes + 1);
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read ", path));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " grew past the limit of ", max_bytes, " bytes"));
  }
  out.resize(got);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& field) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
  const ScopedFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.fd < 0) return OpenError(field, path);
  return ReadOpened(fd.fd, path, max_bytes, field);
}

absl::StatusOr<std::string> ReadRegularFileWithin(const std::string& root, const std::string& rel,
                                                  size_t max_bytes, const std::string& field) {
  const std::filesystem::path r(rel);
  if (rel.empty() || r.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", rel, "' is not a relative path"));
  }
  for (const auto& part : r) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", rel, "' leaves its folder"));
    }
  }
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::canonical(root, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(field, ": no folder ", root));
  const std::string path = (base / r).string();
  // The last component is never followed; the kernel then says where the
  // file it opened is, so a link earlier on the way cannot lead out.
  const ScopedFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.fd < 0) return OpenError(field, path);
  const std::filesystem::path opened =
      std::filesystem::read_symlink(absl::StrCat("/proc/self/fd/", fd.fd), ec);
  const std::string inside = base.string() == "/" ? "/" : base.string() + "/";
  if (ec || opened.string().rfind(inside, 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " leads out of ", base.string(), " through a link"));
  }
  return ReadOpened(fd.fd, path, max_bytes, field);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content,
                                 const std::string& field) {
  namespace fs = std::filesystem;
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": a file path is required"));
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": folder '", dir.string(), "' does not exist"));
  }
  if (fs::is_directory(target, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is a folder"));
  }
  // StrCat, not operator+: GCC 12 at -O3 reports a false -Wrestrict overlap
  // in the chained concatenation (a Release build failed on it).
  std::string tmp = (dir / absl::StrCat(".", target.filename().string(), ".XXXXXX")).string();
  const int fd = mkstemp(tmp.data());
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(field, ": cannot write in '", dir.string(), "'"));
  }
  absl::Status st = absl::OkStatus();
  {
    ScopedFd f(fd);
    size_t done = 0;
    while (done < content.size()) {
      const ssize_t n = write(fd, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        st = absl::ErrnoToStatus(errno, absl::StrCat(field, ": writing '", path, "'"));
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (st.ok() && fsync(fd) != 0) st = absl::ErrnoToStatus(errno, absl::StrCat(field, ": writing '", path, "'"));
    // mkstemp makes it 0600; a report is for sharing like any file the user writes.
    if (st.ok()) {
      const mode_t mask = umask(0);
      umask(mask);
      (void)fchmod(fd, 0666 & ~mask);
    }
  }
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::ErrnoToStatus(errno, absl::StrCat(field, ": cannot replace '", path, "'"));
  }
  if (!st.ok()) unlink(tmp.c_str());
  return st;
}

}  // namespace infrarsi
