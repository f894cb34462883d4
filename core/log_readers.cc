#include "core/log_readers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "re2/re2.h"

namespace infrarsi {
namespace {

// A line longer than this is cut before matching: no framework's step line
// comes near it, and RE2's time is linear in what it is given.
constexpr size_t kMaxMatchedBytes = 16 * 1024;

constexpr ReaderTraits kTraits[] = {
    // name, step_time, tokens, memory, data_seed, optimizer, dtype
    {"harness", true, true, true, true, true, true},
    {"megatron", true, true, true, false, false, false},
    {"torchtitan", false, true, true, false, false, false},
    {"deepspeed", true, false, true, false, false, false},
    {"hf_trainer", false, false, false, false, false, false},
    {"jsonl", true, true, true, true, false, false},
    {"regex", true, true, true, true, false, false},
};

// The groups a regex reader's pattern may name.
const std::set<std::string>& RegexGroups() {
  static const auto* groups = new std::set<std::string>{
      "step", "loss", "step_time_s", "step_time_ms", "tokens", "peak_mem_gib", "peak_mem_mib",
      "data_seed"};
  return *groups;
}

// A number as a framework prints it: "1.234567E+01", "1,234", "nan".
std::optional<double> Number(const std::string& text) {
  std::string t = absl::StrReplaceAll(text, {{",", ""}});
  double v = 0;
  if (!absl::SimpleAtod(t, &v)) return std::nullopt;
  return v;
}
std::optional<int64_t> Integer(const std::string& text) {
  std::optional<double> v = Number(text);
  if (!v || !std::isfinite(*v) || *v < 0 || *v > 9.007199254740992e15 || *v != std::floor(*v)) {
    return std::nullopt;
  }
  return static_cast<int64_t>(*v);
}

// The loss as printed, NaN for "nan" (evidence the contract judges) and
// nothing for what is no number at all.
std::optional<double> Loss(const std::string& text) {
  std::optional<double> v = Number(text);
  if (v) return v;
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "nan" || lower == "-nan") return std::nan("");
  return std::nullopt;
}

// A step line's step number and loss as printed; nothing when either is
// not a number.
std::optional<LogStep> StepWithLoss(const std::string& step, const std::string& loss_text) {
  LogStep s;
  s.step = Integer(step);
  std::optional<double> loss = Loss(loss_text);
  if (!s.step || !loss) return std::nullopt;
  s.loss = *loss;
  return s;
}

std::string_view Capped(std::string_view line) {
  return line.size() > kMaxMatchedBytes ? line.substr(0, kMaxMatchedBytes) : line;
}

// Megatron-LM's training_log(): one line per log interval,
//  " [2024-05-01 12:00:00] iteration       10/     500 | consumed samples:    2560 |
//   elapsed time per iteration (ms): 1234.5 | ... | global batch size:   256 |
//   lm loss: 1.023456E+01 | loss scale: 1.0 | ..."
// and, once, "[Rank 0] (after 1 iterations) memory (MB) | allocated: ... |
// max allocated: 2345.6 | reserved: ... | max reserved: ...".
class MegatronReader : public LogReader {
 public:
  std::optional<LogStep> Feed(std::string_view raw) override {
    const std::string line = StripAnsi(Capped(raw));
    std::string value;
    if (RE2::PartialMatch(line, memory_, &value)) {
      if (std::optional<double> mb = Number(value)) peak_mem_gib_ = *mb / 1024.0;
      return std::nullopt;
    }
    std::string iter;
    if (!RE2::PartialMatch(line, iteration_, &iter)) return std::nullopt;
    std::string loss_text;
    if (!RE2::PartialMatch(line, loss_, &loss_text)) return std::nullopt;
    std::optional<LogStep> step = StepWithLoss(iter, loss_text);
    if (!step) return std::nullopt;
    LogStep& s = *step;
    if (RE2::PartialMatch(line, elapsed_, &value)) {
      if (std::optional<double> ms = Number(value)) s.step_time_s = *ms / 1000.0;
    }
    if (RE2::PartialMatch(line, batch_, &value)) s.global_batch = Integer(value);
    if (RE2::PartialMatch(line, consumed_, &value)) s.consumed_samples = Integer(value);
    if (peak_mem_gib_ > 0) s.peak_mem_gib = peak_mem_gib_;
    return step;
  }

