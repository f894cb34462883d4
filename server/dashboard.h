// The read-only web dashboard: infrarsi-server's --http-listen. Each handler
// resolves the caller exactly as the gRPC API does (the same tokens, roles
// and teams), asks the session manager as that caller, and hands the
// answer to core/web for the HTML. Nothing here changes a session.
//
// Routes: GET /login, POST /login (a token from the form, kept in an
// HttpOnly, SameSite=Strict session cookie), POST /logout; GET / (the
// sessions), GET /sessions/<id> (live while it runs), /sessions/<id>/content
// (what the live page swaps in), /sessions/<id>/report.json (as `infrarsi
// report --json`), GET /agents, GET /bank, GET /static/dashboard.js.
// A request may carry "Authorization: Bearer <token>" instead of the cookie.
// Until the first token exists the server is open, as the gRPC API is.
//
// Pages send a Content-Security-Policy that allows nothing but this server
// (inline styles, its own script), and are never cached.
//
// Thread safety: handlers run on cpp-httplib's worker threads; the manager
// and the authenticator are thread-safe.
#ifndef INFRARSI_SERVER_DASHBOARD_H_
#define INFRARSI_SERVER_DASHBOARD_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/session_manager.h"

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

 private:
  // Reports by session, each as of its newest event seq; a few dozen
  // sessions at most. Thread-safe.
  class ReportCache;
  Dashboard();
  void Route();
  std::unique_ptr<ReportCache> reports_;
  Options options_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

// The token a request carries: "Authorization: Bearer <t>" first, else the
// session cookie; "" when neither. Exposed for tests.
std::string RequestToken(const std::string& authorization, const std::string& cookie_header);

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_DASHBOARD_H_
