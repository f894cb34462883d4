// The daemon's metrics: per-method RPC counts and latencies (a gRPC server
// interceptor records every call's status and duration) and an HTTP
// endpoint serving them in Prometheus' text format with the manager's and
// the database's figures (sessions by stage, trials by status, leases
// expired, agents by state and live, proposal latency, database size, bank
// rows). A scrape reads counts on its own database connection.
#ifndef INFRARSI_SERVER_METRICS_ENDPOINT_H_
#define INFRARSI_SERVER_METRICS_ENDPOINT_H_

#include <grpcpp/support/server_interceptor.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/metrics.h"
#include "core/session_manager.h"
#include "storage/storage.h"

namespace httplib {
class Server;
}

namespace infrarsi::server {

// RPC counts by method and code, latencies by method. Thread-safe.
class RpcMetrics {
 public:
  // Knows the server's methods (infrarsi.v1's services, health,
  // reflection): any other name a caller sends is counted as "unknown", so
  // that no caller can add series without bound.
  RpcMetrics();
  // `method`: "package.Service/Method".
  void Record(const std::string& method, int code, double seconds);
  void Render(MetricsText* out) const;
  // For ServerBuilder::experimental().SetInterceptorCreators; the
  // factory must not outlive this object.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  std::set<std::string> known_;  // fixed at construction
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Histogram>> latency_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, int64_t> calls_ ABSL_GUARDED_BY(mu_);
};

class MetricsEndpoint {
 public:
  struct Options {
    std::string listen;  // HOST:PORT (port 0: any free one)
    // Not owned; all required and must outlive the endpoint.
    SessionManager* manager = nullptr;
    storage::Storage* reader = nullptr;  // counts are read here
    const RpcMetrics* rpcs = nullptr;
    std::string db_path;  // its size (and its WAL's) is reported
  };
  // Starts serving GET /metrics on its own thread.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Create(const Options& options);
  ~MetricsEndpoint();  // stops serving
  int port() const { return port_; }
  // One exposition, as GET /metrics serves it.
  static absl::StatusOr<std::string> Render(const Options& options);

 private:
  MetricsEndpoint() = default;
  Options options_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_METRICS_ENDPOINT_H_
