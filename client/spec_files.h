// What `infrarsi session create` sends: the spec and every file it names,
// read here on the submitter's host (the server reads no path a spec
// names). Files are read only if they are regular files within the size
// limits; a device, a FIFO or an oversized file is refused naming the field.
#ifndef INFRARSI_CLIENT_SPEC_FILES_H_
#define INFRARSI_CLIENT_SPEC_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

// The Init request for the spec at `spec_path`: its YAML, its folder (for
// the agents' relative paths) and, as SpecFiles, the replay landscape, the
// patch files and (without a repository) the protected files as they are
// in the workdir. A spec that does not parse is sent as it is, for the
// server to say what is wrong with it.
absl::StatusOr<v1::InitRequest> ReadSpecRequest(const std::string& spec_path);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_SPEC_FILES_H_
