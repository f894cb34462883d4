// Whether a finished trial honoured the task contract. Pure: the evidence is
// what the agent reported and observed; the caller records the verdict.
//
// Two clocks. A training process reports how long each step took (its own
// timer, which the trial's code can touch); for trials that run a real
// process the agent also records when each metrics line arrived on its own
// monotonic clock, which the trial cannot touch. The agent's clock is the
// authority: a step time counts only where the agent's clock confirms it
// (see TimeOnAgentClock and the "timing" rule).
#ifndef INFRARSI_CORE_CONTRACT_H_
#define INFRARSI_CORE_CONTRACT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

struct StepEvidence {
  int64_t step = 0;
  bool warmup = false;
  double loss = 0;
  int64_t tokens = 0;
  double step_time_s = 0;
  std::optional<int64_t> data_seed;
  std::string dtype;
  int optimizer_steps = -1;  // -1: not reported
  // Agent's clock: seconds from the process's start to this line's arrival
  // (0: not observed, a simulated executor), and how late it may have been
  // seen at most (0: unknown, the trial's poll interval applies).
  double arrival_s = 0;
  double arrival_error_s = 0;
};

struct TrialEvidence {
  std::vector<StepEvidence> steps;  // in step order
  // Agent's clock: process start to exit. Simulated executors: what the
  // executor says the trial would have taken.
  double wall_s = 0;
  std::vector<std::string> protected_changed;
  // A real process timed by the agent (arrival_s on every step) rather than
  // a simulated executor.
  bool agent_clock = false;
  // The longest gap between two reads of the metrics file: the bound on
  // each arrival's error, seconds.
  double poll_interval_s = 0;
};

// What a trial is held to besides the spec's contract: the baseline's
// figures from the doctor (absent while the doctor builds them) and the
// hardware's physics.
struct ContractReference {
  std::vector<double> losses;     // the baseline's loss at each step
  int expected_timed_steps = 0;   // 0: not checked
  // Agent's clock: the longest the baseline ran after its last metrics
  // line; < 0: unknown (nothing is then charged for a tail).
  double tail_s = -1;
  // Model FLOPs of one optimizer step and the dense peak of all the
  // session's GPUs together, FLOP/s; either 0: the MFU rule is skipped.
  double flops_per_step = 0;
  double peak_flops = 0;
};

struct Violation {
  std::string kind;    // protected_file, instrumentation, timed_steps, tokens_per_step,
                       // data_seed, precision, loss_nan, loss, impossible, timing
  std::string reason;  // says what was seen and what the contract says
};

// The timed window on the agent's clock: from the arrival of the line
// before the first timed step to the arrival of the last timed line. When
// no line precedes the first timed step, the window starts at that step's
// line and leaves the step out (its start was never observed).
struct AgentClockTiming {
  bool valid = false;
  std::string why_not;   // set when !valid
  int window_steps = 0;  // timed steps inside the window
  double observed_s = 0; // the window's length on the agent's clock
  double reported_s = 0; // what those steps report in total
  double tail_s = 0;     // last line to the process's exit
  // Slack for the clock's resolution, applied once per trial: the read
  // delays of the two lines that bound the window.
  double slack_s = 0;
};
AgentClockTiming TimeOnAgentClock(const TrialEvidence& e);

// Time after the last metrics line is no evidence of cheating: a
// checkpoint write, NCCL teardown or a busy host make it vary without
// bound. But it is time the trial ran that no step reports, so work moved
// there (lines written ahead of the work) must not look like a speed-up.
// The trial is charged instead of accused: its step time is at least its
// timed window plus what its tail ran beyond the baseline's longest tail,
// per timed step. What a charge says, for the trial's note.
struct TailCharge {
  double extra_s = 0;      // tail beyond the baseline's; 0: nothing charged
  double step_time_s = 0;  // (window + extra) / window steps
  std::string note;
};
// Only with the agent's clock, a known baseline tail and a valid window.
TailCharge ChargeForTail(const AgentClockTiming& timing, const ContractReference& reference);

// The first rule the trial breaks, or none. The order is fixed so that a
// trial breaking several rules always gets the same verdict.
std::optional<Violation> CheckContract(const ContractSpec& contract,
                                       const ContractReference& reference,
                                       const TrialEvidence& evidence);

// The rules the lines of a trial still running already break, or none: every
// per-line rule of CheckContract, but not the step count, the window on the
// agent's clock or the wall time, which only a whole run shows. A trial the
// server stops early (pruned) is judged by this first.
std::optional<Violation> CheckContractSoFar(const ContractSpec& contract,
                                            ContractReference reference, TrialEvidence evidence);

// Per-step extras travel in StepRecord::extra; these keep one encoding.
std::string EncodeStepExtra(const StepEvidence& s);
void DecodeStepExtra(const std::string& json, StepEvidence* s);

// Model FLOPs per token the spec states (flops_per_token, else 6 x params),
// or the simulator's count for a sim session; 0 when unknown.
double SpecFlopsPerToken(const SessionSpec& spec);
// The dense peak of one GPU of `gpu` for the precisions a session may use,
// FLOP/s: fp8's where the space or the contract allows fp8 (or says
// nothing), else bf16's (an upper bound for bf16, fp16, tf32 and fp32).
// 0 for a GPU the catalog does not know.
double PeakFlopsPerGpu(const SessionSpec& spec);
// What the MFU rule compares (ContractReference's two figures): the model
// FLOPs of one optimizer step, and the peak of all the session's GPUs.
double SpecFlopsPerStep(const SessionSpec& spec);
double SpecPeakFlops(const SessionSpec& spec);

// The frozen contract as the API shows and stores it: what no trial may
// change, with `hash` (StableHash of ContractText) and the patches' diffs.
v1::Contract ContractProtoOf(const SessionSpec& spec, const std::string& hash);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_CONTRACT_H_
