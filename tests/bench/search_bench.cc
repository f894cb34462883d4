// Search benchmark: how many trials a strategy needs to come within 2% of a
// landscape's best setting, how many OOMs it pays on the way, and how much
// of the optimum's speed-up it holds after 40 trials.
//
// Landscapes: the measured H200 landscape (data/landscapes) and the four
// simulator reference workloads (deploy/workloads), scored against their
// noise-free truth. Strategies: random without repeats, a DeepSpeed-
// autotuner-like heuristic (largest micro-batch that fits, memory-saving
// stage by stage), the model search cold and with deploy/priors.yaml.
// Optuna's TPE runs from tests/bench/tpe_bench.py against `--oracle`.
//
// Usage:
//   search_bench [seeds=30] [budget=200] [landscape-substring]
//   search_bench --transfer [seeds=10] [workload-substring]  same workload on another GPU, bank vs cold
//   search_bench --estimates [tune|held-out]  the planner's textbook estimates against the
//                                 simulator: the reference suite, or a half of the generated one
//   search_bench --generalize [seeds=10] [budget=30] [both|held-out|tune]
//                                 the generated suite (workload_suite.h), cold, against TPE,
//                                 in trials and GPU-seconds, with and without pruning
//                                 (SEARCH_SEED0=k: seeds k+1..k+seeds, to read how far
//                                 the seeds alone move the sums; SEARCH_SUITE_SEED=s: a
//                                 development suite drawn with another generator seed;
//                                 SEARCH_NOISE=1: the step times the search sees carry
//                                 the cluster's run-to-run noise, seeded per session;
//                                 SEARCH_BASELINE_RUNS=k: the doctor's k baseline runs;
//                                 SEARCH_NO_GAIN_STOP=1: no expected-gain stop, the
//                                 optimizer's own stops kept, to read what it costs;
//                                 SEARCH_BLIND=1: the search sees each workload as a
//                                 real job's, without the simulator's textbook estimates
//                                 and launch rules: the path real jobs and the measured
//                                 landscape take, to tune on without looking at those)
//   search_bench --latency [history=2000] proposal latency with a long history, each
//                proposal after the last one's pick ran, with the session's memo
//                and the history's indices kept as the server keeps them
//                (LATENCY_N proposals, default 100; LATENCY_NO_MEMO=1: no memo;
//                LATENCY_NO_KEPT_INDEX=1: every proposal indexes the history;
//                LATENCY_EARLY=1: an early session with two contract violations instead);
//                then Optuna's TPE on the same landscapes (tpe_bench.py --latency), with
//                the target's verdict: our p99 under a tenth of its median, per landscape
//   search_bench --promote [seeds=30]     whole noisy sessions: what is promoted after re-verification
//   search_bench --describe               landscapes as JSON lines (for tpe_bench.py)
//   search_bench --oracle NAME            answers "k=v,..." lines with "ok T MEM" / "oom" / "failed"
//
// For experiments, the "model" strategy's options can be overridden from the
// environment: X_NOISE (time_noise_var), X_IVT (interaction_var_total),
// X_IVMAX, X_LOCAL, X_INIT, X_MSIG (memory_sigma), X_LEARNSIG
// (learn_memory_sigma, 0 or 1), X_SIGW (memory_sigma_weight), X_EQUIV
// (skip_equivalent, 0 or 1), X_GRADED (graded_fallback, 0 or 1), X_KEEP_FIT
// (fallback_keeps_fit, 0 or 1), X_KNOB_SCALE (learned_knob_scale_floor),
// X_STALL (stall_trials), X_STALL_UNTRIED (stall_grows_untried, 0 or 1),
// X_PROBE (probe_untried_values, 0 or 1), X_PROBE_FIT, X_PROBE_BEAT
// (probe_min_fit, probe_min_p_beat_baseline), X_EDGE_FIT, X_EDGE_EXP
// (edge_probe_min_fit, edge_probe_min_expected), X_TREND (trend_var), and the rest
// ExperimentOptions reads. X_NO_MEMO: sessions keep no ProposalMemo (each
// proposal's fits start afresh; the server keeps one per session).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include <malloc.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "base/allocator.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/agent/executors/landscape.h"
#include "core/doctor.h"
#include "core/model_optimizer.h"
#include "core/optimizer.h"
#include "core/planner.h"
#include "core/report.h"
#include "core/search_history.h"
#include "core/sim_landscape.h"
#include "core/spec.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "models/cluster_sim.h"
#include "models/stats.h"
#include "storage/sqlite_storage.h"
#include "tests/bench/workload_suite.h"

namespace {

// The model search's options with X_* environment overrides, for trying
// an option on the suites without a rebuild (the defaults otherwise).
infrarsi::ModelOptimizer::Options ExperimentOptions() {
  infrarsi::ModelOptimizer::Options o;
  auto num = [](const char* name, auto* field) {
    if (const char* v = std::getenv(name)) *field = static_cast<std::decay_t<decltype(*field)>>(std::atof(v));
  };
  num("X_NOISE", &o.time_noise_var);
  num("X_IVT", &o.interaction_var_total);
  num("X_EIVT", &o.estimated_interaction_var_total);
  num("X_MAIN", &o.main_effect_var);
  num("X_EMAIN", &o.estimated_main_effect_var);
  num("X_STALL", &o.stall_trials);
  num("X_RISK", &o.risk_weight);
  num("X_FITSTOP", &o.stop_unlikely_fits_after);
  num("X_LOCALMIN", &o.local_min_share);
  num("X_FLASH", &o.flash_off_prior);
  num("X_FUSED", &o.fused_off_prior);
  num("X_C0", &o.oom_caution_start);
  num("X_SOFT", &o.soft_caution);
  num("X_STOPOOM", &o.stop_after_ooms);
  num("X_PROBE", &o.probe_untried_values);
  num("X_PROBE_FIT", &o.probe_min_fit);
  num("X_PROBE_BEAT", &o.probe_min_p_beat_baseline);
  num("X_EDGE_FIT", &o.edge_probe_min_fit);
  num("X_EDGE_EXP", &o.edge_probe_min_expected);
  num("X_TREND", &o.trend_var);
  num("X_RETRY", &o.oom_retry_min_fit);
  num("X_IVMAX", &o.max_interaction_var);
  num("X_LOCAL", &o.local_every);
  num("X_INIT", &o.initial_designs);
  num("X_MSIG", &o.memory_sigma);
  num("X_MDOUBT", &o.memory_doubt_scale);
  num("X_SIGW", &o.memory_sigma_weight);
  num("X_COST", &o.cost_weight);
  num("X_TRUST", &o.trust_radius);
  num("X_PBASE", &o.min_p_beat_baseline);
  num("X_POOL", &o.pool_size);
  num("X_HINT", &o.rules_hint_logit);
  num("X_HINTV", &o.rules_hint_var);
  if (const char* v = std::getenv("X_LEARNSIG")) o.learn_memory_sigma = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_OOMC")) o.oom_caution = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_EQUIV")) o.skip_equivalent = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_GRADED")) o.graded_fallback = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_KEEP_FIT")) o.fallback_keeps_fit = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_STALL_UNTRIED")) o.stall_grows_untried = std::atoi(v) != 0;
  if (const char* v = std::getenv("X_LDOUBT")) o.learn_memory_doubt = std::atoi(v) != 0;
  num("X_MINDOUBT", &o.min_memory_doubt_scale);
  num("X_DOUBTSD", &o.memory_doubt_log_sd);
  num("X_DOUBTROWS", &o.memory_doubt_rows);
  num("X_KNOB_SCALE", &o.learned_knob_scale_floor);
  return o;
}

using infrarsi::Config;
using infrarsi::Observation;

struct Outcome {
  bool ok = false;
  bool oom = false;
  double step_time_s = 0;
  double peak_mem_gib = 0;
  // GPU-seconds the trial costs (GPUs x wall time, start-up included, as
  // the simulator's MeasureTrial counts it, without noise), and what it
  // costs when the server stops it after its third timed step (pruning).
  // 0 where unknown (the measured landscape).
  double gpu_s = 0;
  double gpu_s_pruned = 0;
};

struct Bench {
  std::string name;
  infrarsi::SessionSpec spec;
  std::function<Outcome(const Config&)> evaluate;
  double best = 0;
  double baseline = 0;
  Config best_config;  // where known (the simulator's landscapes)
  // Relative noise of the cluster (what the doctor's floor would read);
  // the pruning rule's margin is twice it, at least 2%.
  double noise_floor = 0.01;
  bool hand_tuned = false;  // generated suite: the baseline is a decent one
  // The cluster's run-to-run noise (a trial's lognormal factor, as the
  // simulator's MeasureTrial draws it): what SEARCH_NOISE adds to the
  // step times the search sees. 0 where evaluate is not the simulator.
  double noise_cv = 0;
};

// How a session measures, from the environment (read once; a bad value
// exits 2 naming the variable): SEARCH_NOISE=1 gives each trial's step time
// as the search sees it the cluster's run-to-run noise, drawn from the
// session's seed (the figures still read the noise-free times: what a
// setting is, not what one run of it showed); SEARCH_BASELINE_RUNS=k runs
// the baseline k times first, as the doctor's repeats do (default 1);
// SEARCH_NO_GAIN_STOP=1 leaves the server's expected-gain stop out (the
// optimizer's own stops kept), to read what that stop costs the targets.
struct Measuring {
  bool noise = false;
  int baseline_runs = 1;
  bool no_gain_stop = false;
};
const Measuring& SessionMeasuring() {
  static const Measuring m = [] {
    Measuring out;
    if (const char* s = std::getenv("SEARCH_NOISE"); s != nullptr) {
      if (std::strcmp(s, "0") != 0 && std::strcmp(s, "1") != 0) {
        std::fprintf(stderr, "SEARCH_NOISE must be 0 or 1, got '%s'\n", s);
        std::exit(2);
      }
      out.noise = s[0] == '1';
    }
    if (const char* s = std::getenv("SEARCH_NO_GAIN_STOP"); s != nullptr) {
      if (std::strcmp(s, "0") != 0 && std::strcmp(s, "1") != 0) {
        std::fprintf(stderr, "SEARCH_NO_GAIN_STOP must be 0 or 1, got '%s'\n", s);
        std::exit(2);
      }
      out.no_gain_stop = s[0] == '1';
    }
    if (const char* s = std::getenv("SEARCH_BASELINE_RUNS"); s != nullptr) {
      if (!absl::SimpleAtoi(s, &out.baseline_runs) || out.baseline_runs < 1 || out.baseline_runs > 20) {
        std::fprintf(stderr, "SEARCH_BASELINE_RUNS must be an integer from 1 to 20, got '%s'\n", s);
        std::exit(2);
      }
    }
    return out;
  }();
  return m;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// deploy/priors.yaml, the priors the project ships.
absl::StatusOr<infrarsi::Priors> ShippedPriors() {
  return infrarsi::ParsePriors(Read(std::string(INFRARSI_SOURCE_DIR) + "/deploy/priors.yaml"));
}

infrarsi::SessionSpec Parse(const std::string& text, const std::string& dir,
                            const std::string& what) {
  infrarsi::SpecParseOptions o;
  o.spec_dir = dir;
  o.stored = true;  // the measured landscape is read here, not sent with the spec
  auto spec = infrarsi::ParseSpec(text, o);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), spec.status().ToString().c_str());
    std::exit(1);
  }
  return *spec;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

