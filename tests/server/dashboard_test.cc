// The dashboard's boundary, over real HTTP against an in-process server:
// who gets in (tokens in a header, the login form's cookie), what each
// caller sees (a team its own sessions; another team's answer exactly as a
// missing one), TLS, and the headers that keep pages from loading anything
// else. The pages themselves: tests/core/web_test.cc; in a browser:
// tests/integration/dashboard_browser_test.cc.
#include "server/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/rpc_client.h"
#include "base/clock.h"
#include "core/login_sessions.h"
#include "server/http_gate.h"
#include "server/infrarsi_server.h"
#include "server/tokens.h"
#include "storage/sqlite_storage.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_certs.h"

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

using ::infrarsi::testing::Pem;

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
  // The cookie a successful login sets ("infrarsi_session=..."), or "".
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
  // A trial's kept output: its own team reads it as text; another team's
  // request is answered as for a missing session.
  {
    storage::SqliteStorage::Options so;
    so.path = dir_ + "/db";
    auto db = storage::SqliteStorage::Create(so);
    ASSERT_TRUE(db.ok()) << db.status();
    storage::TrialRecord t;
    t.session_id = theirs;
    t.purpose = "doctor";
    t.status = "failed";
    t.config = "{}";
    auto trial = (*db)->InsertTrial(t);
    ASSERT_TRUE(trial.ok()) << trial.status();
    storage::TrialLogRecord log;
    log.trial_id = *trial;
    log.stream = "stderr";
    log.content = "Traceback: <script>alert(1)</script>\n";
    log.dropped_bytes = 7;
    ASSERT_TRUE((*db)->PutTrialLog(log).ok());
    const std::string path = absl::StrCat("/sessions/", theirs, "/trials/", *trial, "/stderr");
    auto as_b = Http().Get(path, Bearer(bob));
    ASSERT_TRUE(as_b);
    EXPECT_EQ(as_b->status, 200);
    EXPECT_EQ(as_b->get_header_value("Content-Type"), "text/plain; charset=utf-8");
    EXPECT_EQ(as_b->get_header_value("X-Content-Type-Options"), "nosniff");
    EXPECT_NE(as_b->body.find("[the first 7 bytes were not kept]"), std::string::npos) << as_b->body;
    EXPECT_NE(as_b->body.find("Traceback"), std::string::npos);
    auto as_a = Http().Get(path, Bearer(alice));
    ASSERT_TRUE(as_a);
    EXPECT_EQ(as_a->status, 404);
    EXPECT_EQ(as_a->body.find("Traceback"), std::string::npos);
    // Through the session it does not belong to, it is not found either.
    auto crossed = Http().Get(absl::StrCat("/sessions/", mine, "/trials/", *trial, "/stderr"), Bearer(alice));
    ASSERT_TRUE(crossed);
    EXPECT_EQ(crossed->status, 404);
  }
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
  // The cookie holds an opaque login session, never the token: any other
  // listener on this host name receives it (cookies ignore ports), and the
  // token would open the gRPC API to it.
  EXPECT_EQ(set_cookie.find(bob), std::string::npos) << set_cookie;
  EXPECT_EQ(cookie.rfind("infrarsi_session=", 0), 0u) << cookie;
  EXPECT_EQ(cookie.size(), std::string("infrarsi_session=").size() + 64) << cookie;
  EXPECT_NE(set_cookie.find("Max-Age=43200"), std::string::npos) << "it expires: " << set_cookie;
  // What a stolen cookie is worth elsewhere: not a token for the API.
  {
    client::RpcClient::Options co;
    co.server = absl::StrCat("127.0.0.1:", server_->port());
    co.token = cookie.substr(cookie.find('=') + 1);
    auto stolen = client::RpcClient::Create(co);
    ASSERT_TRUE(stolen.ok());
    EXPECT_FALSE((*stolen)->ListSessions(v1::ListSessionsRequest()).ok());
  }
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
  // Logout ends the session on the server: a copy of the cookie is
  // worthless after it.
  const std::string alice_cookie = Login(alice, &status);
  ASSERT_EQ(status, 303);
  ASSERT_EQ(Http().Get("/", {{"Cookie", alice_cookie}})->status, 200);
  ASSERT_EQ(Http().Post("/logout", {{"Cookie", alice_cookie}}, "", "application/x-www-form-urlencoded")->status, 303);
  auto after = Http().Get("/", {{"Cookie", alice_cookie}});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 303) << "the session outlived its logout";
  // A made-up session id opens nothing.
  EXPECT_EQ(Http().Get("/", {{"Cookie", "infrarsi_session=" + std::string(64, 'a')}})->status, 303);
}