 private:
  const RE2 iteration_{R"(\biteration\s+(\d+)\s*/\s*\d+\s*\|)"};
  const RE2 loss_{R"(\|\s*lm loss:\s*([-+0-9.eEnaNA]+)\s*\|)"};
  const RE2 elapsed_{R"(elapsed time per iteration \(ms\):\s*([0-9.eE+-]+))"};
  const RE2 batch_{R"(global batch size:\s*(\d+))"};
  const RE2 consumed_{R"(consumed samples:\s*(\d+))"};
  const RE2 memory_{R"(memory \(MB\).*\|\s*max allocated:\s*([0-9.eE+]+))"};
  double peak_mem_gib_ = 0;
};

// torchtitan's MetricsProcessor.log(), coloured:
//  "step:  1  loss: 12.2398  grad_norm: 1.2  memory: 21.05GiB(26.60%)  tps: 1,234
//   tflops: 12.34  mfu: 1.23%"; some versions add "step_time: 0.5" or
// "elapsed_time_per_step: 0.5s". Validation lines ("validate step: ...")
// are not training steps.
class TorchtitanReader : public LogReader {
 public:
  std::optional<LogStep> Feed(std::string_view raw) override {
    const std::string line = StripAnsi(Capped(raw));
    if (line.find("validat") != std::string::npos) return std::nullopt;
    std::string step, loss_text, value;
    if (!RE2::PartialMatch(line, step_, &step, &loss_text)) return std::nullopt;
    std::optional<LogStep> s = StepWithLoss(step, loss_text);
    if (!s) return std::nullopt;
    if (RE2::PartialMatch(line, memory_, &value)) s->peak_mem_gib = Number(value);
    if (RE2::PartialMatch(line, time_, &value)) s->step_time_s = Number(value);
    if (RE2::PartialMatch(line, tps_, &value)) s->tokens_per_second = Number(value);
    return s;
  }

 private:
  const RE2 tps_{R"(\btps:\s*([0-9][0-9,]*(?:\.[0-9]+)?))"};
  const RE2 step_{R"((?:^|\s)step:\s*(\d+)\s+loss:\s*([-+0-9.eEnaNA]+))"};
  const RE2 memory_{R"(\bmemory:\s*([0-9.]+)\s*GiB)"};
  const RE2 time_{R"(\b(?:step_time|elapsed_time_per_step):\s*([0-9.eE+-]+))"};
};

// DeepSpeed's ThroughputTimer (steps_per_print):
//  "epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.0,
//   CurrSamplesPerSec=25.7, MemAllocated=4.32GB, MaxMemAllocated=38.49GB"
// (older releases: "0/20, RunningAvgSamplesPerSec=..."). DeepSpeed prints
// no loss; the script's own line does ("Loss: 10.8766", "loss = 2.1"). A
// step is complete once both its timer line and a loss line arrived, in
// either order.
class DeepSpeedReader : public LogReader {
 public:
  explicit DeepSpeedReader(int64_t global_batch) : global_batch_(global_batch) {}
  std::optional<LogStep> Feed(std::string_view raw) override {
    const std::string line = StripAnsi(Capped(raw));
    std::string step, rate, mem, value;
    if (RE2::PartialMatch(line, timer_, &step, &rate)) {
      LogStep s;
      s.step = Integer(step);
      if (!s.step) return std::nullopt;
      std::optional<double> r = Number(rate);
      if (r && *r > 0 && global_batch_ > 0) s.step_time_s = static_cast<double>(global_batch_) / *r;
      if (RE2::PartialMatch(line, max_mem_, &mem)) s.peak_mem_gib = Number(mem);  // GB as printed
      timer_step_ = s;
      return Complete();
    }
    if (RE2::PartialMatch(line, loss_line_, &value)) {
      loss_ = Loss(value);
      return Complete();
    }
    return std::nullopt;
  }

