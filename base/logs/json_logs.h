// The daemons' --log-format json (infrarsi-server, infrarsi-agent): one
// JSON object per line, for log shippers. Binaries only: core returns
// status and never logs.
#ifndef INFRARSI_BASE_LOGS_JSON_LOGS_H_
#define INFRARSI_BASE_LOGS_JSON_LOGS_H_

namespace infrarsi {

// Sets spdlog's default formatter (every logger created after, and the
// default one) to {"ts":..., "level":..., "logger":..., "thread":...,
// "msg":...}: ts in UTC with milliseconds, the message escaped as a JSON
// string. Call from main before any line is logged (a line logged earlier
// is plain text). Not thread-safe against concurrent logging setup.
void UseJsonLogs();

}  // namespace infrarsi

#endif  // INFRARSI_BASE_LOGS_JSON_LOGS_H_
