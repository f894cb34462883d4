// A session's stages by name, and what each means for the parts that only
// need to know that (the CLI, the watch stream's end).
#ifndef INFRARSI_CORE_STAGE_H_
#define INFRARSI_CORE_STAGE_H_

#include <string>

#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

// "initialized", "doctoring", ... for a Stage; "unspecified" otherwise.
std::string StageName(v1::Stage stage);
v1::Stage StageFromName(const std::string& name);
// Applied, cancelled or failed: the session is over.
bool IsTerminalStage(v1::Stage stage);
// Searched or terminal: nothing more happens by itself.
bool IsFinishedStage(v1::Stage stage);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_STAGE_H_
