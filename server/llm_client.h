// Asks an OpenAI-compatible chat endpoint for a session's knob priors (the
// optional `--llm-endpoint` of infrarsi-server). One POST to
// {endpoint}/chat/completions per session run; the answer is read strictly
// by core's ParseLlmPriorResponse. Never required: every failure is a
// status, and the caller falls back to the knowledge file.
//
// Thread-safe: each call makes its own connection.
#ifndef INFRARSI_SERVER_LLM_CLIENT_H_
#define INFRARSI_SERVER_LLM_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/priors.h"
#include "core/spec.h"

namespace infrarsi {

class LlmPriorClient {
 public:
  struct Options {
    // Base URL, e.g. "http://127.0.0.1:8080/v1" or "https://host/v1"
    // (required); "/chat/completions" is appended.
    std::string endpoint;
    std::string model;    // required
    std::string api_key;  // sent as a bearer token when not empty
    absl::Duration timeout = absl::Seconds(30);
  };
  // INVALID_ARGUMENT names a missing or malformed option.
  static absl::StatusOr<std::unique_ptr<LlmPriorClient>> Create(const Options& options);

  // The validated priors for the spec's knobs. UNAVAILABLE when the
  // endpoint cannot be reached or answers an HTTP error; INVALID_ARGUMENT
  // when the answer is not valid priors.
  absl::StatusOr<Priors> Ask(const SessionSpec& spec) const;
  // One /chat/completions POST of `request_json`; the response body.
  // UNAVAILABLE when the endpoint cannot be reached, is slower than the
  // timeout, answers an HTTP error, or sends more than kMaxAnswerBytes
  // (refused as it streams in).
  absl::StatusOr<std::string> Post(const std::string& request_json) const;
  static constexpr size_t kMaxAnswerBytes = 4 << 20;

 private:
  explicit LlmPriorClient(Options o) : options_(std::move(o)) {}
  Options options_;
  std::string scheme_host_port_;  // "http://127.0.0.1:8080"
  std::string path_;              // "/v1/chat/completions"
};

}  // namespace infrarsi

#endif  // INFRARSI_SERVER_LLM_CLIENT_H_
