// A stand-in training process for tests: writes one metrics line per step to
// $INFRARSI_METRICS, sleeping --step-ms per step. Flags choose failures.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  int steps = 4, step_ms = 50, exit_code = 0, warmup = 1;
  double mem = 10.0, loss0 = 10.0;
  bool oom_event = false, oom_stderr = false, hang = false, spawn_child = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--steps") steps = std::atoi(next());
    else if (a == "--step-ms") step_ms = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--mem") mem = std::atof(next());
    else if (a == "--loss0") loss0 = std::atof(next());
    else if (a == "--exit") exit_code = std::atoi(next());
    else if (a == "--oom-event") oom_event = true;
    else if (a == "--oom-stderr") oom_stderr = true;
    else if (a == "--hang") hang = true;
    else if (a == "--spawn-child") spawn_child = true;
    else if (a == "--echo") std::printf("arg:%s\n", next());
  }
  const char* path = std::getenv("INFRARSI_METRICS");
  if (!path) {
    std::fprintf(stderr, "INFRARSI_METRICS not set\n");
    return 2;
  }
  if (spawn_child) {
    // A grandchild that would outlive us unless the group is killed.
    if (std::system("sleep 30 &") != 0) return 3;
  }
  if (oom_stderr) {
    std::fprintf(stderr, "RuntimeError: CUDA out of memory. Tried to allocate 4.00 GiB\n");
    return 1;
  }
  FILE* f = std::fopen(path, "a");
  if (!f) return 2;
  if (oom_event) {
    std::fprintf(f, "{\"event\": \"oom\"}\n");
    std::fclose(f);
    return 1;
  }
  for (int s = 0; s < steps + warmup; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    if (hang && s == 0) std::this_thread::sleep_for(std::chrono::hours(1));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(f,
                 "{\"step\": %d, \"loss\": %.6f, \"tokens\": 4096, \"step_time_s\": %.6f, "
                 "\"peak_mem_gib\": %.3f, \"warmup\": %s, \"phases\": {\"fwd_bwd_s\": %.6f}}\n",
                 s, loss0 - 0.01 * s, dt, mem, s < warmup ? "true" : "false", dt * 0.9);
    std::fflush(f);
  }
  std::fclose(f);
  return exit_code;
}
