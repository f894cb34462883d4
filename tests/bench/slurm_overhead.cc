// Not a test: what running a trial as a Slurm job adds, on the local
// two-node cluster (tests/bench/slurm_overhead.sh starts it). For 1- and
// 2-node jobs of the stand-in trainer (tests/testing/slurm_trainer.py, one
// 1 ms step), prints per trial: submit -> the job's start (sbatch, the
// scheduler, the batch script's first line: queued_s), start -> the first
// metrics line (srun on every node, python, the rendezvous), and their sum,
// submit -> first metrics line. Median and max over --trials runs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/agent/executors/slurm_executor.h"

namespace {

using infrarsi::client::ProgressSink;
using infrarsi::client::SlurmExecutor;
namespace v1 = infrarsi::v1;

class FirstLine : public ProgressSink {
 public:
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    if (first < 0 && !steps.empty()) first = steps.front().arrival_s();
    return true;
  }
  double first = -1;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 10;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--trials") trials = std::atoi(argv[i + 1]);
  }
  if (std::getenv("SLURM_CONF") == nullptr) {
    std::fprintf(stderr, "SLURM_CONF is not set: run tests/bench/slurm_overhead.sh\n");
    return 2;
  }
  const std::string dir = std::filesystem::temp_directory_path() / "infrarsi-slurm-bench";
  std::filesystem::create_directories(dir);
  SlurmExecutor::Options o;
  o.scratch_root = dir + "/scratch";
  o.max_nodes = 2;
  o.allow_any_command = true;
  o.allow_root = true;
  o.workdir_root = dir;
  o.query_interval = absl::Milliseconds(100);
  auto ex = SlurmExecutor::Create(o);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", ex.status().ToString().c_str());
    return 1;
  }
  std::printf("%-6s %8s  %-28s %-28s %-28s\n", "nodes", "trials", "submit->start s (med/max)",
              "start->1st line s (med/max)", "submit->1st line s (med/max)");
  int id = 0;
  for (int nodes : {1, 2}) {
    std::vector<double> queued, first, total;
    for (int i = 0; i < trials; ++i) {
      v1::TrialAssignment t;
      t.set_trial_id(++id);
      t.set_session_id("bench");
      t.set_attempt(1);
      t.set_lease_timeout_ms(30000);
      v1::ProcessSpec* p = t.mutable_executor()->mutable_process();
      for (const std::string& a :
           {std::string("python3"), std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/slurm_trainer.py",
            std::string("--nodes"), absl::StrCat(nodes), std::string("--steps"), std::string("0"),
            std::string("--step-ms"), std::string("1")}) {
        p->add_argv(a);
      }
      p->set_workdir(dir);
      p->set_timeout_s(120);
      t.mutable_executor()->mutable_slurm()->set_gpus(8 * nodes);
      FirstLine sink;
      auto out = (*ex)->Run(t, &sink);
      if (!out.ok() || out->status() != "ok" || sink.first < 0) {
        std::fprintf(stderr, "trial %d: %s %s\n", id, out.ok() ? out->status().c_str() : "",
                     out.ok() ? out->error().c_str() : out.status().ToString().c_str());
        return 1;
      }
      queued.push_back(out->slurm().queued_s());
      first.push_back(sink.first);
      total.push_back(out->slurm().queued_s() + sink.first);
    }
    auto cell = [](const std::vector<double>& v) {
      return absl::StrCat(absl::SixDigits(Median(v)), " / ", absl::SixDigits(*std::max_element(v.begin(), v.end())));
    };
    std::printf("%-6d %8d  %-28s %-28s %-28s\n", nodes, trials, cell(queued).c_str(),
                cell(first).c_str(), cell(total).c_str());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
