// InfraRsiServer's own start-up and shutdown.
#include "server/infrarsi_server.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <grpcpp/impl/client_unary_call.h>
#include <httplib.h>

#include "client/rpc_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection_client.pb.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"
#include "server/tokens.h"
#include "storage/sqlite_storage.h"
#include "absl/strings/str_cat.h"
#include <unistd.h>
#include "tests/testing/subprocess.h"
#include "tests/testing/test_certs.h"

namespace infrarsi::server {
namespace {

TEST(InfraRsiServerTest, FailedStartReturnsTheErrorWithoutCrashing) {
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  o.priors_yaml = "knobs:\n  attn: {sdpa: {time: fast}}\n";
  auto s = InfraRsiServer::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "knobs.attn.sdpa.time: must be a number");
  o.priors_yaml = "";
  o.listen = "127.0.0.1:70000";
  EXPECT_EQ(InfraRsiServer::Create(o).status().message(),
            "listen: expected HOST:PORT, got '127.0.0.1:70000'");
  std::filesystem::remove_all(dir);
}

// Issue 32: a second server on the same database served a stale copy and
// wrote over the first's sessions; a second on the same port (another
// database even) was let bind it too, and the kernel split connections.
TEST(InfraRsiServerTest, OneServerPerDatabaseAndPerAddress) {
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  auto first = InfraRsiServer::Create(o);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = InfraRsiServer::Create(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_NE(second.status().message().find(
                absl::StrCat("is in use by another infrarsi-server (pid ", getpid(), ")")),
            std::string::npos)
      << second.status();
  // The same port, another database: refused, not shared.
  o.listen = absl::StrCat("127.0.0.1:", (*first)->port());
  o.db_path = dir + "/other.db";
  auto same_port = InfraRsiServer::Create(o);
  ASSERT_FALSE(same_port.ok());
  EXPECT_NE(same_port.status().message().find("cannot listen on " + o.listen), std::string::npos)
      << same_port.status();
  // Once the first is gone, its database is free again.
  first->reset();
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  EXPECT_TRUE(InfraRsiServer::Create(o).ok());
  std::filesystem::remove_all(dir);
}

TEST(InfraRsiServerTest, StartsOnAFreePortWithOrWithoutPriors) {
  const std::string dir = testing::MakeTempDir("server");
  for (const char* priors : {"", "knobs:\n  attn: {sdpa: {time: -0.3}}\n"}) {
    InfraRsiServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir + "/db";
    o.priors_yaml = priors;
    auto s = InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_GT((*s)->port(), 0);
    (*s)->Shutdown();
    (*s)->Shutdown();  // idempotent
  }
  std::filesystem::remove_all(dir);
}

// Issue 17: no gRPC health service, no reflection (probes and tools saw
// UNIMPLEMENTED), and a watch of a finished session never ended.
TEST(InfraRsiServerTest, HealthReflectionAndWatchesThatEnd) {
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  auto s = InfraRsiServer::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto channel = grpc::CreateChannel((*s)->address(), grpc::InsecureChannelCredentials());
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };

  auto health = grpc::health::v1::Health::NewStub(channel);
  auto check = [&](const std::string& service, grpc::health::v1::HealthCheckResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    return health->Check(&ctx, req, out);
  };
  for (const char* service : {"", "infrarsi.v1.SessionService", "infrarsi.v1.AgentService",
                              "infrarsi.v1.BankService"}) {
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status st = check(service, &resp);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckResponse unknown;
  EXPECT_EQ(check("no.such.Service", &unknown).error_code(), grpc::StatusCode::NOT_FOUND);

  {
    namespace refl = infrarsi::testing::reflection;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    const grpc::internal::RpcMethod method(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        grpc::internal::RpcMethod::BIDI_STREAMING, channel);
    std::unique_ptr<grpc::ClientReaderWriter<refl::ServerReflectionRequest,
                                             refl::ServerReflectionResponse>>
        stream(grpc::internal::ClientReaderWriterFactory<
               refl::ServerReflectionRequest, refl::ServerReflectionResponse>::Create(channel.get(),
                                                                                      method, &ctx));
    refl::ServerReflectionRequest req;
    req.set_list_services("*");
    ASSERT_TRUE(stream->Write(req));
    stream->WritesDone();
    refl::ServerReflectionResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    std::set<std::string> names;
    for (const auto& svc : resp.list_services_response().service()) names.insert(svc.name());
    EXPECT_TRUE(names.count("infrarsi.v1.SessionService")) << resp.ShortDebugString();
    EXPECT_TRUE(names.count("grpc.health.v1.Health")) << resp.ShortDebugString();
    while (stream->Read(&resp)) {}
    EXPECT_TRUE(stream->Finish().ok());
  }

  // A cancelled (finished) session: its watch sends a snapshot and ends,
  // from the start and from its last event alike.
  auto sessions = v1::SessionService::NewStub(channel);
  v1::InitRequest init;
  init.set_spec_yaml(
      "name: t\nworkload: {model: toy-1b, global_batch: 8, seq_len: 1024}\n"
      "hardware: {gpu: H200, count: 1}\nknobs: {mbs: [1, 2]}\nbaseline: {mbs: 1}\n"
      "budget: {max_trials: 4}\n"
      "executor:\n  process: {command: 'python3 train.py', workdir: /srv/job}\n");
  v1::SessionSummary created;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    const grpc::Status st = sessions->Init(&ctx, init, &created);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  v1::SessionSummary cancelled;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::CancelSessionRequest req;
    req.set_session_id(created.session_id());
    ASSERT_TRUE(sessions->CancelSession(&ctx, req, &cancelled).ok());
  }
  for (int64_t after : {int64_t{0}, cancelled.last_event_seq()}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    v1::WatchSessionRequest req;
    req.set_session_id(created.session_id());
    req.set_after_seq(after);
    auto reader = sessions->WatchSession(&ctx, req);
    v1::SessionEvent ev;
    int events = 0;
    while (reader->Read(&ev)) ++events;
    const grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << "after " << after << ": " << st.error_message()
                         << " (the stream of a finished session did not end)";
    if (after == 0) {
      EXPECT_EQ(events, 1);
    }
  }

  // Shutting down: a probe watching the health service sees NOT_SERVING
  // once the shutdown begins, while calls drain.
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(deadline());
  grpc::health::v1::HealthCheckRequest watch_req;
  auto watch = health->Watch(&watch_ctx, watch_req);
  grpc::health::v1::HealthCheckResponse seen;
  ASSERT_TRUE(watch->Read(&seen));
  EXPECT_EQ(seen.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread stopper([&] { (*s)->Shutdown(absl::Seconds(1)); });
  bool not_serving = false;
  while (watch->Read(&seen)) {
    if (seen.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING) {
      not_serving = true;
      break;
    }
  }
  watch_ctx.TryCancel();
  watch->Finish();
  stopper.join();
  EXPECT_TRUE(not_serving) << "the health watch never said NOT_SERVING during shutdown";
  std::filesystem::remove_all(dir);
}

// Issue 17: no metrics. GET /metrics on --metrics-listen serves
// Prometheus' text format: sessions by stage, trials by status, agents,
// leases expired, RPC counts and latency histograms by method, proposal
// latency, database size and bank rows; the counts move with the calls.
TEST(InfraRsiServerTest, MetricsEndpointServesPrometheusText) {
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  auto s = InfraRsiServer::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GT((*s)->metrics_port(), 0);
  auto channel = grpc::CreateChannel((*s)->address(), grpc::InsecureChannelCredentials());
  auto sessions = v1::SessionService::NewStub(channel);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id("ses-nope");
    v1::SessionSummary out;
    EXPECT_EQ(sessions->GetSession(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // A caller naming methods that do not exist must not grow the metrics
  // (each distinct method would be a new series).
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    const grpc::internal::RpcMethod bogus(absl::StrCat("/infrarsi.v1.Nope/M", i).c_str(),
                                          grpc::internal::RpcMethod::NORMAL_RPC, channel);
    v1::GetSessionRequest req;
    v1::SessionSummary out;
    EXPECT_EQ(grpc::internal::BlockingUnaryCall(channel.get(), bogus, &ctx, req, &out).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  httplib::Client http("127.0.0.1", (*s)->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res) << "no answer from the metrics endpoint";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res->body;
  for (const char* line :
       {"# TYPE infrarsi_sessions gauge\n", "# TYPE infrarsi_trials gauge\n",
        "infrarsi_trials_queued 0\n", "infrarsi_leases_expired_total 0\n",
        "infrarsi_agents{state=\"active\"} 0\n", "infrarsi_agents_live 0\n",
        "# TYPE infrarsi_proposal_duration_seconds histogram\n",
        "infrarsi_proposal_duration_seconds_count 0\n", "infrarsi_search_trials_read_total 0\n",
        "infrarsi_bank_rows 0\n",
        "infrarsi_rpc_requests_total{method=\"infrarsi.v1.SessionService/GetSession\",code=\"NOT_FOUND\"} 2\n",
        "infrarsi_rpc_duration_seconds_count{method=\"infrarsi.v1.SessionService/GetSession\"} 2\n",
        "infrarsi_rpc_duration_seconds_bucket{method=\"infrarsi.v1.SessionService/GetSession\",le=\"+Inf\"} 2\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  EXPECT_EQ(text.find("infrarsi_database_bytes{file=\"db\"} 0\n"), std::string::npos)
      << "the database's size is 0";
  EXPECT_EQ(text.find("infrarsi.v1.Nope"), std::string::npos) << text;
  EXPECT_NE(text.find("infrarsi_rpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 3\n"),
            std::string::npos) << text;
  EXPECT_EQ(http.Get("/nothing")->status, 404);
  InfraRsiServer::Options bad = o;
  bad.db_path = dir + "/db2";
  bad.metrics_listen = "127.0.0.1:99999";
  EXPECT_EQ(InfraRsiServer::Create(bad).status().message(),
            "--metrics-listen: expected HOST:PORT, got '127.0.0.1:99999'");
  (*s)->Shutdown(absl::Seconds(1));
  std::filesystem::remove_all(dir);
}

using ::infrarsi::testing::Pem;

TEST(InfraRsiServerTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  EXPECT_TRUE(ResolvesToLoopbackOnly("127.0.0.1"));
  EXPECT_TRUE(ResolvesToLoopbackOnly("localhost"));
  EXPECT_TRUE(ResolvesToLoopbackOnly("[::1]"));
  EXPECT_FALSE(ResolvesToLoopbackOnly("0.0.0.0"));
  EXPECT_FALSE(ResolvesToLoopbackOnly("[::]"));
  EXPECT_FALSE(ResolvesToLoopbackOnly("10.1.2.3"));
  EXPECT_FALSE(ResolvesToLoopbackOnly(""));
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "0.0.0.0:0";
  o.db_path = dir + "/db";
  auto refused = InfraRsiServer::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().substr(0, 46), "listen: refusing to serve 0.0.0.0 without TLS;")
      << refused.status();
  o.insecure = true;
  // Without a token every caller would be admin: never on a network.
  auto open = InfraRsiServer::Create(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(open.status())) << open.status();
  EXPECT_NE(open.status().message().find("no API token exists"), std::string::npos);
  {
    storage::SqliteStorage::Options so;
    so.path = o.db_path;
    auto db = storage::SqliteStorage::Create(so);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(CreateToken(db->get(), "admin", "", "ops").ok());
  }
  auto allowed = InfraRsiServer::Create(o);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  (*allowed)->Shutdown();
  o.insecure = false;
  o.tls_cert_pem = Pem("server.pem");
  EXPECT_EQ(InfraRsiServer::Create(o).status().message(), "tls_key: required with tls_cert");
  std::filesystem::remove_all(dir);
}

// What counts is the address the name resolves to, not how it is spelled:
// the host's own name resolves (through the hosts file) off loopback here.
TEST(InfraRsiServerTest, TheTlsRefusalJudgesTheResolvedAddress) {
  char name[256] = {0};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  if (ResolvesToLoopbackOnly(name)) {
    GTEST_SKIP() << "this host's name (" << name << ") resolves to loopback only";
  }
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = absl::StrCat(name, ":0");
  o.db_path = dir + "/db";
  auto refused = InfraRsiServer::Create(o);
  ASSERT_FALSE(refused.ok()) << "listened in plaintext on " << name;
  EXPECT_NE(refused.status().message().find("without TLS"), std::string::npos) << refused.status();
  std::filesystem::remove_all(dir);
}

TEST(InfraRsiServerTest, TlsAndMutualTls) {
  const std::string dir = testing::MakeTempDir("server");
  std::string token;
  auto reach = [&token](int port, const client::TlsOptions& tls) {
    client::RpcClient::Options co;
    co.token = token;
    co.server = "localhost:" + std::to_string(port);
    co.call_timeout = absl::Seconds(5);
    co.tls = tls;
    auto c = client::RpcClient::Create(co);
    return c.ok() ? (*c)->ListSessions().status() : c.status();
  };
  const client::TlsOptions plain;
  const client::TlsOptions server_only{Pem("ca.pem"), "", ""};
  const client::TlsOptions with_cert{Pem("ca.pem"), Pem("client.pem"), Pem("client.key")};
  {
    InfraRsiServer::Options o;
    o.listen = "0.0.0.0:0";  // TLS makes a non-loopback address acceptable
    o.db_path = dir + "/tls.db";
    {  // ... with tokens: off loopback the server is never open
      storage::SqliteStorage::Options so;
      so.path = o.db_path;
      auto db = storage::SqliteStorage::Create(so);
      ASSERT_TRUE(db.ok());
      auto t = CreateToken(db->get(), "admin", "", "ops");
      ASSERT_TRUE(t.ok());
      token = *t;
    }
    o.tls_cert_pem = Pem("server.pem");
    o.tls_key_pem = Pem("server.key");
    auto s = InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(reach((*s)->port(), server_only).ok());
    EXPECT_FALSE(reach((*s)->port(), plain).ok()) << "plaintext client reached a TLS server";
    (*s)->Shutdown();
  }
  {
    InfraRsiServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir + "/mtls.db";
    o.tls_cert_pem = Pem("server.pem");
    o.tls_key_pem = Pem("server.key");
    o.tls_client_ca_pem = Pem("ca.pem");
    auto s = InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(reach((*s)->port(), with_cert).ok());
    EXPECT_FALSE(reach((*s)->port(), server_only).ok()) << "a client without a certificate got in";
    (*s)->Shutdown();
  }
  std::filesystem::remove_all(dir);
}

TEST(TlsFilesTest, TheTokenFileWinsOverTheEnvironment) {
  const std::string dir = testing::MakeTempDir("creds");
  std::ofstream(dir + "/token") << "irt_from_file\n";
  ::setenv("INFRARSI_TOKEN", "irt_from_env", 1);
  EXPECT_EQ(client::ResolveCredentials("", "", "", "")->token, "irt_from_env");
  EXPECT_EQ(client::ResolveCredentials(dir + "/token", "", "", "")->token, "irt_from_file");
  ::unsetenv("INFRARSI_TOKEN");
  EXPECT_EQ(client::ResolveCredentials("/dev/zero", "", "", "").status().message().rfind(
                "--token-file: /dev/zero is not a regular file", 0),
            0u);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(client::ResolveCredentials("", "", "", "")->token, "");
  EXPECT_EQ(client::ResolveCredentials("", "/no/ca.pem", "", "").status().message(),
            "--tls-ca: cannot read /no/ca.pem");
}

TEST(TlsFilesTest, BadFlagsAreNamed) {
  EXPECT_EQ(client::LoadTlsFiles("/no/such.pem", "", "").status().message(),
            "--tls-ca: cannot read /no/such.pem");
  const std::string certs = std::string(INFRARSI_SOURCE_DIR) + "/tests/testing/certs/";
  EXPECT_EQ(client::LoadTlsFiles(certs + "ca.pem", certs + "client.pem", "").status().message(),
            "--tls-key: required with --tls-cert");
  auto ok = client::LoadTlsFiles(certs + "ca.pem", certs + "client.pem", certs + "client.key");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_NE(ok->ca_pem.find("BEGIN CERTIFICATE"), std::string::npos);
}

}  // namespace
}  // namespace infrarsi::server
