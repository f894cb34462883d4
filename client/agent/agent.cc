#include "client/agent/agent.h"

#include <optional>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/agent/executors/process_executor.h"
#include "client/agent/executor_factory.h"
#include "client/agent/executors/sim_executor.h"
#include "base/status_macros.h"
#include "client/rpc_client.h"
#include "core/agent_policy.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace infrarsi::client {
namespace {

bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// Reports steps to the server; any refusal stops the trial. Steps that
// could not be sent (server unreachable) are kept and sent again, with the
// next report or with the completion: the server stores steps idempotently.
class RpcProgressSink : public ProgressSink {
 public:
  RpcProgressSink(v1::AgentService::Stub* stub, const v1::TrialAssignment& t, std::string token)
      : stub_(stub), trial_(t), token_(std::move(token)) {}
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    std::lock_guard<std::mutex> lock(mu_);
    unsent_.insert(unsent_.end(), steps.begin(), steps.end());
    v1::ReportProgressRequest req;
    req.set_trial_id(trial_.trial_id());
    req.set_lease_token(trial_.lease_token());
    for (const auto& s : unsent_) *req.add_steps() = s;
    if (job_.has_value()) *req.mutable_slurm() = *job_;
    v1::ReportProgressResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const absl::Status st = FromGrpcStatus(stub_->ReportProgress(&ctx, req, &resp));
    if (st.ok()) {
      unsent_.clear();
      if (!resp.pruned().empty()) spdlog::info("trial {}: {}", trial_.trial_id(), resp.pruned());
      return !resp.cancelled();
    }
    // An unreachable server may come back: keep running, the lease allows it.
    if (Retryable(st)) return true;
    spdlog::warn("trial {}: progress refused ({}); stopping it", trial_.trial_id(), st.ToString());
    return false;
  }
  void SetJob(const v1::SlurmJob& job) override {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
  }
  std::vector<v1::StepMetrics> TakeUnsent() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(unsent_);
  }

 private:
  v1::AgentService::Stub* stub_;
  const v1::TrialAssignment& trial_;
  std::string token_;
  std::mutex mu_;
  std::vector<v1::StepMetrics> unsent_;
  std::optional<v1::SlurmJob> job_;
};

std::string DefaultHost() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

Agent::Agent(const Options& options) : options_(options) {}
Agent::~Agent() = default;

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(const Options& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("server: required");
  if (options.gpu_model.empty()) return absl::InvalidArgumentError("gpu_model: required");
  if (options.gpu_count < 0) return absl::InvalidArgumentError("gpu_count: must be >= 0");
  if (options.executors.empty()) return absl::InvalidArgumentError("executors: at least one");
  RETURN_IF_ERROR(CheckExecutorNames(options.executors));
  std::unique_ptr<Agent> a(new Agent(options));
  if (a->options_.host.empty()) a->options_.host = DefaultHost();
  const auto& names = a->options_.executors;
  const bool runs_code = std::find(names.begin(), names.end(), "process") != names.end() ||
                         std::find(names.begin(), names.end(), "slurm") != names.end();
  if (runs_code) {
    // The agent creates and owns its scratch root: one that exists must be
    // its own and writable by no one else (a guessable path another user
    // made first would hand it the trials' files).
    auto root = OwnScratchRoot(a->options_.scratch_root);
    if (!root.ok()) return root.status();
    a->options_.scratch_root = *root;
  }
  auto channel = grpc::CreateChannel(options.server, ChannelCredentialsFor(options.tls));
  a->stub_ = v1::AgentService::NewStub(channel);
  // One executor per name the operator listed, each built by its factory
  // (client/agent/executor_factory.cc: where a new executor is added).
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, MakeExecutor(name, a->options_));
    a->executors_[name] = std::move(ex);
  }
  return a;
}

std::string Agent::agent_id() const {
  std::lock_guard<std::mutex> lock(id_mu_);
  return agent_id_;
}

void Agent::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  for (auto& [name, ex] : executors_) ex->Abort();
}

absl::Status Agent::Register() {
  v1::RegisterAgentRequest req;
  req.set_host(options_.host);
  req.set_gpu_model(options_.gpu_model);
  req.set_gpu_count(options_.gpu_count);
  req.set_memory_per_gpu_gib(options_.memory_per_gpu_gib);
  for (const auto& e : options_.executors) req.add_executors(e);
  for (const auto& t : options_.serve_teams) req.add_teams(t);
  if ((executors_.count("process") || executors_.count("slurm")) &&
      !options_.process.allow_any_command) {
    for (const auto& c : options_.allow_commands) req.add_commands(c);
  }
  req.set_agent_id(agent_id());
  while (!stop_.HasBeenNotified()) {
    v1::RegisterAgentResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const absl::Status st = FromGrpcStatus(stub_->RegisterAgent(&ctx, req, &resp));
    if (st.ok()) {
      std::lock_guard<std::mutex> lock(id_mu_);
      agent_id_ = resp.agent_id();
      if (resp.heartbeat_interval_ms() > 0) {
        heartbeat_ms_ = std::clamp<int64_t>(resp.heartbeat_interval_ms(), 100, 60000);
      }
      spdlog::info("registered as {} ({} x{}, executors: {})", agent_id_, options_.gpu_model,
                   options_.gpu_count, req.executors_size());
      if (options_.on_registered) options_.on_registered(agent_id_);
      return absl::OkStatus();
    }
    if (!Retryable(st)) return st;
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));
  }
  return absl::CancelledError("agent stopped");
}

