// The dashboard's front door: an accept loop of its own in front of
// cpp-httplib's request handling, so that slow or idle clients cannot
// starve it. cpp-httplib's own loop gives each connection a worker of a
// fixed pool (8 here) for as long as the client sends a header line within
// the read timeout: eight sockets trickling a line every 3 s made every
// page time out. Here:
//
// - a connection gets a worker only once its whole request (head, and a
//   body up to max_request_bytes) has arrived; under TLS, once the client
//   has spoken first. Until then it waits in one poll loop, costing a file
//   descriptor and no thread, for at most head_deadline;
// - a worker's hold on a connection is bounded in total (request_deadline):
//   a watchdog shuts down a socket held longer, so a client that reads its
//   answer (or, under TLS, sends its request) slowly frees its worker;
// - each client address keeps at most max_per_client connections open,
//   all clients at most max_open (more are closed at once), and one
//   address holds at most a quarter of the workers (its further requests
//   wait for its own to finish);
// - one request per connection (the answer says Connection: close).
//
// Thread safety: Start and the destructor from one thread; the gate runs
// its own threads (one poller, `workers` workers).
#ifndef INFRARSI_SERVER_HTTP_GATE_H_
#define INFRARSI_SERVER_HTTP_GATE_H_

#include <openssl/ssl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}

namespace infrarsi::server {

class HttpGate {
 public:
  struct Options {
    int workers = 16;                                      // requests served at once
    absl::Duration head_deadline = absl::Seconds(10);      // for the whole request to arrive
    absl::Duration request_deadline = absl::Seconds(30);   // a worker's hold on one connection
    absl::Duration io_timeout = absl::Seconds(5);          // one read or write
    int max_per_client = 64;                               // open connections per address
    // Connections open at once, all clients (waiting, ready and served):
    // each holds a descriptor of the server's (the gRPC port shares them)
    // and up to max_request_bytes. Start lowers it to a quarter of the
    // process's descriptor limit.
    size_t max_open = 1024;
    size_t max_request_bytes = 72 * 1024;                  // head and body
  };
  // Serves `routes`' handlers (its own listen loop is never used) on the
  // listening socket `listen_fd` (taken over: closed by the gate). `ssl`:
  // the TLS context (not owned, outlives the gate), or null for plain HTTP.
  // `routes` must be a GatedRoutes (http_gate.cc) made by NewRoutes().
  static absl::StatusOr<std::unique_ptr<HttpGate>> Start(Options options, httplib::Server* routes,
                                                         int listen_fd, SSL_CTX* ssl);
  // A cpp-httplib server whose handlers the gate can call.
  static std::unique_ptr<httplib::Server> NewRoutes();
  // Binds HOST:PORT (port 0: any free one) without port reuse; the socket
  // and the port bound. UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::pair<int, int>> Listen(const std::string& host, int port);

  ~HttpGate();  // stops accepting, ends every connection, joins its threads

  // Connections refused so far for their client's cap, and dropped for
  // their deadline (tests, operators).
  int64_t refused() const { return refused_.load(); }
  int64_t expired() const { return expired_.load(); }

 private:
  struct Conn {
    int fd = -1;
    std::string client;
    absl::Time since;   // accepted at
    std::string first;  // what the poller read of it (plain HTTP): the whole request
  };
  HttpGate(Options options, httplib::Server* routes, int listen_fd, SSL_CTX* ssl);
  void Poll();
  void Work();
  void Drop(const Conn& c);  // closes and uncounts

  Options options_;
  httplib::Server* routes_;
  int listen_fd_;
  SSL_CTX* ssl_;
  int wake_[2] = {-1, -1};  // a byte here wakes the poller
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0}, expired_{0};

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::deque<Conn> ready_;                      // guarded by mu_: waiting for a worker
  std::map<int, absl::Time> serving_;           // guarded by mu_: fd -> when a worker took it
  std::map<std::string, int> per_client_;       // guarded by mu_: open connections per address
  size_t open_ = 0;                             // guarded by mu_: their sum
  std::map<std::string, int> serving_client_;   // guarded by mu_: workers held per address

  std::thread poller_;
  std::vector<std::thread> workers_;
};

}  // namespace infrarsi::server

#endif  // INFRARSI_SERVER_HTTP_GATE_H_
