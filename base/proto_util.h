// Small conversions between plain values and the API's messages, written
// once for every folder that stores or shows them.
#ifndef INFRARSI_BASE_PROTO_UTIL_H_
#define INFRARSI_BASE_PROTO_UTIL_H_

#include <map>
#include <string>

#include "google/protobuf/map.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {

// A setting as an API map field.
inline void CopyConfig(const std::map<std::string, std::string>& c, google::protobuf::Map<std::string, std::string>* out) {
  for (const auto& [k, v] : c) (*out)[k] = v;
}

// A message as stored JSON (field names as in the proto).
inline std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// A message as users see it (`infrarsi report --json`, the dashboard's
// report.json): indented, every field present (defaults included), field
// names as in the proto.
inline std::string ToStableJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// Stored JSON back as a message; empty or unreadable JSON: an empty one.
template <typename T>
T FromJson(const std::string& json) {
  T m;
  if (!json.empty()) (void)google::protobuf::util::JsonStringToMessage(json, &m);
  return m;
}

}  // namespace infrarsi

#endif  // INFRARSI_BASE_PROTO_UTIL_H_
