// The LLM priors client against a local HTTP stand-in of an
// OpenAI-compatible endpoint (cpp-httplib's server on a free port).
#include "server/llm_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <string>
#include <thread>

#include "core/spec.h"

namespace infrarsi {
namespace {

class StandIn {
 public:
  StandIn() {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      last_body_ = req.body;
      last_auth_ = req.get_header_value("Authorization");
      res.status = status_;
      res.set_content(answer_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // bind_to_any_port already listens: connections queue until the loop runs.
  }
  ~StandIn() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  void Answer(int status, const std::string& body) {
    status_ = status;
    answer_ = body;
  }
  std::string last_body_, last_auth_;

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> status_{200};
  std::string answer_;
};

SessionSpec Spec() {
  SessionSpec s;
  s.name = "toy";
  s.model = "toy-1b";
  s.gpu = "H100";
  s.gpu_count = 8;
  s.knobs = {{"flash", {"false", "true"}}, {"mbs", {"1", "2", "4"}}};
  s.baseline = {{"flash", "false"}, {"mbs", "1"}};
  return s;
}

std::string Chat(const std::string& content) {
  return "{\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": " +
         JsonQuote(content) + "}}]}";
}

TEST(LlmPriorClientTest, AsksTheEndpointAndValidatesItsAnswer) {
  StandIn llm;
  LlmPriorClient::Options o;
  o.endpoint = llm.url();
  o.model = "tuner-7b";
  o.api_key = "sk-test";
  auto client = LlmPriorClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();

  llm.Answer(200, Chat(R"({"knobs": {"flash": {"true": {"time": -0.25, "time_sd": 0.1}}},
                          "per_doubling": {"mbs": {"time": -0.05, "time_sd": 0.1, "mem": 0.4, "mem_sd": 0.2}}})"));
  auto p = (*client)->Ask(Spec());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->EffectOf(Spec(), "flash", "true").time, -0.25, 1e-12);
  EXPECT_NEAR(p->EffectOf(Spec(), "mbs", "4").mem, 0.8, 1e-12);
  EXPECT_EQ(llm.last_auth_, "Bearer sk-test");
  EXPECT_NE(llm.last_body_.find("\"model\":\"tuner-7b\""), std::string::npos);

  // A knob the session does not have: refused whole.
  llm.Answer(200, Chat(R"({"knobs": {"tp": {"2": {"time": -0.1}}}})"));
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->Ask(Spec()).status()));
  // Prose instead of JSON.
  llm.Answer(200, Chat("I think flash attention helps."));
  EXPECT_TRUE(absl::IsInvalidArgument((*client)->Ask(Spec()).status()));
  // The endpoint failing.
  llm.Answer(503, "{}");
  const absl::Status down = (*client)->Ask(Spec()).status();
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  EXPECT_NE(down.message().find("HTTP 503"), std::string::npos);
}

// The endpoint is not trusted with the server's memory either: an answer
// larger than the cap is refused as it streams in, not after.
TEST(LlmPriorClientTest, AnOversizedAnswerIsRefused) {
  StandIn llm;
  LlmPriorClient::Options o;
  o.endpoint = llm.url();
  o.model = "m";
  auto client = LlmPriorClient::Create(o);
  ASSERT_TRUE(client.ok());
  llm.Answer(200, Chat(std::string(LlmPriorClient::kMaxAnswerBytes + 1, 'x')));
  const absl::Status st = (*client)->Post("{}").status();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find("larger than"), std::string::npos) << st;
  llm.Answer(200, Chat("small"));
  EXPECT_TRUE((*client)->Post("{}").ok());
}

TEST(LlmPriorClientTest, UnreachableAndBadOptions) {
  LlmPriorClient::Options o;
  o.endpoint = "http://127.0.0.1:1/v1";  // nothing listens on port 1
  o.model = "m";
  o.timeout = absl::Seconds(2);
  auto client = LlmPriorClient::Create(o);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(absl::IsUnavailable((*client)->Ask(Spec()).status()));

  o.endpoint = "ftp://host/v1";
  EXPECT_EQ(LlmPriorClient::Create(o).status().message(),
            "llm endpoint: expected an http:// or https:// URL, got 'ftp://host/v1'");
  o.endpoint = "http://host/v1";
  o.model = "";
  EXPECT_EQ(LlmPriorClient::Create(o).status().message(), "llm model: required");
}

}  // namespace
}  // namespace infrarsi
