// HeldLock: releases, when it goes out of scope, a mutex its caller already
// holds (taken by TryLock, or by Lock on one branch of a choice). This
// Abseil's MutexLock cannot adopt a held lock.
#ifndef INFRARSI_BASE_HELD_LOCK_H_
#define INFRARSI_BASE_HELD_LOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace infrarsi {

class ABSL_SCOPED_LOCKABLE HeldLock {
 public:
  // Precondition: the caller holds `mu`; from here this object does.
  explicit HeldLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) : mu_(mu) {}
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  absl::Mutex* const mu_;
};

}  // namespace infrarsi

#endif  // INFRARSI_BASE_HELD_LOCK_H_