// `best_s` > 0: the landscape's best step time, known (the generated suite
// found it); else the whole space is enumerated.
Bench SimBench(const infrarsi::SessionSpec& spec, double best_s = 0) {
  namespace ms = infrarsi::models::sim;
  Bench b;
  b.spec = spec;
  b.name = spec.name + " (sim)";
  if (best_s > 0) {
    b.best = best_s;
    b.baseline = ms::Simulate(spec.sim.model, spec.sim.cluster, infrarsi::SimKnobs(spec, spec.baseline)).step_time_s;
  } else {
    auto land = infrarsi::EnumerateSimLandscape(b.spec, 1);
    b.best = land->best.front().result.step_time_s;
    b.best_config = land->best.front().config;
    b.baseline = land->baseline.result.step_time_s;
  }
  b.noise_floor = std::max(0.01, spec.sim.cluster.noise_cv);
  b.noise_cv = spec.sim.cluster.noise_cv;
  const double world = spec.sim.cluster.world();
  const double startup = ms::StartupS(spec.sim.model, spec.sim.cluster);
  const double warm = 1.8 * spec.sim.warmup_steps;  // MeasureTrial's warm-up steps are slower
  const double timed = spec.sim.timed_steps;
  b.evaluate = [spec, world, startup, warm, timed](const Config& c) {
    const ms::SimResult r = ms::Simulate(spec.sim.model, spec.sim.cluster, infrarsi::SimKnobs(spec, c));
    Outcome o;
    o.ok = r.status == ms::Status::kOk;
    o.oom = r.status == ms::Status::kOom;
    o.step_time_s = r.step_time_s;
    o.peak_mem_gib = r.peak_mem_gib;
    const double wall = o.ok    ? startup + (warm + timed) * r.step_time_s
                        : o.oom ? startup + 0.5 * r.step_time_s
                                : 8.0;  // argument checks fail before any GPU work
    o.gpu_s = world * wall;
    o.gpu_s_pruned = o.ok ? world * (startup + (warm + std::min(3.0, timed)) * r.step_time_s) : o.gpu_s;
    return o;
  };
  return b;
}

// The four reference workloads the search was developed on, first; the
// rest of the suite in deploy/workloads after them, by name.
const char* kReferences[] = {"dense-8b-1x8-h100.yaml", "dense-70b-4x8-h100.yaml",
                             "moe-8x7b-16l-1x8-h100.yaml", "moe-8x7b-2x8-h200.yaml"};

std::string WorkloadDir() { return std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads"; }

std::vector<std::string> SuiteFiles() {
  std::vector<std::string> files(std::begin(kReferences), std::end(kReferences));
  std::vector<std::string> rest;
  for (const auto& e : std::filesystem::directory_iterator(WorkloadDir())) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".yaml") continue;
    if (std::find(files.begin(), files.end(), name) == files.end()) rest.push_back(name);
  }
  std::sort(rest.begin(), rest.end());
  files.insert(files.end(), rest.begin(), rest.end());
  return files;
}

// One workload of the suite, parsed.
infrarsi::SessionSpec Workload(const std::string& file) {
  const std::string path = WorkloadDir() + "/" + file;
  return Parse(Read(path), WorkloadDir(), path);
}

// GPU models in pairs of the same compute and another memory (H100 <->
// H200, A100-40GB <-> A100-80GB).
const std::map<std::string, std::string>& GpuPairs() {
  static const std::map<std::string, std::string> kOther = {{"H100", "H200"},
                                                            {"H200", "H100"},
                                                            {"A100-40GB", "A100-80GB"},
                                                            {"A100-80GB", "A100-40GB"}};
  return kOther;
}

// The same workload on the other GPU model of its pair. Precondition:
// GpuPairs() has spec.gpu.
infrarsi::SessionSpec OnOtherGpu(const infrarsi::SessionSpec& spec) {
  infrarsi::SessionSpec other = spec;
  other.gpu = GpuPairs().at(spec.gpu);
  other.sim.cluster.gpu = *infrarsi::models::sim::FindGpu(other.gpu);
  return other;
}

std::vector<Bench> Landscapes() {
  const std::string root = INFRARSI_SOURCE_DIR;
  std::vector<Bench> benches;
  {
    Bench b;
    b.name = "h200-gpt-354m (measured)";
    const std::string path = root + "/data/specs/demo-h200-gpt-354m.yaml";
    b.spec = Parse(Read(path), root + "/data/specs", path);
    // SEARCH_H200_NO_SHAPE=1: as if the spec declared no model shape (the
    // search's path for a real job that does not).
    if (const char* s = std::getenv("SEARCH_H200_NO_SHAPE"); s != nullptr && std::strcmp(s, "1") == 0) {
      b.spec.shape.reset();
    }
    auto land = std::make_shared<infrarsi::client::Landscape>(
        *infrarsi::client::Landscape::Load(root + "/data/landscapes/h200-gpt-354m-seq2048.jsonl"));
    b.evaluate = [land](const Config& c) {
      Outcome o;
      const auto* t = land->FindGrid(std::map<std::string, std::string>(c.begin(), c.end()));
      if (t == nullptr) return o;
      o.ok = t->status == "ok";
      o.oom = t->status == "oom";
      o.step_time_s = t->step_time_s;
      o.peak_mem_gib = t->peak_reserved_gib;
      return o;
    };
    for (const auto& t : land->trials) {
      if (t.role == "grid" && t.status == "ok" && (b.best == 0 || t.step_time_s < b.best)) {
        b.best = t.step_time_s;
      }
    }
    b.baseline = b.evaluate(b.spec.baseline).step_time_s;
    benches.push_back(std::move(b));
  }
  for (const std::string& f : SuiteFiles()) {
    benches.push_back(SimBench(Workload(f)));
  }
  return benches;
}

// DeepSpeed-autotuner-like: memory-saving stages in turn (as the autotuner
// walks ZeRO stages), and within each the micro-batch sizes from small to
// large until one runs out of memory. Other knobs stay at the baseline.
class HeuristicOptimizer : public infrarsi::Optimizer {
 public:
  infrarsi::Proposal Propose(const infrarsi::SearchContext& ctx,
                             const std::vector<Observation>& history, int n,
                             uint64_t) override {
    const infrarsi::SessionSpec& spec = *ctx.spec;
    std::vector<Config> stages = {spec.baseline};
    auto add_stage = [&](const char* knob, const char* value) {
      const infrarsi::Knob* k = spec.FindKnob(knob);
      if (k == nullptr || std::find(k->values.begin(), k->values.end(), value) == k->values.end()) {
        return;
      }
      Config c = stages.back();
      c[knob] = value;
      if (c != stages.back()) stages.push_back(c);
    };
    add_stage("dist_opt", "true");
    add_stage("recompute", "selective");
    add_stage("ckpt", "true");
    add_stage("recompute", "full");
    std::map<std::string, std::string> status;
    for (const Observation& o : history) status[infrarsi::ConfigKey(o.config)] = o.status;
    const infrarsi::Knob* mb = spec.FindKnob("micro_batch");
    infrarsi::Proposal p;
    for (const Config& stage : stages) {
      std::vector<Config> seq;
      if (mb == nullptr) {
        seq.push_back(stage);
      } else {
        std::vector<std::string> values = mb->values;
        std::sort(values.begin(), values.end(), [](const std::string& a, const std::string& b) {
          double x = 0, y = 0;
          (void)absl::SimpleAtod(a, &x);
          (void)absl::SimpleAtod(b, &y);
          return x < y;
        });
        for (const std::string& v : values) {
          Config c = stage;
          c["micro_batch"] = v;
          seq.push_back(c);
        }
      }
      for (const Config& c : seq) {
        auto it = status.find(infrarsi::ConfigKey(c));
        if (it == status.end()) {
          if (static_cast<int>(p.configs.size()) < n) {
            p.configs.push_back(c);
            p.reasons.push_back("heuristic");
          }
          break;  // one step of this stage at a time
        }
        if (it->second == "oom") break;  // largest that fits found
      }
    }
    return p;
  }
  std::string Name() const override { return "heuristic"; }
};

// One trial of `c` as the search sees it.
Observation Observe(const Bench& b, const Config& c, Outcome* out = nullptr) {
  const Outcome o = b.evaluate(c);
  Observation obs;
  obs.config = c;
  obs.status = o.ok ? "ok" : o.oom ? "oom" : "failed";
  obs.step_time_s = o.step_time_s;
  obs.peak_mem_gib = o.peak_mem_gib;
  if (out != nullptr) *out = o;
  return obs;
}

struct Strategy {
  std::string name;
  std::unique_ptr<infrarsi::Optimizer> opt;
  const infrarsi::Priors* priors = nullptr;
};

struct SessionResult {
  int trials_to_2pct = 0;  // budget + 1 when never
  int ooms = 0, failed = 0;
  double best_at_40 = 0;     // best step time within 40 trials (0: none ran)
  double best_found = 0;
  // Over the whole budget: OOMs, and trials slower than the baseline or
  // failed (of `trials`).
  int ooms_total = 0, worse_than_baseline = 0, trials = 0;
  int failed_total = 0;  // trials that neither ran nor ran out of memory (launch errors)
  // Ended by the expected-gain stop reading an expected gain of 0: every
  // setting's score zeroed by the OOM caution or the baseline's floor.
  bool stopped_at_zero_gain = false;
  // Trials that ran within 1% of the fastest before them (the baseline
  // included), either way: they re-measure what was known.
  int remeasures = 0;
  // GPU-seconds until the first trial within 2% (the whole budget's when
  // never), without and with the server's pruning of trials that cannot
  // win; and how many trials pruning stops before that.
  double gpu_s_to_2pct = 0, gpu_s_to_2pct_pruned = 0;
  int pruned = 0;
  // The memory model's P(fits) of each pick that ran or ran out of memory,
  // as the proposal gave it (Proposal::p_fit), and whether it ran out.
  std::vector<std::pair<double, bool>> fits;
  // Why the session ended.
  enum EndedBy { kBudget, kGainStop, kOomStop, kExhausted, kEndings };
  EndedBy ended_by = kBudget;
};

