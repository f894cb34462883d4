// Code patches proposed by a language model, the pure half: what the model
// is shown (the doctor's phase profile, the files in the editable scope, the
// contract, what the bank knows) and how its answer is admitted. The HTTP
// call lives in the server.
//
// Nothing the model says is trusted. Each proposal goes through exactly the
// path a spec's own patches take at Init (AddCheckedPatch: a valid name, the
// size limit, the editable scope and the protected files, a clean apply to
// the locked base commit), becomes a patch knob ("patch_llm-<name>", off by
// default) with the model's rationale and prior, and its trials are judged
// by the session's contract like any other. The contract, the scope and the
// verdict are never touched: a proposal can only add a candidate.
//
// Thread safety: free functions over their arguments.
#ifndef INFRARSI_CORE_LLM_PATCHES_H_
#define INFRARSI_CORE_LLM_PATCHES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/source_repo.h"
#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

// What the model is shown.
struct LlmPatchContext {
  const SessionSpec* spec = nullptr;        // required
  const v1::DoctorReport* doctor = nullptr;  // optional: the phase profile
  std::vector<std::pair<std::string, std::string>> files;  // editable files: path, text
  std::string bank;  // what the bank knows of this workload, a line or two
};

// At most this many proposals are read, and this many admitted.
inline constexpr int kMaxLlmProposals = 8;
inline constexpr int kMaxLlmPatches = 4;
// What the model is shown of the scope, in all.
inline constexpr size_t kMaxLlmContextBytes = 256 << 10;

// The body of an OpenAI-compatible /chat/completions request.
std::string LlmPatchRequestJson(const LlmPatchContext& context, const std::string& model);

// One proposal and what became of it (the report shows every one).
struct LlmPatchOutcome {
  std::string name;  // the patch's name in the session ("llm-<proposed>"), or what was proposed
  std::string rationale;
  bool accepted = false;
  std::string reason;  // why it was refused
  std::vector<std::string> paths;
  bool has_prior = false;
  double prior_time = 0, prior_time_sd = 0.5;
  std::string diff;  // kept for accepted ones (the session's search runs it)
};

// The one time a session asked.
struct LlmPatchRound {
  bool asked = false;  // the session's one ask has been made (or decided against)
  std::string note;  // why it was not asked, or why its answer was not used
  std::vector<LlmPatchOutcome> outcomes;
  std::vector<std::pair<std::string, std::string>> conflicts;  // patch pairs that do not stack
};

// Reads `response_body` and admits each proposal onto `spec` (see above);
// pairs of patches that do not apply one after the other are recorded as
// conflicts. INVALID_ARGUMENT, with `spec` unchanged, when the answer as a
// whole is unreadable.
absl::StatusOr<LlmPatchRound> AdmitLlmPatches(const std::string& response_body,
                                              const SourceRepo* source_repo, SessionSpec* spec);

// The round as stored (JSON) and read back; RestoreLlmPatches re-adds the
// accepted patches and their conflicts to a restored session's spec (they
// were checked against the repository when admitted).
std::string EncodeLlmPatchRound(const LlmPatchRound& round);
LlmPatchRound DecodeLlmPatchRound(const std::string& json);
absl::Status RestoreLlmPatches(const LlmPatchRound& round, SessionSpec* spec);

// What the LLM is shown of a session's editable scope: its files at the
// locked commit (read through `repo`; none when it is null), each in scope
// exactly as a patch changing it would be, as many as fit in
// kMaxLlmContextBytes.
std::vector<std::pair<std::string, std::string>> EditableFilesForLlm(const SessionSpec& spec,
                                                                     const SourceRepo* repo);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_LLM_PATCHES_H_
