#include "base/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace infrarsi {

std::string SecureRandomHex(size_t bytes) {
  std::string buf(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(buf.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "infrarsi: getrandom failed; refusing to issue predictable secrets\n");
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(buf);
}

}  // namespace infrarsi
