// Priors from a language model, the pure half: the question asked for a
// session and the strict reading of the answer. The HTTP call lives in
// server/llm_client (core does no I/O).
//
// The answer must be a JSON object of the deploy/priors.yaml structure
// ({"knobs": {knob: {value: {time, time_sd, mem, mem_sd}}}, "per_doubling":
// {...}}), possibly inside a ``` fence; anything else is refused, and the
// caller falls back to the knowledge file.
#ifndef INFRARSI_CORE_LLM_PRIORS_H_
#define INFRARSI_CORE_LLM_PRIORS_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/priors.h"
#include "core/spec.h"

namespace infrarsi {

// The body of an OpenAI-compatible /chat/completions request asking for the
// spec's knob effects (temperature 0, JSON only).
std::string LlmPriorRequestJson(const SessionSpec& spec, const std::string& model);

// The first choice's message content of a /chat/completions response body,
// out of a ``` fence if it is in one; INVALID_ARGUMENT unless it is a JSON
// object's text.
absl::StatusOr<std::string> LlmAnswerContent(const std::string& body);

// Reads a /chat/completions response body: the first choice's message
// content must parse as priors and pass ValidatePriorsFor(spec).
// INVALID_ARGUMENT says what was wrong, naming the field.
absl::StatusOr<Priors> ParseLlmPriorResponse(const std::string& body, const SessionSpec& spec);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_LLM_PRIORS_H_
