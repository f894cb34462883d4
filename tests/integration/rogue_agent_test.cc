// A rogue agent, through the gRPC API: a real server on port 0, and an
// AgentService client that sends whatever numbers it likes. The server
// must check every number, refuse what is impossible naming the field, and
// never promote a verdict that cannot be true.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "client/cli/report_format.h"
#include "client/rpc_client.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"
#include "server/infrarsi_server.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

namespace fs = std::filesystem;

// A process session (the agent's clock is required) over a one-knob space.
std::string Spec(int max_trials, int doctor, int candidates, int runs,
                 const std::string& workload = "model: m, global_batch: 8, seq_len: 128") {
  return absl::StrCat(R"(
name: rogue
workload: {)", workload, R"(}
hardware: {gpu: H200, count: 1}
knobs:
  mode: [base, a, b]
baseline: {mode: base}
budget: {max_trials: )", max_trials, ", min_trials: ", max_trials, R"(}
doctor: {repeats: )", doctor, R"(}
verify: {candidates: )", candidates, ", runs: ", runs, R"(}
executor:
  process: {command: "python3 train.py --mode {mode}", workdir: /tmp}
)");
}

class RogueAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("rogue");
    server::InfraRsiServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir_ + "/db";
    auto s = server::InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    agents_ = v1::AgentService::NewStub(channel);
    client::RpcClient::Options co;
    co.server = server_->address();
    client_ = *client::RpcClient::Create(co);
    v1::RegisterAgentRequest r;
    r.set_host("rogue");
    r.set_gpu_model("H200");
    r.set_gpu_count(1);
    r.set_memory_per_gpu_gib(141);
    r.add_executors("process");
    v1::RegisterAgentResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(agents_->RegisterAgent(&ctx, r, &resp).ok());
    agent_id_ = resp.agent_id();
  }
  void TearDown() override {
    server_->Shutdown();
    fs::remove_all(dir_);
  }

  std::string Create(const std::string& yaml) {
    v1::InitRequest r;
    r.set_spec_yaml(yaml);
    r.set_spec_dir("/tmp");
    auto s = client_->Init(r);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->session_id() : "";
  }

  std::optional<v1::TrialAssignment> Lease() {
    v1::LeaseTrialRequest r;
    r.set_agent_id(agent_id_);
    r.set_wait_ms(2000);
    v1::LeaseTrialResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(agents_->LeaseTrial(&ctx, r, &resp).ok());
    if (!resp.has_trial()) return std::nullopt;
    return resp.trial();
  }

  // Starts the doctor of session `id` and leases its first trial.
  std::optional<v1::TrialAssignment> DoctorAndLease(const std::string& id) {
    v1::DoctorRequest d;
    d.set_session_id(id);
    EXPECT_TRUE(client_->Doctor(d).ok());
    return Lease();
  }

  absl::Status Complete(const v1::TrialAssignment& t, const v1::TrialOutcome& o) {
    v1::CompleteTrialRequest r;
    r.set_trial_id(t.trial_id());
    r.set_lease_token(t.lease_token());
    *r.mutable_outcome() = o;
    v1::CompleteTrialResponse resp;
    grpc::ClientContext ctx;
    return client::FromGrpcStatus(agents_->CompleteTrial(&ctx, r, &resp));
  }

  absl::Status Progress(const v1::TrialAssignment& t, const std::vector<v1::StepMetrics>& steps) {
    v1::ReportProgressRequest r;
    r.set_trial_id(t.trial_id());
    r.set_lease_token(t.lease_token());
    for (const auto& s : steps) *r.add_steps() = s;
    v1::ReportProgressResponse resp;
    grpc::ClientContext ctx;
    return client::FromGrpcStatus(agents_->ReportProgress(&ctx, r, &resp));
  }

  // An outcome whose every number is plausible: one warm-up step, then
  // `times` as the timed steps, on an agent's clock that agrees with them.
  static v1::TrialOutcome Plausible(const std::vector<double>& times, int64_t tokens = 1024) {
    v1::TrialOutcome o;
    o.set_status("ok");
    o.set_clock("agent");
    o.set_poll_interval_s(0.001);
    double at = 0.1;  // start-up
    for (size_t i = 0; i <= times.size(); ++i) {
      v1::StepMetrics* m = o.add_steps();
      const double took = i == 0 ? 2 * times[0] : times[i - 1];
      at += took;
      m->set_step(static_cast<int64_t>(i));
      m->set_loss(5.0 - 0.01 * static_cast<double>(i));
      m->set_tokens(tokens);
      m->set_step_time_s(took);
      m->set_peak_mem_gib(20);
      m->set_warmup(i == 0);
      m->set_arrival_s(at);
      m->set_arrival_error_s(0.001);
    }
    o.set_wall_s(at + 0.05);
    o.set_peak_mem_gib(20);
    return o;
  }

  // Runs every trial the session queues with `outcome_for` until the
  // session leaves `stage`.
  void Serve(const std::string& id, v1::Stage stage,
             const std::function<v1::TrialOutcome(const v1::TrialAssignment&)>& outcome_for) {
    for (int i = 0; i < 200; ++i) {
      auto s = client_->GetSession(id);
      ASSERT_TRUE(s.ok());
      if (s->stage() != stage && !(stage == v1::STAGE_RUNNING && s->stage() == v1::STAGE_VERIFYING)) {
        return;
      }
      auto t = Lease();
      if (!t) continue;
      const absl::Status done = Complete(*t, outcome_for(*t));
      ASSERT_TRUE(done.ok()) << done;
    }
    FAIL() << "session " << id << " never left its stage";
  }

  // Doctor then run, every trial answered with `outcome_for`.
  void DoctorAndRun(const std::string& id,
                    const std::function<v1::TrialOutcome(const v1::TrialAssignment&)>& outcome_for) {
    v1::DoctorRequest d;
    d.set_session_id(id);
    ASSERT_TRUE(client_->Doctor(d).ok());
    Serve(id, v1::STAGE_DOCTORING, outcome_for);
    v1::RunRequest r;
    r.set_session_id(id);
    ASSERT_TRUE(client_->Run(r).ok());
    Serve(id, v1::STAGE_RUNNING, outcome_for);
  }

  std::string dir_;
  std::unique_ptr<server::InfraRsiServer> server_;
  std::unique_ptr<v1::AgentService::Stub> agents_;
  std::unique_ptr<client::RpcClient> client_;
  std::string agent_id_;
};

