#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace infrarsi {

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& field) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const std::string why = absl::StrCat(field, ": cannot open ", path, ": ", std::strerror(e));
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(why);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(why);
    return absl::InvalidArgumentError(why);
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
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

}  // namespace infrarsi
