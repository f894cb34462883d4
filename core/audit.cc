#include "core/audit.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/patch_scope.h"
#include "core/trial_status.h"

namespace infrarsi {

std::string FailureClass(const std::string& status, const std::string& violation,
                         const std::string& error) {
  if (status == trial_status::kOom || status == trial_status::kTimeout) return status;
  if (status == "violation") return absl::StrCat("violation:", violation.empty() ? "other" : violation);
  if (status == trial_status::kFailed) return absl::StartsWith(error, "launcher") ? "launcher" : "crash";
  return "";
}

std::vector<FailureCost> FailureCosts(const SessionSpec& spec,
                                      const std::vector<FailedTrialCost>& trials) {
  // (class, knob, value) -> cost; knob "" is the class total.
  std::map<std::tuple<std::string, std::string, std::string>, FailureCost> by;
  auto add = [&](const std::string& cls, const std::string& knob, const std::string& value,
                 double gpu_s) {
    FailureCost& c = by[{cls, knob, value}];
    c.failure_class = cls;
    c.knob = knob;
    c.value = value;
    ++c.trials;
    c.gpu_s += gpu_s;
  };
  for (const FailedTrialCost& t : trials) {
    const std::string cls = FailureClass(t.status, t.violation, t.error);
    if (cls.empty()) continue;
    const double gpu_s = t.cost_s * std::max(1, spec.gpu_count);
    add(cls, "", "", gpu_s);
    for (const Knob& k : spec.knobs) {
      if (std::any_of(spec.patches.begin(), spec.patches.end(),
                      [&](const PatchSpec& p) { return p.knob == k.name; })) {
        continue;  // patches are listed by name below
      }
      auto it = t.config.find(k.name);
      if (it != t.config.end() && it->second != spec.baseline.at(k.name)) add(cls, k.name, it->second, gpu_s);
    }
    for (const PatchSpec* p : spec.PatchesOn(t.config)) add(cls, "patch", p->name, gpu_s);
  }
  std::vector<FailureCost> out;
  for (auto& [key, c] : by) out.push_back(c);
  // Classes by total cost; within a class, its total first, then the rest.
  std::map<std::string, double> class_total;
  for (const FailureCost& c : out) {
    if (c.knob.empty()) class_total[c.failure_class] = c.gpu_s;
  }
  std::sort(out.begin(), out.end(), [&](const FailureCost& a, const FailureCost& b) {
    if (a.failure_class != b.failure_class) {
      const double ta = class_total[a.failure_class], tb = class_total[b.failure_class];
      return ta != tb ? ta > tb : a.failure_class < b.failure_class;
    }
    if (a.knob.empty() != b.knob.empty()) return a.knob.empty();
    if (a.gpu_s != b.gpu_s) return a.gpu_s > b.gpu_s;
    return std::tie(a.knob, a.value) < std::tie(b.knob, b.value);
  });
  return out;
}

std::vector<SourcePathAudit> AuditSourcePaths(const SessionSpec& spec, const Config& config) {
  std::vector<SourcePathAudit> out;
  for (const PatchSpec* p : spec.PatchesOn(config)) {
    for (const std::string& path : p->paths) {
      SourcePathAudit a;
      a.path = path;
      a.patch = p->name;
      for (const std::string& glob : spec.contract.editable) {
        if (GlobMatch(glob, path)) {
          a.editable_glob = glob;
          break;
        }
      }
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace infrarsi
