// The session spec: what a team submits to Init, parsed and validated.
//
// Validation is strict: unknown fields are refused (a typo must not silently
// fall back to a default), and every error names the field, e.g.
// "baseline.attn: value 'flash' is not in knobs.attn".
#ifndef INFRARSI_CORE_SPEC_H_
#define INFRARSI_CORE_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json.h"
#include "core/derived.h"
#include "core/log_readers.h"
#include "core/source_repo.h"
#include "models/cluster_sim.h"

namespace infrarsi {

// A launch setting: knob name -> value, values as their YAML text with
// booleans normalised to "true"/"false". Ordered, so equal settings compare
// and encode equally.
using Config = std::map<std::string, std::string>;

struct Knob {
  std::string name;
  std::vector<std::string> values;  // non-empty, unique, in spec order
};

struct ReplayExecutorSpec {
  std::string landscape;          // the file as the spec names it
  std::string landscape_content;  // as the submitter sent it (empty: a stored legacy spec)
  double capacity_gib = 0;  // 0: no emulated capacity
  double noise_pct = 0;     // extra relative noise on step times, percent
};

struct ProcessExecutorSpec {
  std::vector<std::string> argv;  // template; "{knob}" placeholders
  // Where trials run on the agents (resolved against the spec's folder; the
  // server never reads it; each agent's policy decides whether it may).
  std::string workdir;
  int32_t timeout_s = 600;
  // A trial with no metrics line for this long hangs: killed as a timeout.
  int32_t watchdog_s = 300;
  // Where its steps come from: the harness's metrics lines, or a log
  // reader over the job's own output (core/log_readers.h).
  LogReaderSpec metrics;
  // Environment knobs: NAME -> a template with {knob} placeholders, set by
  // the agent (no shell, no `env` command) if its --env-allow names it.
  std::map<std::string, std::string> env;
};

// executor.slurm: the process runs as one Slurm job (agents with the slurm
// executor, on a submit host). Placement only: what runs and how it is
// judged is the process spec's.
struct SlurmPlacementSpec {
  bool enabled = false;
  std::string partition;  // "": the agent's default
  std::string account;
  std::string qos;
  int32_t time_limit_min = 0;  // 0: from the trial's timeout
  // "--name=value" or "--name"; each agent allows only the names its
  // operator listed. Options InfraRSI sets itself are refused here.
  std::vector<std::string> sbatch_options;
  int32_t gpus_per_node = 0;  // 0: the agent's
  // Later jobs of the session leave out nodes noted as failing its trials.
  bool exclude_failed_nodes = true;
};

// The sbatch options the slurm executor sets itself: a spec (or an
// operator) may not pass them as extra options.
const std::set<std::string>& SlurmReservedOptions();
// The reserved option `name` ("--ui") is or abbreviates ("--uid"), as
// sbatch reads any prefix of a long option; "" when none.
std::string SlurmReservedOption(const std::string& name);

// "" when `option` ("--name=value" or "--name") is well-formed, else why
// not. `name` receives "--name".
std::string SlurmOptionError(const std::string& option, std::string* name);

struct SimExecutorSpec {
  models::sim::ModelShape model;      // seq_len, global_batch from workload
  models::sim::ClusterShape cluster;  // gpu from hardware.gpu
  Config fixed;  // simulator knobs held constant (not searched)
  int32_t warmup_steps = 1;
  int32_t timed_steps = 5;
};

// A real job's model shape as its spec declares it (workload.shape): what
// the search's textbook memory and step-time estimates read (core/
// planner.h). The simulator's spec carries its own (SimExecutorSpec).
struct ShapeSpec {
  models::sim::ModelShape model;      // seq_len, global_batch from workload
  models::sim::ClusterShape cluster;  // gpu from hardware.gpu, nodes from hardware.count
  Config fixed;  // simulator knobs the job holds at a value other than the default
  // Searched knobs read as the simulator knob named here (a drafted
  // Megatron spec's tensor_model_parallel_size is tp), each of their values
  // as the simulator value `values` maps it to (none listed: as written;
  // an HF script's attn_implementation sdpa is flash_attn true); a knob not
  // listed is read as the simulator knob of its own name, if there is one;
  // one listed with no simulator knob (null) as none.
  struct KnobAs {
    std::string sim;
    std::map<std::string, std::string> values;
  };
  std::map<std::string, KnobAs> knobs;
  // The simulator knob the searched knob `name` is read as; "" for none.
  std::string SimKnobOf(const std::string& name) const;
  // The simulator's value for the searched knob `name` at `value` (its
  // boolean spellings normalised).
  std::string SimValueOf(const std::string& name, const std::string& value) const;
  // Whether the launcher refuses what the simulator's does (Megatron-LM's
  // parallel-size assertions: tp divides the heads, pp the layers, and so
  // on): only right where `fixed` holds every parallel size the job sets.
  bool launch_rules = false;
};

// The task contract: what decides whether a trial counts. Locked at Init.
struct ContractSpec {
  int64_t tokens_per_step = 0;  // default: global_batch x seq_len
  int32_t timed_steps = 0;      // 0: as many as the baseline reported
  bool data_seed_set = false;
  int64_t data_seed = 0;
  // A step's loss may differ from the baseline's by abs + rel * |baseline|.
  // Defaults separate honest settings on the measured H200 landscape (at
  // most 4.5e-4 apart) from the shrunk-batch probe (up to 0.02).
  double loss_abs_tol = 2e-3;
  double loss_rel_tol = 1e-4;
  // The timed steps may report at most this fraction less time in total
  // than the agent's clock saw over the timed window (less the clock's
  // resolution, once per trial); see core/contract.h.
  double timing_tolerance = 0.25;
  std::vector<std::string> precision;  // allowed dtypes; empty: any
  bool optimizer_in_window = false;    // lines must report optimizer_steps == 1
  std::vector<std::string> editable;   // globs a patch may change
  std::vector<std::string> protected_files;  // workdir-relative; no patch may change them
  std::map<std::string, std::string> protected_hashes;  // filled by Init
};

struct PatchSpec {
  std::string name;
  std::string rationale;
  std::string diff;
  std::vector<std::string> paths;  // files it changes
  // The knob that switches it ("patch_<name>", values off/on, baseline off):
  // patches are searched together with the launch knobs.
  std::string knob;
  // Optional prior effect of switching it on, on log step time.
  bool has_prior = false;
  double prior_time = 0, prior_time_sd = 0.5;
};

// The team's repository the patches apply to. Trials run in a clean work
// tree of it at base_commit with their patches applied (agents fetch it
// from `url`); `apply` commits into the submitter's own clone.
struct RepositorySpec {
  std::string name;             // as registered by an admin (repository.name)
  std::string url;              // where it is read from; empty: no repository
  std::string base = "HEAD";    // as written
  std::string base_commit;      // full SHA-1, resolved at Init
};

struct VerifySpec {
  int32_t candidates = 3;  // top settings re-run against the baseline
  int32_t runs = 3;        // A/B pairs per candidate
  // Rounds of fresh pairs for candidates whose pairs said the host got
  // busier after the doctor (core/doctor.h kNoisierThanCalibrated). Each
  // round is judged on its own pairs, so every extra round adds at most the
  // interval's 2.5% to the chance of promoting a candidate that is no
  // faster; hence at most 2.
  int32_t busier_retries = 1;
};

struct ExecutorTraits;

struct SessionSpec {
  std::string name;
  std::string model;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  // Optional: the model's size, for the MFU plausibility check: FLOPs per
  // token (forward and backward), or parameters (6 x params per token).
  double params = 0;
  double flops_per_token = 0;
  std::string gpu;
  int32_t gpu_count = 0;
  std::vector<Knob> knobs;  // in spec order
  Config baseline;
  // Values that follow from the knobs (core/derived.h), in spec order:
  // gradient accumulation tied to the micro-batch, and the like.
  std::vector<std::pair<std::string, DerivedExpr>> derived;
  int32_t max_trials = 0;
  // Search stops when trials x GPUs x their wall time reach this (0: no
  // limit), ...
  double max_gpu_hours = 0;
  // ... or, after at least min_trials search trials, when no setting is
  // expected to beat the best by more than max(stop_gain, the doctor's noise
  // floor) (relative step time).
  int32_t min_trials = 10;
  double stop_gain = 0;
  int32_t doctor_repeats = 5;
  ContractSpec contract;
  VerifySpec verify;
  std::vector<PatchSpec> patches;
  RepositorySpec repository;
  // Pairs of patch names that do not apply together; a setting never
  // switches on both (found at Init).
  std::vector<std::pair<std::string, std::string>> patch_conflicts;
  uint64_t seed = 0;
  // Whether other teams may read this session's bank entries (and start
  // their searches from them).
  bool share_bank = false;
  // Which agents may run its trials: any (the shared pool and the team's
  // own) or only agents whose token is scoped to the session's team.
  enum class Pool { kAny, kTeam } pool = Pool::kAny;
  enum class ExecutorKind { kReplay, kProcess, kSim } executor_kind = ExecutorKind::kReplay;
  ReplayExecutorSpec replay;
  ProcessExecutorSpec process;
  SimExecutorSpec sim;
  // Declared by a real job (never with the simulator's executor).
  std::optional<ShapeSpec> shape;
  SlurmPlacementSpec slurm;

