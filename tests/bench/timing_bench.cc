// Not a test: how often the contract's timing rules flag honest trials,
// and how short a step can be before a 2x under-report slips through.
//
// Every trial is a real process run by the agent's ProcessExecutor (the
// agent's clock as deployed) and judged by the server's CheckContract with
// the reference a doctor would have built from the first runs. Prints one
// row per (program, step length).
//
//   build/tests/timing_bench [RUNS]                 # fast stand-ins
//   TINY_GPT=1 build/tests/timing_bench [RUNS]      # plus the tiny-gpt example (torch)
//   POLL_MS=1 build/tests/timing_bench [RUNS]       # the agent's --poll-ms (default 5)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/agent/executors/process_executor.h"
#include "core/agent_report.h"
#include "core/contract.h"
#include "core/doctor.h"
#include "models/stats.h"

namespace {

namespace fs = std::filesystem;
using infrarsi::v1::StepMetrics;

class Sink : public infrarsi::client::ProgressSink {
 public:
  bool OnSteps(const std::vector<StepMetrics>& steps) override {
    all.insert(all.end(), steps.begin(), steps.end());
    return true;
  }
  std::vector<StepMetrics> all;
};

struct Result {
  std::string status;
  std::optional<infrarsi::Violation> violation;
  double poll_s = 0;
  infrarsi::DoctorRun run;  // the run as a doctor would take it
};

struct Program {
  std::string name;
  std::vector<std::string> argv;  // "{ms}" and "{steps}" filled in
  std::string workdir;
  int64_t tokens = 4096;
};

std::string Fill(std::string arg, int ms, int steps) {
  for (auto [key, value] : {std::pair<std::string, int>{"{ms}", ms}, {"{steps}", steps}}) {
    for (size_t p; (p = arg.find(key)) != std::string::npos;) {
      arg.replace(p, key.size(), std::to_string(value));
    }
  }
  return arg;
}

// Runs `p` `runs` times; the first three build the doctor's reference (the
// tail), as a session would, and are judged without it.
std::vector<Result> RunMany(const Program& p, int ms, int steps, int runs,
                            const std::string& scratch) {
  infrarsi::client::ProcessExecutor::Options o;
  o.sandbox = false;  // the bench times the clock, not the sandbox
  o.scratch_root = scratch;
  o.allow_any_command = true;  // the bench's own programs
  o.workdir_root = p.workdir;
  o.allow_root = true;
  // POLL_MS=N: the agent's --poll-ms (default: the executor's, 5 ms).
  if (const char* poll = std::getenv("POLL_MS"); poll != nullptr && std::atoi(poll) > 0) {
    o.poll_interval = absl::Milliseconds(std::atoi(poll));
  }
  auto made = infrarsi::client::ProcessExecutor::Create(o);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    std::exit(1);
  }
  infrarsi::client::ProcessExecutor& ex = **made;
  infrarsi::ContractSpec contract;
  contract.tokens_per_step = p.tokens;
  infrarsi::ContractReference ref;
  ref.expected_timed_steps = steps;
  double tail = -1;
  std::vector<Result> out;
  for (int i = 0; i < runs; ++i) {
    infrarsi::v1::TrialAssignment a;
    a.set_trial_id(i + 1);
    a.set_lease_timeout_ms(30000);
    auto* spec = a.mutable_executor()->mutable_process();
    for (const std::string& arg : p.argv) spec->add_argv(Fill(arg, ms, steps));
    spec->set_workdir(p.workdir);
    spec->set_timeout_s(600);
    Sink sink;
    auto outcome = ex.Run(a, &sink);
    Result r;
    if (!outcome.ok()) {
      r.status = std::string(outcome.status().message());
      out.push_back(r);
      continue;
    }
    for (const auto& m : sink.all) *outcome->add_steps() = m;
    r.status = outcome->status();
    const infrarsi::TrialEvidence e = infrarsi::EvidenceOfOutcome(*outcome);
    r.poll_s = infrarsi::TimeOnAgentClock(e).slack_s;
    ref.tail_s = i < 3 ? -1 : tail;
    r.violation = infrarsi::CheckContract(contract, ref, e);
    const infrarsi::AgentClockTiming timing = infrarsi::TimeOnAgentClock(e);
    if (i < 3) tail = std::max(tail, timing.tail_s);
    // The run as the session manager hands it to the doctor.
    std::vector<double> timed;
    for (const auto& s : e.steps) {
      if (!s.warmup) timed.push_back(s.step_time_s);
    }
    r.run.step_time_s = timed.empty() ? 0 : infrarsi::models::Median(timed);
    r.run.steps = static_cast<int>(e.steps.size());
    if (timing.valid) {
      r.run.window_s = timing.observed_s;
      r.run.agent_step_time_s = timing.observed_s / timing.window_steps;
      r.run.clock_slack_s = timing.slack_s;
      r.run.tail_s = timing.tail_s;
    }
    out.push_back(r);
  }
  return out;
}

