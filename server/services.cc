#include "server/services.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/stage.h"
#include "base/status_macros.h"
#include "server/grpc_status.h"

namespace infrarsi::server {
namespace {

// Denials are logged (who was refused what, never the token).
grpc::Status Fail(grpc::ServerContext* ctx, const char* rpc, const absl::Status& st) {
  if (absl::IsPermissionDenied(st) || absl::IsUnauthenticated(st)) {
    spdlog::warn("denied {} from {}: {}", rpc, ctx->peer(), std::string(st.message()));
  }
  return ToGrpcStatus(st);
}

// Copies a StatusOr's value into the response, or returns its error.
template <typename T>
grpc::Status Reply(grpc::ServerContext* ctx, const char* rpc, absl::StatusOr<T> result,
                   T* response) {
  if (!result.ok()) return Fail(ctx, rpc, result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

// The caller, from the "authorization" metadata.
absl::StatusOr<Principal> Caller(grpc::ServerContext* ctx, const Authenticator* auth) {
  if (auth == nullptr) return Principal::Open();
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  return auth->Authenticate(it == md.end() ? "" : std::string(it->second.data(), it->second.size()));
}

// The caller of an AgentService method: an agent (or admin, or open).
absl::StatusOr<Principal> AgentCaller(grpc::ServerContext* ctx, const Authenticator* auth) {
  ASSIGN_OR_RETURN(Principal who, Caller(ctx, auth));
  RETURN_IF_ERROR(Authorize(who, Action::kAgent));
  return who;
}

// Who holds a long-lived call, for the per-caller caps: the token, or on an
// open server the peer's address (without its port).
std::string CallerKey(const Principal& who, const grpc::ServerContext* ctx) {
  if (!who.token_id.empty()) return who.token_id;
  std::string peer = ctx->peer();
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

#define INFRARSI_CALLER(who, expr)                   \
  auto who##_or = (expr);                            \
  if (!who##_or.ok()) return Fail(ctx, __func__, who##_or.status()); \
  [[maybe_unused]] const Principal& who = *who##_or

constexpr int64_t kMaxLeaseWaitMs = 30000;

}  // namespace

grpc::Status SessionServiceImpl::Init(grpc::ServerContext* ctx, const v1::InitRequest* req,
                                      v1::SessionSummary* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Init(*req, who), resp);
}
grpc::Status SessionServiceImpl::Doctor(grpc::ServerContext* ctx, const v1::DoctorRequest* req,
                                        v1::SessionSummary* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Doctor(*req, who), resp);
}
grpc::Status SessionServiceImpl::Run(grpc::ServerContext* ctx, const v1::RunRequest* req,
                                     v1::SessionSummary* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Run(*req, who), resp);
}
grpc::Status SessionServiceImpl::Report(grpc::ServerContext* ctx, const v1::ReportRequest* req,
                                        v1::SessionReport* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Report(req->session_id(), who), resp);
}
grpc::Status SessionServiceImpl::Apply(grpc::ServerContext* ctx, const v1::ApplyRequest* req,
                                       v1::ApplyResponse* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Apply(*req, who), resp);
}
grpc::Status SessionServiceImpl::GetTrialLog(grpc::ServerContext* ctx,
                                             const v1::GetTrialLogRequest* req,
                                             v1::TrialLogResponse* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->GetTrialLog(*req, who), resp);
}
grpc::Status SessionServiceImpl::GetSession(grpc::ServerContext* ctx,
                                            const v1::GetSessionRequest* req,
                                            v1::SessionSummary* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->GetSession(req->session_id(), who), resp);
}
grpc::Status SessionServiceImpl::ListSessions(grpc::ServerContext* ctx,
                                              const v1::ListSessionsRequest* req,
                                              v1::ListSessionsResponse* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->ListSessions(*req, who), resp);
}
grpc::Status SessionServiceImpl::CancelSession(grpc::ServerContext* ctx,
                                               const v1::CancelSessionRequest* req,
                                               v1::SessionSummary* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->Cancel(req->session_id(), who), resp);
}

grpc::Status SessionServiceImpl::ListAgents(grpc::ServerContext* ctx,
                                            const v1::ListAgentsRequest* req,
                                            v1::ListAgentsResponse* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->ListAgents(*req, who), resp);
}
grpc::Status SessionServiceImpl::SetAgentState(grpc::ServerContext* ctx,
                                               const v1::SetAgentStateRequest* req,
                                               v1::AgentInfo* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->SetAgentState(*req, who), resp);
}

