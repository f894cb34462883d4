// Prints how close the cluster simulator comes to Table 1 of Narayanan et al.
// 2021, to NeMo's fp8 recipes on DGX-H100 and to the calibration set of
// tests/models/calibration.h (FSDP, MoE with MLA, Blackwell systems: every
// row with its error, whether it is in the pass set, and why a row misses),
// and how long it takes per trial on each reference workload: Simulate
// (noise-free) and MeasureTrial (1 warm-up + 5 steps).
// Usage: sim_bench [repetitions]
//        sim_bench --row NAME [KNOB=VALUE ...]   (one calibration row: its
//            error, memory and phases; with knobs changed, what the row
//            would give run that way)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/optimizer.h"
#include "core/spec.h"
#include "tests/models/calibration.h"
#include "tests/models/megatron_table1.h"
#include "tests/models/nemo_perf.h"

int main(int argc, char** argv) {
  namespace ms = infrarsi::models::sim;
  if (argc > 1 && std::string(argv[1]) == "--row") {
    if (argc < 3) {
      std::fprintf(stderr,
                   "usage: sim_bench --row NAME [KNOB=VALUE ...] (a calibration row's name, as "
                   "sim_bench 1 prints it; knobs as in a spec)\n");
      return 2;
    }
    for (ms::CalibrationRow row : ms::CalibrationSet()) {
      if (row.name != argv[2]) continue;
      for (int i = 3; i < argc; ++i) {
        const std::string kv = argv[i];
        const size_t eq = kv.find('=');
        std::string error = "expected KNOB=VALUE, got '" + kv + "'";
        if (eq == std::string::npos ||
            !ms::SetKnob(&row.knobs, kv.substr(0, eq), kv.substr(eq + 1), &error)) {
          std::fprintf(stderr, "--row: %s\n", error.c_str());
          return 2;
        }
      }
      const ms::SimResult r = ms::Simulate(row.model, row.cluster, row.knobs);
      std::printf("%s: %s, step %.3f s, dp %d, %lld micro-batches\n", row.name.c_str(),
                  ms::StatusName(r.status), r.step_time_s, r.dp,
                  static_cast<long long>(r.microbatches));
      if (r.status == ms::Status::kOk) {
        std::printf("error against the published figure: %+.1f%%\n",
                    100.0 * ms::CalibrationError(row, r));
      }
      const ms::MemoryBreakdown& m = r.memory;
      std::printf("memory GiB: weights %.1f grads %.1f optimizer %.1f activations %.1f logits "
                  "%.1f buffers %.1f total %.2f of %.1f\n",
                  m.weights_gib, m.grads_gib, m.optimizer_gib, m.activations_gib, m.logits_gib,
                  m.buffers_gib, m.total_gib, row.cluster.gpu.memory_gib);
      if (m.optimizer_step_gib > 0) {
        std::printf("  (and %.1f GiB of fp32 gradients only at the optimizer step)\n",
                    m.optimizer_step_gib);
      }
      for (const auto& [phase, s] : r.phases) std::printf("  %-16s %.4f s\n", phase.c_str(), s);
      return 0;
    }
    std::fprintf(stderr, "--row: no calibration row named '%s'\n", argv[2]);
    return 2;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  std::printf("%-12s %14s %14s %8s\n", "Table 1 row", "paper TF/GPU", "simulated", "error");
  for (const ms::PublishedRow& row : ms::kMegatronTable1) {
    const double sim = ms::SimulatedTflops(row);
    std::printf("%-12s %14.0f %14.1f %+7.1f%%\n", row.name, row.tflops_per_gpu, sim,
                100.0 * (sim / row.tflops_per_gpu - 1.0));
  }
  std::printf("\n%-14s %12s %12s %8s %10s\n", "NeMo fp8 row", "paper tok/s", "simulated",
              "error", "peak GiB");
  for (const ms::NemoRow& row : ms::kNemoH100Fp8) {
    const ms::SimResult r = ms::SimulateNemo(row);
    if (r.status != ms::Status::kOk) {
      std::printf("%-14s %12.0f %12s %8s %10.1f\n", row.name, row.tokens_per_s_per_gpu,
                  ms::StatusName(r.status), "-", r.peak_mem_gib);
      continue;
    }
    const double tok = ms::TokensPerGpu(row, r);
    std::printf("%-14s %12.0f %12.0f %+7.1f%% %10.1f\n", row.name, row.tokens_per_s_per_gpu, tok,
                100.0 * (tok / row.tokens_per_s_per_gpu - 1.0), r.peak_mem_gib);
  }
  std::printf("\n%-36s %4s %10s %10s %8s %12s  %s\n", "calibration row", "set", "published",
              "simulated", "error", "peak GiB", "note");
  int pass = 0, within = 0;
  for (const ms::CalibrationRow& row : ms::CalibrationSet()) {
    const ms::SimResult r = ms::Simulate(row.model, row.cluster, row.knobs);
    const char* set = row.pass_set ? "pass" : row.fit_only ? "fit" : "-";
    const bool tokens = row.tokens_per_s_per_gpu > 0;
    const double published = tokens ? row.tokens_per_s_per_gpu : row.tflops_per_gpu;
    const std::string why = !row.miss.empty() ? "miss: " + row.miss : row.note;
    if (r.status != ms::Status::kOk) {
      std::printf("%-36s %4s %10.0f %10s %8s %6.1f/%-5.1f  %s\n", row.name.c_str(), set, published,
                  ms::StatusName(r.status), "-", r.peak_mem_gib, row.cluster.gpu.memory_gib,
                  why.c_str());
      continue;
    }
    const double sim = tokens ? ms::SimTokensPerGpu(row, r) : r.model_tflops_per_gpu;
    const double err = ms::CalibrationError(row, r);
    if (row.pass_set) {
      ++pass;
      within += std::abs(err) <= 0.10;
    }
    std::printf("%-36s %4s %10.0f %10.0f %+7.1f%% %6.1f/%-5.1f  %s%s\n", row.name.c_str(), set,
                published, sim, 100.0 * err, r.peak_mem_gib, row.cluster.gpu.memory_gib,
                tokens ? "" : "(TFLOP/s/GPU) ", why.c_str());
  }
  std::printf("pass set: %d of %d rows within 10%%\n\n", within, pass);
  const std::string dir = std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads";
  std::printf("%-26s %10s %14s %16s\n", "workload", "settings", "simulate_us", "measure_trial_us");
  for (const char* f : {"dense-8b-1x8-h100.yaml", "dense-70b-4x8-h100.yaml",
                        "moe-8x7b-16l-1x8-h100.yaml", "moe-8x7b-2x8-h200.yaml",
                        "fsdp-8b-2x8-h100.yaml", "moe-mla-16b-1x8-h200.yaml",
                        "dense-70b-4x4-gb200.yaml"}) {
    std::ifstream in(dir + "/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    infrarsi::SpecParseOptions o;
    o.spec_dir = dir;
    auto spec = infrarsi::ParseSpec(ss.str(), o);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s: %s\n", f, spec.status().ToString().c_str());
      return 1;
    }
    const int64_t n = spec->SpaceSize();
    std::vector<ms::LaunchKnobs> knobs;
    for (int64_t i = 0; i < n; ++i) knobs.push_back(infrarsi::SimKnobs(*spec, infrarsi::ConfigAt(*spec, i)));
    double sink = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      for (const auto& k : knobs) sink += ms::Simulate(spec->sim.model, spec->sim.cluster, k).step_time_s;
    }
    auto t1 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < knobs.size(); ++i) {
        sink += ms::MeasureTrial(spec->sim.model, spec->sim.cluster, knobs[i], 1, 5, i, 0).wall_s;
      }
    }
    auto t2 = std::chrono::steady_clock::now();
    const double sim_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / (reps * n);
    const double meas_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / (reps * n);
    std::printf("%-26s %10lld %14.2f %16.2f\n", spec->name.c_str(), static_cast<long long>(n), sim_us, meas_us);
    if (sink < 0) std::printf("impossible\n");
  }
  return 0;
}
