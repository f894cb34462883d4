// The tests' TLS certificates (tests/testing/certs/, made for localhost).
// Needs INFRARSI_SOURCE_DIR, which every test target defines.
#ifndef INFRARSI_TESTS_TESTING_TEST_CERTS_H_
#define INFRARSI_TESTS_TESTING_TEST_CERTS_H_

#include <fstream>
#include <sstream>
#include <string>

namespace infrarsi::testing {

// The PEM text of certs/`name`; empty where it cannot be read.
inline std::string Pem(const std::string& name) {
  std::ifstream in(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/certs/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_TEST_CERTS_H_
