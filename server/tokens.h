// The server's side of API tokens: SHA-256 digests (OpenSSL), secrets from
// core/random, and the `infrarsi-server token` commands on a database.
#ifndef INFRARSI_SERVER_TOKENS_H_
#define INFRARSI_SERVER_TOKENS_H_

#include <string>

#include "absl/status/statusor.h"
#include "storage/storage.h"

namespace infrarsi::server {

// Lower-case hex SHA-256 of `text`.
std::string Sha256Hex(const std::string& text);

// `infrarsi-server token create`: stores a new token and returns its text
// (shown once; only its hash is kept). INVALID_ARGUMENT names the field.
absl::StatusOr<std::string> CreateToken(storage::Storage* db, const std::string& role,
                                        const std::string& team, const std::string& name);
// `token list`: one line per token, never the token itself.
absl::StatusOr<std::string> ListTokens(storage::Storage* db);
// `token revoke ID`.
absl::Status RevokeToken(storage::Storage* db, const std::string& id);

// `infrarsi-server repo add NAME --url URL --team T`: a repository the
// team's sessions may name. INVALID_ARGUMENT names the field.
absl::Status AddRepository(storage::Storage* db, const std::string& name, const std::string& url,
                           const std::string& team);
// `repo list`: one line per repository.
absl::StatusOr<std::string> ListRepositories(storage::Storage* db);

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_TOKENS_H_
