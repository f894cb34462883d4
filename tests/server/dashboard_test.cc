// The dashboard's boundary, over real HTTP against an in-process server:
// who gets in (tokens in a header, the login form's cookie), what each
// caller sees (a team its own sessions; another team's answer exactly as a
// missing one), TLS, and the headers that keep pages from loading anything
// else. The pages themselves: tests/core/web_test.cc; in a browser:
// tests/integration/dashboard_browser_test.cc.
#include "server/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/infrarsi_server.h"
#include "server/tokens.h"
#include "storage/sqlite_storage.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::server {
namespace {

constexpr char kSpec[] = R"(
name: NAME
workload: {model: toy-1b, global_batch: 8, seq_len: 1024}
hardware: {gpu: H200, count: 1}
knobs:
  mbs: [1, 2, 4]
baseline: {mbs: 1}
budget: {max_trials: 3}
executor:
  replay: {landscape: /data/land.jsonl}
)";

v1::InitRequest InitReq(const std::string& name) {
  v1::InitRequest r;
  std::string yaml = kSpec;
  yaml.replace(yaml.find("NAME"), 4, name);
  r.set_spec_yaml(yaml);
  v1::SpecFile* f = r.add_files();
  f->set_field("executor.replay.landscape");
  f->set_path("/data/land.jsonl");
  f->set_content("{\"meta\": {}}\n");
  return r;
}

std::string Pem(const std::string& name) {
  std::ifstream in(std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/certs/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("dashboard"); }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(1));
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Tokens first (the server reads them per call), then the server.
  std::string Token(const std::string& role, const std::string& team, const std::string& name) {
    storage::SqliteStorage::Options so;
    so.path = dir_ + "/db";
    auto db = storage::SqliteStorage::Create(so);
    EXPECT_TRUE(db.ok()) << db.status();
    auto t = CreateToken(db->get(), role, team, name);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : "";
  }
  void Start(InfraRsiServer::Options o = {}) {
    o.listen = "127.0.0.1:0";
    if (o.http_listen.empty()) o.http_listen = "127.0.0.1:0";
    o.db_path = dir_ + "/db";
    auto s = InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_GT(server_->http_port(), 0);
  }
  // A session of `team`, created as that team's submitter.
  std::string Session(const std::string& team, const std::string& name) {
    Principal p;
    p.token_id = "tok-" + team;
    p.role = Role::kSubmitter;
    p.team = team;
    auto s = server_->manager()->Init(InitReq(name), p);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->session_id() : "";
  }
  httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_follow_location(false);
    return c;
  }
  static httplib::Headers Bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }
  // The cookie a successful login sets ("infrarsi_token=..."), or "".
  std::string Login(const std::string& token, int* status = nullptr, std::string* set_cookie = nullptr) {
    auto res = Http().Post("/login", httplib::Params{{"token", token}});
    EXPECT_TRUE(res);
    if (!res) return "";
    if (status) *status = res->status;
    const std::string cookie = res->get_header_value("Set-Cookie");
    if (set_cookie) *set_cookie = cookie;
    if (res->status != 303) return "";
    return cookie.substr(0, cookie.find(';'));
  }

  std::string dir_;
  std::unique_ptr<InfraRsiServer> server_;
};

TEST_F(DashboardTest, AnOpenLoopbackServerShowsEverythingWithSafeHeaders) {
  Start();
  const std::string id = Session("", "first");
  auto list = Http().Get("/");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  EXPECT_NE(list->body.find(id), std::string::npos);
  EXPECT_NE(list->body.find("open server"), std::string::npos);
  // Nothing but this server, never cached, never framed.
  EXPECT_EQ(list->get_header_value("Content-Security-Policy").rfind("default-src 'none'; script-src 'self';", 0), 0u);
  EXPECT_EQ(list->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(list->get_header_value("X-Frame-Options"), "DENY");
  auto page = Http().Get("/sessions/" + id);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("id=\"content\" data-live=\"1\""), std::string::npos)
      << "an initialized session is live";
  auto part = Http().Get("/sessions/" + id + "/content");
  ASSERT_TRUE(part);
  EXPECT_EQ(part->body.rfind("<div id=\"content\"", 0), 0u) << part->body.substr(0, 200);
  // A live page polling a session that did not change reuses its report;
  // a change (an event) makes a new one.
  const int64_t built = server_->dashboard()->reports_built();
  ASSERT_EQ(Http().Get("/sessions/" + id + "/content")->status, 200);
  ASSERT_EQ(Http().Get("/sessions/" + id + "/report.json")->status, 200);
  EXPECT_EQ(server_->dashboard()->reports_built(), built);
  v1::RegisterAgentRequest reg;
  reg.set_host("h");
  reg.set_gpu_model("H200");
  reg.set_gpu_count(1);
  reg.add_executors("replay");
  ASSERT_TRUE(server_->manager()->RegisterAgent(reg).ok());
  v1::DoctorRequest doctor;
  doctor.set_session_id(id);
  doctor.set_repeats(2);
  ASSERT_TRUE(server_->manager()->Doctor(doctor).ok());
  auto after = Http().Get("/sessions/" + id + "/content");
  ASSERT_TRUE(after);
  EXPECT_EQ(server_->dashboard()->reports_built(), built + 1);
  EXPECT_NE(after->body.find("data-stage=\"doctoring\""), std::string::npos);
  auto json = Http().Get("/sessions/" + id + "/report.json");
  ASSERT_TRUE(json);
  EXPECT_EQ(json->get_header_value("Content-Type"), "application/json");
  EXPECT_NE(json->body.find("\"session_id\": \"" + id + "\""), std::string::npos);
  auto script = Http().Get("/static/dashboard.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_NE(script->body.find("sortTable"), std::string::npos);
  EXPECT_EQ(Http().Get("/sessions/ses-nope")->status, 404);
  EXPECT_EQ(Http().Get("/sessions/..%2f..%2fetc")->status, 404);
  EXPECT_EQ(Http().Get("/agents")->status, 200);
  EXPECT_EQ(Http().Get("/bank")->status, 200);
  auto bad = Http().Get("/bank?status=exploded");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("status"), std::string::npos) << "the error names the field";
}

