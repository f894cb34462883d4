// The read-only web dashboard: infrarsi-server's --http-listen. Each handler
// resolves the caller exactly as the gRPC API does (the same tokens, roles
// and teams), asks the session manager as that caller, and hands the
// answer to core/web for the HTML. Nothing here changes a session.
//
// Routes: GET /login, POST /login (a token from the form opens a login
// session kept by the server, core/login_sessions.h; the HttpOnly,
// SameSite=Strict cookie holds only its opaque id), POST /logout (ends it); GET / (the
// sessions), GET /sessions/<id> (live while it runs), /sessions/<id>/content
// (what the live page swaps in), /sessions/<id>/report.json (as `infrarsi
// report --json`), GET /agents, GET /bank, GET /static/dashboard.js.
// A request may carry "Authorization: Bearer <token>" instead of the cookie.
// Until the first token exists the server is open, as the gRPC API is.
//
// Pages send a Content-Security-Policy that allows nothing but this server
// (inline styles, its own script), and are never cached.
//
// Connections are accepted by an HttpGate (http_gate.h): a request gets a
// worker only once it has arrived whole, each worker's hold is bounded, and
// each client address is capped, so slow or idle clients cannot starve the
// pages.
//
// Thread safety: handlers run on the gate's worker threads; the manager,
// the authenticator and the login sessions are thread-safe.
#ifndef INFRARSI_SERVER_DASHBOARD_H_
#define INFRARSI_SERVER_DASHBOARD_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/auth.h"
#include "base/clock.h"
#include "core/login_sessions.h"
#include "core/session_manager.h"
#include "server/http_gate.h"

namespace httplib {
class Server;
}

namespace infrarsi::server {

class Dashboard {
 public:
  struct Options {
    std::string listen;  // HOST:PORT (port 0: any free one); required
    // Not owned; must outlive the dashboard. `auth` null: open (tests).
    SessionManager* manager = nullptr;
    const Authenticator* auth = nullptr;
    Clock* clock = Clock::Real();
    // TLS (PEM), the gRPC port's own: with a certificate the dashboard is
    // HTTPS only; with a client CA, browsers must present a certificate it
    // signed. Without TLS it listens only on loopback unless `insecure`.
    std::string tls_cert_pem;
    std::string tls_key_pem;
    std::string tls_client_ca_pem;
    bool insecure = false;
    // How long a login lasts (then the browser logs in again).
    absl::Duration login_lifetime = absl::Hours(12);
    // Slow and idle clients (http_gate.h): workers, deadlines, the cap
    // per client address.
    HttpGate::Options gate;
  };
  // Starts serving on its own thread. INVALID_ARGUMENT naming "http_listen"
  // for a bad address or plaintext off loopback; UNAVAILABLE when it
  // cannot bind.
  static absl::StatusOr<std::unique_ptr<Dashboard>> Create(const Options& options);
  ~Dashboard();  // stops serving; waits for handlers in flight
  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_pem.empty(); }
  // Reports built for session pages so far: a page polled while its session
  // did not change reuses the report of the same event (tests, operators).
  int64_t reports_built() const;
  // Connections refused for their client's cap so far.
  int64_t refused_connections() const;

 private:
  // Reports by session, each as of its newest event seq; a few dozen
  // sessions at most. Thread-safe.
  class ReportCache;
  Dashboard();
  void Route();
  std::unique_ptr<ReportCache> reports_;
  std::unique_ptr<LoginSessions> logins_;
  Options options_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  SSL_CTX* ssl_ctx_ = nullptr;  // owned; null without TLS
  std::unique_ptr<HttpGate> gate_;
};

// What a request carries: "Authorization: Bearer <t>" first, else the
// login session's id from the cookie; both empty when neither. Exposed for
// tests.
struct RequestCredential {
  std::string bearer;   // an API token
  std::string session;  // a login session's id
};
RequestCredential CredentialOf(const std::string& authorization, const std::string& cookie_header);

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_DASHBOARD_H_
