// The doctor's verdict: once every baseline run of a session finished, what
// its runs say (a doctor report, or why the session fails). A pure function
// over records the session manager read beforehand, so it is tested on
// hand-built records without storage.
#ifndef INFRARSI_CORE_DOCTOR_VERDICT_H_
#define INFRARSI_CORE_DOCTOR_VERDICT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"
#include "storage/storage.h"

namespace infrarsi {

// The doctor runs among `trials` whose steps the verdict reads (those that
// finished ok); empty, with *done false, while any doctor run is in flight.
std::vector<int64_t> DoctorRunsToRead(const std::vector<storage::TrialRecord>& trials,
                                      bool* done);

struct DoctorVerdict {
  bool done = false;     // every doctor run finished: a verdict was made
  std::string failure;   // non-empty: the session fails, saying this
  v1::DoctorReport report;  // the verdict when it did not fail
};
// The doctor stops early when its first two finished baseline runs failed
// the same way (the same status and error, numbers aside: trial ids and
// paths differ) and none succeeded: a missing data file or a bad flag will
// fail every repeat, and each costs a launch. What to add to the verdict
// (JudgeDoctor's, over the runs with the rest cancelled, which quotes the
// whole error): which runs, and how many were not run; "" when the runs do
// not (yet) say so.
std::string RepeatedDoctorFailure(const std::vector<storage::TrialRecord>& trials);

// `steps`: each ok doctor run's per-step records (DoctorRunsToRead's ids).
// Fails the session when the baseline breaks the contract or lacks the
// metrics it needs, when no run succeeded, or when honest repeats disagree
// on the loss beyond the tolerance; warns (in the report) of lost runs and
// drift.
DoctorVerdict JudgeDoctor(const SessionSpec& spec, const std::vector<storage::TrialRecord>& trials,
                          const std::map<int64_t, std::vector<storage::StepRecord>>& steps);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_DOCTOR_VERDICT_H_
