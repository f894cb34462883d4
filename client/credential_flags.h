// The flags the CLI and the agent share for reaching the server: a token
// from a file or the environment (a --token on the command line is refused:
// every user of the host sees it in ps) and the TLS files. Defined here,
// parsed by each main.
#ifndef INFRARSI_CLIENT_CREDENTIAL_FLAGS_H_
#define INFRARSI_CLIENT_CREDENTIAL_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "client/rpc_client.h"

namespace infrarsi::client {

struct CredentialFlags {
  std::string token_flag, token_file, tls_ca, tls_cert, tls_key;

  // Adds --token (refused), --token-file and --tls-ca/--tls-cert/--tls-key.
  void AddTo(CLI::App& app) {
    app.add_option("--token", token_flag, "refused: a token on the command line shows in ps")
        ->group("");
    app.add_option("--token-file", token_file,
                   "file holding the bearer token (default: $INFRARSI_TOKEN_FILE, else the token "
                   "in $INFRARSI_TOKEN; none needed before the server has tokens)")
        ->envname("INFRARSI_TOKEN_FILE");
    app.add_option("--tls-ca", tls_ca, "PEM CA that signed the server's certificate: connect with TLS");
    app.add_option("--tls-cert", tls_cert, "PEM client certificate (servers that require mutual TLS)");
    app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  }
  // After parsing: the credentials, or the flag that is wrong.
  absl::StatusOr<Credentials> Resolve() const {
    if (!token_flag.empty()) return TokenOnCommandLine();
    return ResolveCredentials(token_file, tls_ca, tls_cert, tls_key);
  }
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_CREDENTIAL_FLAGS_H_