TEST_F(RogueAgentTest, ImpossibleNumbersAreRefusedNamingTheFieldAndNothingIsStored) {
  const std::string id = Create(Spec(2, 1, 1, 2));
  auto t = DoctorAndLease(id);
  ASSERT_TRUE(t.has_value());
  const v1::TrialOutcome good = Plausible({0.05, 0.05, 0.05});
  struct Case {
    std::string name, field;
    std::function<void(v1::TrialOutcome&)> edit;
  };
  const std::vector<Case> cases = {
      {"NaN step time", "steps[1].step_time_s",
       [](v1::TrialOutcome& o) { o.mutable_steps(1)->set_step_time_s(std::nan("")); }},
      {"negative step time", "steps[1].step_time_s",
       [](v1::TrialOutcome& o) { o.mutable_steps(1)->set_step_time_s(-1); }},
      {"zero step time", "steps[2].step_time_s",
       [](v1::TrialOutcome& o) { o.mutable_steps(2)->set_step_time_s(0); }},
      {"denormal step time", "steps[3].step_time_s",
       [](v1::TrialOutcome& o) { o.mutable_steps(3)->set_step_time_s(1e-300); }},
      {"huge step time", "steps[3].step_time_s",
       [](v1::TrialOutcome& o) { o.mutable_steps(3)->set_step_time_s(1e300); }},
      {"NaN peak memory", "outcome.peak_mem_gib",
       [](v1::TrialOutcome& o) { o.set_peak_mem_gib(std::nan("")); }},
      {"peak memory beyond the device", "steps[1].peak_mem_gib",
       [](v1::TrialOutcome& o) { o.mutable_steps(1)->set_peak_mem_gib(1e6); }},
      {"huge loss", "steps[2].loss",
       [](v1::TrialOutcome& o) { o.mutable_steps(2)->set_loss(1e300); }},
      {"negative tokens", "steps[1].tokens",
       [](v1::TrialOutcome& o) { o.mutable_steps(1)->set_tokens(-1024); }},
      {"duplicated step", "steps[2].step",
       [](v1::TrialOutcome& o) { o.mutable_steps(2)->set_step(1); }},
      {"reordered steps", "steps[2].step",
       [](v1::TrialOutcome& o) {
         o.mutable_steps(1)->set_step(2);
         o.mutable_steps(2)->set_step(1);
       }},
  };
  for (const Case& c : cases) {
    v1::TrialOutcome bad = good;
    c.edit(bad);
    const absl::Status st = Complete(*t, bad);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << c.name << ": " << st;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << c.name << ": " << st;
  }
  // A million steps: refused long before, naming the cap.
  std::vector<v1::StepMetrics> chunk;
  absl::Status flood = absl::OkStatus();
  for (int64_t base = 0; base < 1000000 && flood.ok(); base += 50000) {
    chunk.clear();
    for (int64_t k = base; k < base + 50000; ++k) {
      v1::StepMetrics m = good.steps(1);
      m.set_step(k);
      m.set_warmup(false);
      chunk.push_back(m);
    }
    flood = Progress(*t, chunk);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(flood)) << flood;
  EXPECT_NE(flood.message().find("steps"), std::string::npos) << flood;
  // Nothing of it was stored: the trial is still the agent's to finish, and
  // the bank holds nothing.
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->trials_size(), 1);
  EXPECT_EQ(rep->trials(0).status(), "leased");
  v1::QueryExperienceRequest q;
  EXPECT_EQ(client_->QueryExperience(q)->entries_size(), 0);
}

