#include "client/agent/agent_policy_file.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file_util.h"
#include "core/status_macros.h"

namespace infrarsi::client {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("policy.", field, ": ", why));
}

absl::StatusOr<std::vector<std::string>> Strings(const YAML::Node& n, const std::string& field) {
  std::vector<std::string> out;
  if (!n.IsSequence()) return Bad(field, "must be a list of strings");
  for (const auto& v : n) {
    if (!v.IsScalar() || v.Scalar().empty()) return Bad(field, "items must be non-empty strings");
    out.push_back(v.Scalar());
  }
  return out;
}

absl::StatusOr<std::string> String(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar() || n.Scalar().empty()) return Bad(field, "must be a non-empty string");
  return n.Scalar();
}

}  // namespace

absl::StatusOr<AgentPolicy> ParseAgentPolicy(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("policy: invalid YAML: ", e.msg));
  }
  AgentPolicy p;
  if (root.IsNull()) return p;
  if (!root.IsMap()) return absl::InvalidArgumentError("policy: must be a YAML mapping");
  const std::set<std::string> known = {"executors", "teams",   "commands", "allow_any_command",
                                       "workdir_root", "run_as", "env_allow"};
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (!known.count(key)) {
        return Bad(key, absl::StrCat("unknown field (expected one of: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    if (root["executors"]) {
      ASSIGN_OR_RETURN(auto e, Strings(root["executors"], "executors"));
      p.executors = absl::StrJoin(e, ",");
    }
    for (auto [key, out] : {std::pair{"teams", &p.teams}, std::pair{"commands", &p.commands},
                            std::pair{"env_allow", &p.env_allow}}) {
      if (!root[key]) continue;
      ASSIGN_OR_RETURN(*out, Strings(root[key], key));
    }
    for (auto [key, out] : {std::pair{"workdir_root", &p.workdir_root},
                            std::pair{"run_as", &p.run_as}}) {
      if (!root[key]) continue;
      ASSIGN_OR_RETURN(*out, String(root[key], key));
    }
    if (root["allow_any_command"]) {
      const std::string v = root["allow_any_command"].Scalar();
      if (v != "true" && v != "false") return Bad("allow_any_command", "must be true or false");
      p.allow_any_command = v == "true";
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("policy: malformed: ", e.msg));
  }
  return p;
}

absl::StatusOr<AgentPolicy> LoadAgentPolicy(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, 1 << 20, "--policy"));
  return ParseAgentPolicy(text);
}

}  // namespace infrarsi::client
