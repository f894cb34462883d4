// A session's stages: their names, and one table of what each stage means
// for the parts that only need to know that (the lease queue, memory, the
// restart, retention, the CLI, the watch stream's end). A new stage is one
// row of that table (stage.cc) plus its transitions in the session manager.
#ifndef INFRARSI_CORE_STAGE_H_
#define INFRARSI_CORE_STAGE_H_

#include <string>
#include <vector>

#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

// What a restarted server does for a session found in a stage.
enum class StageResume {
  kNone,          // nothing: it waits for its team's next command, or is over
  kDoctor,        // the doctor's verdict, if its runs finished meanwhile
  kSearch,        // the search starts again from its inputs and history
  kVerification,  // the verification's verdict, if its runs finished meanwhile
};

struct StageTraits {
  v1::Stage stage = v1::STAGE_UNSPECIFIED;
  const char* name = "unspecified";
  // Its queued trials may be leased.
  bool leasing = false;
  // It stays in memory (it may move on by itself, or waits for its team).
  bool active = false;
  // Searched or over: nothing more happens by itself (watch streams end).
  bool finished = false;
  // Over for good: applied, cancelled, failed.
  bool terminal = false;
  // The purpose of the trials this stage waits for ("" for none).
  const char* awaits_purpose = "";
  StageResume resume = StageResume::kNone;
};

// The row for `stage`; the "unspecified" row (all false) for an unknown one.
const StageTraits& TraitsOf(v1::Stage stage);
const StageTraits& TraitsOf(const std::string& stage_name);

// "initialized", "doctoring", ... for a Stage; "unspecified" otherwise.
std::string StageName(v1::Stage stage);
v1::Stage StageFromName(const std::string& name);
// Applied, cancelled or failed: the session is over.
bool IsTerminalStage(v1::Stage stage);
// Searched or terminal: nothing more happens by itself.
bool IsFinishedStage(v1::Stage stage);
// Initialized or doctored: nothing happens until the team runs the next
// stage (doctor, run).
bool WaitsForUser(v1::Stage stage);
// The names of the stages whose traits `pick` selects, in stage order.
std::vector<std::string> StageNamesWhere(bool StageTraits::*pick);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_STAGE_H_
