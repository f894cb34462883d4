// Which agents may run which trials. Two parties decide: the tenant (a
// session may accept only agents whose token is scoped to its team:
// hardware.pool: team) and the agent's operator (the teams it serves, the
// commands its process executor may run). The server matches on both so it
// never offers a trial the agent would refuse; the agent enforces its own
// part again, trusting nothing it is sent. Pure functions.
#ifndef INFRARSI_CORE_AGENT_POLICY_H_
#define INFRARSI_CORE_AGENT_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/spec.h"

namespace infrarsi {

// A command prefix: argv words that must open the trial's command, each
// matched whole ("python3 train.py" allows `python3 train.py --mbs 4`,
// not `python3 evil.py` nor `python3 -c ...`).
using CommandPrefix = std::vector<std::string>;

struct AgentScope {
  std::string token_team;                // the team its token is scoped to; "": shared pool
  std::vector<std::string> serves;       // teams its operator serves; empty: any
  std::vector<CommandPrefix> commands;   // empty: any (only when the operator allows it)
};

// Why an agent with `scope` may not run trials of a session owned by `team`
// that accepts `pool`; "" when it may.
std::string TenancyRefusal(const AgentScope& scope, const std::string& team,
                           SessionSpec::Pool pool);

// OK when every name is an executor an agent may offer (replay, process,
// sim); else INVALID_ARGUMENT "executors: ...".
absl::Status CheckExecutorNames(const std::vector<std::string>& names);

// Whether `argv` opens with one of `prefixes` (an empty list allows any).
bool CommandAllowed(const std::vector<std::string>& argv,
                    const std::vector<CommandPrefix>& prefixes);

// Prefixes as written by an operator ("python3 train.py"), split like a
// command line. INVALID_ARGUMENT naming `field` for an empty or unbalanced one.
absl::StatusOr<std::vector<CommandPrefix>> ParseCommandPrefixes(
    const std::vector<std::string>& written, const std::string& field);

// JSON list of strings <-> vector (how an agent's policy is stored).
std::string EncodeStringList(const std::vector<std::string>& v);
std::vector<std::string> DecodeStringList(const std::string& json);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AGENT_POLICY_H_