 private:
  std::optional<LogStep> Complete() {
    if (!timer_step_ || !loss_) return std::nullopt;
    LogStep s = *timer_step_;
    s.loss = *loss_;
    timer_step_.reset();
    loss_.reset();
    return s;
  }
  const int64_t global_batch_;
  const RE2 timer_{
      R"((?:global_step=|\b\d+/)(\d+),\s*RunningAvgSamplesPerSec=[^,]*,\s*CurrSamplesPerSec=([-+0-9.eEinfINF]+))"};
  const RE2 max_mem_{R"(MaxMemAllocated=([0-9.]+)GB)"};
  const RE2 loss_line_{R"((?i)\bloss\b\s*[:=]\s*([-+0-9.e]+|nan|inf))"};
  std::optional<LogStep> timer_step_;
  std::optional<double> loss_;
};

// The HF Trainer's log dict, printed every logging_steps:
//  "{'loss': 2.3456, 'grad_norm': 1.23, 'learning_rate': 4.9e-05, 'epoch': 0.01}"
// (after a progress bar's carriage returns, when tqdm is on). It states no
// step number and no time: steps are counted, the agent's clock times them.
// The summary ("train_runtime") and evaluation ("eval_loss") dicts are not
// steps.
class HfTrainerReader : public LogReader {
 public:
  std::optional<LogStep> Feed(std::string_view raw) override {
    const std::string line = StripAnsi(Capped(raw));
    if (line.find("'train_runtime'") != std::string::npos) return std::nullopt;
    std::string value;
    if (!RE2::PartialMatch(line, loss_, &value)) return std::nullopt;
    std::optional<double> loss = Loss(value);
    if (!loss) return std::nullopt;
    LogStep s;
    s.loss = *loss;
    return s;
  }

