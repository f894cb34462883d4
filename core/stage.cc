#include "core/stage.h"

#include <utility>

namespace infrarsi {
namespace {

const std::pair<v1::Stage, const char*> kStageNames[] = {
    {v1::STAGE_INITIALIZED, "initialized"}, {v1::STAGE_DOCTORING, "doctoring"},
    {v1::STAGE_DOCTORED, "doctored"},       {v1::STAGE_RUNNING, "running"},
    {v1::STAGE_VERIFYING, "verifying"},
    {v1::STAGE_SEARCHED, "searched"},       {v1::STAGE_APPLIED, "applied"},
    {v1::STAGE_CANCELLED, "cancelled"},     {v1::STAGE_FAILED, "failed"},
};

}  // namespace

std::string StageName(v1::Stage stage) {
  for (const auto& [st, name] : kStageNames) {
    if (st == stage) return name;
  }
  return "unspecified";
}

v1::Stage StageFromName(const std::string& name) {
  for (const auto& [st, n] : kStageNames) {
    if (name == n) return st;
  }
  return v1::STAGE_UNSPECIFIED;
}

bool IsTerminalStage(v1::Stage st) {
  return st == v1::STAGE_APPLIED || st == v1::STAGE_CANCELLED || st == v1::STAGE_FAILED;
}

bool IsFinishedStage(v1::Stage stage) {
  return stage == v1::STAGE_SEARCHED || IsTerminalStage(stage);
}

}  // namespace infrarsi
