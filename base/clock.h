// Time source. Everything that reads the time takes a Clock so that tests can
// drive leases and deadlines with FakeClock instead of sleeping.
#ifndef INFRARSI_BASE_CLOCK_H_
#define INFRARSI_BASE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace infrarsi {

// Thread-safe: implementations may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;

  // The process-wide real clock; never deleted.
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace infrarsi

#endif  // INFRARSI_BASE_CLOCK_H_