 private:
  // Only a dict that opens with 'loss' (an evaluation dict opens with
  // 'eval_loss').
  const RE2 loss_{R"(\{\s*'loss':\s*'?([-+0-9.eEnaNA]+)'?\s*[,}])"};
};

// JSON lines: {"step": 3, "loss": 2.1, "step_time_s": 0.5, "tokens": 32768,
// "peak_mem_gib": 27.4, "data_seed": 1}; only "loss" is required. Lines
// that are not JSON objects are the script's other output.
class JsonlReader : public LogReader {
 public:
  std::optional<LogStep> Feed(std::string_view raw) override {
    const absl::string_view line =
        absl::StripAsciiWhitespace(absl::string_view(raw.data(), raw.size()));
    if (line.empty() || line.front() != '{' || line.size() > kMaxMatchedBytes) return std::nullopt;
    google::protobuf::Struct st;
    if (!google::protobuf::util::JsonStringToMessage(std::string(line), &st).ok()) {
      return std::nullopt;
    }
    using google::protobuf::Value;
    const auto& f = st.fields();
    auto number = [&](const char* key) -> std::optional<double> {
      auto it = f.find(key);
      if (it == f.end() || it->second.kind_case() != Value::kNumberValue) return std::nullopt;
      return it->second.number_value();
    };
    auto whole = [&](const char* key) -> std::optional<int64_t> {
      std::optional<double> v = number(key);
      if (!v) return std::nullopt;
      return Integer(absl::StrCat(*v));
    };
    auto loss = f.find("loss");
    if (loss == f.end()) return std::nullopt;
    LogStep s;
    if (loss->second.kind_case() == Value::kNumberValue) {
      s.loss = loss->second.number_value();
    } else if (loss->second.kind_case() == Value::kStringValue && Loss(loss->second.string_value())) {
      s.loss = *Loss(loss->second.string_value());
    } else if (loss->second.kind_case() == Value::kNullValue) {
      s.loss = std::nan("");
    } else {
      return std::nullopt;
    }
    s.step = whole("step");
    s.step_time_s = number("step_time_s");
    s.tokens = whole("tokens");
    s.peak_mem_gib = number("peak_mem_gib");
    s.data_seed = whole("data_seed");
    return s;
  }
};

// A pattern of the spec's own with named groups (RE2: "(?P<loss>...)").
class RegexReader : public LogReader {
 public:
  explicit RegexReader(const std::string& pattern) : re_(pattern) {
    for (const auto& [name, index] : re_.NamedCapturingGroups()) index_[name] = index;
  }
  std::optional<LogStep> Feed(std::string_view raw) override {
    const std::string line = StripAnsi(Capped(raw));
    const int n = re_.NumberOfCapturingGroups();
    std::vector<std::string> values(static_cast<size_t>(n));
    std::vector<RE2::Arg> args(static_cast<size_t>(n));
    std::vector<const RE2::Arg*> ptrs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      args[static_cast<size_t>(i)] = &values[static_cast<size_t>(i)];
      ptrs[static_cast<size_t>(i)] = &args[static_cast<size_t>(i)];
    }
    if (!RE2::PartialMatchN(line, re_, ptrs.data(), n)) return std::nullopt;
    auto group = [&](const char* name) -> std::optional<std::string> {
      auto it = index_.find(name);
      if (it == index_.end() || values[static_cast<size_t>(it->second - 1)].empty()) {
        return std::nullopt;
      }
      return values[static_cast<size_t>(it->second - 1)];
    };
    LogStep s;
    std::optional<double> loss = group("loss") ? Loss(*group("loss")) : std::nullopt;
    if (!loss) return std::nullopt;
    s.loss = *loss;
    if (auto v = group("step")) {
      s.step = Integer(*v);
      if (!s.step) return std::nullopt;
    }
    if (auto v = group("step_time_s")) s.step_time_s = Number(*v);
    if (auto v = group("step_time_ms")) {
      if (std::optional<double> ms = Number(*v)) s.step_time_s = *ms / 1000.0;
    }
    if (auto v = group("tokens")) s.tokens = Integer(*v);
    if (auto v = group("peak_mem_gib")) s.peak_mem_gib = Number(*v);
    if (auto v = group("peak_mem_mib")) {
      if (std::optional<double> mib = Number(*v)) s.peak_mem_gib = *mib / 1024.0;
    }
    if (auto v = group("data_seed")) s.data_seed = Integer(*v);
    return s;
  }

 private:
  RE2 re_;
  std::map<std::string, int> index_;
};

}  // namespace

const ReaderTraits* ReaderTraitsOf(const std::string& reader) {
  for (const ReaderTraits& t : kTraits) {
    if (reader == t.name) return &t;
  }
  return nullptr;
}

std::string KnownReaders() {
  std::vector<std::string> names;
  for (const ReaderTraits& t : kTraits) names.push_back(t.name);
  return absl::StrJoin(names, ", ");
}

bool StatesDataSeed(const LogReaderSpec& spec) {
  const ReaderTraits* t = ReaderTraitsOf(spec.reader);
  if (t == nullptr || !t->data_seed) return false;
  if (spec.reader != "regex") return true;
  RE2::Options options;
  options.set_log_errors(false);
  const RE2 re(spec.pattern, options);
  return re.ok() && re.NamedCapturingGroups().count("data_seed") > 0;
}

std::string LogReaderSpecError(const LogReaderSpec& spec) {
  if (ReaderTraitsOf(spec.reader) == nullptr) {
    return absl::StrCat("reader: unknown reader '", spec.reader, "' (known: ", KnownReaders(), ")");
  }
  if (spec.stream != "stdout" && spec.stream != "stderr") {
    return absl::StrCat("from: '", spec.stream, "' must be stdout or stderr");
  }
  if (spec.warmup_steps < 0 || spec.warmup_steps > 1000) {
    return "warmup_steps: must be between 0 and 1000";
  }
  if (spec.reader != "regex") {
    if (!spec.pattern.empty()) return "pattern: only the regex reader takes a pattern";
    return "";
  }
  if (spec.pattern.empty()) return "pattern: the regex reader needs one";
  if (spec.pattern.size() > 4096) return "pattern: longer than 4096 characters";
  RE2::Options options;
  options.set_log_errors(false);
  RE2 re(spec.pattern, options);
  if (!re.ok()) return absl::StrCat("pattern: not a valid RE2 expression: ", re.error());
  bool loss = false;
  for (const auto& [name, index] : re.NamedCapturingGroups()) {
    if (RegexGroups().count(name) == 0) {
      return absl::StrCat("pattern: unknown group '", name, "' (known: ",
                          absl::StrJoin(RegexGroups(), ", "), ")");
    }
    loss = loss || name == "loss";
  }
  if (!loss) return "pattern: needs a named group for the loss: (?P<loss>...)";
  return "";
}

