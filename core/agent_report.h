// What an agent may tell the server about a trial. Every number in a
// ReportProgress or a CompleteTrial is checked here before any of it is
// stored: an agent (or whoever holds its token) could send anything, and a
// NaN, a negative time or a million steps must never reach the verdict or
// the bank. Pure functions; the manager supplies the limits.
#ifndef INFRARSI_CORE_AGENT_REPORT_H_
#define INFRARSI_CORE_AGENT_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/contract.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// Bounds that hold for every trial whatever its session says.
inline constexpr int64_t kMaxStepsPerTrial = 20000;  // metrics lines, warm-up included
inline constexpr double kMinStepTimeS = 1e-6;       // a timed step shorter is not a step
inline constexpr double kMaxStepTimeS = 7 * 86400.0;
inline constexpr double kMaxAbsLoss = 1e6;          // finite losses; NaN/inf are evidence
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 40;
inline constexpr double kMaxPollIntervalS = 1.0;    // a coarser clock times nothing
inline constexpr size_t kMaxReportTextBytes = 4096; // error and note are cut to this
// What is kept of a trial's stdout and of its stderr: the last MiB of each.
inline constexpr size_t kMaxTrialLogBytes = 1 << 20;
inline constexpr double kMaxOomPeakGib = 1e6;       // what an OOM trial may say it needed

// The metrics lines a trial may report: ten times a baseline run's once
// the doctor counted them (`steps_per_run` > 0), else ten times the
// contract's timed steps plus a warm-up of ten, never over the hard cap.
int64_t MaxStepsPerTrial(int steps_per_run, int contract_timed_steps);

// What one trial's reports are held to.
struct ReportLimits {
  // Device memory a step may report, GiB: the GPU's capacity with margin.
  double max_peak_mem_gib = 0;
  // Metrics lines the trial may report in all.
  int64_t max_steps = kMaxStepsPerTrial;
  // The trial runs a real process: every step carries the agent's
  // arrival_s and the outcome's clock is "agent".
  bool agent_clock = false;
  // Agent's clock: the longest wall_s the server's own clock allows (the
  // time since the lease, with margin); 0: not checked.
  double max_wall_s = 0;
};

// Checks `steps` (a ReportProgress's, or the steps a completion carries)
// against what the trial has stored. Returns the records to store: a step
// already stored and sent again unchanged (a retry after a lost reply) is
// dropped. INVALID_ARGUMENT names the field as "<prefix>[i].<field>".
absl::StatusOr<std::vector<storage::StepRecord>> ValidateSteps(
    int64_t trial_id, const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps,
    const std::vector<storage::StepRecord>& stored, const ReportLimits& limits,
    const std::string& prefix);
// The same, given only the tail Storage::ListStepTail returns for the first
// step of `steps` (the steps a report may resend, the last one, the count):
// a report of a long trial need not read all of it.
absl::StatusOr<std::vector<storage::StepRecord>> ValidateStepsOnTail(
    int64_t trial_id, const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps,
    const storage::Storage::StepTail& tail, const ReportLimits& limits,
    const std::string& prefix);
// The first step number of a report, where Storage::ListStepTail starts.
int64_t FirstStepOf(const google::protobuf::RepeatedPtrField<v1::StepMetrics>& steps);

// Checks a completion's own numbers, given every step the trial has with
// the completion's included (`all_steps`, in step order).
absl::Status ValidateOutcome(const v1::TrialOutcome& outcome,
                             const std::vector<storage::StepRecord>& all_steps,
                             const ReportLimits& limits);

// One encoding of a reported step in storage, and back.
storage::StepRecord StepRecordOf(int64_t trial_id, const v1::StepMetrics& m, bool agent_clock);
StepEvidence EvidenceOf(const storage::StepRecord& r);

// The contract's evidence of a trial from its stored steps and outcome.
TrialEvidence EvidenceOfTrial(const std::vector<storage::StepRecord>& steps, double wall_s,
                              bool agent_clock, double poll_interval_s);
// The same straight from an executor's outcome (benchmarks, tests).
TrialEvidence EvidenceOfOutcome(const v1::TrialOutcome& outcome);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_AGENT_REPORT_H_
