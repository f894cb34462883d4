#include "base/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace infrarsi {

absl::Status KeepFreedMemoryForReuse() {
#if defined(__GLIBC__)
  // Setting either threshold also turns off glibc's adaptive ones, so both
  // are set: in an A/B either alone was slower than the two together, and
  // the trim threshold alone slower than glibc's defaults (every block
  // above 128 KiB mapped afresh then).
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) != 1) {
    return absl::InternalError("mallopt(M_MMAP_THRESHOLD) refused the value");
  }
  if (mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) != 1) {
    return absl::InternalError("mallopt(M_TRIM_THRESHOLD) refused the value");
  }
#endif
  return absl::OkStatus();
}

}  // namespace infrarsi