SessionResult RunSession(const Bench& b, infrarsi::Optimizer& opt, const infrarsi::Priors* priors,
                         const std::vector<Config>& warm, int budget, uint64_t seed,
                         const std::vector<infrarsi::SearchContext::Related>& related = {},
                         bool stop_when_reached = false, bool server_stop_rule = false) {
  // What the search sees of a trial: with SEARCH_NOISE, its step time
  // times the cluster's run-to-run factor.
  const Measuring& measuring = SessionMeasuring();
  std::mt19937_64 noise_rng(seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto seen = [&](Observation obs) {
    if (measuring.noise && b.noise_cv > 0 && obs.status == "ok") obs.step_time_s *= std::exp(b.noise_cv * normal(noise_rng));
    return obs;
  };
  // The baseline is measured by the doctor first, as in a session.
  Outcome bo;
  std::vector<Observation> history;
  for (int i = 0; i < measuring.baseline_runs; ++i) history.push_back(seen(Observe(b, b.spec.baseline, &bo)));
  SessionResult r;
  r.trials_to_2pct = budget + 1;
  r.best_found = bo.ok ? bo.step_time_s : 0;
  infrarsi::SearchContext ctx;
  ctx.spec = &b.spec;
  ctx.priors = priors;
  ctx.warm_starts = warm;
  ctx.related = &related;
  // What the server's stop rule reads (SessionManager::OpenWindow), where
  // it applies.
  if (server_stop_rule && !measuring.no_gain_stop) ctx.stop_below = infrarsi::SearchStopBelow(b.spec, b.noise_floor);
  // The session's memo, as the server keeps one (X_NO_MEMO: none).
  infrarsi::ProposalMemo memo;
  if (std::getenv("X_NO_MEMO") == nullptr) ctx.memo = &memo;
  for (int n = 1; n <= budget; ++n) {
    const infrarsi::Proposal proposal = opt.Propose(ctx, history, 1, seed * 1000 + static_cast<uint64_t>(n));
    const std::vector<Config>& next = proposal.configs;
    if (next.empty()) {
      r.ended_by = SessionResult::kExhausted;
      break;
    }
    // The server's stop rule (infrarsi::SearchStopReason; the spec's
    // defaults: min_trials 10, stop_gain 0).
    if (server_stop_rule && (!measuring.no_gain_stop || !proposal.stop.empty())) {
      if (const std::string why = infrarsi::SearchStopReason(b.spec, n - 1, proposal, b.noise_floor); !why.empty()) {
        r.ended_by = !proposal.stop.empty() ? SessionResult::kOomStop : SessionResult::kGainStop;
        r.stopped_at_zero_gain = proposal.stop.empty() && proposal.expected_gain == 0;
        if (std::getenv("SEARCH_TRACE") != nullptr) {
          std::fprintf(stderr, "seed %llu stops before trial %d: %s\n", static_cast<unsigned long long>(seed), n,
                       why.c_str());
        }
        break;
      }
    }
    Outcome o;
    history.push_back(seen(Observe(b, next[0], &o)));
    if (std::getenv("SEARCH_TRACE") != nullptr) {  // one line per trial, for diagnosis
      std::string diff;
      for (const auto& k : b.spec.knobs) {
        if (next[0].at(k.name) != b.spec.baseline.at(k.name)) diff += k.name + "=" + next[0].at(k.name) + " ";
      }
      // P(fits) as the pick saw it (-1: before the models; 1: no memory
      // model) and the expected gain the stop rule read.
      std::fprintf(stderr, "seed %llu trial %3d %-6s %8.3f (%5.3f of best) %5.1f GiB P(fits) %5.2f gain %6.3f [%s] %s\n",
                   static_cast<unsigned long long>(seed), n, history.back().status.c_str(),
                   o.step_time_s, o.ok ? o.step_time_s / b.best : 0.0, o.peak_mem_gib,
                   proposal.p_fit.empty() ? 1.0 : proposal.p_fit[0], proposal.expected_gain,
                   proposal.reasons.empty() ? "" : proposal.reasons[0].c_str(), diff.c_str());
    }
    // Failures count until the session gets within 2% (what it paid to
    // get there), or over the whole budget if it never does.
    if (r.trials_to_2pct > budget) {
      r.ooms += o.oom;
      r.failed += !o.ok && !o.oom;
    }
    ++r.trials;
    r.ooms_total += o.oom;
    r.failed_total += !o.ok && !o.oom;
    if (!proposal.p_fit.empty() && proposal.p_fit[0] >= 0 && (o.ok || o.oom)) r.fits.push_back({proposal.p_fit[0], o.oom});
    r.worse_than_baseline += !o.ok || o.step_time_s > b.baseline;
    r.remeasures += o.ok && r.best_found > 0 && std::abs(o.step_time_s / r.best_found - 1) < 0.01;
    // Pruning, as the server's JudgePrune: past three timed steps, a trial
    // slower than the incumbent by more than twice the noise floor stops.
    const bool prune = o.ok && r.best_found > 0 && o.step_time_s > r.best_found * (1 + 2 * b.noise_floor);
    if (r.trials_to_2pct > budget) {
      r.gpu_s_to_2pct += o.gpu_s;
      r.gpu_s_to_2pct_pruned += prune ? o.gpu_s_pruned : o.gpu_s;
      r.pruned += prune;
    }
    if (o.ok && (r.best_found == 0 || o.step_time_s < r.best_found)) r.best_found = o.step_time_s;
    if (n <= 40) r.best_at_40 = r.best_found;
    if (o.ok && o.step_time_s <= 1.02 * b.best && r.trials_to_2pct > budget) {
      r.trials_to_2pct = n;
      // Nothing left to measure (the whole-budget counts are read only with
      // budgets of at most 40).
      if (n >= 40 || stop_when_reached) break;
    }
  }
  if (r.best_at_40 == 0) r.best_at_40 = r.best_found;
  return r;
}

int Main(int seeds, int budget, const std::string& only) {
  auto priors = ShippedPriors();
  if (!priors.ok()) {
    std::fprintf(stderr, "priors: %s\n", priors.status().ToString().c_str());
    return 1;
  }
  std::vector<Strategy> strategies;
  strategies.push_back({"random", std::make_unique<infrarsi::RandomOptimizer>()});
  strategies.push_back({"heuristic", std::make_unique<HeuristicOptimizer>()});
  infrarsi::ModelOptimizer::Options one_hot;
  one_hot.use_time_estimate = false;
  strategies.push_back({"model-1hot", std::make_unique<infrarsi::ModelOptimizer>(one_hot)});
  const infrarsi::ModelOptimizer::Options exp_opts = ExperimentOptions();
  strategies.push_back({"model", std::make_unique<infrarsi::ModelOptimizer>(exp_opts)});
  strategies.push_back({"model+priors", std::make_unique<infrarsi::ModelOptimizer>(), &*priors});

  std::printf("%d seeds, budget %d trials; 'reached' = a trial within 2%% of the landscape's best;\n"
              "OOM and fail per session: paid until then (or over the budget when never).\n"
              "@40 = median share of the optimum's speed-up held after 40 trials; found = median\n"
              "speed-up found (not re-verified; the benchmark has no noise).\n\n",
              seeds, budget);
  std::printf("%-34s %-13s %8s %7s %5s %9s %8s %9s %7s %8s\n", "landscape", "strategy", "reached",
              "median", "p90", "OOM/sess", "OOM med", "fail/sess", "@40", "found");
  // Per strategy, the suite's summary: how many workloads meet each of the
  // targets (median <= 15 and p90 <= 30 trials to within 2%, >= 99% of the
  // optimum's gain at 40, median OOMs per session <= 1), and the worst.
  struct Summary {
    int workloads = 0, median_ok = 0, p90_ok = 0, at40_ok = 0, oom_ok = 0;
    double worst_median = 0, worst_p90 = 0, worst_at40 = 2, worst_oom = 0;
    std::string worst_median_at, worst_at40_at;
  };
  std::map<std::string, Summary> summary;
  for (const Bench& b : Landscapes()) {
    if (!only.empty() && b.name.find(only) == std::string::npos) continue;
    for (const Strategy& s : strategies) {
      // SEARCH_STRATEGIES=a,b runs only those (for quicker experiments).
      if (const char* only_s = std::getenv("SEARCH_STRATEGIES");
          only_s != nullptr && ("," + std::string(only_s) + ",").find("," + s.name + ",") == std::string::npos) {
        continue;
      }
      std::vector<double> need, at40, found, oom_counts;
      double ooms = 0, failed = 0;
      int reached = 0;
      for (int seed = 1; seed <= seeds; ++seed) {
        const SessionResult r = RunSession(b, *s.opt, s.priors, {}, budget, static_cast<uint64_t>(seed));
        need.push_back(r.trials_to_2pct);
        reached += r.trials_to_2pct <= budget;
        ooms += r.ooms;
        oom_counts.push_back(r.ooms);
        failed += r.failed;
        const double opt_speedup = b.baseline / b.best;
        at40.push_back(r.best_at_40 > 0 ? (b.baseline / r.best_at_40) / opt_speedup : 0);
        found.push_back(r.best_found > 0 ? b.baseline / r.best_found : 0);
      }
      const double median = Percentile(need, 0.5), p90 = Percentile(need, 0.9);
      const double a40 = Percentile(at40, 0.5), oom_med = Percentile(oom_counts, 0.5);
      std::printf("%-34s %-13s %5d/%-2d %7.0f %5.0f %9.1f %8.0f %9.1f %6.1f%% %7.2fx\n", b.name.c_str(),
                  s.name.c_str(), reached, seeds, median, p90, ooms / seeds, oom_med, failed / seeds,
                  100 * a40, Percentile(found, 0.5));
      std::fflush(stdout);
      if (b.name.find("(sim)") == std::string::npos) continue;  // the suite is the simulator's
      Summary& sum = summary[s.name];
      ++sum.workloads;
      sum.median_ok += median <= 15;
      sum.p90_ok += p90 <= 30;
      sum.at40_ok += a40 >= 0.99;
      sum.oom_ok += oom_med <= 1;
      if (median > sum.worst_median) {
        sum.worst_median = median;
        sum.worst_median_at = b.name;
      }
      sum.worst_p90 = std::max(sum.worst_p90, p90);
      if (a40 < sum.worst_at40) {
        sum.worst_at40 = a40;
        sum.worst_at40_at = b.name;
      }
      sum.worst_oom = std::max(sum.worst_oom, oom_med);
    }
  }
  std::printf("\nA median or p90 of budget+1 means that share of sessions never got within 2%%.\n");
  if (!summary.empty()) {
    std::printf("\nSuite summary (simulator workloads): workloads meeting each target, and the worst.\n");
    std::printf("%-13s %9s %14s %12s %14s   %s\n", "strategy", "workloads", "median<=15",
                "p90<=30", "@40>=99%", "OOM median<=1");
    for (const Strategy& s : strategies) {
      auto it = summary.find(s.name);
      if (it == summary.end()) continue;
      const Summary& m = it->second;
      std::printf("%-13s %9d %8d (%3.0f) %6d (%3.0f) %7d (%4.1f%%)   %d (%.0f)\n", s.name.c_str(),
                  m.workloads, m.median_ok, m.worst_median, m.p90_ok, m.worst_p90, m.at40_ok,
                  100 * m.worst_at40, m.oom_ok, m.worst_oom);
      std::printf("%-13s   worst median: %s; worst @40: %s\n", "", m.worst_median_at.c_str(),
                  m.worst_at40_at.c_str());
    }
  }
  return 0;
}

// Transfer: the bank holds one 40-trial session of the same workload on the
// other GPU model; the new session starts from its best settings.
int Transfer(int seeds, const std::string& only) {
  std::printf("Transfer: same workload, other GPU; the bank holds one 40-trial cold session on the\n"
              "source GPU. Median / p90 trials to within 2%% of the target's best (%d seeds, budget\n"
              "200): cold; starting from the bank's best settings; and also learning from all of\n"
              "that session's trials. src best: the source's best setting on the target, as a\n"
              "multiple of the target's best; dst best: the target's best on the source.\n\n",
              seeds);
  std::printf("%-28s %-6s -> %-6s %14s %14s %14s %9s %9s\n", "workload", "from", "to", "cold",
              "bank starts", "+ its trials", "src best", "dst best");
  infrarsi::ModelOptimizer model;
  for (const std::string& f : SuiteFiles()) {
    if (!only.empty() && f.find(only) == std::string::npos) continue;
    const infrarsi::SessionSpec target = Workload(f);
    if (!GpuPairs().count(target.gpu)) {  // a GB200, say: no pair in the catalog
      std::printf("%-28s %s has no GPU of the same compute with another memory: skipped\n", target.name.c_str(),
                  target.gpu.c_str());
      continue;
    }
    const infrarsi::SessionSpec source = OnOtherGpu(target);
    const std::string& other = source.gpu;
    const Bench src = SimBench(source), dst = SimBench(target);
    std::vector<double> cold, warm, both;
    for (int seed = 1; seed <= seeds; ++seed) {
      // The bank session: its best settings, fastest first, as the server's
      // WarmStarts ranks them.
      std::vector<Observation> hist = {Observe(src, src.spec.baseline)};
      infrarsi::SearchContext ctx;
      ctx.spec = &src.spec;
      for (int n = 1; n <= 40; ++n) {
        auto next = model.Propose(ctx, hist, 1, 7777u * static_cast<uint64_t>(seed) + static_cast<uint64_t>(n)).configs;
        if (next.empty()) break;
        hist.push_back(Observe(src, next[0]));
      }
      std::vector<Observation> ok;
      for (const Observation& o : hist) {
        if (o.status == "ok" && o.config != src.spec.baseline) ok.push_back(o);
      }
      std::sort(ok.begin(), ok.end(), [](const Observation& a, const Observation& b) {
        return a.step_time_s < b.step_time_s;
      });
      std::vector<Config> bank;
      for (size_t i = 0; i < ok.size() && i < 5; ++i) bank.push_back(ok[i].config);
      std::vector<infrarsi::SearchContext::Related> related;
      for (const Observation& o : hist) related.push_back({o, "source-session"});
      // Only the trials to within 2% are measured here.
      cold.push_back(RunSession(dst, model, nullptr, {}, 200, static_cast<uint64_t>(seed), {}, true).trials_to_2pct);
      warm.push_back(RunSession(dst, model, nullptr, bank, 200, static_cast<uint64_t>(seed), {}, true).trials_to_2pct);
      both.push_back(
          RunSession(dst, model, nullptr, bank, 200, static_cast<uint64_t>(seed), related, true).trials_to_2pct);
    }
    auto cell = [](const std::vector<double>& v) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.0f / %.0f", Percentile(v, 0.5), Percentile(v, 0.9));
      return std::string(buf);
    };
    // How far apart the two landscapes are: each one's best run on the
    // other GPU, against that GPU's best.
    auto on = [](const Bench& where, const Config& c) {
      const Outcome o = where.evaluate(c);
      char buf[32];
      if (o.ok) {
        std::snprintf(buf, sizeof(buf), "%.3f", o.step_time_s / where.best);
      } else {
        std::snprintf(buf, sizeof(buf), "%s", o.oom ? "OOM" : "fails");
      }
      return std::string(buf);
    };
    std::printf("%-28s %-6s -> %-6s %14s %14s %14s %9s %9s\n", target.name.c_str(), other.c_str(),
                target.gpu.c_str(), cell(cold).c_str(), cell(warm).c_str(), cell(both).c_str(),
                on(dst, src.best_config).c_str(), on(src, dst.best_config).c_str());
    std::fflush(stdout);
  }
  return 0;
}