Executor* Agent::ExecutorFor(const v1::TrialAssignment& trial) {
  auto it = executors_.find(ExecutorNameOf(trial));
  return it == executors_.end() ? nullptr : it->second.get();
}

absl::Status Agent::RunTrial(const v1::TrialAssignment& trial) {
  spdlog::info("trial {} (session {}, attempt {}): starting", trial.trial_id(),
               trial.session_id(), trial.attempt());
  RpcProgressSink sink(stub_.get(), trial, options_.token);
  v1::TrialOutcome outcome;
  Executor* ex = ExecutorFor(trial);
  const auto& teams = options_.serve_teams;
  if (!teams.empty() && std::find(teams.begin(), teams.end(), trial.team()) == teams.end()) {
    // The server should not have offered it; the agent decides anyway.
    outcome.set_status("refused");
    outcome.set_error(absl::StrCat("agent policy: this agent serves teams ",
                                   absl::StrJoin(teams, ", "), ", not '", trial.team(), "'"));
  } else if (ex == nullptr) {
    outcome.set_status("refused");
    outcome.set_error("agent policy: this agent does not run this executor");
  } else {
    auto result = ex->Run(trial, &sink);
    if (result.ok()) {
      outcome = *std::move(result);
    } else {
      outcome.set_status("failed");
      outcome.set_error(absl::StrCat("executor: ", result.status().message()));
    }
  }
  for (v1::StepMetrics& m : sink.TakeUnsent()) *outcome.add_steps() = std::move(m);
  v1::CompleteTrialRequest req;
  req.set_trial_id(trial.trial_id());
  req.set_lease_token(trial.lease_token());
  *req.mutable_outcome() = outcome;
  // Retry through a server restart: a repeated completion is harmless.
  const absl::Time give_up = absl::Now() + options_.retry_window;
  while (true) {
    v1::CompleteTrialResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const absl::Status st = FromGrpcStatus(stub_->CompleteTrial(&ctx, req, &resp));
    if (st.ok()) {
      spdlog::info("trial {}: {}{}", trial.trial_id(), outcome.status(),
                   resp.duplicate() ? " (already recorded)" : "");
      ++trials_completed_;
      return absl::OkStatus();
    }
    if (!Retryable(st) || absl::Now() > give_up) {
      spdlog::warn("trial {}: completion refused: {}", trial.trial_id(), st.ToString());
      return st;
    }
    absl::SleepFor(absl::Milliseconds(300));
  }
}

absl::Status Agent::WorkLoop() {
  absl::Status result = absl::OkStatus();
  while (!stop_.HasBeenNotified()) {
    if (options_.max_trials > 0 && trials_completed_ >= options_.max_trials) break;
    v1::LeaseTrialRequest req;
    req.set_agent_id(agent_id());
    req.set_wait_ms(absl::ToInt64Milliseconds(options_.lease_wait));
    v1::LeaseTrialResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(options_.lease_wait + absl::Seconds(10)));
    const absl::Status st = FromGrpcStatus(stub_->LeaseTrial(&ctx, req, &resp));
    if (absl::IsNotFound(st)) {
      // The server forgot us (a fresh database): register again (once,
      // whichever slot noticed first; the id is kept).
      absl::Status r;
      {
        std::lock_guard<std::mutex> lock(register_mu_);
        r = Register();
      }
      if (!r.ok()) {
        result = r;
        break;
      }
      continue;
    }
    if (!st.ok()) {
      if (!Retryable(st)) {
        result = st;
        break;
      }
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(300));
      continue;
    }
    if (!resp.has_trial()) continue;
    (void)RunTrial(resp.trial());  // a refused completion is logged; carry on
  }
  return result;
}

absl::Status Agent::RunLoop() {
  RETURN_IF_ERROR(Register());
  std::thread heartbeat([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(heartbeat_ms_.load()))) {
      v1::HeartbeatRequest req;
      req.set_agent_id(agent_id());
      v1::HeartbeatResponse resp;
      grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      (void)stub_->Heartbeat(&ctx, req, &resp);
    }
  });
  // One lease loop per slot; the first runs on this thread.
  std::vector<absl::Status> results(static_cast<size_t>(std::max(1, options_.slots)));
  std::vector<std::thread> workers;
  for (size_t k = 1; k < results.size(); ++k) {
    workers.emplace_back([this, &results, k] {
      results[k] = WorkLoop();
      if (!results[k].ok()) Stop();  // one slot's fatal error ends them all
    });
  }
  results[0] = WorkLoop();
  if (!results[0].ok()) Stop();
  for (std::thread& w : workers) w.join();
  absl::Status result = absl::OkStatus();
  for (const absl::Status& r : results) {
    if (!r.ok() && result.ok()) result = r;
  }
  Stop();
  heartbeat.join();
  // A clean exit says so: the server stops counting this agent as live at
  // once (no doctor run is pinned to it any more) and requeues anything it
  // still holds. Best effort: a server that is gone finds out by liveness.
  {
    v1::DeregisterAgentRequest req;
    req.set_agent_id(agent_id());
    v1::DeregisterAgentResponse resp;
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (const absl::Status st = FromGrpcStatus(stub_->DeregisterAgent(&ctx, req, &resp)); st.ok()) {
      spdlog::info("deregistered {}{}", agent_id(),
                   resp.requeued() > 0 ? absl::StrCat(" (", resp.requeued(), " trials requeued)")
                                       : std::string());
    } else {
      spdlog::warn("deregister: {}", st.ToString());
    }
  }
  return absl::IsCancelled(result) ? absl::OkStatus() : result;
}

}  // namespace infrarsi::client
