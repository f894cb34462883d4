#include "base/allocator.h"

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// AddressSanitizer replaces malloc (its mallopt refuses every setting).
#if defined(__SANITIZE_ADDRESS__)
#define INFRARSI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INFRARSI_ASAN 1
#endif
#endif

namespace infrarsi {
namespace {

TEST(AllocatorTest, LargeBlocksComeFromTheHeapNotFreshMappings) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "the settings are glibc's";
#elif defined(INFRARSI_ASAN)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's; the settings do not apply";
#else
  ASSERT_TRUE(KeepFreedMemoryForReuse().ok());
  // A 4 MiB block (a proposal's candidate features are about that) is
  // above glibc's default mmap threshold: with the settings it is carved
  // from the heap, so no mapped block is added.
  const size_t mapped_before = mallinfo2().hblks;
  void* volatile block = std::malloc(size_t{4} << 20);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, size_t{4} << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  std::free(block);
  // Freed, it stays mapped for the next one: the heap does not shrink by it.
  const size_t arena_before = mallinfo2().arena;
  void* volatile again = std::malloc(size_t{4} << 20);
  EXPECT_EQ(mallinfo2().arena, arena_before);
  std::free(again);
#endif
}

}  // namespace
}  // namespace infrarsi
