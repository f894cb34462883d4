// The one place where absl::Status becomes grpc::Status.
#ifndef INFRARSI_SERVER_GRPC_STATUS_H_
#define INFRARSI_SERVER_GRPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace infrarsi::server {

// Same canonical code, same message.
inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_GRPC_STATUS_H_