TEST_F(DashboardTest, TokensInAHeaderOrTheLoginCookieWithTeamsAsTheApiHasThem) {
  const std::string alice = Token("submitter", "a", "alice");
  const std::string bob = Token("reader", "b", "bob");
  const std::string admin = Token("admin", "", "ops");
  const std::string agent = Token("agent", "", "node");
  Start();
  const std::string mine = Session("a", "team-a-job");
  const std::string theirs = Session("b", "team-b-job");

  // No token: a browser is sent to the login form; a bad bearer is 401.
  auto anon = Http().Get("/");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 303);
  EXPECT_EQ(anon->get_header_value("Location"), "/login");
  auto wrong = Http().Get("/", Bearer("not-a-token"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(Http().Get("/sessions/" + mine)->status, 303) << "a session page without a token";
  EXPECT_EQ(Http().Get("/sessions/" + mine + "/report.json")->status, 303);

  // A header token: a team sees its own sessions only; another team's
  // session answers as a missing one does.
  auto a_list = Http().Get("/", Bearer(alice));
  ASSERT_TRUE(a_list);
  EXPECT_EQ(a_list->status, 200);
  EXPECT_NE(a_list->body.find(mine), std::string::npos);
  EXPECT_EQ(a_list->body.find(theirs), std::string::npos) << "team a listed team b's session";
  auto a_theirs = Http().Get("/sessions/" + theirs, Bearer(alice));
  auto a_missing = Http().Get("/sessions/ses-000000000000", Bearer(alice));
  ASSERT_TRUE(a_theirs && a_missing);
  EXPECT_EQ(a_theirs->status, 404);
  EXPECT_EQ(a_missing->status, 404);
  EXPECT_EQ(a_theirs->body.find("team-b-job"), std::string::npos);
  EXPECT_EQ(Http().Get("/sessions/" + theirs + "/report.json", Bearer(alice))->status, 404);
  EXPECT_EQ(Http().Get("/sessions/" + theirs + "/content", Bearer(alice))->status, 404);
  auto admin_list = Http().Get("/", Bearer(admin));
  ASSERT_TRUE(admin_list);
  EXPECT_NE(admin_list->body.find(mine), std::string::npos);
  EXPECT_NE(admin_list->body.find(theirs), std::string::npos);

  // The login form: a bad token is refused saying why; an agent's token
  // cannot read; a good one sets an HttpOnly, SameSite=Strict cookie.
  int status = 0;
  std::string set_cookie;
  EXPECT_EQ(Login("not-a-token", &status), "");
  EXPECT_EQ(status, 401);
  EXPECT_EQ(Login("", &status), "");
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Login(agent, &status), "");
  EXPECT_EQ(status, 403);
  const std::string cookie = Login(bob, &status, &set_cookie);
  ASSERT_EQ(status, 303);
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos) << set_cookie;
  EXPECT_EQ(set_cookie.find("Secure"), std::string::npos) << "plain HTTP: a Secure cookie would not come back";
  auto b_list = Http().Get("/", {{"Cookie", cookie}});
  ASSERT_TRUE(b_list);
  EXPECT_EQ(b_list->status, 200);
  EXPECT_NE(b_list->body.find(theirs), std::string::npos);
  EXPECT_EQ(b_list->body.find(mine), std::string::npos);
  EXPECT_NE(b_list->body.find("team b"), std::string::npos) << "the navigation names the caller";
  // A login posted from another site's page is refused (login CSRF).
  auto forged = Http().Post("/login", {{"Origin", "http://evil.example"}}, httplib::Params{{"token", bob}});
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);
  EXPECT_EQ(forged->get_header_value("Set-Cookie"), "");

  // Revoking the token ends the login at the next page.
  {
    storage::SqliteStorage::Options so;
    so.path = dir_ + "/db";
    auto db = storage::SqliteStorage::Create(so);
    ASSERT_TRUE(db.ok());
    auto tokens = (*db)->ListTokens();
    ASSERT_TRUE(tokens.ok());
    for (const auto& t : *tokens) {
      if (t.name == "bob") {
        ASSERT_TRUE(RevokeToken(db->get(), t.id).ok());
      }
    }
  }
  auto revoked = Http().Get("/", {{"Cookie", cookie}});
  ASSERT_TRUE(revoked);
  EXPECT_EQ(revoked->status, 303);
  EXPECT_EQ(revoked->get_header_value("Location"), "/login?expired=1");
  EXPECT_NE(revoked->get_header_value("Set-Cookie").find("Max-Age=0"), std::string::npos);
  auto forged_out = Http().Post("/logout", {{"Origin", "https://evil.example"}}, "", "application/x-www-form-urlencoded");
  ASSERT_TRUE(forged_out);
  EXPECT_EQ(forged_out->status, 403);
  auto out = Http().Post("/logout", "", "application/x-www-form-urlencoded");
  ASSERT_TRUE(out);
  EXPECT_EQ(out->status, 303);
  EXPECT_NE(out->get_header_value("Set-Cookie").find("Max-Age=0"), std::string::npos);
}

