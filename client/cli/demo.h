// `infrarsi demo`: an embedded server and two replay agents on the measured
// H200 landscape shipped in the binary, taken through all five stages.
#ifndef INFRARSI_CLIENT_CLI_DEMO_H_
#define INFRARSI_CLIENT_CLI_DEMO_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace infrarsi::client {

struct DemoOptions {
  // Working folder (database, spec, landscape, target repository). Empty: a
  // fresh temporary folder, removed at the end unless keep is set.
  std::string workdir;
  bool keep = false;
  int agents = 2;
  int max_trials = 0;  // 0: the demo spec's budget
};

absl::Status RunDemo(const DemoOptions& options, std::ostream& out);

// The embedded data, generated at build time from data/.
extern const char* const kDemoSpecYaml;
extern const char* const kDemoLandscapeJsonl;

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_CLI_DEMO_H_