// A session as the server runs it, on the simulator with its noise: the
// doctor's baseline repeats set the noise floor; the search (the spec's
// trial budget, stopping early when no setting is expected to beat the best
// by more than the floor) sees noisy step times; the fastest candidates are
// re-run in randomised A/B pairs with the baseline and judged by the
// server's own rule (JudgeCandidate, PickPromoted). What counts is the
// promoted setting's true (noise-free) speed-up.
int Promote(int seeds) {
  namespace ms = infrarsi::models::sim;
  auto priors = ShippedPriors();
  if (!priors.ok()) {
    std::fprintf(stderr, "priors: %s\n", priors.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "Promotion: whole sessions on the simulator with its noise, %d seeds. trials = search\n"
      "trials run (budget or early stop); promoted = sessions that promoted a setting; true =\n"
      "median noise-free speed-up of what was promoted (share of the optimum's); measured =\n"
      "median re-verified speed-up and lower 95%% bound.\n\n",
      seeds);
  std::printf("%-28s %-13s %7s %9s %16s %18s\n", "workload", "strategy", "trials", "promoted",
              "true (share)", "measured [low]");
  for (const char* f : kReferences) {
    const infrarsi::SessionSpec spec = Workload(f);
    const Bench b = SimBench(spec);
    const auto& sim = spec.sim;
    for (const bool with_priors : {false, true}) {
      infrarsi::ModelOptimizer model;
      std::vector<double> trials, truth, share, measured, low;
      int promoted = 0;
      for (int seed = 1; seed <= seeds; ++seed) {
        int64_t index = 0;  // trials the cluster has run (drift)
        auto measure = [&](const Config& c) {
          const ms::Measurement m = ms::MeasureTrial(
              sim.model, sim.cluster, infrarsi::SimKnobs(spec, c), sim.warmup_steps, sim.timed_steps,
              static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(index), index);
          ++index;
          Observation o;
          o.config = c;
          o.status = ms::StatusName(m.status);
          o.peak_mem_gib = m.peak_mem_gib;
          std::vector<double> timed;
          for (const auto& st : m.steps) {
            if (!st.warmup) timed.push_back(st.step_time_s);
          }
          if (o.status == "ok") o.step_time_s = infrarsi::models::Median(timed);
          return o;
        };
        std::vector<infrarsi::DoctorRun> doctor;
        for (int r = 0; r < spec.doctor_repeats; ++r) {
          infrarsi::DoctorRun d;
          d.step_time_s = measure(spec.baseline).step_time_s;
          doctor.push_back(d);
        }
        const auto report = infrarsi::BuildDoctorReport(doctor, spec.verify.runs);
        const double floor = report.noise_floor();
        std::vector<Observation> history;
        {
          Observation base;
          base.config = spec.baseline;
          base.status = "ok";
          base.step_time_s = report.median_step_time_s();
          history.push_back(base);
        }
        infrarsi::SearchContext ctx;
        ctx.spec = &spec;
        ctx.priors = with_priors ? &*priors : nullptr;
        int n = 0;
        for (; n < spec.max_trials; ++n) {
          const auto p = model.Propose(ctx, history, 1, static_cast<uint64_t>(seed) * 1000 + static_cast<uint64_t>(n));
          if (!infrarsi::SearchStopReason(spec, n, p, floor).empty()) break;
          history.push_back(measure(p.configs[0]));
        }
        trials.push_back(n);
        std::vector<const Observation*> ok;
        for (size_t i = 1; i < history.size(); ++i) {
          if (history[i].status == "ok" && history[i].step_time_s < report.median_step_time_s()) {
            ok.push_back(&history[i]);
          }
        }
        std::sort(ok.begin(), ok.end(), [](const auto* a, const auto* c) { return a->step_time_s < c->step_time_s; });
        if (ok.size() > static_cast<size_t>(spec.verify.candidates)) ok.resize(static_cast<size_t>(spec.verify.candidates));
        std::mt19937_64 order(static_cast<uint64_t>(seed) * 31);
        std::vector<infrarsi::CandidateVerdict> verdicts;
        for (const Observation* c : ok) {
          std::vector<std::pair<double, double>> pairs;
          for (int r = 0; r < spec.verify.runs; ++r) {
            const bool base_first = (order() & 1) == 0;
            double base_t = 0, cand_t = 0;
            for (int k = 0; k < 2; ++k) {
              const bool is_base = (k == 0) == base_first;
              const Observation o = measure(is_base ? spec.baseline : c->config);
              (is_base ? base_t : cand_t) = o.status == "ok" ? o.step_time_s : -1.0;
            }
            pairs.emplace_back(base_t, cand_t);
          }
          verdicts.push_back(infrarsi::JudgeCandidate(pairs, floor));
        }
        const int pick = infrarsi::PickPromoted(verdicts);
        if (pick < 0) continue;
        ++promoted;
        const double t = b.evaluate(ok[static_cast<size_t>(pick)]->config).step_time_s;
        truth.push_back(b.baseline / t);
        share.push_back(b.best / t);
        measured.push_back(verdicts[static_cast<size_t>(pick)].estimate.speedup);
        low.push_back(verdicts[static_cast<size_t>(pick)].estimate.ci_low);
      }
      auto med = [](const std::vector<double>& v) { return v.empty() ? 0.0 : Percentile(v, 0.5); };
      char true_s[32], meas_s[32];
      std::snprintf(true_s, sizeof(true_s), "%.2fx (%.1f%%)", med(truth), 100 * med(share));
      std::snprintf(meas_s, sizeof(meas_s), "%.2fx [%.2f]", med(measured), med(low));
      std::printf("%-28s %-13s %7.0f %6d/%-2d %16s %18s\n", b.name.c_str(),
                  with_priors ? "model+priors" : "model", med(trials), promoted, seeds, true_s, meas_s);
      std::fflush(stdout);
    }
  }
  return 0;
}

// What the server does before each proposal (core/search_driver.cc): read
// the session's trials from its SQLite store and turn them into the
// search's history. whole: SearchHistoryOf over all the trials (decoding
// each stored setting), as the server did before schema v17, p50 and p99
// over `reads` reads of `history` stored as a session's trials; kept: the
// session's kept history (SearchHistory) brought up to date, each read
// after a trial finished and the next was queued, as between two
// proposals; and the median time protobuf's JSON parser alone takes over
// the same stored settings (what DecodeConfigJson used before its direct
// reader); all -1, with a note on stderr, where the store could not be
// set up.
struct ReadBack {
  double p50 = -1, p99 = -1, kept_p50 = -1, kept_p99 = -1, writes_p50 = -1, kept_mib = -1, general_parser = -1;
};
ReadBack ServerReadBack(const infrarsi::SessionSpec& spec, const std::vector<Observation>& history, int reads) {
  const std::filesystem::path db =
      std::filesystem::temp_directory_path() / ("search_bench_latency_" + std::to_string(getpid()) + ".db");
  // The file and SQLite's beside it go however this returns (after the
  // store, declared below, has closed them).
  struct Remove {
    std::string path;
    ~Remove() {
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ignored);
    }
  } cleanup{db.string()};
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "the server's read-back not timed: %s\n", std::string(s.message()).c_str());
    return ReadBack{};
  };
  auto store = infrarsi::storage::SqliteStorage::Create({.path = db.string()});
  if (!store.ok()) return fail(store.status());
  infrarsi::storage::SessionRecord rec;
  rec.id = "latency";
  rec.stage = "running";
  if (absl::Status s = (*store)->InsertSession(rec); !s.ok()) return fail(s);
  std::vector<std::string> stored;
  for (const Observation& o : history) {
    infrarsi::storage::TrialRecord t;
    t.session_id = rec.id;
    t.purpose = "search";
    t.config = infrarsi::EncodeConfigJson(o.config);
    t.status = o.status;
    t.step_time_s = o.step_time_s;
    t.peak_mem_gib = o.peak_mem_gib;
    t.cost_s = 60;
    stored.push_back(t.config);
    if (absl::StatusOr<int64_t> id = (*store)->InsertTrial(t); !id.ok()) return fail(id.status());
  }
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> ms, general;
  for (int i = 0; i < reads; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto trials = (*store)->ListTrials(rec.id);
    if (!trials.ok()) return fail(trials.status());
    double gpu_s = 0;
    auto read = infrarsi::SearchHistoryOf(spec, *trials, &gpu_s);
    if (!read.ok()) return fail(read.status());
    ms.push_back(since(t0));
  }
  // The session's kept history: one whole read, then each read after the
  // last queued trial finished and another was queued.
  std::vector<double> kept_ms, writes_ms;
  infrarsi::SearchHistory kept;
  auto kept_spec = std::make_shared<const infrarsi::SessionSpec>(spec);
  auto read_changed = [&](int64_t after_rev) { return (*store)->ListTrialsChangedSince(rec.id, after_rev); };
  const size_t heap_before = mallinfo2().uordblks;
  if (absl::Status s = kept.Update(kept_spec, read_changed); !s.ok()) return fail(s);
  // What the session holds between its proposals (the heap the first,
  // whole read left allocated: the kept settings and their indexes).
  const double kept_mib = static_cast<double>(mallinfo2().uordblks - heap_before) / (1 << 20);
  infrarsi::storage::TrialRecord queued;
  queued.session_id = rec.id;
  queued.purpose = "search";
  queued.status = "queued";
  queued.config = stored.back();
  absl::StatusOr<int64_t> queued_id = (*store)->InsertTrial(queued);
  if (!queued_id.ok()) return fail(queued_id.status());
  for (int i = 0; i < reads; ++i) {
    const auto w0 = std::chrono::steady_clock::now();
    queued.id = *queued_id;
    queued.status = "ok";
    queued.step_time_s = 1.0;
    queued.cost_s = 60;
    if (absl::Status s = (*store)->UpdateTrial(queued); !s.ok()) return fail(s);
    queued.id = 0;
    queued.status = "queued";
    queued.config = stored[static_cast<size_t>(i) % stored.size()];
    queued_id = (*store)->InsertTrial(queued);
    if (!queued_id.ok()) return fail(queued_id.status());
    writes_ms.push_back(since(w0));
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = kept.Update(kept_spec, read_changed); !s.ok()) return fail(s);
    kept_ms.push_back(since(t0));
    if (kept.last_read() != 2) return fail(absl::InternalError("the kept history read more than what changed"));
  }
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& json : stored) {
      google::protobuf::Struct st;
      if (!google::protobuf::util::JsonStringToMessage(json, &st).ok()) return fail(absl::DataLossError(json));
    }
    general.push_back(since(t0));
  }
  return {Percentile(ms, 0.5),      Percentile(ms, 0.99),        Percentile(kept_ms, 0.5),
          Percentile(kept_ms, 0.99), Percentile(writes_ms, 0.5), kept_mib,
          Percentile(general, 0.5)};
}