// The device's capacity bounds what a trial may report; for a GPU the
// catalog knows, an agent cannot raise it by registering more memory.
TEST_F(RogueAgentTest, AnAgentCannotRaiseTheCatalogsCapacityByRegisteringIt) {
  // The agent registers again, now claiming a million GiB per GPU.
  v1::RegisterAgentRequest r;
  r.set_agent_id(agent_id_);
  r.set_host("rogue");
  r.set_gpu_model("H200");
  r.set_gpu_count(1);
  r.set_memory_per_gpu_gib(1e6);
  r.add_executors("process");
  v1::RegisterAgentResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(agents_->RegisterAgent(&ctx, r, &resp).ok());
  ASSERT_EQ(resp.agent_id(), agent_id_);
  const std::string id = Create(Spec(2, 1, 1, 2));
  auto t = DoctorAndLease(id);
  ASSERT_TRUE(t.has_value());
  v1::TrialOutcome o = Plausible({0.05, 0.05, 0.05});
  o.mutable_steps(1)->set_peak_mem_gib(5000);
  const absl::Status st = Complete(*t, o);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("steps[1].peak_mem_gib"), std::string::npos) << st;
}

// The forged verdict: a baseline whose runs agree to the last digit (a
// noise floor of 0), and a 20x candidate whose A/B pairs agree to the
// last digit too. Today it is promoted at 20.000x [20.000, 20.000].
TEST_F(RogueAgentTest, ForgedQuietBaselineAndTwentyfoldCandidateAreNotPromoted) {
  const std::string id = Create(Spec(2, 3, 2, 2));
  auto forged = [](const v1::TrialAssignment& t) {
    const std::string mode = t.config().at("mode");
    const double s = mode == "base" ? 0.1 : mode == "a" ? 0.005 : 0.2;
    return Plausible({s, s, s});
  };
  DoctorAndRun(id, forged);
  auto s = client_->GetSession(id);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->promoted()) << s->best_speedup();
  // Its headline says nothing was promoted, and why, before any figure
  // (it showed "best 0.0050s (20.00x)").
  EXPECT_FALSE(s->not_promoted().empty());
  const std::string line = client::FormatSummary(*s);
  EXPECT_NE(line.find("nothing promoted: "), std::string::npos) << line;
  EXPECT_EQ(line.find(" best "), std::string::npos) << line;
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  const std::string text = client::FormatReport(*rep);
  ASSERT_NE(text.find("Nothing promoted: "), std::string::npos) << text;
  EXPECT_LT(text.find("Nothing promoted: "), text.find("Fastest search trial (not promoted"));
  EXPECT_EQ(text.find("Best:"), std::string::npos) << text;
  EXPECT_NE(rep->doctor().warning().find("last digit"), std::string::npos)
      << rep->doctor().warning();
  EXPECT_GT(rep->doctor().noise_floor(), 0.0);
}

