#include "core/llm_priors.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace infrarsi {

std::string LlmPriorRequestJson(const SessionSpec& spec, const std::string& model) {
  std::string knobs;
  for (const Knob& k : spec.knobs) {
    absl::StrAppend(&knobs, "- ", k.name, ": values [", absl::StrJoin(k.values, ", "),
                    "], baseline ", spec.baseline.at(k.name), "\n");
  }
  const std::string question = absl::StrCat(
      "You are an expert in distributed LLM training performance. A training job (workload ",
      spec.WorkloadSignature(), ", ", spec.gpu_count, "x ", spec.gpu,
      ") is tuned over these launch knobs:\n", knobs,
      "For each non-baseline value, estimate its effect relative to the baseline value on log "
      "step time (time; -0.3 is about 26% faster) and on log peak GPU memory (mem), each with a "
      "standard deviation (time_sd, mem_sd) saying how unsure you are. Answer with one JSON "
      "object only, no prose: {\"knobs\": {\"<knob>\": {\"<value>\": {\"time\": 0.0, "
      "\"time_sd\": 0.3, \"mem\": 0.0, \"mem_sd\": 0.3}}}}. Effects must lie in [-2, 2] and "
      "standard deviations in (0, 3].");
  return absl::StrCat(
      "{\"model\":", JsonQuote(model), ",\"temperature\":0,\"messages\":[",
      "{\"role\":\"system\",\"content\":", JsonQuote("Answer with JSON only."), "},",
      "{\"role\":\"user\",\"content\":", JsonQuote(question), "}]}");
}

absl::StatusOr<std::string> LlmAnswerContent(const std::string& body) {
  YAML::Node root;
  try {
    root = YAML::Load(body);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("response: not JSON: ", e.msg));
  }
  if (!root.IsMap() || !root["choices"] || !root["choices"].IsSequence() ||
      root["choices"].size() == 0) {
    return absl::InvalidArgumentError("response.choices: missing or empty");
  }
  const YAML::Node msg = root["choices"][0]["message"];
  if (!msg || !msg.IsMap() || !msg["content"] || !msg["content"].IsScalar()) {
    return absl::InvalidArgumentError("response.choices[0].message.content: missing");
  }
  std::string content = msg["content"].Scalar();
  // Models often fence JSON; take what is inside the fence.
  absl::string_view c = absl::StripAsciiWhitespace(content);
  if (absl::ConsumePrefix(&c, "```")) {
    absl::ConsumePrefix(&c, "json");
    const size_t end = c.rfind("```");
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError("response content: unterminated ``` fence");
    }
    c = c.substr(0, end);
  }
  content = std::string(absl::StripAsciiWhitespace(c));
  if (content.empty() || content.front() != '{') {
    return absl::InvalidArgumentError("response content: not a JSON object");
  }
  return content;
}

absl::StatusOr<Priors> ParseLlmPriorResponse(const std::string& body, const SessionSpec& spec) {
  auto answer = LlmAnswerContent(body);
  if (!answer.ok()) return answer.status();
  const std::string& content = *answer;
  auto priors = ParsePriors(content);
  if (!priors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("response content: ", priors.status().message()));
  }
  if (absl::Status st = ValidatePriorsFor(*priors, spec); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("response content: ", st.message()));
  }
  if (priors->values.empty() && priors->per_doubling.empty()) {
    return absl::InvalidArgumentError("response content: no knob effects");
  }
  return priors;
}

}  // namespace infrarsi