// Dozens of clients that send their request a header line at a time (a
// line every 300 ms, no token needed) hold no worker: the pages answer
// beside them. Before, eight such sockets held cpp-httplib's whole pool
// and every page timed out for as long as they kept sending.
TEST_F(DashboardTest, SlowClientsDoNotStarveThePages) {
  Start();
  const std::string id = Session("", "busy");
  std::atomic<bool> done{false};
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    const char head[] = "GET / HTTP/1.1\r\nHost: x\r\n";
    ASSERT_GT(send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL), 0);
    slow.push_back(fd);
  }
  // They trickle a header line each until the test is done (at most 20 s,
  // longer than the page's own timeout below).
  std::thread trickle([&] {
    for (int k = 0; k < 66 && !done; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int fd : slow) (void)send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
    }
  });
  httplib::Client c("127.0.0.1", server_->http_port());
  c.set_read_timeout(8, 0);
  c.set_connection_timeout(8, 0);
  int answered = 0;
  for (int i = 0; i < 10; ++i) {
    auto page = c.Get(i % 2 == 0 ? "/" : "/sessions/" + id);
    if (page && page->status == 200) ++answered;
  }
  done = true;
  trickle.join();
  for (int fd : slow) close(fd);
  EXPECT_EQ(answered, 10) << "the pages starved beside slow clients";
  EXPECT_EQ(server_->dashboard()->refused_connections(), 0);
}

// Connections past the gate's cap (all clients together) are refused at
// once, never queued: each would hold one of the server's descriptors (the
// gRPC port shares them) and a request's bytes.
TEST(HttpGateTest, ConnectionsPastTheCapAreRefusedAtOnce) {
  auto routes = HttpGate::NewRoutes();
  routes->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  auto bound = HttpGate::Listen("127.0.0.1", 0);
  ASSERT_TRUE(bound.ok()) << bound.status();
  HttpGate::Options o;
  o.max_open = 3;
  auto gate = HttpGate::Start(o, routes.get(), bound->first, nullptr);
  ASSERT_TRUE(gate.ok()) << gate.status();
  auto connect_idle = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(bound->second));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  };
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(connect_idle());
  // The fourth is answered 503 and closed, not left waiting.
  const int extra = connect_idle();
  char buf[64] = {0};
  timeval tv{10, 0};
  setsockopt(extra, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const ssize_t n = recv(extra, buf, sizeof(buf) - 1, 0);
  EXPECT_GT(n, 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 503", 0), 0u) << buf;
  close(extra);
  EXPECT_GE((*gate)->refused(), 1);
  // One idle connection gone: a page is served again.
  close(idle.back());
  idle.pop_back();
  httplib::Client c("127.0.0.1", bound->second);
  c.set_read_timeout(8, 0);
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    auto page = c.Get("/");
    served = page && page->status == 200 && page->body == "ok";
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(served);
  for (int fd : idle) close(fd);
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
  EXPECT_EQ(set.rfind("__Host-infrarsi_session=", 0), 0u) << set;
  EXPECT_NE(set.find("; Path=/; HttpOnly; SameSite=Strict; Secure; Max-Age="), std::string::npos) << set;
  EXPECT_EQ(set.find(admin), std::string::npos) << "the token is in the cookie: " << set;
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

TEST(RequestCredentialTest, HeaderFirstThenTheSessionCookie) {
  EXPECT_EQ(CredentialOf("Bearer abc", "infrarsi_session=def").bearer, "abc");
  EXPECT_EQ(CredentialOf("Bearer abc", "infrarsi_session=def").session, "");
  EXPECT_EQ(CredentialOf("", "x=1; infrarsi_session=def; y=2").session, "def");
  EXPECT_EQ(CredentialOf("", "infrarsi_sessionx=def").session, "");
  EXPECT_EQ(CredentialOf("", "__Host-infrarsi_session=tls; infrarsi_session=plain").session, "tls");
  // The old cookie, holding a token, is no credential at all.
  EXPECT_EQ(CredentialOf("", "infrarsi_token=irt_abc").session, "");
  EXPECT_EQ(CredentialOf("Basic abc", "").bearer, "");
  EXPECT_EQ(CredentialOf("", "").session, "");
}

// Logins expire, end at logout, and are capped: the oldest goes first.
TEST(LoginSessionsTest, OpaqueExpiringAndBounded) {
  FakeClock clock;
  LoginSessions::Options o;
  o.clock = &clock;
  o.lifetime = absl::Hours(1);
  o.max_sessions = 2;
  auto logins = LoginSessions::Create(o);
  const std::string a = logins->Start("irt_a");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find("irt_a"), std::string::npos);
  EXPECT_EQ(logins->TokenOf(a), "irt_a");
  clock.Advance(absl::Minutes(59));
  EXPECT_EQ(logins->TokenOf(a), "irt_a");
  clock.Advance(absl::Minutes(1));
  EXPECT_EQ(logins->TokenOf(a), "") << "expired";
  const std::string b = logins->Start("irt_b");
  clock.Advance(absl::Seconds(1));
  const std::string c = logins->Start("irt_c");
  clock.Advance(absl::Seconds(1));
  const std::string d = logins->Start("irt_d");  // past the cap: b goes
  EXPECT_EQ(logins->size(), 2u);
  EXPECT_EQ(logins->TokenOf(b), "");
  EXPECT_EQ(logins->TokenOf(c), "irt_c");
  logins->End(c);
  EXPECT_EQ(logins->TokenOf(c), "");
  EXPECT_EQ(logins->TokenOf(d), "irt_d");
  EXPECT_EQ(logins->TokenOf(""), "");
}

}  // namespace
}  // namespace infrarsi::server