TEST_F(DashboardTest, TlsWithTheServersCertificatesAndTheSameNetworkRules) {
  const std::string admin = Token("admin", "", "ops");
  InfraRsiServer::Options o;
  o.tls_cert_pem = Pem("server.pem");
  o.tls_key_pem = Pem("server.key");
  Start(o);
  httplib::SSLClient tls("localhost", server_->http_port());
  tls.set_ca_cert_path((std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/certs/ca.pem").c_str());
  tls.enable_server_certificate_verification(true);
  auto login = tls.Get("/login");
  ASSERT_TRUE(login) << httplib::to_string(login.error());
  EXPECT_EQ(login->status, 200);
  auto plain = Http().Get("/login");
  EXPECT_FALSE(plain && plain->status == 200) << "plain HTTP reached the TLS dashboard";
  auto posted = tls.Post("/login", httplib::Params{{"token", "wrong"}});
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 401);
  // Under TLS the cookie is Secure and host-only ("__Host-").
  auto in = tls.Post("/login", httplib::Params{{"token", admin}});
  ASSERT_TRUE(in);
  EXPECT_EQ(in->status, 303);
  const std::string set = in->get_header_value("Set-Cookie");
  EXPECT_EQ(set.rfind("__Host-infrarsi_token=" + admin + "; Path=/; HttpOnly; SameSite=Strict; Secure", 0), 0u) << set;
  auto page = tls.Get("/", {{"Cookie", set.substr(0, set.find(';'))}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  server_->Shutdown(absl::Seconds(1));
  server_.reset();

  // Off loopback: plaintext is refused, and an open server is refused even
  // with --insecure (every visitor would read every session).
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  InfraRsiServer::Options off;
  off.listen = "127.0.0.1:0";
  off.http_listen = "0.0.0.0:0";
  off.db_path = dir_ + "/db";
  auto refused = InfraRsiServer::Create(off);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("http_listen: refusing to serve the dashboard on 0.0.0.0 without TLS"),
            std::string::npos) << refused.status();
  off.insecure = true;
  auto open = InfraRsiServer::Create(off);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("http_listen: no API token exists"), std::string::npos) << open.status();
  off.http_listen = "127.0.0.1:99999";
  off.insecure = false;
  EXPECT_EQ(InfraRsiServer::Create(off).status().message(),
            "http_listen: expected HOST:PORT, got '127.0.0.1:99999'");
}

TEST(RequestTokenTest, HeaderFirstThenTheCookie) {
  EXPECT_EQ(RequestToken("Bearer abc", "infrarsi_token=def"), "abc");
  EXPECT_EQ(RequestToken("", "x=1; infrarsi_token=def; y=2"), "def");
  EXPECT_EQ(RequestToken("", "infrarsi_tokenx=def"), "");
  EXPECT_EQ(RequestToken("", "__Host-infrarsi_token=tls; infrarsi_token=plain"), "tls");
  EXPECT_EQ(RequestToken("Basic abc", ""), "");
  EXPECT_EQ(RequestToken("", ""), "");
}

}  // namespace
}  // namespace infrarsi::server