int Latency(int history_size) {
  std::printf(
      "Proposal latency with %d trials of history (random settings, 1 in 20 a contract\n"
      "violation), 1 proposal of 1 setting each, as a session makes them: each after the\n"
      "last one's pick ran and joined the history, with the session's ProposalMemo (the\n"
      "fits start at the last proposal's modes; LATENCY_NO_MEMO=1: without; cold: the\n"
      "first proposal, untimed in the rest, with an empty memo, as after a restart) and the\n"
      "settings' indices kept as the server's kept history keeps them (LATENCY_NO_KEPT_INDEX=1:\n"
      "each proposal indexes the whole history); then\n"
      "the same with the server's most of %zu bank trials of the workload from another GPU\n"
      "(SearchContext::related); cpu: the median CPU time of a proposal over all threads\n"
      "(the step-time and launch models are fitted on a second thread while the memory\n"
      "model is fitted on the first, and the step-time predictions are made there too).\n"
      "The allocator is set up as infrarsi-server sets it (base/allocator.h, one malloc\n"
      "arena)\n\n",
      history_size, infrarsi::SearchContext::kMaxRelated);
  std::printf("%-28s %8s %8s %8s %8s   %9s %9s   %8s %9s\n", "landscape", "cold ms", "p50 ms", "p99 ms",
              "max ms", "+bank p50", "+bank p99", "cpu p50", "+bank cpu");
  const int n = std::getenv("LATENCY_N") ? std::atoi(std::getenv("LATENCY_N")) : 100;
  std::string ours_p99;  // JSON members, landscape -> our p99 (ms), for tpe_bench.py's verdict
  std::vector<std::pair<std::string, ReadBack>> read_back;  // by landscape
  for (const char* f : kReferences) {
    const infrarsi::SessionSpec spec = Workload(f);
    const Bench b = SimBench(spec);
    infrarsi::RandomOptimizer random;
    infrarsi::SearchContext ctx;
    ctx.spec = &b.spec;
    std::vector<Observation> hist;
    for (const Config& c : random.Propose(ctx, {}, history_size, 1).configs) {
      hist.push_back(Observe(b, c));
      // Worst case: failures no launcher rule explains (crashes, contract
      // violations), one trial in 20, so the run model is fitted too.
      if (hist.size() % 20 == 0) hist.back().status = "violation";
    }
    if (std::getenv("LATENCY_EARLY") != nullptr) {
      // An early session instead: 8 trials that ran, then up to two
      // contract violations each holding a value no trial that ran held,
      // so every candidate is scored by its contract risk (ValueBlame).
      hist.resize(8);
      for (Observation& o : hist) {
        if (o.status == "violation") o.status = "ok";
      }
      int made = 0;
      for (const infrarsi::Knob& k : b.spec.knobs) {
        for (const std::string& v : k.values) {
          const bool held = std::any_of(hist.begin(), hist.end(),
                                        [&](const Observation& o) { return o.config.at(k.name) == v; });
          if (held || made >= 2) continue;
          Observation o = hist[static_cast<size_t>(made++)];
          o.config[k.name] = v;
          o.status = "violation";
          o.step_time_s = 0;
          hist.push_back(o);
        }
      }
    }
    // The bank's rows as the server loads them: trials that ran, on the
    // other GPU.
    const Bench src = SimBench(OnOtherGpu(spec));
    std::vector<infrarsi::SearchContext::Related> related;
    for (const Config& c : random.Propose(ctx, {}, 4 * static_cast<int>(infrarsi::SearchContext::kMaxRelated), 2).configs) {
      if (related.size() >= infrarsi::SearchContext::kMaxRelated) break;
      Observation o = Observe(src, c);
      if (o.status == "ok") related.push_back({o, "bank-session"});
    }
    infrarsi::ModelOptimizer model;
    // Wall time, and the process's CPU time (what the proposal itself costs
    // on all its threads; nothing else runs in this process meanwhile).
    auto thread_ms = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
    };
    // As a session's proposals come: each after the last one's pick ran
    // (its outcome joins the history), with the session's memo, as the
    // server keeps one (LATENCY_NO_MEMO: without).
    const bool use_memo = std::getenv("LATENCY_NO_MEMO") == nullptr;
    // The history's settings indexed once per trial, as the server's kept
    // history holds them (SearchHistory; LATENCY_NO_KEPT_INDEX: each
    // proposal indexes all of them, as before).
    const bool keep_index = std::getenv("LATENCY_NO_KEPT_INDEX") == nullptr;
    auto time = [&](infrarsi::SearchContext c, std::vector<double>* cpu, double* cold_ms) {
      std::vector<double> ms;
      std::vector<Observation> h = hist;
      std::vector<int64_t> kept;  // parallel to h, as SearchHistory::space_indices
      if (keep_index) {
        for (const Observation& o : h) kept.push_back(infrarsi::IndexOf(b.spec, o.config));
        c.history_index = &kept;
      }
      infrarsi::ProposalMemo memo;
      if (use_memo) c.memo = &memo;
      for (int i = -1; i < n; ++i) {
        const double c0 = thread_ms();
        const auto t0 = std::chrono::steady_clock::now();
        auto p = model.Propose(c, h, 1, static_cast<uint64_t>(i));
        const auto t1 = std::chrono::steady_clock::now();
        const double wall = std::chrono::duration<double, std::milli>(t1 - t0).count();
        if (i < 0) {
          *cold_ms = wall;
        } else {
          cpu->push_back(thread_ms() - c0);
          ms.push_back(wall);
        }
        if (p.configs.empty()) break;
        h.push_back(Observe(b, p.configs[0]));
        if (keep_index) kept.push_back(infrarsi::IndexOf(b.spec, h.back().config));
      }
      return ms;
    };
    std::vector<double> plain_cpu, bank_cpu;
    double cold = 0, bank_cold = 0;
    const std::vector<double> plain = time(ctx, &plain_cpu, &cold);
    ours_p99 += absl::StrFormat("%s\"%s\": %.3f", ours_p99.empty() ? "" : ", ", b.name, Percentile(plain, 0.99));
    infrarsi::SearchContext with_bank = ctx;
    with_bank.related = &related;
    const std::vector<double> bank = time(with_bank, &bank_cpu, &bank_cold);
    std::printf("%-28s %8.1f %8.1f %8.1f %8.1f   %9.1f %9.1f   %8.1f %9.1f\n", b.name.c_str(), cold,
                Percentile(plain, 0.5), Percentile(plain, 0.99), Percentile(plain, 1.0),
                Percentile(bank, 0.5), Percentile(bank, 0.99), Percentile(plain_cpu, 0.5),
                Percentile(bank_cpu, 0.5));
    std::fflush(stdout);
    read_back.push_back({b.name, ServerReadBack(b.spec, hist, 20)});
  }
  std::printf(
      "\nWhat the server does before each proposal besides: read the session's trials from its\n"
      "SQLite store (a file in %s) and decode the stored settings. whole: all %d\n"
      "(ListTrials, SearchHistoryOf), as the server did before schema v17, 20 reads; kept:\n"
      "the session's kept history brought up to date (core/search_history.h: the trials\n"
      "changed since its last read), 20 reads, each after one trial finished and one was\n"
      "queued (writes: those two writes' p50, each a transaction of its own: what a\n"
      "trial's rev adds to a write shows here; MiB: the heap the kept history holds between\n"
      "proposals, malloc's count); protobuf: its JSON parser alone over the same stored\n"
      "settings (what the decoding took before its direct reader), median of 3\n",
      std::filesystem::temp_directory_path().string().c_str(), history_size);
  std::printf("%-28s %10s %10s   %9s %9s %9s %6s   %11s\n", "landscape", "whole p50", "whole p99", "kept p50",
              "kept p99", "writes", "MiB", "protobuf ms");
  for (const auto& [name, r] : read_back) {
    std::printf("%-28s %10.2f %10.2f   %9.2f %9.2f %9.2f %6.1f   %11.1f\n", name.c_str(), r.p50, r.p99,
                r.kept_p50, r.kept_p99, r.writes_p50, r.kept_mib, r.general_parser);
  }
  // Optuna's TPE with the same history, in the same run (issue 33's target:
  // our p99 under a tenth of its median), where Debian's python3-optuna is.
  if (std::getenv("SEARCH_NO_TPE") == nullptr &&
      std::system("/usr/bin/python3 -c 'import optuna' >/dev/null 2>&1") == 0) {
    std::printf("\n");
    std::fflush(stdout);
    const std::string cmd = "OURS_P99='{" + ours_p99 + "}' SEARCH_BENCH=/proc/" + std::to_string(getpid()) +
                            "/exe /usr/bin/python3 " + std::string(INFRARSI_SOURCE_DIR) +
                            "/tests/bench/tpe_bench.py --latency " +
                            std::to_string(history_size);
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "tpe_bench.py --latency failed\n");
  } else {
    std::printf("\n(Optuna's TPE not timed: Debian's python3-optuna is not installed, or SEARCH_NO_TPE is set)\n");
  }
  return 0;
}

