// The cost of one std::async round trip (start a thread, run nothing,
// join), as RunAside pays it for the fits' second thread: the figure of
// docs/benchmarks.md, "Where the fits' critical path is now". Not built by
// CMake: g++ -O2 -pthread tests/bench/not_kept/async_round_trip.cc -o /tmp/art && /tmp/art
#include <future>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
int main() {
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = std::async(std::launch::async, [] {});
    f.get();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("async round trip us: p50 %.1f p90 %.1f p99 %.1f max %.1f\n", us[1000], us[1800], us[1980], us.back());
}