absl::StatusOr<std::unique_ptr<LogReader>> LogReader::Create(const LogReaderSpec& spec,
                                                             int64_t global_batch) {
  if (std::string why = LogReaderSpecError(spec); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics.", why));
  }
  if (spec.reader == "megatron") return std::make_unique<MegatronReader>();
  if (spec.reader == "torchtitan") return std::make_unique<TorchtitanReader>();
  if (spec.reader == "deepspeed") return std::make_unique<DeepSpeedReader>(global_batch);
  if (spec.reader == "hf_trainer") return std::make_unique<HfTrainerReader>();
  if (spec.reader == "jsonl") return std::make_unique<JsonlReader>();
  if (spec.reader == "regex") return std::make_unique<RegexReader>(spec.pattern);
  return absl::InvalidArgumentError(
      "metrics.reader: the harness writes its own metrics file; it has no log reader");
}

std::string StripAnsi(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() && !(line[j] >= 0x40 && line[j] <= 0x7e)) ++j;
      i = j;  // the final byte is skipped too
      continue;
    }
    out += line[i];
  }
  return out;
}

std::optional<v1::StepMetrics> LogStepBuilder::Add(const LogStep& s, double arrival_s,
                                                   double arrival_error_s) {
  if (!error_.empty()) return std::nullopt;
  const int64_t step = s.step ? *s.step : count_ + 1;
  if (last_step_ && step <= *last_step_) return std::nullopt;
  const int64_t between = last_step_ ? step - *last_step_ : 1;
  if (between > 1) {
    error_ = absl::StrCat(
        "the log skips from step ", *last_step_, " to ", step,
        ": a log reader needs a line for every step (Megatron: --log-interval 1; torchtitan: "
        "--metrics.log_freq 1; DeepSpeed: steps_per_print 1; HF Trainer: logging_steps=1)");
    return std::nullopt;
  }
  ++count_;
  v1::StepMetrics m;
  m.set_step(step);
  m.set_loss(s.loss);
  m.set_warmup(count_ <= options_.warmup_steps);
  // A stated time past what the server accepts (7 days) is no time: the
  // agent's clock stands in, so a garbled line cannot get the report refused.
  constexpr double kMaxStepSeconds = 7 * 86400.0;
  const bool stated = s.step_time_s && std::isfinite(*s.step_time_s) && *s.step_time_s >= 0 &&
                      *s.step_time_s <= kMaxStepSeconds;
  double t = stated ? *s.step_time_s : (arrival_s - last_arrival_s_) / static_cast<double>(between);
  if (!std::isfinite(t) || t < 0) t = 0;
  // A timed step's time is never 0: lines that arrived together (a
  // buffered log) are then judged by the timing rule, not refused as 0 s.
  if (!m.warmup()) t = std::max(t, 1e-6);
  m.set_step_time_s(t);
  // Tokens: what the log states, else the contract's.
  const int64_t per_sample =
      options_.global_batch > 0 ? options_.tokens_per_step / options_.global_batch : 0;
  int64_t tokens = options_.tokens_per_step;
  if (s.tokens) {
    tokens = *s.tokens;
  } else if (s.global_batch && per_sample > 0) {
    int64_t samples = *s.global_batch;
    // The consumed samples' increase is what really went through: a
    // script that prints the batch it was asked for but feeds less shows
    // it here.
    if (s.consumed_samples && last_consumed_ && *s.consumed_samples >= *last_consumed_ &&
        between > 0) {
      samples = (*s.consumed_samples - *last_consumed_) / between;
    }
    tokens = samples * per_sample;
  }
  // torchtitan states a rate, not a count: per GPU, over the time since its
  // previous line. One step's rate is not judged against one step's
  // arrival gap: on a busy host the trainer can be descheduled between
  // timing a step and printing it, and the agent reads a line up to
  // `arrival_error_s` late, so one gap can be half again the step
  // (an honest trial was judged a cheat that way). What is judged is the
  // window since the first timed step: the time the contract's tokens
  // take at the stated rates against the agent's clock over the window.
  // Lateness does not add up over steps: only the window's two ends count,
  // each read at most its arrival error late and printed at most half a
  // step (the window's mean) after it was timed. Beyond that and 25% more
  // either way (torchtitan's clock and the agent's differ a little), the
  // step is said to have processed the window's average the rates imply,
  // which the contract's tokens rule refuses by name; a batch cut in half
  // shows from the window's third step. A stated step time is the
  // trainer's own clock: no lateness then. A first line with none before
  // it is not judged: its gap runs from the process's start.
  if (!s.tokens && !s.global_batch && s.tokens_per_second && options_.world > 0 && !m.warmup() &&
      std::isfinite(*s.tokens_per_second) && *s.tokens_per_second >= 0 &&
      options_.tokens_per_step > 0 && (stated || last_step_.has_value())) {
    const double read_error = stated ? 0.0 : std::max(arrival_error_s, 0.0);
    if (rate_steps_ == 0) rate_open_error_s_ = stated ? 0.0 : last_arrival_error_s_;
    ++rate_steps_;
    rate_observed_s_ += t;
    const double contract = static_cast<double>(options_.tokens_per_step);
    const double rate = *s.tokens_per_second * options_.world;  // tokens per second, all GPUs
    // The window's time the stated rates say the contract's tokens take
    // (a rate of 0 says they never went through).
    rate_needed_s_ += rate > 0 ? contract / rate : std::numeric_limits<double>::infinity();
    const double lag = stated ? 0.0 : 0.5 * rate_needed_s_ / static_cast<double>(rate_steps_);
    const double lo = std::max(0.0, rate_observed_s_ - read_error - lag);
    const double hi = rate_observed_s_ + rate_open_error_s_ + lag;
    double implied = -1;  // per step, over the window; -1: honest
    if (!std::isfinite(rate_needed_s_)) {
      implied = 0;
    } else if (hi < 0.75 * rate_needed_s_) {
      implied = contract * hi / rate_needed_s_;  // fewer tokens than the contract, at most this
    } else if (lo > 1.25 * rate_needed_s_) {
      implied = contract * lo / rate_needed_s_;  // more, at least this
    }
    if (implied >= 0) {
      // Bounded before rounding: a lying rate (1e300 tokens/s) implies a
      // count no integer holds, and llround's result is then unspecified.
      tokens = std::llround(std::min(implied, static_cast<double>(int64_t{1} << 40)));
      if (tokens == options_.tokens_per_step) tokens += implied < contract ? -1 : 1;
    }
  }
  // Beyond what any step processes (2^40, the server's bound): said as the
  // bound, which the contract's tokens rule then refuses by name.
  m.set_tokens(std::clamp<int64_t>(tokens, 0, int64_t{1} << 40));
  if (s.peak_mem_gib && std::isfinite(*s.peak_mem_gib) && *s.peak_mem_gib >= 0) {
    peak_mem_gib_ = *s.peak_mem_gib;
  }
  m.set_peak_mem_gib(peak_mem_gib_);
  if (s.data_seed) m.set_data_seed(*s.data_seed);
  m.set_arrival_s(arrival_s);
  m.set_arrival_error_s(arrival_error_s);
  last_step_ = step;
  last_arrival_s_ = arrival_s;
  last_arrival_error_s_ = arrival_error_s;
  if (s.consumed_samples) last_consumed_ = s.consumed_samples;
  return m;
}

}  // namespace infrarsi
