#include "base/logs/json_logs.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "base/json.h"

namespace infrarsi {
namespace {

// %* in the pattern: the message as a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& m, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string q = JsonQuote(std::string(m.payload.data(), m.payload.size()));
    dest.append(q.data(), q.data() + q.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

}  // namespace

void UseJsonLogs() {
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  f->add_flag<JsonMessageFlag>('*').set_pattern(
      R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","thread":%t,"msg":%*})");
  spdlog::set_formatter(std::move(f));
}

}  // namespace infrarsi
