// Unpredictable identifiers and secrets from the operating system's
// cryptographic generator (getrandom(2)). Lease tokens are credentials: a
// generator whose state can be recovered from its outputs (mt19937 seeded
// from the clock) lets anyone who sees a few leases forge the next.
#ifndef INFRARSI_BASE_RANDOM_H_
#define INFRARSI_BASE_RANDOM_H_

#include <string>

namespace infrarsi {

// `bytes` random bytes as lower-case hex. Thread-safe. Aborts if the
// kernel's generator is unavailable (nothing secure could be issued).
std::string SecureRandomHex(size_t bytes);

}  // namespace infrarsi

#endif  // INFRARSI_BASE_RANDOM_H_
