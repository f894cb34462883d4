// JSON string literals, written once for every folder (the spec's JSON,
// the reports, the daemons' JSON logs).
#ifndef INFRARSI_BASE_JSON_H_
#define INFRARSI_BASE_JSON_H_

#include <string>

namespace infrarsi {

// A JSON string literal, quotes included: `"`, `\` and control characters
// escaped; other bytes (UTF-8 included) pass through. Thread-safe.
std::string JsonQuote(const std::string& s);

}  // namespace infrarsi

#endif  // INFRARSI_BASE_JSON_H_
