// The training process writes metrics lines and its own log, and it may be
// hostile: ParseMetricsLine and every log reader (with the builder that
// times their steps) must never crash on any line, and what they hand on
// must stay within what the server accepts.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/agent/executors/metrics_line.h"
#include "core/log_readers.h"

namespace {

struct Reader {
  std::unique_ptr<infrarsi::LogReader> reader;
  std::unique_ptr<infrarsi::LogStepBuilder> steps;
};

std::vector<Reader>& Readers() {
  static auto* readers = [] {
    auto* out = new std::vector<Reader>;
    for (const char* name : {"megatron", "torchtitan", "deepspeed", "hf_trainer", "jsonl", "regex"}) {
      infrarsi::LogReaderSpec spec;
      spec.reader = name;
      if (spec.reader == "regex") {
        spec.pattern = R"(it (?P<step>\d+) loss (?P<loss>\S+) t (?P<step_time_ms>[0-9.]+) mem (?P<peak_mem_mib>\S+))";
      }
      Reader r;
      r.reader = *infrarsi::LogReader::Create(spec, 32);
      r.steps = std::make_unique<infrarsi::LogStepBuilder>(
          infrarsi::LogStepBuilder::Options{1, 32 * 128, 32});
      out->push_back(std::move(r));
    }
    return out;
  }();
  return *readers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto line = infrarsi::client::ParseMetricsLine(text);
  if (line.ok() && !line->oom && line->step.step_time_s() < 0) __builtin_trap();  // negative times are refused
  // Each reader keeps state across lines (as over a trial's output).
  static double arrival = 0;
  arrival += 0.001;
  for (Reader& r : Readers()) {
    auto step = r.reader->Feed(text);
    if (!step) continue;
    auto m = r.steps->Add(*step, arrival, 0.001);
    if (!m) continue;
    if (!(m->step_time_s() >= 0) || std::isinf(m->step_time_s())) __builtin_trap();
    if (m->peak_mem_gib() < 0 || std::isnan(m->peak_mem_gib())) __builtin_trap();
  }
  return 0;
}
