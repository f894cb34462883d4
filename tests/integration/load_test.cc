// Load: 200 concurrent agents and 10 sessions against one server on
// loopback. Each agent is a thread with its own gRPC channel that leases,
// runs the trial on the simulator and completes it, timing every RPC. The
// test is bounded in time, prints RPC latency percentiles, and checks that
// no trial was lost or completed twice.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/rpc_client.h"
#include "client/agent/executors/sim_executor.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"
#include "server/infrarsi_server.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

constexpr int kAgents = 200;
constexpr int kSessions = 10;

// Latencies per RPC, in ms.
class Latencies {
 public:
  void Add(const std::string& rpc, double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    ms_[rpc].push_back(ms);
  }
  void Print() {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("%-16s %8s %8s %8s %8s %8s\n", "rpc", "calls", "p50 ms", "p90 ms", "p99 ms", "max ms");
    for (auto& [rpc, times] : ms_) {
      std::vector<double>& v = times;  // clang 14 cannot capture a structured binding
      std::sort(v.begin(), v.end());
      auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
      std::printf("%-16s %8zu %8.2f %8.2f %8.2f %8.2f\n", rpc.c_str(), v.size(), at(0.5), at(0.9),
                  at(0.99), v.back());
    }
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<double>> ms_;
};

template <typename F>
grpc::Status Timed(Latencies* lat, const std::string& rpc, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = call();
  lat->Add(rpc, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return st;
}

class StubSink : public client::ProgressSink {
 public:
  StubSink(v1::AgentService::Stub* stub, const v1::TrialAssignment& t, Latencies* lat)
      : stub_(stub), trial_(t), lat_(lat) {}
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    v1::ReportProgressRequest req;
    req.set_trial_id(trial_.trial_id());
    req.set_lease_token(trial_.lease_token());
    for (const auto& s : steps) *req.add_steps() = s;
    v1::ReportProgressResponse resp;
    grpc::ClientContext ctx;
    return Timed(lat_, "ReportProgress", [&] { return stub_->ReportProgress(&ctx, req, &resp); }).ok();
  }

 private:
  v1::AgentService::Stub* stub_;
  const v1::TrialAssignment& trial_;
  Latencies* lat_;
};

TEST(LoadTest, TwoHundredAgentsTenSessionsNothingLostOrDuplicated) {
  const std::string dir = testing::MakeTempDir("load");
  server::InfraRsiServer::Options so;
  so.listen = "127.0.0.1:0";
  so.db_path = dir + "/load.db";
  auto server = server::InfraRsiServer::Create(so);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());

  client::RpcClient::Options co;
  co.server = address;
  auto cli = client::RpcClient::Create(co);
  ASSERT_TRUE(cli.ok());
  const std::string workloads = std::string(INFRARSI_SOURCE_DIR) + "/deploy/workloads/";
  const std::vector<std::string> specs = {"dense-8b-1x8-h100.yaml", "moe-8x7b-16l-1x8-h100.yaml",
                                          "moe-8x7b-2x8-h200.yaml", "dense-70b-4x8-h100.yaml"};