// The textbook memory estimate on a half of the generated suite: how far
// log(estimate / peak) spreads over 400 sampled settings that launch (OOMs
// included: the simulator knows their peak). The search's memory model
// fits an offset and a slope on it, so its spread, not its mean, is what
// the model cannot learn from a few runs.
// Least squares of y on a constant and `columns`: the weights (constant
// first) and the residuals (fit less y).
struct LeastSquaresFit {
  Eigen::VectorXd weights, residuals;
  double ResidualSd() const { return std::sqrt(residuals.squaredNorm() / static_cast<double>(residuals.size())); }
};
LeastSquaresFit LeastSquares(const std::vector<const std::vector<double>*>& columns, const std::vector<double>& y) {
  const Eigen::Index rows = static_cast<Eigen::Index>(y.size());
  Eigen::MatrixXd x(rows, static_cast<Eigen::Index>(columns.size()) + 1);
  Eigen::VectorXd v(rows);
  for (Eigen::Index j = 0; j < rows; ++j) {
    x(j, 0) = 1.0;
    for (size_t c = 0; c < columns.size(); ++c) x(j, static_cast<Eigen::Index>(c) + 1) = (*columns[c])[static_cast<size_t>(j)];
    v[j] = y[static_cast<size_t>(j)];
  }
  LeastSquaresFit f;
  f.weights = x.colPivHouseholderQr().solve(v);
  f.residuals = x * f.weights - v;
  return f;
}

// The knob value whose settings (`at`, each with its error) an estimate
// misjudges most against the rest: their mean error less the mean of all
// (what a fix to the estimate would look at first). "" where no value has
// ten settings.
std::pair<double, std::string> WorstValue(const infrarsi::SessionSpec& spec, const std::vector<Config>& at,
                                          const std::vector<double>& error) {
  double mean = 0;
  for (double e : error) mean += e / static_cast<double>(error.size());
  std::pair<double, std::string> worst{0.0, ""};
  for (const infrarsi::Knob& k : spec.knobs) {
    for (const std::string& v : k.values) {
      double sum = 0;
      int n = 0;
      for (size_t j = 0; j < at.size(); ++j) {
        if (at[j].at(k.name) == v) sum += error[j], ++n;
      }
      if (n < 10) continue;
      if (std::abs(sum / n - mean) > std::abs(worst.first)) worst = {sum / n - mean, k.name + "=" + v};
    }
  }
  return worst;
}

// The generator seed of the suite: SEARCH_SUITE_SEED=s (a positive
// integer) draws a development suite from the same distribution with
// another seed (both halves fresh workloads), for diagnosing and tuning on
// more than the tuning half's 22 without looking at the held-out half.
// A bad value is an error that names the variable (exit 2), not a silent
// fallback to another suite.
uint64_t SuiteSeed() {
  const char* s = std::getenv("SEARCH_SUITE_SEED");
  if (s == nullptr) return infrarsi::bench::kSuiteSeed;
  uint64_t seed = 0;
  if (!absl::SimpleAtoi(s, &seed) || seed == 0) {
    std::fprintf(stderr, "SEARCH_SUITE_SEED must be a positive integer, got '%s'\n", s);
    std::exit(2);
  }
  return seed;
}

int SuiteEstimates(bool held_out) {
  auto suite = infrarsi::bench::GenerateSuite(infrarsi::bench::kSuiteSize, SuiteSeed());
  if (!suite.ok()) {
    std::fprintf(stderr, "suite: %s\n", suite.status().ToString().c_str());
    return 1;
  }
  namespace ms = infrarsi::models::sim;
  std::printf("Textbook memory estimate against the simulator's peak, %s half, 400 sampled settings\n"
              "that launch each: mean and sd of log(estimate / peak); the baseline's estimate and\n"
              "peak (GiB) against the device's memory; fit sd / +share sd / share: the residual sd of\n"
              "least squares of log peak on log estimate, then with the estimate's activation share, and\n"
              "the share's weight; the knob value whose settings it misjudges most (their mean less the\n"
              "workload's). Step time, of the settings that fit: t fit sd and t slope, least squares of\n"
              "log step time on the log textbook estimate; t worst: the knob value it misjudges most\n\n"
              "%-40s %8s %8s %9s %9s %9s %7s %7s %7s  %-28s %7s %7s  %s\n",
              held_out ? "held-out" : "tuning", "workload", "mean", "sd", "base est", "base peak", "device",
              "fit sd", "+share", "share", "worst value", "t fit sd", "t slope", "t worst");
  double sum_sd = 0, sum_t_sd = 0;
  for (const auto& w : *suite) {
    if (w.held_out != held_out) continue;
    const infrarsi::SessionSpec spec = Parse(w.yaml, "/", w.name);
    const infrarsi::Planner planner = infrarsi::PlannerFor(spec);
    std::mt19937_64 rng(1);
    const int64_t size = spec.SpaceSize();
    std::vector<double> lr, log_peak, log_est, share, log_time, log_time_est;
    std::vector<Config> at, ran;
    for (int i = 0; i < 20000 && lr.size() < 400; ++i) {
      const int64_t index = static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
      if (!planner.launches_at(index)) continue;
      const ms::SimResult r =
          ms::Simulate(spec.sim.model, spec.sim.cluster, infrarsi::SimKnobs(spec, infrarsi::ConfigAt(spec, index)));
      if (r.status == ms::Status::kLauncherError || r.peak_mem_gib <= 0) continue;
      const infrarsi::Planner::MemoryEstimate e = planner.memory_estimate_parts_at(index);
      lr.push_back(std::log(e.gib / r.peak_mem_gib));
      log_peak.push_back(std::log(r.peak_mem_gib));
      log_est.push_back(std::log(e.gib));
      share.push_back(e.activation_share);
      at.push_back(infrarsi::ConfigAt(spec, index));
      if (r.status == ms::Status::kOk && r.step_time_s > 0) {
        log_time.push_back(std::log(r.step_time_s));
        log_time_est.push_back(std::log(planner.time_estimate_s_at(index)));
        ran.push_back(at.back());
      }
    }
    if (lr.empty()) {
      std::printf("%-40s no sampled setting launches\n", w.name.c_str());
      continue;
    }
    double mean = 0, var = 0;
    for (double x : lr) mean += x / static_cast<double>(lr.size());
    for (double x : lr) var += (x - mean) * (x - mean) / static_cast<double>(lr.size());
    const ms::SimResult base = ms::Simulate(spec.sim.model, spec.sim.cluster, infrarsi::SimKnobs(spec, spec.baseline));
    const auto [worst_shift, worst] = WorstValue(spec, at, lr);
    // Least squares of the log peak on the log estimate, then with the
    // estimate's activation share beside it (the memory model's two
    // columns): the residual sd of each and the share's weight.
    const double sd_est = LeastSquares({&log_est}, log_peak).ResidualSd();
    const LeastSquaresFit with_share = LeastSquares({&log_est, &share}, log_peak);
    const double sd_share = with_share.ResidualSd(), share_weight = with_share.weights[2];
    // Step time on its estimate, the same way (one column and a constant):
    // what the step-time model's estimate feature can explain, and the
    // knob value its residuals single out.
    double t_sd = 0, t_slope = 0, t_shift = 0;
    std::string t_worst = "-";
    if (log_time.size() >= 10) {
      const LeastSquaresFit t = LeastSquares({&log_time_est}, log_time);
      t_sd = t.ResidualSd();
      t_slope = t.weights[1];
      std::tie(t_shift, t_worst) =
          WorstValue(spec, ran, std::vector<double>(t.residuals.data(), t.residuals.data() + t.residuals.size()));
      if (t_worst.empty()) t_worst = "-";
    }
    char mem_worst[64];
    std::snprintf(mem_worst, sizeof(mem_worst), "%+.3f at %s", worst_shift, worst.c_str());
    std::printf("%-40s %8.3f %8.3f %9.1f %9.1f %9.1f %7.3f %7.3f %+7.2f  %-28s %7.3f %7.2f  %+.3f at %s\n",
                w.name.c_str(), mean, std::sqrt(var), planner.memory_estimate_gib(spec.baseline), base.peak_mem_gib,
                planner.capacity_gib, sd_est, sd_share, share_weight, mem_worst, t_sd, t_slope, t_shift,
                t_worst.c_str());
    sum_t_sd += t_sd;
    sum_sd += std::sqrt(var);
  }
  std::printf("\nSum of the sds: %.3f; of the step-time fits' residual sds: %.3f\n", sum_sd, sum_t_sd);
  return 0;
}

// How far the planner's textbook estimates are from the simulator, over a
// sample of each workload's settings that run.
int Estimates() {
  std::printf("Textbook estimates against the simulator, settings that run (up to 5000 sampled):\n"
              "memory: median / p90 of |log(estimate / peak)| and the median ratio; time: Pearson\n"
              "correlation of the logs\n\n");
  std::printf("%-28s %7s %12s %12s %12s %10s\n", "workload", "ran", "mem |log|", "mem p90",
              "mem ratio", "time corr");
  for (const std::string& f : SuiteFiles()) {
    const infrarsi::SessionSpec spec = Workload(f);
    const Bench b = SimBench(spec);
    const infrarsi::Planner planner = infrarsi::PlannerFor(spec);
    std::mt19937_64 rng(1);
    const int64_t size = spec.SpaceSize();
    std::vector<double> err, ratio, lt, le;
    for (int i = 0; i < 5000 && i < size; ++i) {
      const int64_t index = size <= 5000 ? i : static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
      if (!planner.launches_at(index)) continue;
      const Outcome o = b.evaluate(infrarsi::ConfigAt(spec, index));
      if (!o.ok) continue;
      const double r = planner.memory_estimate_gib_at(index) / o.peak_mem_gib;
      err.push_back(std::fabs(std::log(r)));
      ratio.push_back(r);
      lt.push_back(std::log(o.step_time_s));
      le.push_back(std::log(planner.time_estimate_s_at(index)));
    }
    std::printf("%-28s %7zu %12.3f %12.3f %12.3f %10.3f\n", spec.name.c_str(), err.size(),
                Percentile(err, 0.5), Percentile(err, 0.9), Percentile(ratio, 0.5),
                infrarsi::models::Correlation(lt, le));
  }
  return 0;
}

// The generated suite's workload `w` as a bench.
// SEARCH_BLIND=1 (read once; a bad value exits 2): the generated suite's
// search sees each workload as a real job's (executor replay), so
// PlannerFor gives it the GPU's capacity only: no textbook memory or time
// estimate, no launch rules. Outcomes still come from the simulator
// (evaluate holds its own copy of the spec). The search's path on real
// jobs and on the measured landscape, which the project never tunes on.
// SEARCH_BLIND=shape: real jobs' specs that declare their model shape
// (workload.shape: the simulator's model, cluster and held knobs), so
// PlannerFor gives the textbook estimates but no launch rules; shape+rules:
// with the launcher's rules too (workload.shape.launch_rules); shape-wrong:
// the shape declared one layer off, so the rules' hint (Planner::
// rules_refuse_at) refuses pipeline depths that launch and passes ones
// that do not (how a wrong hint costs).
enum class Blind { kNo, kYes, kShape, kShapeRules, kShapeWrong };
Blind SearchBlind() {
  static const Blind blind = [] {
    const char* s = std::getenv("SEARCH_BLIND");
    if (s == nullptr || std::strcmp(s, "0") == 0) return Blind::kNo;
    if (std::strcmp(s, "1") == 0) return Blind::kYes;
    if (std::strcmp(s, "shape") == 0) return Blind::kShape;
    if (std::strcmp(s, "shape+rules") == 0) return Blind::kShapeRules;
    if (std::strcmp(s, "shape-wrong") == 0) return Blind::kShapeWrong;
    std::fprintf(stderr, "SEARCH_BLIND must be 0, 1, shape, shape+rules or shape-wrong, got '%s'\n", s);
    std::exit(2);
  }();
  return blind;
}

