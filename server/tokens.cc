#include "server/tokens.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/auth.h"
#include "base/random.h"
#include "core/spec.h"
#include "base/status_macros.h"

namespace infrarsi::server {

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), len));
}

absl::StatusOr<std::string> CreateToken(storage::Storage* db, const std::string& role,
                                        const std::string& team, const std::string& name) {
  Authenticator::Options o;
  o.storage = db;
  o.hash = Sha256Hex;
  const Authenticator auth(o);
  const std::string secret = SecureRandomHex(32);
  ASSIGN_OR_RETURN(auto issued,
                   auth.Issue(role, team, name, secret, absl::ToUnixMillis(absl::Now())));
  RETURN_IF_ERROR(db->AddToken(issued.first));
  return issued.second;
}

absl::StatusOr<std::string> ListTokens(storage::Storage* db) {
  ASSIGN_OR_RETURN(auto tokens, db->ListTokens());
  std::string out = absl::StrFormat("%-16s %-10s %-16s %-8s %s\n", "ID", "ROLE", "TEAM", "STATE", "NAME");
  for (const auto& t : tokens) {
    absl::StrAppendFormat(&out, "%-16s %-10s %-16s %-8s %s\n", t.id, t.role,
                          t.team.empty() ? "-" : t.team, t.revoked_ms ? "revoked" : "live", t.name);
  }
  return out;
}

absl::Status RevokeToken(storage::Storage* db, const std::string& id) {
  return db->RevokeToken(id, absl::ToUnixMillis(absl::Now()));
}

absl::Status AddRepository(storage::Storage* db, const std::string& name, const std::string& url,
                           const std::string& team) {
  if (!IsValidName(name)) return absl::InvalidArgumentError("name: 1-128 letters, digits, '-', '_' or '.'");
  if (!IsValidName(team)) return absl::InvalidArgumentError("team: 1-128 letters, digits, '-', '_' or '.'");
  if (url.empty() || url.size() > 4096) return absl::InvalidArgumentError("url: required");
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20) return absl::InvalidArgumentError("url: control characters");
  }
  storage::RepositoryRecord r;
  r.name = name;
  r.url = url;
  r.team = team;
  r.created_ms = absl::ToUnixMillis(absl::Now());
  return db->AddRepository(r);
}

absl::StatusOr<std::string> ListRepositories(storage::Storage* db) {
  ASSIGN_OR_RETURN(auto repos, db->ListRepositories());
  std::string out = absl::StrFormat("%-24s %-16s %s\n", "NAME", "TEAM", "URL");
  for (const auto& r : repos) absl::StrAppendFormat(&out, "%-24s %-16s %s\n", r.name, r.team, r.url);
  return out;
}

}  // namespace infrarsi::server
