// Reading a file somebody named, safely: only a regular file, and never
// more than a bound, checked before reading (a path to /dev/zero, a FIFO or
// a 50 GB file must neither exhaust memory nor block the caller).
#ifndef INFRARSI_BASE_FILE_UTIL_H_
#define INFRARSI_BASE_FILE_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace infrarsi {

// A file descriptor that closes itself. Not copyable.
struct ScopedFd {
  int fd = -1;
  explicit ScopedFd(int f) : fd(f) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
};

// The content of `path`. Opens without blocking (a FIFO is refused, not
// waited on) and without following a terminal device; INVALID_ARGUMENT
// naming `field` when it is not a regular file or is larger than
// `max_bytes`, NOT_FOUND / PERMISSION_DENIED when it cannot be opened.
// Thread-safe.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& field);

// The same for `rel` inside the folder `root`, where somebody else may have
// put links: the last component must not be a link, and the file opened
// must lie inside `root` (no link on the way leads out). INVALID_ARGUMENT
// naming `field` otherwise, or for an absolute `rel` or one with "..".
absl::StatusOr<std::string> ReadRegularFileWithin(const std::string& root, const std::string& rel,
                                                  size_t max_bytes, const std::string& field);

// Writes `content` to `path` whole or not at all: into a temporary file
// beside it, flushed, then renamed over it (a reader never sees half a
// file; a failure leaves whatever was there). INVALID_ARGUMENT naming
// `field` when its folder does not exist or it names a folder; the
// errno's status otherwise. Thread-safe for distinct paths.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content,
                                 const std::string& field);

}  // namespace infrarsi

#endif  // INFRARSI_BASE_FILE_UTIL_H_
