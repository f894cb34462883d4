// Who may do what. Every RPC carries a bearer token; its hash is looked up
// in storage and gives the caller a role and a team:
//   admin      everything, every team;
//   submitter  create and drive its team's sessions, read its team's
//              reports and the bank entries it may see;
//   reader     its team's reports and the bank entries it may see;
//   agent      the AgentService only (leases bind it to its trials).
// A team sees only its own sessions; another team's bank entries only
// where that session was created with `share_bank: true`. Until the first
// token is created the server is open (every call acts as admin), so a
// loopback demo needs no setup.
#ifndef INFRARSI_CORE_AUTH_H_
#define INFRARSI_CORE_AUTH_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "storage/storage.h"

namespace infrarsi {

enum class Role { kAdmin, kSubmitter, kReader, kAgent };
const char* RoleName(Role role);
// INVALID_ARGUMENT naming the field "role" for anything else.
absl::StatusOr<Role> ParseRole(const std::string& name);

struct Principal {
  std::string token_id;  // "" for the open server
  Role role = Role::kAdmin;
  std::string team;
  bool open = false;
  // The open server: no tokens exist yet.
  static Principal Open() {
    Principal p;
    p.open = true;
    return p;
  }
  bool SeesTeam(const std::string& owner) const {
    return open || role == Role::kAdmin || owner == team;
  }
};

enum class Action {
  kSubmit,  // create and drive sessions
  kRead,    // reports, session state, the bank
  kAgent,   // register, lease, report, complete
};
// PERMISSION_DENIED, naming the role and the action, when the role lacks it.
absl::Status Authorize(const Principal& who, Action action);
// The error for a session id that names no session the caller may see:
// another team's session answers exactly as a missing one does, so that
// ids cannot be probed.
absl::Status NoSuchSession(const std::string& id);

// Resolves bearer tokens. Thread-safe if the storage is.
class Authenticator {
 public:
  struct Options {
    storage::Storage* storage = nullptr;  // required, not owned
    // Digest of a token's text (the server uses SHA-256, hex). Required.
    std::function<std::string(const std::string&)> hash;
  };
  explicit Authenticator(Options options) : options_(std::move(options)) {}

  // `authorization` is the request's "authorization" metadata ("Bearer
  // <token>", possibly empty). UNAUTHENTICATED when tokens exist and it is
  // missing, malformed, unknown or revoked; the open principal when no
  // token exists.
  absl::StatusOr<Principal> Authenticate(const std::string& authorization) const;

  // A new token for `role` and `team` from `secret` (random bytes, hex): the
  // record to store (hash only) and the text to show once.
  absl::StatusOr<std::pair<storage::TokenRecord, std::string>> Issue(
      const std::string& role, const std::string& team, const std::string& name,
      const std::string& secret_hex, int64_t now_ms) const;

 private:
  Options options_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AUTH_H_
