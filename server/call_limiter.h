// Caps the long-lived calls one caller holds at once (watch streams, long
// polls): each holds a server thread, so without a cap one client can take
// them all. Thread-safe.
#ifndef INFRARSI_SERVER_CALL_LIMITER_H_
#define INFRARSI_SERVER_CALL_LIMITER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace infrarsi::server {

class CallLimiter {
 public:
  explicit CallLimiter(int max_per_caller) : max_(max_per_caller) {}

  // Held while the call runs; released when destroyed.
  class Slot {
   public:
    Slot(CallLimiter* owner, std::string caller) : owner_(owner), caller_(std::move(caller)) {}
    ~Slot() { owner_->Release(caller_); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    CallLimiter* owner_;
    std::string caller_;
  };

  // A slot for `caller`, or null when it already holds the maximum.
  std::unique_ptr<Slot> Acquire(const std::string& caller) {
    std::lock_guard<std::mutex> lock(mu_);
    int& n = held_[caller];
    if (n >= max_) return nullptr;
    ++n;
    return std::make_unique<Slot>(this, caller);
  }
  int max() const { return max_; }

 private:
  void Release(const std::string& caller) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--held_[caller] <= 0) held_.erase(caller);
  }

  const int max_;
  std::mutex mu_;
  std::map<std::string, int> held_;
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_CALL_LIMITER_H_