// Noisy, honest-looking baseline runs, but a candidate whose every A/B run
// reports the same number: not promoted, and its trials leave the bank's
// results.
TEST_F(RogueAgentTest, CandidateRunsThatAgreeToTheLastDigitAreImplausible) {
  const std::string id = Create(Spec(2, 3, 1, 3));
  int n = 0;
  auto outcome = [&n](const v1::TrialAssignment& t) {
    const std::string mode = t.config().at("mode");
    const double jitter = 1.0 + 0.003 * ((n++ % 7) - 3);
    if (mode == "a") return Plausible({0.02, 0.02, 0.02});  // the same, every run
    return Plausible({0.1 * jitter, 0.1 * jitter * 1.002, 0.1 * jitter * 0.998});
  };
  DoctorAndRun(id, outcome);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  EXPECT_FALSE(rep->doctor().suspicious());
  ASSERT_EQ(rep->verification().candidates_size(), 1);
  const auto& c = rep->verification().candidates(0);
  EXPECT_EQ(c.config().at("mode"), "a");
  EXPECT_FALSE(c.cleared());
  EXPECT_NE(c.reason().find("agree to the last digit"), std::string::npos) << c.reason();
  EXPECT_EQ(rep->verification().promoted_rank(), 0);
  for (const auto& t : rep->trials()) {
    if (t.config().at("mode") != "a") continue;
    EXPECT_EQ(t.status(), "violation") << t.purpose() << " " << t.tag();
    EXPECT_EQ(t.violation(), "implausible");
  }
  v1::QueryExperienceRequest q;
  q.set_status("ok");
  q.set_page_size(1000);
  auto bank = client_->QueryExperience(q);
  ASSERT_TRUE(bank.ok()) << bank.status();
  for (const auto& e : bank->entries()) {
    EXPECT_NE(e.config().at("mode"), "a") << "an implausible result stayed in the bank";
  }
}

// An honest 2x candidate whose every run's end its agent read late (as a
// Slurm agent reads the controller's word): its whole runs keep almost
// none of the 0.15 s it saves per run in the timed window, less than half. Said with each
// run's resolution, the server calls it unconfirmed; said without, the
// same numbers are what moved work looks like, and its trials become
// violations (what CI saw happen to an honest Slurm candidate).
TEST_F(RogueAgentTest, WholeRunsReadLateAreJudgedByTheResolutionTheirAgentStates) {
  for (const double resolution : {0.3, 0.0}) {
    SCOPED_TRACE(absl::StrCat("resolution ", resolution));
    const std::string id = Create(Spec(2, 3, 1, 3));
    int n = 0;
    auto outcome = [&](const v1::TrialAssignment& t) {
      const std::string mode = t.config().at("mode");
      const bool doctor = n < 3;  // the doctor's three baseline runs come first
      const double jitter = 1.0 + 0.003 * ((n++ % 7) - 3);
      const double s = (mode == "a" ? 0.05 : mode == "b" ? 0.2 : 0.1) * jitter;
      v1::TrialOutcome o = Plausible({s, s * 1.002, s * 0.998});
      // Its end read late (as some of the doctor's were: a long tail is
      // not charged as work): of the 0.25 s it saves per run (0.15 s in
      // the window, 0.1 in the warm-up) the whole runs show about 0.03.
      if (mode == "a" || doctor) {
        o.set_wall_s(o.wall_s() + 0.22 * jitter);
        o.set_wall_resolution_s(resolution);
      }
      return o;
    };
    DoctorAndRun(id, outcome);
    auto rep = client_->Report(id);
    ASSERT_TRUE(rep.ok());
    ASSERT_EQ(rep->verification().candidates_size(), 1);
    const auto& c = rep->verification().candidates(0);
    EXPECT_EQ(c.config().at("mode"), "a");
    EXPECT_FALSE(c.cleared()) << c.reason();
    EXPECT_NE(c.reason().find("vanishes over the whole run"), std::string::npos) << c.reason();
    for (const auto& t : rep->trials()) {
      if (t.config().at("mode") != "a") continue;
      if (resolution > 0) {
        EXPECT_EQ(t.status(), "ok") << t.purpose() << " " << t.tag() << ": " << c.reason();
      } else {
        EXPECT_EQ(t.violation(), "implausible") << t.purpose() << " " << t.tag();
      }
    }
    if (resolution > 0) {
      EXPECT_NE(c.reason().find("too few to disqualify"), std::string::npos) << c.reason();
      EXPECT_NE(c.reason().find("0.3000 s on the candidate's"), std::string::npos) << c.reason();
    }
  }
}

