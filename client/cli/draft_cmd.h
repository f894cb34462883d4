// `infrarsi draft`: the I/O around core/draft. Reads the training script
// (for its argparse choices) and the job's Python files (a repository's
// committed ones at HEAD, else the working folder's), asks the optional
// LLM, and writes the spec (a new file, whole or not at all, or stdout).
// Nothing is sent to the InfraRSI server.
#ifndef INFRARSI_CLIENT_CLI_DRAFT_CMD_H_
#define INFRARSI_CLIENT_CLI_DRAFT_CMD_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/draft.h"

namespace infrarsi::client {

struct DraftOptions {
  DraftInput input;        // argv and the facts; files and choices are filled in here
  std::string repo;        // a git repository the trials run in (its path); "": none
  std::string workdir;     // else the folder the command runs in; "": the current one
  std::string out;         // the spec file to write (refused if it exists); "": stdout
  std::string llm_endpoint, llm_model, llm_api_key;
  absl::Duration llm_timeout = absl::Seconds(60);
};

// Writes the spec to options.out or `out`; says what it did on `log`.
absl::Status RunDraft(DraftOptions options, std::ostream& out, std::ostream& log);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_CLI_DRAFT_CMD_H_
