// Reading a file somebody named, safely: only a regular file, and never
// more than a bound, checked before reading (a path to /dev/zero, a FIFO or
// a 50 GB file must neither exhaust memory nor block the caller).
#ifndef INFRARSI_CORE_FILE_UTIL_H_
#define INFRARSI_CORE_FILE_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace infrarsi {

// The content of `path`. Opens without blocking (a FIFO is refused, not
// waited on) and without following a terminal device; INVALID_ARGUMENT
// naming `field` when it is not a regular file or is larger than
// `max_bytes`, NOT_FOUND / PERMISSION_DENIED when it cannot be opened.
// Thread-safe.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, size_t max_bytes,
                                            const std::string& field);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_FILE_UTIL_H_
