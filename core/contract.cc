#include "core/contract.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {

std::optional<Violation> CheckContract(const ContractSpec& c,
                                       const std::vector<double>& reference,
                                       int expected_timed_steps, const TrialEvidence& e) {
  auto v = [](std::string kind, std::string reason) {
    return std::optional<Violation>(Violation{std::move(kind), std::move(reason)});
  };
  if (!e.protected_changed.empty()) {
    return v("protected_file", absl::StrCat("protected file changed: ",
                                            absl::StrJoin(e.protected_changed, ", ")));
  }
  int timed = 0;
  double reported = 0;
  for (const StepEvidence& s : e.steps) {
    timed += !s.warmup;
    reported += s.step_time_s;
  }
  if (expected_timed_steps > 0 && timed != expected_timed_steps) {
    return v("timed_steps", absl::StrCat("reported ", timed, " timed steps, the contract says ",
                                         expected_timed_steps));
  }
  for (const StepEvidence& s : e.steps) {
    if (s.warmup) continue;
    if (s.tokens != c.tokens_per_step) {
      return v("tokens_per_step",
               absl::StrCat("step ", s.step, " processed ", s.tokens,
                            " tokens, the contract says ", c.tokens_per_step,
                            " per optimizer step"));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!c.data_seed_set) break;
    if (!s.data_seed.has_value()) {
      return v("instrumentation",
               absl::StrCat("step ", s.step, " does not report data_seed, which the contract needs"));
    }
    if (*s.data_seed != c.data_seed) {
      return v("data_seed", absl::StrCat("step ", s.step, " used data seed ", *s.data_seed,
                                         ", the contract says ", c.data_seed));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (c.precision.empty()) break;
    if (s.dtype.empty()) continue;  // only what the harness reports can be checked
    if (std::find(c.precision.begin(), c.precision.end(), s.dtype) == c.precision.end()) {
      return v("precision", absl::StrCat("step ", s.step, " ran in ", s.dtype,
                                         ", the contract allows ",
                                         absl::StrJoin(c.precision, ", ")));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!std::isfinite(s.loss)) {
      return v("loss_nan", absl::StrCat("step ", s.step, " loss is ", s.loss));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (s.step < 0 || static_cast<size_t>(s.step) >= reference.size()) continue;
    const double ref = reference[static_cast<size_t>(s.step)];
    const double tol = c.loss_abs_tol + c.loss_rel_tol * std::fabs(ref);
    const double diff = std::fabs(s.loss - ref);
    if (diff > tol) {
      return v("loss", absl::StrFormat(
                           "step %d loss %.6f differs from the baseline's %.6f by %.3g "
                           "(tolerance %.3g)",
                           s.step, s.loss, ref, diff, tol));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (!c.optimizer_in_window || s.warmup) continue;
    if (s.optimizer_steps < 0) {
      return v("instrumentation", absl::StrCat("step ", s.step,
                                               " does not report optimizer_steps, which the "
                                               "contract needs"));
    }
    if (s.optimizer_steps != 1) {
      return v("timing", absl::StrCat("step ", s.step, " ran ", s.optimizer_steps,
                                      " optimizer steps inside the timed window (expected 1): "
                                      "the optimizer step was moved outside the timer"));
    }
  }
  for (const StepEvidence& s : e.steps) {
    if (s.warmup || s.observed_interval_s <= 0) continue;
    const double floor = s.observed_interval_s * (1.0 - c.timing_tolerance) - c.timing_slack_s;
    if (s.step_time_s < floor) {
      return v("timing", absl::StrFormat(
                             "step %d reported %.3f s but the agent saw %.3f s between its "
                             "metrics lines: the trial reports faster than it ran",
                             s.step, s.step_time_s, s.observed_interval_s));
    }
  }
  if (e.wall_s > 0 && reported > e.wall_s * 1.05 + c.timing_slack_s) {
    return v("timing", absl::StrFormat("steps report %.3f s in total but the trial ran %.3f s",
                                       reported, e.wall_s));
  }
  return std::nullopt;
}

std::string EncodeStepExtra(const StepEvidence& s) {
  std::string out = "{";
  absl::StrAppend(&out, "\"optimizer_steps\":", s.optimizer_steps);
  absl::StrAppendFormat(&out, ",\"observed_interval_s\":%.9g", s.observed_interval_s);
  if (s.data_seed) absl::StrAppend(&out, ",\"data_seed\":", *s.data_seed);
  if (!s.dtype.empty()) absl::StrAppend(&out, ",\"dtype\":", JsonQuote(s.dtype));
  return out + "}";
}

void DecodeStepExtra(const std::string& json, StepEvidence* s) {
  google::protobuf::Struct st;
  if (json.empty() || !google::protobuf::util::JsonStringToMessage(json, &st).ok()) return;
  const auto& f = st.fields();
  if (auto it = f.find("optimizer_steps"); it != f.end()) {
    s->optimizer_steps = static_cast<int>(it->second.number_value());
  }
  if (auto it = f.find("observed_interval_s"); it != f.end()) {
    s->observed_interval_s = it->second.number_value();
  }
  if (auto it = f.find("data_seed"); it != f.end()) {
    s->data_seed = static_cast<int64_t>(it->second.number_value());
  }
  if (auto it = f.find("dtype"); it != f.end()) s->dtype = it->second.string_value();
}

}  // namespace infrarsi
