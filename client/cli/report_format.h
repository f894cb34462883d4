// Human and JSON renderings of what the server returns.
#ifndef INFRARSI_CLIENT_CLI_REPORT_FORMAT_H_
#define INFRARSI_CLIENT_CLI_REPORT_FORMAT_H_

#include <string>

#include "google/protobuf/message.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::client {

// Stable JSON: snake_case field names as in the proto, every field present
// (defaults included), int64 as strings per the proto3 JSON mapping.
std::string ToJson(const google::protobuf::Message& m);

// "attn=sdpa,ckpt=false,..." (sorted by knob).
std::string FormatConfig(const google::protobuf::Map<std::string, std::string>& c);

std::string FormatReport(const v1::SessionReport& r);
std::string FormatSummary(const v1::SessionSummary& s);
std::string FormatBank(const v1::QueryExperienceResponse& r);
// `infrarsi agents`: one line per agent.
std::string FormatAgents(const v1::ListAgentsResponse& r);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_CLI_REPORT_FORMAT_H_