grpc::Status SessionServiceImpl::WatchSession(grpc::ServerContext* ctx,
                                              const v1::WatchSessionRequest* req,
                                              grpc::ServerWriter<v1::SessionEvent>* writer) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  auto slot = streams_->Acquire(CallerKey(who, ctx));
  if (slot == nullptr) {
    return Fail(ctx, __func__,
                absl::ResourceExhaustedError(absl::StrCat(
                    "WatchSession: at most ", streams_->max(),
                    " concurrent streams per caller (--max-streams-per-caller)")));
  }
  int64_t after = req->after_seq();
  while (!ctx->IsCancelled()) {
    // The token is checked again every second: a revoked one's stream ends.
    if (auto again = Caller(ctx, auth_); !again.ok()) return Fail(ctx, __func__, again.status());
    auto events = m_->WaitEvents(req->session_id(), after, absl::Seconds(1), who);
    if (!events.ok()) return Fail(ctx, __func__, events.status());
    for (const v1::SessionEvent& ev : *events) {
      if (!writer->Write(ev)) return grpc::Status::OK;  // client went away
      after = std::max(after, ev.seq());
    }
    // A finished session's stream ends once what it had to say was sent.
    if (!events->empty()) {
      if (IsFinishedStage(events->back().session().stage())) break;
    } else if (auto now = m_->GetSession(req->session_id(), who);
               now.ok() && IsFinishedStage(now->stage())) {
      break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::RegisterAgent(grpc::ServerContext* ctx,
                                             const v1::RegisterAgentRequest* req,
                                             v1::RegisterAgentResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  return Reply(ctx, __func__, m_->RegisterAgent(*req, who), resp);
}
grpc::Status AgentServiceImpl::DeregisterAgent(grpc::ServerContext* ctx,
                                               const v1::DeregisterAgentRequest* req,
                                               v1::DeregisterAgentResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  return Reply(ctx, __func__, m_->DeregisterAgent(*req, who), resp);
}
grpc::Status AgentServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  return Reply(ctx, __func__, m_->Heartbeat(*req, who), resp);
}

grpc::Status AgentServiceImpl::LeaseTrial(grpc::ServerContext* ctx,
                                          const v1::LeaseTrialRequest* req,
                                          v1::LeaseTrialResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  if (req->wait_ms() < 0 || req->wait_ms() > kMaxLeaseWaitMs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "wait_ms: must be in [0, 30000]");
  }
  std::unique_ptr<CallLimiter::Slot> slot;
  if (req->wait_ms() > 0) {
    slot = polls_->Acquire(CallerKey(who, ctx));
    if (slot == nullptr) {
      return Fail(ctx, __func__,
                  absl::ResourceExhaustedError(absl::StrCat(
                      "LeaseTrial: at most ", polls_->max(),
                      " concurrent long polls per caller (--max-long-polls-per-caller); give each "
                      "agent host its own token")));
    }
  }
  // Long poll: retry when woken until work arrives or the wait is over. A
  // trial is only handed to a caller that is still there: the wait ends
  // before the caller's own deadline, and a lease the call can no longer
  // deliver goes straight back to the queue.
  constexpr absl::Duration kDeliveryMargin = absl::Milliseconds(100);
  const absl::Time caller_gone = absl::FromChrono(ctx->deadline());
  const absl::Time deadline =
      std::min(absl::Now() + absl::Milliseconds(req->wait_ms()), caller_gone - kDeliveryMargin);
  auto gone = [&] { return ctx->IsCancelled() || absl::Now() >= caller_gone - kDeliveryMargin; };
  while (true) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "LeaseTrial: the caller has gone");
    }
    if (gone()) return grpc::Status::OK;  // no time left to deliver a trial: none
    auto leased = m_->TryLease(req->agent_id(), who);
    if (!leased.ok()) return Fail(ctx, __func__, leased.status());
    if (leased->has_value()) {
      if (gone()) {
        if (absl::Status back = m_->ReturnUndelivered((*leased)->trial_id(),
                                                      (*leased)->lease_token(), who);
            !back.ok()) {
          spdlog::warn("LeaseTrial: trial {} could not go back to the queue: {}",
                       (*leased)->trial_id(), back.ToString());
        }
        return grpc::Status(grpc::StatusCode::CANCELLED, "LeaseTrial: the caller has gone");
      }
      *resp->mutable_trial() = std::move(**leased);
      return grpc::Status::OK;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return grpc::Status::OK;
    if (!m_->WaitForWork(std::min(left, absl::Seconds(1)))) return grpc::Status::OK;
  }
}

grpc::Status AgentServiceImpl::ReportProgress(grpc::ServerContext* ctx,
                                              const v1::ReportProgressRequest* req,
                                              v1::ReportProgressResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  return Reply(ctx, __func__, m_->ReportProgress(*req, who), resp);
}
grpc::Status AgentServiceImpl::CompleteTrial(grpc::ServerContext* ctx,
                                             const v1::CompleteTrialRequest* req,
                                             v1::CompleteTrialResponse* resp) {
  INFRARSI_CALLER(who, AgentCaller(ctx, auth_));
  return Reply(ctx, __func__, m_->CompleteTrial(*req, who), resp);
}

grpc::Status BankServiceImpl::QueryExperience(grpc::ServerContext* ctx,
                                              const v1::QueryExperienceRequest* req,
                                              v1::QueryExperienceResponse* resp) {
  INFRARSI_CALLER(who, Caller(ctx, auth_));
  return Reply(ctx, __func__, m_->QueryExperience(*req, who), resp);
}

}  // namespace infrarsi::server
