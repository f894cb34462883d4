// Search benchmark: how many trials a strategy needs to come within 2% of a
// landscape's best setting, and how many OOMs it pays on the way.
//
// Landscapes: the measured H200 landscape (data/landscapes) and the four
// simulator reference workloads (deploy/workloads), scored against their
// noise-free truth. Strategies: those behind core's Optimizer interface
// (today: random without repeats, the server's current strategy).
//
// Usage: search_bench [seeds=30] [budget=200] [landscape-substring]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/landscape.h"
#include "core/model_optimizer.h"
#include "core/optimizer.h"
#include "core/sim_landscape.h"
#include "core/spec.h"

namespace {

using infrarsi::Config;

struct Outcome {
  bool ok = false;
  bool oom = false;
  double step_time_s = 0;
};

struct Bench {
  std::string name;
  infrarsi::SessionSpec spec;
  std::function<Outcome(const Config&)> evaluate;
  double best = 0;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

infrarsi::SessionSpec Parse(const std::string& path, const std::string& dir) {
  infrarsi::SpecParseOptions o;
  o.spec_dir = dir;
  auto spec = infrarsi::ParseSpec(Read(path), o);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), spec.status().ToString().c_str());
    std::exit(1);
  }
  return *spec;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 30;
  const int budget = argc > 2 ? std::atoi(argv[2]) : 200;
  const std::string only = argc > 3 ? argv[3] : "";
  const std::string root = INFRARSI_SOURCE_DIR;
  std::vector<Bench> benches;

  // The measured H200 landscape: truth is the measured grid.
  {
    Bench b;
    b.name = "h200-gpt-354m (measured)";
    b.spec = Parse(root + "/data/specs/demo-h200-gpt-354m.yaml", root + "/data/specs");
    auto land = std::make_shared<infrarsi::client::Landscape>(
        *infrarsi::client::Landscape::Load(root + "/data/landscapes/h200-gpt-354m-seq2048.jsonl"));
    b.evaluate = [land](const Config& c) {
      Outcome o;
      const auto* t = land->FindGrid(std::map<std::string, std::string>(c.begin(), c.end()));
      if (t == nullptr) return o;
      o.ok = t->status == "ok";
      o.oom = t->status == "oom";
      o.step_time_s = t->step_time_s;
      return o;
    };
    for (const auto& t : land->trials) {
      if (t.role == "grid" && t.status == "ok" && (b.best == 0 || t.step_time_s < b.best)) {
        b.best = t.step_time_s;
      }
    }
    benches.push_back(std::move(b));
  }
  // The simulator workloads: truth is the noise-free simulation.
  for (const char* f : {"dense-8b-1x8-h100.yaml", "dense-70b-4x8-h100.yaml",
                        "moe-8x7b-16l-1x8-h100.yaml", "moe-8x7b-2x8-h200.yaml"}) {
    Bench b;
    b.spec = Parse(root + "/deploy/workloads/" + f, root + "/deploy/workloads");
    b.name = b.spec.name + " (sim)";
    auto land = infrarsi::EnumerateSimLandscape(b.spec, 1);
    b.best = land->best.front().result.step_time_s;
    const infrarsi::SessionSpec spec = b.spec;
    b.evaluate = [spec](const Config& c) {
      namespace ms = infrarsi::models::sim;
      const ms::SimResult r = ms::Simulate(spec.sim.model, spec.sim.cluster, infrarsi::SimKnobs(spec, c));
      Outcome o;
      o.ok = r.status == ms::Status::kOk;
      o.oom = r.status == ms::Status::kOom;
      o.step_time_s = r.step_time_s;
      return o;
    };
    benches.push_back(std::move(b));
  }

  std::vector<std::unique_ptr<infrarsi::Optimizer>> strategies;
  strategies.push_back(std::make_unique<infrarsi::RandomOptimizer>());
  strategies.push_back(std::make_unique<infrarsi::ModelOptimizer>());
  {
    auto priors = infrarsi::ParsePriors(Read(root + "/deploy/priors.yaml"));
    if (!priors.ok()) {
      std::fprintf(stderr, "priors: %s\n", priors.status().ToString().c_str());
      return 1;
    }
    infrarsi::ModelOptimizer::Options o;
    o.priors = *priors;
    strategies.push_back(std::make_unique<infrarsi::ModelOptimizer>(o));
  }

  std::printf("%d seeds, budget %d trials; 'reached' = a trial within 2%% of the landscape's best\n\n",
              seeds, budget);
  std::printf("%-30s %-12s %9s %9s %9s %12s %12s\n", "landscape", "strategy", "reached",
              "median", "p90", "OOM/session", "failed/sess");
  for (const Bench& b : benches) {
    if (!only.empty() && b.name.find(only) == std::string::npos) continue;
    for (const auto& strat : strategies) {
      std::vector<double> trials_needed, ooms;
      int reached = 0;
      double failed_total = 0;
      for (int seed = 1; seed <= seeds; ++seed) {
        std::vector<infrarsi::Observation> history;
        // The baseline is measured by the doctor first, as in a session.
        infrarsi::Observation base;
        base.config = b.spec.baseline;
        const Outcome bo = b.evaluate(base.config);
        base.status = bo.ok ? "ok" : "failed";
        base.step_time_s = bo.step_time_s;
        history.push_back(base);
        int n = 0, oom = 0, failed = 0;
        bool hit = false;
        while (n < budget) {
          auto next = strat->Propose(b.spec, history, 1, static_cast<uint64_t>(seed) * 1000 + n);
          if (next.empty()) break;
          ++n;
          const Outcome o = b.evaluate(next[0]);
          infrarsi::Observation obs;
          obs.config = next[0];
          obs.status = o.ok ? "ok" : o.oom ? "oom" : "failed";
          obs.step_time_s = o.step_time_s;
          history.push_back(obs);
          oom += o.oom;
          failed += !o.ok && !o.oom;
          if (o.ok && o.step_time_s <= 1.02 * b.best) {
            hit = true;
            break;
          }
        }
        if (hit) {
          ++reached;
          trials_needed.push_back(n);
        } else {
          trials_needed.push_back(budget + 1);  // censored: counted as beyond the budget
        }
        ooms.push_back(oom);
        failed_total += failed;
      }
      std::printf("%-30s %-12s %6d/%-2d %9.0f %9.0f %12.1f %12.1f\n", b.name.c_str(),
                  strat->Name().c_str(), reached, seeds, Percentile(trials_needed, 0.5),
                  Percentile(trials_needed, 0.9),
                  [&] { double s = 0; for (double x : ooms) s += x; return s / seeds; }(),
                  failed_total / seeds);
    }
  }
  std::printf("\nA median or p90 of budget+1 means that share of sessions never got within 2%%.\n");
  return 0;
}
