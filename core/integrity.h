// The report's account of which integrity checks a session's verdict rests
// on: each says whether it ran, on what, or why it could not. Pure.
#ifndef INFRARSI_CORE_INTEGRITY_H_
#define INFRARSI_CORE_INTEGRITY_H_

#include <vector>

#include "core/spec.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

std::vector<v1::IntegrityCheck> DescribeIntegrityChecks(const SessionSpec& spec,
                                                        const v1::DoctorReport& doctor,
                                                        const v1::Verification& verification);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_INTEGRITY_H_