Bench SuiteBench(const infrarsi::bench::SuiteWorkload& w) {
  Bench b = SimBench(Parse(w.yaml, "/", w.name), w.best_step_s);
  b.name = w.name;
  b.hand_tuned = w.hand_tuned;
  if (SearchBlind() != Blind::kNo) b.spec.executor_kind = infrarsi::SessionSpec::ExecutorKind::kReplay;
  if (SearchBlind() == Blind::kShape || SearchBlind() == Blind::kShapeRules || SearchBlind() == Blind::kShapeWrong) {
    infrarsi::ShapeSpec shape;
    shape.model = b.spec.sim.model;
    shape.cluster = b.spec.sim.cluster;
    shape.fixed = b.spec.sim.fixed;
    shape.launch_rules = SearchBlind() == Blind::kShapeRules;
    b.spec.shape = shape;
    if (SearchBlind() == Blind::kShapeWrong) ++b.spec.shape->model.layers;
  }
  return b;
}

std::string DescribeLine(const Bench& b) {
  std::string knobs;
  for (const auto& k : b.spec.knobs) {
    std::string vals;
    for (const auto& v : k.values) vals += (vals.empty() ? "" : ",") + infrarsi::JsonQuote(v);
    knobs += (knobs.empty() ? "" : ",") + infrarsi::JsonQuote(k.name) + ":[" + vals + "]";
  }
  char tail[128];
  std::snprintf(tail, sizeof(tail), ",\"best\":%.9g,\"baseline_time\":%.9g}", b.best, b.baseline);
  return "{\"name\":" + infrarsi::JsonQuote(b.name) + ",\"knobs\":{" + knobs +
         "},\"baseline\":" + infrarsi::EncodeConfigJson(b.spec.baseline) + tail;
}

