// The dashboard's logins, kept by the server: a browser holds an opaque
// session id in its cookie, never an API token. Cookies are not separated
// by port, so any other listener on the same host name receives the
// cookie: what it gets is an id that opens this dashboard's read-only pages
// until it expires or is ended, not a token for the gRPC API.
//
// A session ends at logout, when its token is revoked (the caller checks
// the token on every request and ends the session when it fails), and
// `lifetime` after the login. At most `max_sessions` are kept; a new login
// past that ends the oldest.
//
// Thread safety: all methods are thread-safe.
#ifndef INFRARSI_CORE_LOGIN_SESSIONS_H_
#define INFRARSI_CORE_LOGIN_SESSIONS_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace infrarsi {

class LoginSessions {
 public:
  struct Options {
    Clock* clock = Clock::Real();       // not owned
    absl::Duration lifetime = absl::Hours(12);
    size_t max_sessions = 10000;
  };
  static std::unique_ptr<LoginSessions> Create(Options options);

  // A new session for `token` (already authenticated by the caller): its
  // id, 256 random bits as hex.
  std::string Start(const std::string& token);
  // The token of the live session `id`; "" when there is none (unknown,
  // ended or expired: an expired one is dropped).
  std::string TokenOf(const std::string& id);
  // Ends `id` (no-op when unknown).
  void End(const std::string& id);
  size_t size() const;

 private:
  explicit LoginSessions(Options options) : options_(options) {}
  struct Entry {
    std::string token;
    absl::Time started;
  };
  Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_LOGIN_SESSIONS_H_