  Latencies lat;
  std::atomic<bool> stop{false};
  std::mutex done_mu;
  std::multiset<int64_t> completed;  // trials whose completion the server accepted as new
  std::atomic<int> duplicates{0}, refused{0};
  auto agent = [&](int i) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    auto stub = v1::AgentService::NewStub(channel);
    v1::RegisterAgentRequest reg;
    reg.set_host(absl::StrCat("load-", i));
    reg.set_gpu_model(i % 4 == 0 ? "H200" : "H100");
    reg.set_gpu_count(i % 4 == 0 ? 16 : 32);
    reg.add_executors("sim");
    v1::RegisterAgentResponse rr;
    {
      grpc::ClientContext ctx;
      if (!Timed(&lat, "RegisterAgent", [&] { return stub->RegisterAgent(&ctx, reg, &rr); }).ok()) return;
    }
    client::SimExecutor sim;
    while (!stop) {
      v1::LeaseTrialRequest lr;
      lr.set_agent_id(rr.agent_id());
      lr.set_wait_ms(200);
      v1::LeaseTrialResponse lease;
      grpc::ClientContext ctx;
      if (!Timed(&lat, "LeaseTrial(poll)", [&] { return stub->LeaseTrial(&ctx, lr, &lease); }).ok()) continue;
      if (!lease.has_trial()) continue;
      StubSink sink(stub.get(), lease.trial(), &lat);
      auto out = sim.Run(lease.trial(), &sink);
      v1::CompleteTrialRequest c;
      c.set_trial_id(lease.trial().trial_id());
      c.set_lease_token(lease.trial().lease_token());
      if (out.ok()) {
        *c.mutable_outcome() = *out;
      } else {
        c.mutable_outcome()->set_status("failed");
      }
      v1::CompleteTrialResponse cr;
      grpc::ClientContext cctx;
      if (Timed(&lat, "CompleteTrial", [&] { return stub->CompleteTrial(&cctx, c, &cr); }).ok()) {
        if (cr.duplicate()) {
          ++duplicates;
        } else {
          std::lock_guard<std::mutex> lock(done_mu);
          completed.insert(c.trial_id());
        }
      } else {
        ++refused;
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> agents;
  for (int i = 0; i < kAgents; ++i) agents.emplace_back(agent, i);

  // Ten sessions, driven concurrently through doctor and run.
  std::vector<std::string> ids;
  for (int i = 0; i < kSessions; ++i) {
    auto s = (*cli)->InitFromFile(workloads + specs[static_cast<size_t>(i) % specs.size()]);
    ASSERT_TRUE(s.ok()) << s.status();
    ids.push_back(s->session_id());
  }
  std::vector<std::thread> drivers;
  std::atomic<int> finished{0};
  for (const std::string& id : ids) {
    drivers.emplace_back([&, id] {
      v1::DoctorRequest d;
      d.set_session_id(id);
      if (!(*cli)->Doctor(d).ok()) return;
      if (!(*cli)->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(120),
                              [](const v1::SessionEvent&) {}).ok()) {
        return;
      }
      v1::RunRequest r;
      r.set_session_id(id);
      r.set_max_trials(30);
      if (!(*cli)->Run(r).ok()) return;
      auto end = (*cli)->Watch(id, absl::Seconds(180), [](const v1::SessionEvent& ev) {
        const v1::Stage st = ev.session().stage();
        return st == v1::STAGE_RUNNING || st == v1::STAGE_VERIFYING;  // until it leaves
      });
      if (end.ok()) ++finished;
    });
  }
  for (auto& d : drivers) d.join();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (auto& a : agents) a.join();

  EXPECT_EQ(finished.load(), kSessions);
  // Every finished trial was completed exactly once, by exactly one agent.
  int trials = 0;
  std::set<int64_t> in_reports;
  for (const std::string& id : ids) {
    auto rep = (*cli)->Report(id);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->stage(), "searched") << id;
    for (const auto& t : rep->trials()) {
      ++trials;
      EXPECT_TRUE(in_reports.insert(t.id()).second) << "trial " << t.id() << " listed twice";
      EXPECT_NE(t.status(), "queued") << "trial " << t.id() << " lost";
      EXPECT_NE(t.status(), "leased") << "trial " << t.id() << " lost";
      EXPECT_EQ(t.attempts(), 1) << "trial " << t.id();
      EXPECT_EQ(completed.count(t.id()), 1u) << "trial " << t.id() << " completed "
                                            << completed.count(t.id()) << " times";
    }
  }
  EXPECT_EQ(completed.size(), in_reports.size());
  EXPECT_EQ(duplicates.load(), 0);
  EXPECT_EQ(refused.load(), 0);
  std::printf("%d agents, %d sessions, %d trials in %.1f s\n", kAgents, kSessions, trials, wall_s);
  lat.Print();
  (*server)->Shutdown();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace infrarsi
