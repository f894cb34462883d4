#include "client/agent/agent_policy_file.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"

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

absl::StatusOr<double> Number(const YAML::Node& n, const std::string& field, double lo, double hi) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !(v >= lo && v <= hi)) {
    return Bad(field, absl::StrCat("must be a number in [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::Status ParseSlurm(const YAML::Node& n, AgentPolicy::Slurm& out) {
  if (!n.IsMap()) return Bad("slurm", "must be a mapping");
  const std::set<std::string> known = {"gpus_per_node", "max_nodes",  "shared_dir", "partition",
                                       "partitions",    "account",    "accounts",   "qos",
                                       "max_time_min",  "allow_options", "options", "max_pending_h"};
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return Bad("slurm." + key,
                 absl::StrCat("unknown field (expected one of: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  for (auto [key, dest, lo, hi] : {std::tuple{"gpus_per_node", &out.gpus_per_node, 0, 64},
                                   std::tuple{"max_nodes", &out.max_nodes, 1, 4096},
                                   std::tuple{"max_time_min", &out.max_time_min, 1, 7 * 1440}}) {
    if (!n[key]) continue;
    int v = 0;
    if (!n[key].IsScalar() || !YAML::convert<int>::decode(n[key], v) || v < lo || v > hi) {
      return Bad(absl::StrCat("slurm.", key), absl::StrCat("must be an integer in [", lo, ", ", hi, "]"));
    }
    *dest = v;
  }
  if (n["max_pending_h"]) {
    ASSIGN_OR_RETURN(out.max_pending_h, Number(n["max_pending_h"], "slurm.max_pending_h", 0.01, 720));
  }
  for (auto [key, dest] : {std::pair{"shared_dir", &out.shared_dir},
                           std::pair{"partition", &out.partition},
                           std::pair{"account", &out.account}}) {
    if (!n[key]) continue;
    ASSIGN_OR_RETURN(*dest, String(n[key], absl::StrCat("slurm.", key)));
  }
  for (auto [key, dest] : {std::pair{"partitions", &out.partitions},
                           std::pair{"accounts", &out.accounts}, std::pair{"qos", &out.qos},
                           std::pair{"allow_options", &out.allow_options},
                           std::pair{"options", &out.options}}) {
    if (!n[key]) continue;
    ASSIGN_OR_RETURN(*dest, Strings(n[key], absl::StrCat("slurm.", key)));
  }
  return absl::OkStatus();
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
  const std::set<std::string> known = {"executors",    "teams",  "commands",   "allow_any_command",
                                       "workdir_root", "run_as", "sandbox",    "trial_uids",
                                       "env_allow",    "slurm"};
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
                            std::pair{"run_as", &p.run_as}, std::pair{"trial_uids", &p.trial_uids}}) {
      if (!root[key]) continue;
      ASSIGN_OR_RETURN(*out, String(root[key], key));
    }
    if (root["sandbox"]) {
      ASSIGN_OR_RETURN(std::string v, String(root["sandbox"], "sandbox"));
      if (v != "on" && v != "off") return Bad("sandbox", "must be on or off");
      p.sandbox = v;
    }
    if (root["allow_any_command"]) {
      const std::string v = root["allow_any_command"].Scalar();
      if (v != "true" && v != "false") return Bad("allow_any_command", "must be true or false");
      p.allow_any_command = v == "true";
    }
    if (root["slurm"]) RETURN_IF_ERROR(ParseSlurm(root["slurm"], p.slurm));
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
