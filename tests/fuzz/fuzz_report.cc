// Agents' reports arrive over the network from whoever holds an agent
// token: whatever ValidateSteps and ValidateOutcome accept must be finite
// and in range (the verdict and the bank may rely on it), and the contract
// must judge it without crashing. The input is a serialized TrialOutcome.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/agent_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  infrarsi::v1::TrialOutcome o;
  if (!o.ParseFromArray(data, static_cast<int>(size))) return 0;
  infrarsi::ReportLimits limits;
  limits.max_peak_mem_gib = 89;
  limits.max_steps = 64;
  limits.agent_clock = size % 2 == 0;
  limits.max_wall_s = 100;
  auto steps = infrarsi::ValidateSteps(1, o.steps(), {}, limits, "outcome.steps");
  if (!steps.ok()) return 0;
  if (!infrarsi::ValidateOutcome(o, *steps, limits).ok()) return 0;
  for (const auto& r : *steps) {
    if (!std::isfinite(r.step_time_s) || r.step_time_s < 0 || r.step_time_s > 1e6) __builtin_trap();
    if (!r.warmup && r.step_time_s < infrarsi::kMinStepTimeS) __builtin_trap();
    if (!std::isfinite(r.peak_mem_gib) || r.peak_mem_gib > limits.max_peak_mem_gib) __builtin_trap();
    if (r.tokens < 0) __builtin_trap();
  }
  if (static_cast<int64_t>(steps->size()) > limits.max_steps) __builtin_trap();
  infrarsi::ContractSpec contract;
  contract.tokens_per_step = 4096;
  infrarsi::ContractReference ref;
  ref.flops_per_step = 1e12;
  ref.peak_flops = 1e15;
  (void)infrarsi::CheckContract(contract, ref,
                                infrarsi::EvidenceOfTrial(*steps, o.wall_s(), limits.agent_clock,
                                                          o.poll_interval_s()));
  return 0;
}
