#include "server/services.h"

#include <algorithm>

#include "server/grpc_status.h"

namespace infrarsi::server {
namespace {

// Copies a StatusOr's value into the response, or returns its error.
template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

constexpr int64_t kMaxLeaseWaitMs = 30000;

}  // namespace

grpc::Status SessionServiceImpl::Init(grpc::ServerContext*, const v1::InitRequest* req,
                                      v1::SessionSummary* resp) {
  return Reply(m_->Init(*req), resp);
}
grpc::Status SessionServiceImpl::Doctor(grpc::ServerContext*, const v1::DoctorRequest* req,
                                        v1::SessionSummary* resp) {
  return Reply(m_->Doctor(*req), resp);
}
grpc::Status SessionServiceImpl::Run(grpc::ServerContext*, const v1::RunRequest* req,
                                     v1::SessionSummary* resp) {
  return Reply(m_->Run(*req), resp);
}
grpc::Status SessionServiceImpl::Report(grpc::ServerContext*, const v1::ReportRequest* req,
                                        v1::SessionReport* resp) {
  return Reply(m_->Report(req->session_id()), resp);
}
grpc::Status SessionServiceImpl::Apply(grpc::ServerContext*, const v1::ApplyRequest* req,
                                       v1::ApplyResponse* resp) {
  return Reply(m_->Apply(*req), resp);
}
grpc::Status SessionServiceImpl::GetSession(grpc::ServerContext*,
                                            const v1::GetSessionRequest* req,
                                            v1::SessionSummary* resp) {
  return Reply(m_->GetSession(req->session_id()), resp);
}
grpc::Status SessionServiceImpl::ListSessions(grpc::ServerContext*,
                                              const v1::ListSessionsRequest*,
                                              v1::ListSessionsResponse* resp) {
  return Reply(m_->ListSessions(), resp);
}
grpc::Status SessionServiceImpl::CancelSession(grpc::ServerContext*,
                                               const v1::CancelSessionRequest* req,
                                               v1::SessionSummary* resp) {
  return Reply(m_->Cancel(req->session_id()), resp);
}

grpc::Status SessionServiceImpl::WatchSession(grpc::ServerContext* ctx,
                                              const v1::WatchSessionRequest* req,
                                              grpc::ServerWriter<v1::SessionEvent>* writer) {
  int64_t after = req->after_seq();
  while (!ctx->IsCancelled()) {
    auto events = m_->WaitEvents(req->session_id(), after, absl::Seconds(1));
    if (!events.ok()) return ToGrpcStatus(events.status());
    for (const v1::SessionEvent& ev : *events) {
      if (!writer->Write(ev)) return grpc::Status::OK;  // client went away
      after = std::max(after, ev.seq());
    }
  }
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::RegisterAgent(grpc::ServerContext*,
                                             const v1::RegisterAgentRequest* req,
                                             v1::RegisterAgentResponse* resp) {
  return Reply(m_->RegisterAgent(*req), resp);
}
grpc::Status AgentServiceImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                         v1::HeartbeatResponse* resp) {
  return Reply(m_->Heartbeat(*req), resp);
}

grpc::Status AgentServiceImpl::LeaseTrial(grpc::ServerContext* ctx,
                                          const v1::LeaseTrialRequest* req,
                                          v1::LeaseTrialResponse* resp) {
  if (req->wait_ms() < 0 || req->wait_ms() > kMaxLeaseWaitMs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "wait_ms: must be in [0, 30000]");
  }
  // Long poll: retry when woken until work arrives or the wait is over.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(req->wait_ms());
  while (true) {
    auto leased = m_->TryLease(req->agent_id());
    if (!leased.ok()) return ToGrpcStatus(leased.status());
    if (leased->has_value()) {
      *resp->mutable_trial() = std::move(**leased);
      return grpc::Status::OK;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || ctx->IsCancelled()) return grpc::Status::OK;
    if (!m_->WaitForWork(std::min(left, absl::Seconds(1)))) return grpc::Status::OK;
  }
}

grpc::Status AgentServiceImpl::ReportProgress(grpc::ServerContext*,
                                              const v1::ReportProgressRequest* req,
                                              v1::ReportProgressResponse* resp) {
  return Reply(m_->ReportProgress(*req), resp);
}
grpc::Status AgentServiceImpl::CompleteTrial(grpc::ServerContext*,
                                             const v1::CompleteTrialRequest* req,
                                             v1::CompleteTrialResponse* resp) {
  return Reply(m_->CompleteTrial(*req), resp);
}

grpc::Status BankServiceImpl::QueryExperience(grpc::ServerContext*,
                                              const v1::QueryExperienceRequest* req,
                                              v1::QueryExperienceResponse* resp) {
  return Reply(m_->QueryExperience(*req), resp);
}

}  // namespace infrarsi::server
