// Whether a finished trial honoured the task contract. Pure: the evidence is
// what the agent reported and observed; the caller records the verdict.
#ifndef INFRARSI_CORE_CONTRACT_H_
#define INFRARSI_CORE_CONTRACT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec.h"

namespace infrarsi {

struct StepEvidence {
  int64_t step = 0;
  bool warmup = false;
  double loss = 0;
  int64_t tokens = 0;
  double step_time_s = 0;
  std::optional<int64_t> data_seed;
  std::string dtype;
  int optimizer_steps = -1;        // -1: not reported
  double observed_interval_s = 0;  // 0: not observed
};

struct TrialEvidence {
  std::vector<StepEvidence> steps;  // in step order
  double wall_s = 0;
  std::vector<std::string> protected_changed;
};

struct Violation {
  std::string kind;    // protected_file, instrumentation, timed_steps, tokens_per_step,
                       // data_seed, precision, loss_nan, loss, timing
  std::string reason;  // says what was seen and what the contract says
};

// The first rule the trial breaks, or none. `reference_losses[i]` is the
// baseline's loss at step i (empty while the doctor builds it);
// `expected_timed_steps` 0 skips that check.
std::optional<Violation> CheckContract(const ContractSpec& contract,
                                       const std::vector<double>& reference_losses,
                                       int expected_timed_steps, const TrialEvidence& evidence);

// Per-step extras travel in StepRecord::extra; these keep one encoding.
std::string EncodeStepExtra(const StepEvidence& s);
void DecodeStepExtra(const std::string& json, StepEvidence* s);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_CONTRACT_H_
