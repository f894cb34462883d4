#include "client/agent/executors/step_stream.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "client/agent/executors/metrics_line.h"

namespace infrarsi::client {

std::string ReadTail(int fd, size_t max_bytes) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return "";
  const size_t size = static_cast<size_t>(st.st_size);
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  std::string out(size - start, '\0');
  const ssize_t n = pread(fd, out.data(), out.size(), static_cast<off_t>(start));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

v1::TrialLog KeptOutput(int fd, size_t max_bytes) {
  v1::TrialLog log;
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return log;
  log.set_content(ReadTail(fd, max_bytes));
  log.set_dropped_bytes(std::max<int64_t>(0, static_cast<int64_t>(st.st_size) -
                                                 static_cast<int64_t>(log.content().size())));
  return log;
}

absl::StatusOr<std::unique_ptr<TrialLogSteps>> TrialLogSteps::Create(const v1::ProcessSpec& spec) {
  const v1::MetricsReader& m = spec.metrics();
  LogReaderSpec rs;
  rs.reader = m.reader().empty() ? "harness" : m.reader();
  if (rs.UsesHarness()) return std::unique_ptr<TrialLogSteps>();
  rs.stream = m.stream().empty() ? "stdout" : m.stream();
  rs.pattern = m.pattern();
  rs.warmup_steps = m.warmup_steps();
  auto reader = LogReader::Create(rs, m.global_batch());
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<TrialLogSteps>(new TrialLogSteps(
      *std::move(reader),
      LogStepBuilder::Options{rs.warmup_steps, m.tokens_per_step(), m.global_batch(), m.world()}));
}

std::vector<v1::StepMetrics> TrialLogSteps::Feed(const std::vector<std::string>& lines,
                                                 double arrival_s, double error_s) {
  std::vector<v1::StepMetrics> out;
  for (const std::string& line : lines) {
    if (!error().empty()) break;
    ++lines_;
    std::optional<LogStep> s = reader_->Feed(line);
    if (!s) continue;
    ++found_;
    if (std::optional<v1::StepMetrics> m = steps_.Add(*s, arrival_s, error_s)) out.push_back(*std::move(m));
  }
  return out;
}

bool LooksLikeOom(const std::string& output) {
  const std::string lower = absl::AsciiStrToLower(output);
  return absl::StrContains(lower, "out of memory") || absl::StrContains(lower, "outofmemoryerror");
}

std::vector<std::string> LineTailer::NewLines() {
  std::vector<std::string> lines;
  if (fd_ < 0) return lines;
  char buf[65536];
  while (true) {
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) break;
    pending_.append(buf, static_cast<size_t>(n));
    // A line longer than the format allows is cut off rather than held.
    if (pending_.size() > 4 * kMaxMetricsLineBytes && pending_.find('\n') == std::string::npos) {
      pending_.clear();
    }
  }
  size_t start = 0;
  while (true) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = pending_.substr(start, nl - start);
    if (!absl::StripAsciiWhitespace(line).empty()) lines.push_back(std::move(line));
    start = nl + 1;
  }
  pending_.erase(0, start);  // an unfinished last line is read next time
  return lines;
}

StepReporter::StepReporter(ProgressSink* sink) : sink_(sink) {
  thread_ = std::thread([this] {
    while (true) {
      std::vector<v1::StepMetrics> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !pending_.empty() || keepalive_ || done_; });
        batch.swap(pending_);
        const bool keepalive = keepalive_;
        keepalive_ = false;
        if (batch.empty() && !keepalive && done_) return;
      }
      if (!sink_->OnSteps(batch)) refused_ = true;
    }
  });
}

StepReporter::~StepReporter() { Finish(); }

void StepReporter::Push(std::vector<v1::StepMetrics> steps) {
  if (steps.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : steps) pending_.push_back(std::move(s));
  cv_.notify_one();
}

void StepReporter::Keepalive() {
  std::lock_guard<std::mutex> lock(mu_);
  keepalive_ = true;
  cv_.notify_one();
}

void StepReporter::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace infrarsi::client
