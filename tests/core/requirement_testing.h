// What a trial needs of an agent, as the queue and registry tests spell it.
#ifndef INFRARSI_TESTS_CORE_REQUIREMENT_TESTING_H_
#define INFRARSI_TESTS_CORE_REQUIREMENT_TESTING_H_

#include <string>

#include "core/trial_queue.h"

namespace infrarsi::testing {

inline TrialQueue::Requirement Req(const std::string& gpu, int count = 1,
                                   const std::string& executor = "replay") {
  TrialQueue::Requirement r;
  r.gpu_model = gpu;
  r.gpu_count = count;
  r.executor = executor;
  return r;
}

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_CORE_REQUIREMENT_TESTING_H_
