// Process-wide allocator settings for a long-lived process that proposes
// trials.
//
// A proposal at a long history allocates and frees a few MiB of matrices
// (features of every candidate, Gram matrices, covariances). glibc's
// defaults hand such blocks back to the kernel on free (mmap above a
// threshold that adapts, and trimming the heap's free top), so the next
// proposal page-faults every page in again: `perf stat` counted 194k faults
// in one `search_bench --latency 2000` run, and with these settings a
// proposal's median CPU time at 2,000 trials fell by about a third
// (docs/benchmarks.md).
//
// Call once at the start of main, before other threads start, so every
// arena works under the same thresholds from its first block. What it costs:
// each malloc arena keeps up to kTrimThresholdBytes of freed memory mapped
// for reuse instead of returning it, bounded by what that arena once held.
#ifndef INFRARSI_BASE_ALLOCATOR_H_
#define INFRARSI_BASE_ALLOCATOR_H_

#include <cstddef>

#include "absl/status/status.h"

namespace infrarsi {

// Blocks up to this size come from the heap rather than a fresh mapping
// (glibc's ceiling for the setting on 64-bit hosts).
inline constexpr size_t kMmapThresholdBytes = size_t{32} << 20;
// Free memory at a heap's top kept mapped rather than trimmed.
inline constexpr size_t kTrimThresholdBytes = size_t{64} << 20;

// Applies the two settings above. On a libc without mallopt (not glibc):
// OK, nothing done. An error names the setting the allocator refused.
absl::Status KeepFreedMemoryForReuse();

}  // namespace infrarsi

#endif  // INFRARSI_BASE_ALLOCATOR_H_
