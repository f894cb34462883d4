// Not a test: how much of a core the agent spends watching a trial. On a
// CPU host the agent competes with the job it measures, so reading the
// metrics must cost next to nothing. Runs the fake trainer (a real process:
// one metrics line every STEP_MS for STEPS steps) under the agent's
// ProcessExecutor, as deployed, and prints the agent process's CPU time
// (user + system, its threads, not the trial's) over the trial's wall time,
// and the timing resolution the outcome states.
//
//   build/tests/agent_cpu_bench [STEPS] [STEP_MS] [READER] [POLL_MS]
//   READER: harness (metrics file, default) or megatron (the job's stdout);
//   POLL_MS: the agent's --poll-ms (default: the executor's default)
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/agent/executors/process_executor.h"

namespace {

class Sink : public infrarsi::client::ProgressSink {
 public:
  bool OnSteps(const std::vector<infrarsi::v1::StepMetrics>& steps) override {
    lines += steps.size();
    for (const auto& s : steps) max_error = std::max(max_error, s.arrival_error_s());
    return true;
  }
  size_t lines = 0;
  double max_error = 0;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 50;
  const int step_ms = argc > 2 ? std::atoi(argv[2]) : 100;
  const std::string reader = argc > 3 ? argv[3] : "harness";
  const std::string dir = std::filesystem::temp_directory_path() / ("agent-cpu-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  infrarsi::client::ProcessExecutor::Options o;
  o.sandbox = false;
  o.scratch_root = dir + "/scratch";
  o.allow_any_command = true;
  o.allow_root = true;
  o.workdir_root = dir;
  if (argc > 4) o.poll_interval = absl::Milliseconds(std::atoi(argv[4]));
  auto ex = infrarsi::client::ProcessExecutor::Create(o);
  if (!ex.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ex.status().message()).c_str());
    return 1;
  }
  infrarsi::v1::TrialAssignment a;
  a.set_trial_id(1);
  a.set_lease_timeout_ms(30000);
  auto* p = a.mutable_executor()->mutable_process();
  if (reader == "harness") {
    for (const std::string& w : {std::string(FAKE_TRAINER), std::string("--steps"), absl::StrCat(steps),
                                 std::string("--step-ms"), absl::StrCat(step_ms)}) {
      p->add_argv(w);
    }
  } else {
    const std::string script = std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/framework_trainer.py";
    for (const std::string& w : {std::string("python3"), script, std::string("megatron"),
                                 std::string("--micro-batch-size"), std::string("1"),
                                 std::string("--global-batch-size"), std::string("8"),
                                 std::string("--seq-length"), std::string("128"),
                                 std::string("--train-iters"), absl::StrCat(steps),
                                 std::string("--log-interval"), std::string("1"),
                                 std::string("--base-ms"), absl::StrCat(step_ms)}) {
      p->add_argv(w);
    }
    p->mutable_metrics()->set_reader("megatron");
    p->mutable_metrics()->set_stream("stdout");
    p->mutable_metrics()->set_tokens_per_step(1024);
    p->mutable_metrics()->set_global_batch(8);
  }
  p->set_workdir(dir);
  p->set_timeout_s(600);
  Sink sink;
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto out = (*ex)->Run(a, &sink);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  std::filesystem::remove_all(dir);
  if (!out.ok() || out->status() != "ok") {
    std::fprintf(stderr, "trial did not finish ok: %s\n",
                 out.ok() ? out->error().c_str() : std::string(out.status().message()).c_str());
    return 1;
  }
  std::printf("poll %lld ms, reader %s: %zu lines over %.2f s wall; agent CPU %.3f s = %.2f%% of a core; "
              "stated resolution (longest gap between reads) %.2f ms, largest arrival error %.2f ms\n",
              static_cast<long long>(absl::ToInt64Milliseconds(o.poll_interval)), reader.c_str(), sink.lines, wall, cpu, 100 * cpu / wall, 1e3 * out->poll_interval_s(),
              1e3 * sink.max_error);
  return 0;
}