  // "gpt-354m/gb16/seq2048": identifies "the same training job" in the bank.
  std::string WorkloadSignature() const;
  // Number of settings in the knob space (saturates at INT64_MAX).
  int64_t SpaceSize() const;
  const Knob* FindKnob(const std::string& name) const;
  const DerivedExpr* FindDerived(const std::string& name) const;
  // "replay", "process", "sim", or "slurm" (a process placed by Slurm):
  // what an agent must list to run its trials.
  std::string ExecutorName() const;
  // What its executor kind means (ExecutorTraitsOf).
  const ExecutorTraits& Executor() const;
  // The patches `config` switches on, in spec order.
  std::vector<const PatchSpec*> PatchesOn(const Config& config) const;
  // "" when `config` may run, else why not (two conflicting patches on).
  std::string PatchConflict(const Config& config) const;
};

struct SpecParseOptions {
  // Folder that relative agent-side paths (workdir) resolve against; must be
  // absolute if given. Nothing is read from it.
  std::string spec_dir;
  // The files the spec names, as the submitter sent them, by field:
  // "executor.replay.landscape", "patches[<name>].file" and, without a
  // repository, "contract.protected[<path>]". Parsing reads no file: a
  // field whose content is not here is refused (unless `stored`).
  const std::map<std::string, std::string>* files = nullptr;
  // Not owned; when set, receives the fields whose files were used.
  std::set<std::string>* files_used = nullptr;
  // Re-loading a stored spec, frozen at Init: file fields need no content
  // (the frozen contract and the session's record hold what was sent), and
  // the pre-tenancy `repository.path` is read as the repository's URL.
  bool stored = false;
  // Git's blob id of a file's content, which protected files are locked by
  // (the agents check the same). Null: their hashes stay empty.
  std::function<std::string(const std::string&)> blob_hash;
  // The caller may name a repository by URL (admins, and everyone on an
  // open server): the server will read it.
  bool may_name_urls = false;
  // The URL of the repository registered under a name for the caller's
  // team; NOT_FOUND (said the same way for another team's) otherwise. Null:
  // names are refused.
  std::function<absl::StatusOr<std::string>(const std::string&)> repository_url;
  // The session will belong to a team (hardware.pool: team needs one).
  bool team_known = false;
  // Checks patches against the repository and resolves its base commit.
  // Null: patches are checked as text only and the base stays unresolved
  // (re-loading a stored spec, whose frozen contract holds the results).
  const SourceRepo* source_repo = nullptr;
  // Patch diffs locked at Init, by name: used instead of reading a patch's
  // file again (re-loading a stored session whose files may have moved).
  const std::map<std::string, std::string>* frozen_patch_diffs = nullptr;
};

// The simulator's launch setting for `config` on top of the spec's fixed
// knobs. Precondition: spec.executor_kind == kSim and `config` came from its
// space (ParseSpec validated every value).
models::sim::LaunchKnobs SimKnobs(const SessionSpec& spec, const Config& config);

// What a spec and the files sent with it may weigh (the CLI reads no more,
// the server accepts no more).
inline constexpr size_t kMaxSpecBytes = 1 << 20;       // the YAML; inline patches stay far below
inline constexpr size_t kMaxPatchBytes = 1 << 20;      // one patch's diff
inline constexpr size_t kMaxSpecFileBytes = 8 << 20;   // one file sent with the spec
inline constexpr size_t kMaxSpecFilesBytes = 12 << 20; // all of them

// Parses and validates a YAML spec. INVALID_ARGUMENT names the bad field.
absl::StatusOr<SessionSpec> ParseSpec(const std::string& yaml, const SpecParseOptions& options);

// A knob value with the YAML booleans in one spelling ("True", "TRUE" ->
// "true"; the same for false), other values as they are: how ParseSpec
// stores every executor's values but a process's (whose command gets them
// as written), and how the simulator reads them.
std::string NormalizedKnobValue(const std::string& value);

// Whether git reads `url` over a transport (scheme://... or scp-like
// [user@]host:path, a ':' before any '/'), not as a local path.
bool IsRemoteRepositoryUrl(const std::string& url);

// A name a person picks for a session, a patch or a registered repository:
// 1-128 letters, digits, '-', '_' or '.'.
bool IsValidName(const std::string& s);

// Splits a command line into arguments the way a POSIX shell would for plain
// words, single quotes, double quotes and backslashes, without expanding
// anything. Used so that no command ever passes through a shell.
absl::StatusOr<std::vector<std::string>> SplitCommandLine(const std::string& command);

// The placeholders a command word holds as a spec reads them: "name" for
// "{name}", "name?" for a switch "{name?TEXT}" (identifiers only).
std::vector<std::string> CommandPlaceholders(const std::string& word);

// Adds patch `ps` (name, diff, rationale, prior) to `spec` exactly as a
// spec's own patches are added at Init: a valid, unique name; the size
// limit; the files the diff names and (with `source_repo`) the files git
// says it changes, held to the editable scope and off the protected files;
// a clean apply to the locked base commit; its switch knob ("patch_<name>",
// off/on, baseline off). INVALID_ARGUMENT naming `field` otherwise, with
// `spec` unchanged.
absl::Status AddCheckedPatch(PatchSpec ps, const SourceRepo* source_repo, const std::string& field,
                             SessionSpec* spec);

// A setting recorded before some knobs existed (an LLM's patch knobs join
// after the doctor's runs): each missing knob at its baseline value, which
// is what the trial ran (a patch knob's baseline is off). A boolean stored
// in another spelling than the knob's ("true" for "True": recorded before
// values were kept as written) takes the knob's spelling.
void FillKnobDefaults(const SessionSpec& spec, Config* config);

// A patch's switch knob: "patch_<name>", other characters than letters and
// digits as '_'.
std::string PatchKnobName(const std::string& patch);

// Replaces every "{name}" in `arg` by config[name], and every switch
// "{name?TEXT}" by TEXT where config[name] is "true" (by nothing where it
// is not); other text is kept.
std::string SubstituteKnobs(const std::string& arg, const Config& config);
// The values a trial's command and environment are filled from: its
// setting and the spec's derived values at it.
Config CommandValues(const SessionSpec& spec, const Config& config);
// Precision names in one vocabulary: float32/fp32, bfloat16/bf16,
// float16/fp16/half, tf32, fp8 (lower case; others as they are).
std::string CanonicalPrecision(const std::string& name);
// Whether `dtype` is among `allowed`, in any of their spellings.
bool PrecisionAllowed(const std::vector<std::string>& allowed, const std::string& dtype);
// "" when a spec may set environment variable `name` for its trials, else
// why not (the agent's own, or one that picks the program that runs).
std::string TrialEnvNameError(const std::string& name);
// A whole command: each argument substituted, and an argument that is one
// switch alone dropped when the switch is off (so that a flag Megatron
// takes bare, `--sequence-parallel`, is present or absent, never "").
std::vector<std::string> SubstituteCommand(const std::vector<std::string>& argv,
                                           const Config& config);

// A canonical text of everything the contract locks (hashed at Init).
std::string ContractText(const SessionSpec& spec);

// Canonical encodings stored in the database and shown to users.
std::string ConfigKey(const Config& config);          // "a=1,b=x"
std::string EncodeConfigJson(const Config& config);   // {"a":"1","b":"x"}
absl::StatusOr<Config> DecodeConfigJson(const std::string& json);
// `digits` significant digits (17: exact for any double).
std::string EncodeDoubleMapJson(const std::map<std::string, double>& m, int digits = 17);
absl::StatusOr<std::map<std::string, double>> DecodeDoubleMapJson(const std::string& json);
// JsonQuote (a JSON string literal): base/json.h, included above.

// A stable 64-bit FNV-1a digest as 16 hex digits (not cryptographic: it
// detects change, it does not resist forgery).
std::string StableHash(const std::string& data);

// What an executor kind means to the server, asked instead of comparing
// kinds: one row per kind (spec.cc), where a new executor kind is added.
struct ExecutorTraits {
  SessionSpec::ExecutorKind kind;
  const char* name;  // as agents list it
  // A tenant's command runs: agents' command policies apply, the promoted
  // command is committed, the work tree's protected files are checked.
  bool runs_code;
  // Timed on the agent's clock (a real process on a real host), with
  // report limits from the server's own clock.
  bool agent_clock;
  // Outcomes come from the cluster simulator's model of the workload.
  bool simulated;
};
const ExecutorTraits& ExecutorTraitsOf(SessionSpec::ExecutorKind kind);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SPEC_H_
