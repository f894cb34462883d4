#include "server/metrics_endpoint.h"

#include <httplib.h>
#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "grpcpp/support/status.h"

namespace infrarsi::server {
namespace {

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(RpcMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Record(method_, methods->GetSendStatus().error_code(),
                       absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  const std::string method_;
  const absl::Time start_;
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    std::string method = info->method() ? info->method() : "";
    if (!method.empty() && method[0] == '/') method.erase(0, 1);
    return new MetricsInterceptor(metrics_, std::move(method));
  }

 private:
  RpcMetrics* metrics_;
};

int64_t FileBytes(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

RpcMetrics::RpcMetrics() {
  const google::protobuf::FileDescriptor* api = v1::InitRequest::descriptor()->file();
  for (int i = 0; i < api->service_count(); ++i) {
    const google::protobuf::ServiceDescriptor* svc = api->service(i);
    for (int j = 0; j < svc->method_count(); ++j) {
      known_.insert(absl::StrCat(svc->full_name(), "/", svc->method(j)->name()));
    }
  }
  for (const char* m : {"grpc.health.v1.Health/Check", "grpc.health.v1.Health/Watch",
                        "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}) {
    known_.insert(m);
  }
}

void RpcMetrics::Record(const std::string& name, int code, double seconds) {
  static const std::string kUnknown = "unknown";
  const std::string& method = known_.count(name) ? name : kUnknown;
  Histogram* h = nullptr;
  {
    absl::MutexLock lock(&mu_);
    ++calls_[{method, code}];
    auto& slot = latency_[method];
    if (slot == nullptr) slot = std::make_unique<Histogram>();
    h = slot.get();  // never erased: safe after the lock
  }
  h->Observe(seconds);
}

void RpcMetrics::Render(MetricsText* out) const {
  absl::MutexLock lock(&mu_);
  out->Family("infrarsi_rpc_requests_total", "counter", "RPCs finished, by method and status code.");
  for (const auto& [key, n] : calls_) {
    out->Sample("infrarsi_rpc_requests_total",
                {{"method", key.first},
                 {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(key.second))}},
                static_cast<double>(n));
  }
  out->Family("infrarsi_rpc_duration_seconds", "histogram",
              "RPC latency by method (long polls and watch streams last as long as they wait).");
  for (const auto& [method, h] : latency_) {
    out->Histogram("infrarsi_rpc_duration_seconds", {{"method", method}}, h->Take());
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>(this);
}

absl::StatusOr<std::string> MetricsEndpoint::Render(const Options& o) {
  MetricsText out;
  ASSIGN_OR_RETURN(auto stages, o.reader->CountSessionsByStage());
  out.Family("infrarsi_sessions", "gauge", "Sessions by stage.");
  for (const auto& [stage, n] : stages) {
    out.Sample("infrarsi_sessions", {{"stage", stage}}, static_cast<double>(n));
  }
  ASSIGN_OR_RETURN(auto statuses, o.reader->CountTrialsByStatus());
  out.Family("infrarsi_trials", "gauge",
             "Trials by status and executor (\"unknown\": written before schema v11).");
  for (const auto& [key, n] : statuses) {
    out.Sample("infrarsi_trials",
               {{"status", key.first}, {"executor", key.second.empty() ? "unknown" : key.second}},
               static_cast<double>(n));
  }
  const SessionManager::Stats st = o.manager->GetStats();
  out.Family("infrarsi_trials_queued", "gauge", "Trials queued for leasing (active sessions).");
  out.Sample("infrarsi_trials_queued", {}, static_cast<double>(st.queued_trials));
  out.Family("infrarsi_sessions_resident", "gauge", "Sessions held in memory.");
  out.Sample("infrarsi_sessions_resident", {}, static_cast<double>(st.resident_sessions));
  out.Family("infrarsi_leases_expired_total", "counter",
             "Leases that ran out without a completion (requeued or failed), since start.");
  out.Sample("infrarsi_leases_expired_total", {}, static_cast<double>(st.leases_expired));
  out.Family("infrarsi_agents", "gauge", "Registered agents by state.");
  for (const char* state : {kAgentActive, kAgentDraining, kAgentQuarantined}) {
    auto it = st.agents_by_state.find(state);
    out.Sample("infrarsi_agents", {{"state", state}},
               it == st.agents_by_state.end() ? 0.0 : static_cast<double>(it->second));
  }
  out.Family("infrarsi_agents_live", "gauge", "Agents heard from recently and taking work.");
  out.Sample("infrarsi_agents_live", {}, st.agents_live);
  out.Family("infrarsi_proposal_duration_seconds", "histogram",
             "Time to propose settings (fitting the search's models).");
  out.Histogram("infrarsi_proposal_duration_seconds", {}, o.manager->ProposalLatency());
  out.Family("infrarsi_search_trials_read_total", "counter",
             "Trials the search read from the database for its proposals (those written since "
             "each session's last read), since start.");
  out.Sample("infrarsi_search_trials_read_total", {}, static_cast<double>(st.search_trials_read));
  ASSIGN_OR_RETURN(int64_t bank, o.reader->CountBank());
  out.Family("infrarsi_bank_rows", "gauge", "Entries in the experience bank.");
  out.Sample("infrarsi_bank_rows", {}, static_cast<double>(bank));
  out.Family("infrarsi_database_bytes", "gauge", "Size of the SQLite database and its WAL.");
  out.Sample("infrarsi_database_bytes", {{"file", "db"}}, static_cast<double>(FileBytes(o.db_path)));
  out.Sample("infrarsi_database_bytes", {{"file", "wal"}},
             static_cast<double>(FileBytes(o.db_path + "-wal")));
  o.rpcs->Render(&out);
  return out.text();
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Create(const Options& options) {
  if (options.manager == nullptr || options.reader == nullptr || options.rpcs == nullptr) {
    return absl::InvalidArgumentError("metrics: manager, reader and rpcs are required");
  }
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: expected HOST:PORT, got '", options.listen, "'"));
  }
  const std::string host = options.listen.substr(0, colon);
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->options_ = options;
  e->http_ = std::make_unique<httplib::Server>();
  MetricsEndpoint* raw = e.get();
  e->http_->Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    auto text = Render(raw->options_);
    if (!text.ok()) {
      res.status = 500;
      res.set_content(std::string(text.status().message()) + "\n", "text/plain");
      return;
    }
    res.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
  });
  e->port_ = port == 0 ? e->http_->bind_to_any_port(host) : (e->http_->bind_to_port(host, port) ? port : -1);
  if (e->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen: cannot listen on ", options.listen));
  }
  e->thread_ = std::thread([raw] { raw->http_->listen_after_bind(); });
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace infrarsi::server
