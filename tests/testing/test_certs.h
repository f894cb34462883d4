// The tests' TLS certificates (tests/testing/certs/, made for localhost).
// Needs INFRARSI_SOURCE_DIR, which every test target defines.
#ifndef INFRARSI_TESTS_TESTING_TEST_CERTS_H_
#define INFRARSI_TESTS_TESTING_TEST_CERTS_H_

#include <string>

#include "base/file_util.h"

namespace infrarsi::testing {

// The PEM text of certs/`name`; empty where it cannot be read.
inline std::string Pem(const std::string& name) {
  return ReadRegularFile(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/certs/" + name, 1 << 20, "certificate")
      .value_or("");
}

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_TEST_CERTS_H_
