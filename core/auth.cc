#include "core/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace infrarsi {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kAdmin: return "admin";
    case Role::kSubmitter: return "submitter";
    case Role::kReader: return "reader";
    case Role::kAgent: return "agent";
  }
  return "?";
}

absl::StatusOr<Role> ParseRole(const std::string& name) {
  for (Role r : {Role::kAdmin, Role::kSubmitter, Role::kReader, Role::kAgent}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role: expected admin, submitter, reader or agent, got '", name, "'"));
}

absl::Status Authorize(const Principal& who, Action action) {
  if (who.open || who.role == Role::kAdmin) return absl::OkStatus();
  bool ok = false;
  const char* what = "";
  switch (action) {
    case Action::kSubmit:
      ok = who.role == Role::kSubmitter;
      what = "create or drive sessions";
      break;
    case Action::kRead:
      ok = who.role == Role::kSubmitter || who.role == Role::kReader;
      what = "read sessions or the bank";
      break;
    case Action::kAgent:
      ok = who.role == Role::kAgent;
      what = "act as an agent";
      break;
  }
  if (ok) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("permission denied: role ", RoleName(who.role), " may not ", what));
}

absl::Status NoSuchSession(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("session_id: no session '", id, "'"));
}

absl::StatusOr<Principal> Authenticator::Authenticate(const std::string& authorization) const {
  const std::string header(absl::StripAsciiWhitespace(authorization));
  if (header.empty()) {
    // Open until the first token exists.
    ASSIGN_OR_RETURN(auto tokens, options_.storage->ListTokens());
    if (tokens.empty()) return Principal::Open();
    return absl::UnauthenticatedError("missing bearer token (--token or INFRARSI_TOKEN)");
  }
  if (!absl::StartsWithIgnoreCase(header, "bearer ")) {
    return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
  }
  const std::string token(absl::StripAsciiWhitespace(header.substr(7)));
  auto rec = options_.storage->GetTokenByHash(options_.hash(token));
  if (!rec.ok()) {
    if (absl::IsNotFound(rec.status())) {
      ASSIGN_OR_RETURN(auto tokens, options_.storage->ListTokens());
      if (tokens.empty()) return Principal::Open();  // a stray token on an open server
      return absl::UnauthenticatedError("invalid or revoked token");
    }
    return rec.status();
  }
  if (rec->revoked_ms != 0) return absl::UnauthenticatedError("invalid or revoked token");
  Principal p;
  p.token_id = rec->id;
  ASSIGN_OR_RETURN(p.role, ParseRole(rec->role));
  p.team = rec->team;
  return p;
}

absl::StatusOr<std::pair<storage::TokenRecord, std::string>> Authenticator::Issue(
    const std::string& role, const std::string& team, const std::string& name,
    const std::string& secret_hex, int64_t now_ms) const {
  RETURN_IF_ERROR(ParseRole(role).status());
  if (team.empty() && role != "admin" && role != "agent") {
    return absl::InvalidArgumentError("team: required for submitter and reader tokens");
  }
  for (char c : team) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) {
      return absl::InvalidArgumentError("team: use letters, digits, '-', '_' or '.'");
    }
  }
  if (secret_hex.size() < 32) return absl::InvalidArgumentError("secret: too short");
  storage::TokenRecord r;
  const std::string text = absl::StrCat("irt_", secret_hex);
  r.hash = options_.hash(text);
  r.id = absl::StrCat("tok-", r.hash.substr(0, 10));  // from the digest: reveals nothing
  r.name = name;
  r.role = role;
  r.team = team;
  r.created_ms = now_ms;
  return std::make_pair(r, text);
}

}  // namespace infrarsi
