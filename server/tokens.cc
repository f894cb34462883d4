#include "server/tokens.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/auth.h"
#include "core/status_macros.h"

namespace infrarsi::server {

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), len));
}

absl::StatusOr<std::string> RandomHex(int bytes) {
  std::vector<unsigned char> buf(static_cast<size_t>(bytes));
  if (RAND_bytes(buf.data(), bytes) != 1) return absl::InternalError("no random bytes available");
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
}

absl::StatusOr<std::string> CreateToken(storage::Storage* db, const std::string& role,
                                        const std::string& team, const std::string& name) {
  Authenticator::Options o;
  o.storage = db;
  o.hash = Sha256Hex;
  const Authenticator auth(o);
  ASSIGN_OR_RETURN(std::string secret, RandomHex(32));
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

}  // namespace infrarsi::server
