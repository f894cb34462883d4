// Status propagation macros. This Abseil ships none, so they are written once
// here and used by every folder (core, storage, server, client).
#ifndef INFRARSI_BASE_STATUS_MACROS_H_
#define INFRARSI_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define INFRARSI_CONCAT_INNER_(a, b) a##b
#define INFRARSI_CONCAT_(a, b) INFRARSI_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                               \
  do {                                                      \
    ::absl::Status infrarsi_status_ = (expr);               \
    if (!infrarsi_status_.ok()) return infrarsi_status_;    \
  } while (0)

// `ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr` (an absl::StatusOr<T>);
// on error returns its status, otherwise moves the value into `lhs`, which
// may be a declaration (`auto x`) or an existing lvalue.
#define ASSIGN_OR_RETURN(lhs, expr) \
  INFRARSI_ASSIGN_OR_RETURN_IMPL_(INFRARSI_CONCAT_(infrarsi_sor_, __LINE__), lhs, expr)

#define INFRARSI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#endif  // INFRARSI_BASE_STATUS_MACROS_H_