// Honest runs that finished ok and were flagged, and those that did not
// finish at all (a broken environment, not a false alarm).
struct Tally {
  int ran = 0, flagged = 0, broken = 0;
  // Consecutive pairs of finished runs taken as a doctor's two baseline
  // runs, and how many of those the doctor would call suspicious.
  int pairs = 0, suspicious = 0;
  double slack = 0;
  std::string first, broken_why;
};
Tally Count(const std::vector<Result>& rs) {
  Tally t;
  std::vector<infrarsi::DoctorRun> done;
  for (const Result& r : rs) {
    if (r.status == "ok") done.push_back(r.run);
  }
  for (size_t i = 0; i + 1 < done.size(); i += 2) {
    ++t.pairs;
    t.suspicious += infrarsi::BuildDoctorReport({done[i], done[i + 1]}, 2).suspicious() ? 1 : 0;
  }
  for (const Result& r : rs) {
    if (r.status != "ok") {
      ++t.broken;
      if (t.broken_why.empty()) t.broken_why = r.status;
      continue;
    }
    ++t.ran;
    t.slack = std::max(t.slack, r.poll_s);
    if (r.violation) {
      ++t.flagged;
      if (t.first.empty()) t.first = r.violation->reason;
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string src = INFRARSI_SOURCE_DIR;
  const std::string dir = (fs::temp_directory_path() / absl::StrCat("timing-bench-", getpid())).string();
  fs::create_directories(dir + "/job");
  fs::copy_file(src + "/client/harness/infrarsi_harness.py", dir + "/job/infrarsi_harness.py");
  fs::copy_file(src + "/tests/testing/timing_hacks.py", dir + "/job/timing_hacks.py");

  std::printf("Honest trials flagged by the timing rules (%d runs each; runs 1-3 build the\n"
              "reference tail, as the doctor's would):\n", runs);
  // slack_ms: the largest clock slack of a trial (how late the lines that
  // bound its timed window may have been read), milliseconds.
  // suspicious: pairs of runs (as a doctor's two baseline runs) whose step
  // times agree to the last digit on the judged clock.
  std::printf("%-22s %7s %6s %9s %10s %12s  %s\n", "program", "step_ms", "steps", "flagged",
              "suspicious", "max_slack_ms", "first reason");
  const std::vector<Program> honest = {
      {"fake_trainer (C++)", {FAKE_TRAINER, "--steps", "{steps}", "--step-ms", "{ms}"}, dir},
      {"harness (python)",
       {"python3", "timing_hacks.py", "--mode", "honest", "--steps", "{steps}", "--step-ms", "{ms}"},
       dir + "/job"},
  };
  struct Length {
    int ms, steps;
  };
  const std::vector<Length> lengths = {{1, 3}, {5, 3}, {5, 20}, {20, 3}, {70, 3}, {200, 3}, {1000, 3}};
  int flagged_total = 0, honest_total = 0, suspicious_total = 0, pairs_total = 0;
  // One row of the honest table; the totals count every row.
  auto honest_row = [&](const std::string& name, const std::string& ms, int steps, const Tally& t) {
    flagged_total += t.flagged;
    honest_total += t.ran;
    suspicious_total += t.suspicious;
    pairs_total += t.pairs;
    if (t.broken > 0) std::printf("  (%d runs did not finish ok: %s)\n", t.broken, t.broken_why.c_str());
    std::printf("%-22s %7s %6d %5d/%-3d %6d/%-3d %12.2f  %s\n", name.c_str(), ms.c_str(), steps,
                t.flagged, t.ran, t.suspicious, t.pairs, 1000 * t.slack,
                t.first.substr(0, 90).c_str());
  };
  for (const Program& p : honest) {
    for (const Length& l : lengths) {
      if (l.ms >= 1000 && runs > 10) continue;  // long steps: see the tiny-gpt row
      honest_row(p.name, std::to_string(l.ms), l.steps,
                 Count(RunMany(p, l.ms, l.steps, runs, dir + "/scratch")));
    }
  }
  if (std::getenv("TINY_GPT") != nullptr) {
    // The real example: the harness around a PyTorch GPT on CPU.
    const std::string ex = src + "/deploy/examples/tiny-gpt";
    for (const char* f : {"train.py", "model.py", "data.py"}) fs::copy_file(ex + "/" + f, dir + "/job/" + f);
    // Debian's python3 has torch (deploy/install_deps.sh); another python3
    // may come first on PATH.
    const std::string py = std::getenv("TINY_GPT_PYTHON") ? std::getenv("TINY_GPT_PYTHON")
                                                           : "/usr/bin/python3";
    const Program tiny{"tiny-gpt (torch)",
                       {py, "train.py", "--steps", "{steps}", "--micro-batch", "2"},
                       dir + "/job", 512};
    honest_row(tiny.name, "~100", 10, Count(RunMany(tiny, 0, 10, runs, dir + "/scratch")));
  }
  std::printf("false-alarm rate: %d of %d honest trials (%.2f%%); suspicious baselines: %d of "
              "%d pairs of honest runs\n\n",
              flagged_total, honest_total, honest_total ? 100.0 * flagged_total / honest_total : 0.0,
              suspicious_total, pairs_total);

  std::printf("2x under-reports caught (each line claims half its step), %d runs each:\n", runs);
  std::printf("%7s %6s %9s %12s\n", "step_ms", "steps", "caught", "max_slack_ms");
  const Program under{"under",
                      {"python3", "timing_hacks.py", "--mode", "under", "--factor", "2", "--steps",
                       "{steps}", "--step-ms", "{ms}"},
                      dir + "/job"};
  for (int steps : {3, 10}) {
    for (int ms : {1, 2, 3, 4, 5, 7, 10, 20}) {
      const std::vector<Result> rs = RunMany(under, ms, steps, runs, dir + "/scratch");
      int caught = 0;
      double poll = 0;
      for (const Result& r : rs) {
        poll = std::max(poll, r.poll_s);
        caught += r.violation.has_value() && r.violation->kind == "timing";
      }
      std::printf("%7d %6d %5d/%-3zu %12.2f\n", ms, steps, caught, rs.size(), 1000 * poll);
    }
  }
  fs::remove_all(dir);
  return 0;
}
