// A measured landscape (JSON Lines, see data/landscapes/README.md): the first
// line is {"meta": {...}}, then one trial per line. Loaded once, read-only.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_LANDSCAPE_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_LANDSCAPE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi::client {

struct LandscapeTrial {
  std::map<std::string, std::string> config;  // knob -> value, normalised
  std::string role;    // grid, baseline_repeat, launch_repeat, or "" (probe)
  std::string status;  // ok or oom
  std::vector<double> step_times_s;
  std::vector<std::map<std::string, double>> phases;  // per timed step
  std::vector<double> losses;  // warm-up steps first
  double step_time_s = 0;
  double peak_alloc_gib = 0;
  double peak_reserved_gib = 0;
  double wall_s = 0;
  std::string error;  // the framework's message on an oom trial
  std::string hack;   // reward-hack probes: what the edit did
  // Tokens per optimizer step this trial really processed (0: the
  // landscape's). A probe without honest accumulation did one micro-batch.
  int64_t tokens_per_step = 0;
};

struct Landscape {
  std::string gpu;
  double capacity_gib = 0;
  int64_t tokens_per_step = 0;
  int64_t global_batch = 0;
  int warmup_steps = 0;
  double import_and_init_s = 0;
  std::vector<std::string> knob_names;
  std::vector<LandscapeTrial> trials;
  // Between-launch coefficient of variation from the launch_repeat trials:
  // the noise a fresh process sees on this machine.
  double launch_cv = 0;

  // The grid trial of `config` (every knob of the landscape set), or null.
  const LandscapeTrial* FindGrid(const std::map<std::string, std::string>& config) const;
  // A reward-hack probe measured at `config`'s knob values, or null.
  const LandscapeTrial* FindProbe(const std::map<std::string, std::string>& config) const;

  static absl::StatusOr<Landscape> Load(const std::string& path);
  static absl::StatusOr<Landscape> Parse(const std::string& jsonl, const std::string& origin);
};

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_LANDSCAPE_H_
