#include "core/agent_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {

std::string TenancyRefusal(const AgentScope& scope, const std::string& team,
                           SessionSpec::Pool pool) {
  if (!scope.token_team.empty() && scope.token_team != team) {
    return absl::StrCat("its token is scoped to team ", scope.token_team);
  }
  if (pool == SessionSpec::Pool::kTeam && (team.empty() || scope.token_team != team)) {
    return "the session accepts only agents whose token is scoped to its team (hardware.pool: team)";
  }
  if (!scope.serves.empty() &&
      std::find(scope.serves.begin(), scope.serves.end(), team) == scope.serves.end()) {
    return absl::StrCat("its operator serves teams ", absl::StrJoin(scope.serves, ", "), " only");
  }
  return "";
}

absl::Status CheckExecutorNames(const std::vector<std::string>& names) {
  for (const std::string& e : names) {
    if (e != "replay" && e != "process" && e != "sim" && e != "slurm") {
      return absl::InvalidArgumentError(
          absl::StrCat("executors: unknown executor '", e, "' (known: replay, process, sim, slurm)"));
    }
  }
  return absl::OkStatus();
}

bool CommandAllowed(const std::vector<std::string>& argv,
                    const std::vector<CommandPrefix>& prefixes) {
  if (prefixes.empty()) return true;
  for (const CommandPrefix& p : prefixes) {
    if (!p.empty() && p.size() <= argv.size() && std::equal(p.begin(), p.end(), argv.begin())) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<CommandPrefix>> ParseCommandPrefixes(
    const std::vector<std::string>& written, const std::string& field) {
  std::vector<CommandPrefix> out;
  for (const std::string& w : written) {
    auto argv = SplitCommandLine(w);
    if (!argv.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", w, "': ", argv.status().message()));
    }
    if (argv->empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": an empty command"));
    out.push_back(*std::move(argv));
  }
  return out;
}

std::string EncodeStringList(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? "," : "", JsonQuote(v[i]));
  return out + "]";
}

std::vector<std::string> DecodeStringList(const std::string& json) {
  std::vector<std::string> out;
  google::protobuf::ListValue list;
  if (json.empty() || !google::protobuf::util::JsonStringToMessage(json, &list).ok()) return out;
  for (const auto& v : list.values()) {
    if (v.kind_case() == google::protobuf::Value::kStringValue) out.push_back(v.string_value());
  }
  return out;
}

}  // namespace infrarsi
