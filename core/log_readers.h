// Metrics from a training job's own output. A team's script already prints
// a line per step (Megatron-LM, torchtitan, DeepSpeed and the HF Trainer
// each have theirs); a log reader turns those lines into the steps the
// contract judges, so the script runs unmodified (no harness).
//
// Pure: a reader sees one line at a time and knows nothing of clocks. The
// agent feeds it each line of the trial's stdout or stderr as the line
// arrives and times the line on its own clock (LogStepBuilder), exactly as
// it times the harness's metrics lines.
//
// What each reader can state differs (ReaderTraitsOf): Megatron states the
// global batch and the consumed samples, so tokens per step are checked
// against the contract; the others do not, and the contract's figure is
// used (the report says the check could not run). No reader sees the
// optimizer step, the data seed (but jsonl and regex, when the line carries
// it) or the dtype.
#ifndef INFRARSI_CORE_LOG_READERS_H_
#define INFRARSI_CORE_LOG_READERS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

// executor.process.metrics, as the spec writes it.
struct LogReaderSpec {
  // "harness" (the default: metrics lines in $INFRARSI_METRICS), or one of
  // megatron, torchtitan, deepspeed, hf_trainer, jsonl, regex.
  std::string reader = "harness";
  std::string stream = "stdout";  // stdout or stderr
  std::string pattern;            // regex only (RE2 syntax, named groups)
  // The first lines are warm-up (not timed): compilation, allocator warm-up
  // and the first step's data loading make them unlike the rest.
  int32_t warmup_steps = 1;
  bool UsesHarness() const { return reader.empty() || reader == "harness"; }
};

// What a reader's lines state, for the report's list of checks.
struct ReaderTraits {
  const char* name;
  bool step_time;   // the log states each step's time (else the agent's clock is it)
  bool tokens;      // the log states what the step processed (checked against the contract)
  bool memory;      // the log states peak memory
  bool data_seed;   // the log can state the data seed
  bool optimizer;   // the optimizer step is counted inside the timed window
  bool dtype;       // the log states the dtype in use
};
// Null for an unknown name. "harness" is a reader too (all true).
const ReaderTraits* ReaderTraitsOf(const std::string& reader);
// The names, for errors and --help.
std::string KnownReaders();

// Whether `spec`'s lines can state the data seed: its reader can, and a
// regex has a (?P<data_seed>...) group (read from the compiled pattern).
bool StatesDataSeed(const LogReaderSpec& spec);

// "" when `spec` is usable, else why not (the regex compiled with RE2, its
// named groups known and `loss` among them). `field` prefixes nothing: the
// caller names the field.
std::string LogReaderSpecError(const LogReaderSpec& spec);

// One step as a line stated it. Optional fields are what the line left out.
struct LogStep {
  std::optional<int64_t> step;
  double loss = 0;
  std::optional<double> step_time_s;
  std::optional<int64_t> tokens;
  std::optional<double> peak_mem_gib;
  std::optional<int64_t> global_batch;      // Megatron: as stated
  std::optional<int64_t> consumed_samples;  // Megatron: as stated
  std::optional<double> tokens_per_second;  // torchtitan: per GPU, as stated
  std::optional<int64_t> data_seed;
};

// Reads one framework's lines. Thread-compatible.
class LogReader {
 public:
  virtual ~LogReader() = default;
  // A step when `line` completes one, else nothing (most lines are not
  // metrics). A reader may carry state between lines (DeepSpeed's loss and
  // timer lines, Megatron's memory report).
  virtual std::optional<LogStep> Feed(std::string_view line) = 0;

  // Precondition: LogReaderSpecError(spec) == "" and !spec.UsesHarness().
  // `global_batch`: the workload's, which DeepSpeed's samples per second
  // are a rate of.
  static absl::StatusOr<std::unique_ptr<LogReader>> Create(const LogReaderSpec& spec,
                                                           int64_t global_batch);
};

// The line without terminal colour codes (torchtitan colours its fields).
std::string StripAnsi(std::string_view line);

// Turns a reader's steps into the metrics the agent reports, timed on the
// agent's clock. Thread-compatible.
//
// - step numbers: the log's, else counted from 1;
// - warm-up: the first `warmup_steps` steps;
// - step time: the log's, else the agent's clock (time since the previous
//   step's line over the steps between them; the first line from the
//   process's start);
// - tokens: what the log states (Megatron: global batch x tokens per
//   sample, or the consumed samples' increase), else the contract's
//   tokens per step; torchtitan's tokens per second (per GPU): over the
//   timed steps so far, the time the contract's tokens take at the stated
//   rates must come within 25% of the agent's clock (allowing each end of
//   the window its read error and half a step's print delay), or the step
//   is said to have processed the window's average the rates imply;
// - peak memory: the latest the log stated (0 while it stated none).
class LogStepBuilder {
 public:
  struct Options {
    int32_t warmup_steps = 1;
    int64_t tokens_per_step = 0;  // the contract's
    int64_t global_batch = 0;     // the workload's (tokens per sample = tokens / batch)
    int32_t world = 0;            // the session's GPUs (0: unknown)
  };
  explicit LogStepBuilder(Options options) : options_(options) {}
  // The reported step for `s`, which arrived `arrival_s` after the process
  // started, read at most `arrival_error_s` late. Nothing for a step that
  // is not after the last one (a repeated line).
  std::optional<v1::StepMetrics> Add(const LogStep& s, double arrival_s, double arrival_error_s);
  // Set (and every later Add refused) once the log skipped a step: a line
  // that covers several steps cannot be timed or counted as one, so the
  // trial fails with this message, which says how to log every step.
  const std::string& error() const { return error_; }

 private:
  std::string error_;
  Options options_;
  int64_t count_ = 0;
  std::optional<int64_t> last_step_;
  double last_arrival_s_ = 0;
  double last_arrival_error_s_ = 0;
  // torchtitan's rates over the timed steps so far (see Add).
  int64_t rate_steps_ = 0;
  double rate_observed_s_ = 0;  // the agent's clock
  double rate_needed_s_ = 0;    // what the stated rates say the contract's tokens take
  double rate_open_error_s_ = 0;
  double peak_mem_gib_ = 0;
  std::optional<int64_t> last_consumed_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_LOG_READERS_H_
