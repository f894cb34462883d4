#include "server/llm_client.h"

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/llm_priors.h"

namespace infrarsi {

absl::StatusOr<std::unique_ptr<LlmPriorClient>> LlmPriorClient::Create(const Options& options) {
  if (options.model.empty()) return absl::InvalidArgumentError("llm model: required");
  absl::string_view url = options.endpoint;
  if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llm endpoint: expected an http:// or https:// URL, got '", options.endpoint, "'"));
  }
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  std::unique_ptr<LlmPriorClient> c(new LlmPriorClient(options));
  c->scheme_host_port_ = std::string(url.substr(0, slash));
  std::string path = slash == absl::string_view::npos ? "" : std::string(url.substr(slash));
  while (absl::EndsWith(path, "/")) path.pop_back();
  c->path_ = path + "/chat/completions";
  if (c->scheme_host_port_.size() <= scheme_end) {
    return absl::InvalidArgumentError(
        absl::StrCat("llm endpoint: no host in '", options.endpoint, "'"));
  }
  return c;
}

absl::StatusOr<std::string> LlmPriorClient::Post(const std::string& request_json) const {
  httplib::Client cli(scheme_host_port_);
  const auto secs = absl::ToInt64Seconds(options_.timeout);
  const auto usecs = absl::ToInt64Microseconds(options_.timeout) % 1000000;
  cli.set_connection_timeout(secs, usecs);
  cli.set_read_timeout(secs, usecs);
  cli.set_write_timeout(secs, usecs);
  httplib::Request req;
  req.method = "POST";
  req.path = path_;
  if (!options_.api_key.empty()) req.set_header("Authorization", "Bearer " + options_.api_key);
  req.set_header("Content-Type", "application/json");
  req.body = request_json;
  // The answer as it streams in, stopped at the cap: the endpoint is not
  // trusted with this process's memory.
  std::string body;
  bool too_big = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (body.size() + n > kMaxAnswerBytes) {
      too_big = true;
      return false;
    }
    body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const std::string where = absl::StrCat("llm endpoint ", scheme_host_port_, path_);
  if (!cli.send(req, res, error)) {
    if (too_big) return absl::UnavailableError(absl::StrCat(where, ": answer larger than ", kMaxAnswerBytes, " bytes"));
    return absl::UnavailableError(absl::StrCat(where, ": ", httplib::to_string(error)));
  }
  if (res.status != 200) return absl::UnavailableError(absl::StrCat(where, ": HTTP ", res.status));
  return body;
}

absl::StatusOr<Priors> LlmPriorClient::Ask(const SessionSpec& spec) const {
  auto body = Post(LlmPriorRequestJson(spec, options_.model));
  if (!body.ok()) return body.status();
  return ParseLlmPriorResponse(*body, spec);
}

}  // namespace infrarsi