// With the model's size stated, a step faster than the GPU's peak is a
// violation of physics, whoever reports it.
TEST_F(RogueAgentTest, StepsFasterThanTheHardwareAreImpossible) {
  const std::string id =
      Create(Spec(2, 2, 1, 2, "model: gpt-354m, global_batch: 16, seq_len: 2048, params: 354e6"));
  int n = 0;
  auto outcome = [&n](const v1::TrialAssignment& t) {
    const std::string mode = t.config().at("mode");
    const double s = (mode == "a" ? 0.02 : 0.3) * (1.0 + 0.001 * (n++ % 3));
    return Plausible({s, s * 1.001, s * 0.999}, 16 * 2048);
  };
  DoctorAndRun(id, outcome);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  bool seen = false;
  for (const auto& t : rep->trials()) {
    if (t.config().at("mode") != "a") continue;
    seen = true;
    EXPECT_EQ(t.violation(), "impossible") << t.error();
    EXPECT_NE(t.error().find("physically impossible"), std::string::npos) << t.error();
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(rep->verification().promoted_rank(), 0);
  bool mfu_ran = false;
  for (const auto& c : rep->integrity()) mfu_ran = mfu_ran || (c.name() == "mfu" && c.ran());
  EXPECT_TRUE(mfu_ran);
}

// The promoted candidate is not always the fastest search trial: the
// report's best must be the promoted one, trial id included.
TEST_F(RogueAgentTest, ReportBestIsThePromotedCandidateTrialIdIncluded) {
  const std::string id = Create(Spec(2, 4, 2, 3));
  int n = 0;
  std::map<std::string, int> served;
  // 'a' is fastest in the search but not when re-verified; 'b' is 1.4x.
  auto outcome = [&](const v1::TrialAssignment& t) {
    const std::string mode = t.config().at("mode");
    const double jitter = 1.0 + 0.004 * ((n++ % 5) - 2);
    double s = 0.1;
    if (mode == "b") s = 0.1 / 1.4;
    if (mode == "a" && served[mode] == 0) s = 0.05;
    ++served[mode];
    return Plausible({s * jitter, s * jitter * 1.001, s * jitter * 0.999});
  };
  DoctorAndRun(id, outcome);
  auto rep = client_->Report(id);
  ASSERT_TRUE(rep.ok());
  const auto& v = rep->verification();
  ASSERT_EQ(v.candidates_size(), 2);
  ASSERT_EQ(v.promoted_rank(), 2) << v.summary();
  EXPECT_EQ(v.candidates(0).config().at("mode"), "a");
  const auto& promoted = v.candidates(1);
  EXPECT_EQ(rep->best().config().at("mode"), "b");
  EXPECT_EQ(rep->best().trial_id(), promoted.trial_id());
  EXPECT_DOUBLE_EQ(rep->best().speedup(), promoted.speedup());
  // The text says the same: the promoted setting, next to its own trial.
  const std::string text = client::FormatReport(*rep);
  EXPECT_NE(text.find(absl::StrCat("(trial ", promoted.trial_id(), ")  mode=b")), std::string::npos)
      << text;
}

// Issue 17: a long poll whose caller had given up (a client deadline shorter
// than wait_ms) was still handed the next trial: it sat leased to nobody
// until the lease expired and lost an attempt. Work that arrives after the
// caller left must stay queued for a live poller.
TEST_F(RogueAgentTest, ALeaseIsNeverHandedToACallerThatGaveUp) {
  const std::string id = Create(Spec(2, 1, 1, 2));
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto sessions = v1::SessionService::NewStub(channel);
  int64_t seq = 0;
  {
    grpc::ClientContext ctx;
    v1::WatchSessionRequest w;
    w.set_session_id(id);
    auto reader = sessions->WatchSession(&ctx, w);
    v1::SessionEvent ev;
    ASSERT_TRUE(reader->Read(&ev));  // the snapshot
    seq = ev.seq();
    ctx.TryCancel();
  }
  // A poll that gives up after 300 ms while it asked the server to wait 20 s
  // (the server now answers "no work" just before that deadline; before, the
  // call ran out and its handler kept waiting).
  {
    v1::LeaseTrialRequest r;
    r.set_agent_id(agent_id_);
    r.set_wait_ms(20000);
    v1::LeaseTrialResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    const grpc::Status st = agents_->LeaseTrial(&ctx, r, &resp);
    EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
        << st.error_message();
    EXPECT_FALSE(resp.has_trial());
  }
  // Work arrives after the caller left.
  v1::DoctorRequest d;
  d.set_session_id(id);
  ASSERT_TRUE(client_->Doctor(d).ok());
  // The abandoned poll wakes within its 1 s wait slice; it must not lease.
  // (A bounded wait for an event that must not come.)
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1500));
    v1::WatchSessionRequest w;
    w.set_session_id(id);
    w.set_after_seq(seq);
    auto reader = sessions->WatchSession(&ctx, w);
    v1::SessionEvent ev;
    while (reader->Read(&ev)) {
      EXPECT_NE(ev.kind(), "trial_leased") << "trial " << ev.trial().id()
                                           << " was leased to a caller that had gone";
    }
  }
  // A live poller gets it, at its first attempt.
  auto t = Lease();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->attempt(), 1);
}

}  // namespace
}  // namespace infrarsi
