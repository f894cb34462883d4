#include "core/login_sessions.h"

#include "base/random.h"

namespace infrarsi {

std::unique_ptr<LoginSessions> LoginSessions::Create(Options options) {
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.max_sessions == 0) options.max_sessions = 1;
  return std::unique_ptr<LoginSessions>(new LoginSessions(options));
}

std::string LoginSessions::Start(const std::string& token) {
  const std::string id = SecureRandomHex(32);
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  while (sessions_.size() >= options_.max_sessions) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.started < oldest->second.started) oldest = it;
    }
    sessions_.erase(oldest);
  }
  sessions_[id] = Entry{token, now};
  return id;
}

std::string LoginSessions::TokenOf(const std::string& id) {
  if (id.empty()) return "";
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return "";
  if (now - it->second.started >= options_.lifetime) {
    sessions_.erase(it);
    return "";
  }
  return it->second.token;
}

void LoginSessions::End(const std::string& id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

size_t LoginSessions::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace infrarsi