// Generalization (issue 33): the generated suite's two halves, cold, the
// model search against Optuna's TPE (tpe_bench.py --suite, where Debian's
// python3-optuna is installed), in trials and in GPU-seconds.
int Generalize(int seeds, int budget, const std::string& which) {
  const auto t0 = std::chrono::steady_clock::now();
  // Our sessions' seeds start after this (TPE's are its own).
  int seed0 = 0;
  if (const char* s = std::getenv("SEARCH_SEED0"); s != nullptr && (!absl::SimpleAtoi(s, &seed0) || seed0 < 0)) {
    std::fprintf(stderr, "SEARCH_SEED0 must be a non-negative integer, got '%s'\n", s);
    return 2;
  }
  if (seed0 > 0) std::printf("Seeds %d to %d (SEARCH_SEED0=%d).\n", seed0 + 1, seed0 + seeds, seed0);
  const uint64_t suite_seed = SuiteSeed();
  auto suite = infrarsi::bench::GenerateSuite(infrarsi::bench::kSuiteSize, suite_seed);
  if (!suite.ok()) {
    std::fprintf(stderr, "suite: %s\n", suite.status().ToString().c_str());
    return 1;
  }
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int hand = 0, moe = 0;
  for (const auto& w : *suite) {
    hand += w.hand_tuned;
    moe += w.name.find("-moe-") != std::string::npos;
  }
  std::printf("Generated suite (tests/bench/workload_suite.h states the distribution): %zu workloads,\n"
              "seed %llu, %d MoE, %d with hand-tuned baselines; generated in %.1f s. Cold sessions of\n"
              "the model search, %d seeds, budget %d trials, stopping as the server does (past 10 trials,\n"
              "when nothing is expected to gain more than the noise). reached: sessions with a trial within 2%% of\n"
              "the optimum; med: median trials to it (%d = never); OOM: per session over the budget;\n"
              "@%d: median share of the optimum's gain held; worse: share of trials slower than the\n"
              "baseline or failed; GPU-h: median GPU-hours (GPUs x wall, start-up included) to within\n"
              "2%% (a session that never got there counts as infinite), without and with the server's\n"
              "pruning; TPE: Optuna's TPE the same way (reached, median trials, OOMs, GPU-h); ratio:\n"
              "ours / TPE's (0 where only TPE's median is never).\n",
              suite->size(), static_cast<unsigned long long>(suite_seed),
              moe, hand, gen_s, seeds, budget, budget + 1, budget);
  // TPE's figures, per workload name, where Optuna runs here.
  struct Tpe {
    double median = 0, gpu_s = 0, ooms = 0, worse = 0, share = 0;
    int reached = 0;
  };
  std::map<std::string, Tpe> tpe;
  const bool want_tpe = std::getenv("SEARCH_NO_TPE") == nullptr &&
                        std::system("/usr/bin/python3 -c 'import optuna' >/dev/null 2>&1") == 0;
  if (want_tpe) {
    const std::string desc = (std::filesystem::temp_directory_path() /
                              ("search_bench_suite_" + std::to_string(getpid()) + ".jsonl")).string();
    {
      std::ofstream out(desc);
      for (const auto& w : *suite) {
        if (which == "both" || (which == "held-out") == w.held_out) out << DescribeLine(SuiteBench(w)) << "\n";
      }
    }
    const std::string cmd = "SEARCH_BENCH=/proc/" + std::to_string(getpid()) + "/exe /usr/bin/python3 " +
                            std::string(INFRARSI_SOURCE_DIR) + "/tests/bench/tpe_bench.py --suite " + desc +
                            " " + std::to_string(seeds) + " " + std::to_string(budget);
    std::fprintf(stderr, "running Optuna's TPE: %s\n", cmd.c_str());
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof(line), f) != nullptr) {
        const std::string s(line);
        auto field = [&](const std::string& key) {
          const size_t at = s.find("\"" + key + "\":");
          return at == std::string::npos ? 0.0 : std::atof(s.c_str() + at + key.size() + 3);
        };
        const size_t a = s.find("\"name\": \"");
        if (a == std::string::npos) continue;
        const size_t e = s.find('"', a + 9);
        Tpe t;
        t.median = field("median");
        t.gpu_s = field("gpu_s");
        t.ooms = field("ooms");
        t.worse = field("worse");
        t.share = field("share");
        t.reached = static_cast<int>(field("reached"));
        tpe[s.substr(a + 9, e - a - 9)] = t;
      }
      pclose(f);
    }
    std::filesystem::remove(desc);
  } else {
    std::printf("(Optuna's TPE not run: Debian's python3-optuna is not installed, or SEARCH_NO_TPE is set)\n");
  }
  infrarsi::ModelOptimizer model(ExperimentOptions());
  std::optional<infrarsi::Priors> file_priors;
  if (std::getenv("SEARCH_PRIORS") != nullptr) {
    auto parsed = ShippedPriors();
    if (!parsed.ok()) {
      std::fprintf(stderr, "SEARCH_PRIORS: %s\n", parsed.status().ToString().c_str());
      return 1;
    }
    file_priors = *std::move(parsed);
  }
  for (const bool held_out : {false, true}) {
    if (which != "both" && (which == "held-out") != held_out) continue;
    std::printf("\n%s half:\n", held_out ? "Held-out" : "Tuning");
    std::printf("%-40s %5s %6s %7s %4s %5s %6s %6s %8s %8s %6s  %7s %4s %5s %8s %6s\n", "workload", "knobs",
                "gain", "reached", "med", "OOM", "@share", "worse", "GPU-h", "pruned", "saved", "TPE", "med",
                "OOM", "GPU-h", "ratio");
    int n = 0, med_ok = 0, oom_ok = 0, share_ok = 0, tuned = 0, worse_ok = 0, cost_n = 0, cost_ok = 0;
    double worst_med = 0, worst_share = 2, worst_oom = 0, worst_worse = 0, worst_ratio = 0;
    double sum_saved = 0, sum_cost = 0, sum_med = 0, sum_oom = 0, sum_worse = 0;
    // Sum over workloads of the mean trials to within 2% (never: budget +
    // 1) and its variance from the seeds: a median of ten sessions jumps
    // between a count and "never" where the sessions split (how far the
    // seeds alone move the sum of medians: docs/benchmarks.md); the mean
    // and its standard error say how far a comparison can be read.
    double sum_mean = 0, sum_mean_var = 0;
    int sum_remeasures = 0, sum_trials = 0;
    // The memory model's reliability: picks by P(fits) at the pick, their
    // predicted and their observed OOMs.
    const std::vector<double> fit_bins = {0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0000001};
    std::vector<int> bin_picks(fit_bins.size() - 1, 0), bin_ooms(fit_bins.size() - 1, 0);
    std::vector<double> bin_expected(fit_bins.size() - 1, 0.0);
    int ended[SessionResult::kEndings] = {}, ended_short[SessionResult::kEndings] = {};  // by ended_by
    int zero_gain_stops = 0, outcome_ok = 0, outcome_oom = 0, outcome_failed = 0;
    for (const auto& w : *suite) {
      if (w.held_out != held_out) continue;
      // SEARCH_ONLY=substring: only those workloads (for diagnosis).
      if (const char* only = std::getenv("SEARCH_ONLY"); only != nullptr && w.name.find(only) == std::string::npos) {
        continue;
      }
      const Bench b = SuiteBench(w);
      if (std::getenv("SEARCH_TRACE") != nullptr) {  // where the optimum is, against the baseline
        // One enumeration: the 200 best for the count below, the first 5
        // printed; the estimates the simulator's spec gives (SEARCH_BLIND
        // or not).
        infrarsi::SessionSpec sim_spec = b.spec;
        sim_spec.executor_kind = infrarsi::SessionSpec::ExecutorKind::kSim;
        auto land = infrarsi::EnumerateSimLandscape(sim_spec, 200);
        const infrarsi::Planner planner = infrarsi::PlannerFor(sim_spec);
        for (size_t top = 0; top < std::min<size_t>(5, land->best.size()); ++top) {
          const auto& p = land->best[top];
          std::string diff;
          for (const auto& k : b.spec.knobs) {
            if (p.config.at(k.name) != b.spec.baseline.at(k.name)) diff += k.name + "=" + p.config.at(k.name) + " ";
          }
          // Its peak against the textbook estimate and the device: an
          // optimum at the memory edge is where the caution holds back.
          std::fprintf(stderr, "%s: top %.3f (%.3f of best) peak %.1f est %.1f of %.1f GiB: %s\n", w.name.c_str(),
                       p.result.step_time_s, p.result.step_time_s / b.best, p.result.peak_mem_gib,
                       planner.memory_estimate_gib ? planner.memory_estimate_gib(p.config) : 0.0, planner.capacity_gib,
                       diff.c_str());
        }
        {  // whether the settings within 2% can be proposed at all (launch rules)
          int within = 0, launch = 0;
          for (const auto& p : land->best) {
            if (p.result.step_time_s > 1.02 * b.best) continue;
            ++within;
            const int64_t i = infrarsi::IndexOf(b.spec, p.config);
            launch += !planner.launches_at || planner.launches_at(i);
          }
          std::fprintf(stderr, "%s: within 2%%: %d settings (of the 200 best), %d launch per the planner\n",
                       w.name.c_str(), within, launch);
        }
        const Outcome base = b.evaluate(b.spec.baseline);
        // With the textbook estimate (tests/bench/memory_edge.sh reads both lines).
        std::fprintf(stderr, "baseline %.3f (%.3f of best) peak %.1f GiB est %.1f: %s\n", base.step_time_s,
                     base.step_time_s / b.best, base.peak_mem_gib,
                     planner.memory_estimate_gib ? planner.memory_estimate_gib(b.spec.baseline) : 0.0,
                     infrarsi::EncodeConfigJson(b.spec.baseline).c_str());
      }
      std::vector<double> need, share, gpu, gpu_pruned, oom, worse;
      int reached = 0;
      for (int seed = seed0 + 1; seed <= seed0 + seeds; ++seed) {
        const SessionResult r = RunSession(b, model, file_priors ? &*file_priors : nullptr, {}, budget,
                                           static_cast<uint64_t>(seed), {}, false, /*server_stop_rule=*/true);
        need.push_back(r.trials_to_2pct);
        reached += r.trials_to_2pct <= budget;
        share.push_back(r.best_at_40 > 0 ? (b.baseline / r.best_at_40) / (b.baseline / b.best) : 0);
        gpu.push_back(r.gpu_s_to_2pct);
        gpu_pruned.push_back(r.gpu_s_to_2pct_pruned);
        oom.push_back(r.ooms_total);
        worse.push_back(static_cast<double>(r.worse_than_baseline) / std::max(1, r.trials));
        sum_remeasures += r.remeasures;
        for (const auto& [p, oomed] : r.fits) {
          const size_t k = static_cast<size_t>(std::upper_bound(fit_bins.begin(), fit_bins.end(), p) - fit_bins.begin()) - 1;
          if (k >= bin_picks.size()) continue;
          ++bin_picks[k];
          bin_ooms[k] += oomed;
          bin_expected[k] += 1 - p;
        }
        sum_trials += r.trials;
        ++ended[r.ended_by];
        zero_gain_stops += r.stopped_at_zero_gain;
        outcome_oom += r.ooms_total;
        outcome_failed += r.failed_total;
        outcome_ok += r.trials - r.ooms_total - r.failed_total;
        ended_short[r.ended_by] += r.trials_to_2pct > budget;
        if (r.trials_to_2pct <= budget) {
          sum_cost += r.gpu_s_to_2pct;
          sum_saved += r.gpu_s_to_2pct - r.gpu_s_to_2pct_pruned;
        }
      }
      sum_mean += infrarsi::models::Mean(need);
      const double sd = infrarsi::models::SampleStdDev(need);
      if (need.size() > 1) sum_mean_var += sd * sd / static_cast<double>(need.size());
      // A session that never got within 2% has no cost to it: it sorts last
      // (infinite), and a median that falls on one reads "never".
      for (size_t i = 0; i < need.size(); ++i) {
        if (need[i] > budget) gpu[i] = gpu_pruned[i] = std::numeric_limits<double>::infinity();
      }
      double mean_oom = 0, mean_worse = 0;
      for (double o : oom) mean_oom += o / seeds;
      for (double x : worse) mean_worse += x / seeds;
      const double med = Percentile(need, 0.5), sh = Percentile(share, 0.5);
      const double g = Percentile(gpu, 0.5) / 3600, gp = Percentile(gpu_pruned, 0.5) / 3600;
      ++n;
      sum_med += med;
      sum_oom += mean_oom;
      if (w.hand_tuned) sum_worse += mean_worse;
      med_ok += med <= 15;
      oom_ok += mean_oom <= 1 + 1e-9;  // a mean of tenths: 1.0 summed may round above 1
      share_ok += sh >= 0.99;
      worst_med = std::max(worst_med, med);
      worst_share = std::min(worst_share, sh);
      worst_oom = std::max(worst_oom, mean_oom);
      if (w.hand_tuned) {
        ++tuned;
        worse_ok += mean_worse <= 0.15;
        worst_worse = std::max(worst_worse, mean_worse);
      }
      std::printf("%-40s %5d %5.2fx %4d/%-2d %4.0f %5.1f %5.1f%% %5.0f%% %8.2f %8.2f %5.0f%%", w.name.c_str(),
                  w.knobs, w.optimum_gain, reached, seeds, med, mean_oom, 100 * sh, 100 * mean_worse, g, gp,
                  g > 0 && std::isfinite(g) ? 100 * (1 - gp / g) : 0.0);
      auto it = tpe.find(w.name);
      if (it != tpe.end()) {
        // TPE never (median) and ours did: a ratio of 0 (met); ours never: inf.
        const double ratio = std::isinf(it->second.gpu_s) ? (std::isinf(Percentile(gpu, 0.5)) ? 1.0 : 0.0)
                                                            : Percentile(gpu, 0.5) / it->second.gpu_s;
        ++cost_n;
        cost_ok += ratio <= 1.0 / 3;
        worst_ratio = std::max(worst_ratio, ratio);
        std::printf("  %4d/%-2d %4.0f %5.1f %8.2f %6.2f", it->second.reached, seeds, it->second.median,
                    it->second.ooms, it->second.gpu_s / 3600, ratio);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    std::printf("%s half, targets met: median <= 15 trials %d/%d (worst %.0f); OOM/session <= 1 %d/%d "
                "(worst %.1f); >= 99%% of the gain %d/%d (worst %.1f%%); hand-tuned, <= 15%% of trials "
                "slower than the baseline %d/%d (worst %.0f%%)",
                held_out ? "Held-out" : "Tuning", med_ok, n, worst_med, oom_ok, n, worst_oom, share_ok, n,
                100 * worst_share, worse_ok, tuned, 100 * worst_worse);
    if (cost_n > 0) std::printf("; GPU-seconds <= 1/3 of TPE's %d/%d (worst ratio %.2f)", cost_ok, cost_n, worst_ratio);
    std::printf(".\nSums: median trials %.0f, OOMs per session %.1f, hand-tuned share slower %.2f, "
                "GPU-hours of the sessions that got within 2%% %.0f, of which pruning saved %.1f%%; trials "
                "within 1%% of the fastest before them %d of %d.\n",
                sum_med, sum_oom, sum_worse, sum_cost / 3600,
                sum_cost > 0 ? 100 * sum_saved / sum_cost : 0.0, sum_remeasures, sum_trials);
    std::printf("Mean trials to within 2%% (never: %d), summed over the workloads: %.1f, standard error over "
                "the seeds %.1f.\n",
                budget + 1, sum_mean, std::sqrt(sum_mean_var));
    std::printf("Sessions ended by (of them never within 2%%): the budget %d (%d), the expected-gain stop %d (%d), "
                "the optimizer's stop (after OOMs, or nothing likely to fit and beat the baseline) %d (%d), "
                "nothing left to propose %d (%d).\n",
                ended[0], ended_short[0], ended[1], ended_short[1], ended[2], ended_short[2], ended[3], ended_short[3]);
    std::printf("Of the expected-gain stops, at an expected gain of 0 (every score zeroed by the OOM caution or the "
                "baseline's floor): %d. The search trials by outcome: ran %d, out of memory %d, failed to launch %d.\n",
                zero_gain_stops, outcome_ok, outcome_oom, outcome_failed);
    std::printf("The memory model's P(fits) at the pick against the outcome (picks that ran or ran out of memory; "
                "P range: picks, out of memory predicted / observed):");
    for (size_t k = 0; k < bin_picks.size(); ++k) {
      if (bin_picks[k] == 0) continue;
      std::printf(" [%.2f, %.2f): %d, %.1f%% / %.1f%%;", fit_bins[k], std::min(1.0, fit_bins[k + 1]), bin_picks[k],
                  100 * bin_expected[k] / bin_picks[k], 100.0 * bin_ooms[k] / bin_picks[k]);
    }
    std::printf("\n");
  }
  return 0;
}

int Describe() {
  for (const Bench& b : Landscapes()) std::printf("%s\n", DescribeLine(b).c_str());
  return 0;
}

int Oracle(const std::string& name) {
  std::vector<Bench> benches;
  int index = -1;
  // "g07-...": the generated suite's workload 7, generated alone.
  if (name.size() > 3 && name[0] == 'g' && std::sscanf(name.c_str() + 1, "%d-", &index) == 1) {
    auto w = infrarsi::bench::GenerateWorkload(index, SuiteSeed());  // TPE's child inherits the seed
    if (w.ok() && w->name == name) benches.push_back(SuiteBench(*w));
  } else {
    benches = Landscapes();
  }
  for (const Bench& b : benches) {
    if (b.name != name) continue;
    std::string line;
    while (std::getline(std::cin, line)) {
      Config c;
      for (absl::string_view kv : absl::StrSplit(line, ',', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        if (eq == absl::string_view::npos) continue;
        c[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
      }
      if (c.size() != b.spec.knobs.size()) {
        std::printf("failed\n");
      } else {
        // The trial's GPU-seconds last (0 where unknown).
        const Outcome o = b.evaluate(c);
        if (o.ok) std::printf("ok %.9g %.4f %.6g\n", o.step_time_s, o.peak_mem_gib, o.gpu_s);
        else std::printf("%s %.6g\n", o.oom ? "oom" : "failed", o.gpu_s);
      }
      std::fflush(stdout);
    }
    return 0;
  }
  std::fprintf(stderr, "--oracle: no landscape named '%s' (see --describe)\n", name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // The allocator as infrarsi-server sets it up (server/server_main.cc: one
  // malloc arena by default, freed memory kept for reuse), so the latency
  // measured is the server's.
  (void)mallopt(M_ARENA_MAX, 1);
  if (const absl::Status s = infrarsi::KeepFreedMemoryForReuse(); !s.ok()) {
    std::fprintf(stderr, "allocator settings not applied: %s\n", std::string(s.message()).c_str());
  }
  if (argc > 1 && std::strcmp(argv[1], "--describe") == 0) return Describe();
  if (argc > 2 && std::strcmp(argv[1], "--oracle") == 0) return Oracle(argv[2]);
  if (argc > 1 && std::strcmp(argv[1], "--estimates") == 0) {
    if (argc == 2) return Estimates();
    if (std::strcmp(argv[2], "tune") == 0 || std::strcmp(argv[2], "held-out") == 0) {
      return SuiteEstimates(std::strcmp(argv[2], "held-out") == 0);
    }
    std::fprintf(stderr, "--estimates: the half must be 'tune' or 'held-out', not '%s'\n", argv[2]);
    return 2;
  }
  if (argc > 1 && std::strcmp(argv[1], "--generalize") == 0) {
    const int seeds = argc > 2 ? std::atoi(argv[2]) : 10;
    const int budget = argc > 3 ? std::atoi(argv[3]) : 30;
    const std::string which = argc > 4 ? argv[4] : "both";
    if (seeds < 1 || budget < 1 || budget > 40 || (which != "both" && which != "held-out" && which != "tune")) {
      std::fprintf(stderr, "usage: search_bench --generalize [seeds>=1] [budget 1..40] [both|held-out|tune]\n");
      return 2;
    }
    return Generalize(seeds, budget, which);
  }
  if (argc > 1 && std::strcmp(argv[1], "--transfer") == 0) {
    return Transfer(argc > 2 ? std::atoi(argv[2]) : 10, argc > 3 ? argv[3] : "");
  }
  if (argc > 1 && std::strcmp(argv[1], "--promote") == 0) {
    return Promote(argc > 2 ? std::atoi(argv[2]) : 30);
  }
  if (argc > 1 && std::strcmp(argv[1], "--latency") == 0) {
    return Latency(argc > 2 ? std::atoi(argv[2]) : 2000);
  }
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 30;
  const int budget = argc > 2 ? std::atoi(argv[2]) : 200;
  if (seeds < 1 || budget < 1) {
    std::fprintf(stderr, "usage: search_bench [seeds>=1] [budget>=1] [landscape-substring]\n");
    return 2;
  }
  return Main(seeds, budget, argc > 3 ? argv[3] : "");
}
