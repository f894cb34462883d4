#include "core/stage.h"

#include "core/trial_status.h"

namespace infrarsi {
namespace {

// The one table of stages. Columns: stage, name, leasing, active, finished,
// terminal, the purpose it waits for, what a restart resumes.
const StageTraits kStages[] = {
    {v1::STAGE_INITIALIZED, "initialized", false, true, false, false, "", StageResume::kNone},
    {v1::STAGE_DOCTORING, "doctoring", true, true, false, false, trial_purpose::kDoctor,
     StageResume::kDoctor},
    {v1::STAGE_DOCTORED, "doctored", false, true, false, false, "", StageResume::kNone},
    {v1::STAGE_RUNNING, "running", true, true, false, false, trial_purpose::kSearch,
     StageResume::kSearch},
    {v1::STAGE_VERIFYING, "verifying", true, true, false, false, trial_purpose::kVerify,
     StageResume::kVerification},
    {v1::STAGE_SEARCHED, "searched", false, false, true, false, "", StageResume::kNone},
    {v1::STAGE_APPLIED, "applied", false, false, true, true, "", StageResume::kNone},
    {v1::STAGE_CANCELLED, "cancelled", false, false, true, true, "", StageResume::kNone},
    {v1::STAGE_FAILED, "failed", false, false, true, true, "", StageResume::kNone},
};
const StageTraits kUnspecified{};

}  // namespace

const StageTraits& TraitsOf(v1::Stage stage) {
  for (const StageTraits& t : kStages) {
    if (t.stage == stage) return t;
  }
  return kUnspecified;
}

const StageTraits& TraitsOf(const std::string& stage_name) {
  for (const StageTraits& t : kStages) {
    if (stage_name == t.name) return t;
  }
  return kUnspecified;
}

std::string StageName(v1::Stage stage) { return TraitsOf(stage).name; }

v1::Stage StageFromName(const std::string& name) { return TraitsOf(name).stage; }

bool IsTerminalStage(v1::Stage st) { return TraitsOf(st).terminal; }

bool IsFinishedStage(v1::Stage stage) { return TraitsOf(stage).finished; }

bool WaitsForUser(v1::Stage stage) {
  const StageTraits& t = TraitsOf(stage);
  return t.active && !t.leasing && !t.finished;
}

std::vector<std::string> StageNamesWhere(bool StageTraits::*pick) {
  std::vector<std::string> out;
  for (const StageTraits& t : kStages) {
    if (t.*pick) out.push_back(t.name);
  }
  return out;
}

}  // namespace infrarsi
