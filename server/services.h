// gRPC adapters: each method translates the request, calls SessionManager
// and translates the status. No business logic lives here.
#ifndef INFRARSI_SERVER_SERVICES_H_
#define INFRARSI_SERVER_SERVICES_H_

#include "core/auth.h"
#include "core/session_manager.h"
#include "server/call_limiter.h"
#include "infrarsi/v1/infrarsi.grpc.pb.h"

namespace infrarsi::server {

// All three hold a non-owned manager that must outlive them. Thread-safe.
class SessionServiceImpl final : public v1::SessionService::Service {
 public:
  // `auth` (not owned) resolves each call's bearer token; null: open.
  // `streams` (not owned) caps each caller's concurrent WatchSession calls.
  SessionServiceImpl(SessionManager* m, const Authenticator* auth, CallLimiter* streams)
      : m_(m), auth_(auth), streams_(streams) {}
  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest*, v1::SessionSummary*) override;
  grpc::Status Doctor(grpc::ServerContext*, const v1::DoctorRequest*,
                      v1::SessionSummary*) override;
  grpc::Status Run(grpc::ServerContext*, const v1::RunRequest*, v1::SessionSummary*) override;
  grpc::Status Report(grpc::ServerContext*, const v1::ReportRequest*,
                      v1::SessionReport*) override;
  grpc::Status Apply(grpc::ServerContext*, const v1::ApplyRequest*, v1::ApplyResponse*) override;
  grpc::Status GetTrialLog(grpc::ServerContext*, const v1::GetTrialLogRequest*,
                           v1::TrialLogResponse*) override;
  grpc::Status GetSession(grpc::ServerContext*, const v1::GetSessionRequest*,
                          v1::SessionSummary*) override;
  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse*) override;
  grpc::Status CancelSession(grpc::ServerContext*, const v1::CancelSessionRequest*,
                             v1::SessionSummary*) override;
  grpc::Status ListAgents(grpc::ServerContext*, const v1::ListAgentsRequest*,
                          v1::ListAgentsResponse*) override;
  grpc::Status SetAgentState(grpc::ServerContext*, const v1::SetAgentStateRequest*,
                             v1::AgentInfo*) override;
  grpc::Status WatchSession(grpc::ServerContext*, const v1::WatchSessionRequest*,
                            grpc::ServerWriter<v1::SessionEvent>*) override;

 private:
  SessionManager* m_;
  const Authenticator* auth_;
  CallLimiter* streams_;
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  // `auth` (not owned) resolves each call's bearer token; null: open.
  // `polls` (not owned) caps each caller's concurrent waiting LeaseTrial calls.
  AgentServiceImpl(SessionManager* m, const Authenticator* auth, CallLimiter* polls)
      : m_(m), auth_(auth), polls_(polls) {}
  grpc::Status RegisterAgent(grpc::ServerContext*, const v1::RegisterAgentRequest*,
                             v1::RegisterAgentResponse*) override;
  grpc::Status DeregisterAgent(grpc::ServerContext*, const v1::DeregisterAgentRequest*,
                               v1::DeregisterAgentResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::Status LeaseTrial(grpc::ServerContext*, const v1::LeaseTrialRequest*,
                          v1::LeaseTrialResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*, const v1::ReportProgressRequest*,
                              v1::ReportProgressResponse*) override;
  grpc::Status CompleteTrial(grpc::ServerContext*, const v1::CompleteTrialRequest*,
                             v1::CompleteTrialResponse*) override;

 private:
  SessionManager* m_;
  const Authenticator* auth_;
  CallLimiter* polls_;
};

class BankServiceImpl final : public v1::BankService::Service {
 public:
  // `auth` (not owned) resolves each call's bearer token; null: open.
  BankServiceImpl(SessionManager* m, const Authenticator* auth) : m_(m), auth_(auth) {}
  grpc::Status QueryExperience(grpc::ServerContext*, const v1::QueryExperienceRequest*,
                               v1::QueryExperienceResponse*) override;

 private:
  SessionManager* m_;
  const Authenticator* auth_;
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_SERVICES_H_
