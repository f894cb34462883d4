#include "server/http_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace infrarsi::server {
namespace {

// cpp-httplib's request handling (routing, parsing, writing the answer)
// over a stream the gate hands it.
class GatedRoutes : public httplib::Server {
 public:
  bool Handle(httplib::Stream& stream) {
    bool closed = false;
    return process_request(stream, /*close_connection=*/true, closed, [](httplib::Request&) {});
  }
};

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

bool WaitFor(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

void Address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ip.clear();
  port = 0;
  if (r != 0) return;
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, buf, sizeof(buf));
    port = ntohs(in->sin6_port);
  }
  ip = buf;
}

// What both streams share: the socket, its addresses, waiting to write.
class GateStream : public httplib::Stream {
 public:
  GateStream(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {}
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, timeout_ms_); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { Address(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Address(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 protected:
  int fd_;
  int timeout_ms_;
};

// Plain HTTP: what the poller read first (the whole request), then the
// socket, each read and write bounded by `timeout_ms`.
class FdStream : public GateStream {
 public:
  FdStream(int fd, std::string first, int timeout_ms)
      : GateStream(fd, timeout_ms), first_(std::move(first)) {}
  bool is_readable() const override { return pos_ < first_.size() || WaitFor(fd_, POLLIN, timeout_ms_); }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < first_.size()) {
      const size_t n = std::min(size, first_.size() - pos_);
      std::memcpy(ptr, first_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!WaitFor(fd_, POLLIN, timeout_ms_)) return -1;
    return recv(fd_, ptr, size, MSG_DONTWAIT);
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!WaitFor(fd_, POLLOUT, timeout_ms_)) return -1;
      const ssize_t k = send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) return -1;
      done += static_cast<size_t>(k);
    }
    return static_cast<ssize_t>(size);
  }

 private:
  std::string first_;
  size_t pos_ = 0;
};

// TLS over a blocking socket whose reads and writes time out (SO_RCVTIMEO,
// SO_SNDTIMEO).
class SslStream : public GateStream {
 public:
  SslStream(int fd, SSL* ssl, int timeout_ms) : GateStream(fd, timeout_ms), ssl_(ssl) {}
  bool is_readable() const override { return SSL_pending(ssl_) > 0 || WaitFor(fd_, POLLIN, timeout_ms_); }
  ssize_t read(char* ptr, size_t size) override {
    const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 20)));
    return n > 0 ? n : -1;
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      const int n = SSL_write(ssl_, ptr + done, static_cast<int>(std::min<size_t>(size - done, 1 << 20)));
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

 private:
  SSL* ssl_;
};

// Whether `buf` holds a whole request: its head and as many body bytes as
// it declares (a chunked body is read by the worker). -1: malformed.
int RequestComplete(const std::string& buf) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  size_t length = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(buf).substr(0, end), "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)), "content-length") &&
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(colon + 1)), &length)) {
      return -1;
    }
  }
  return buf.size() >= end + 4 + length ? 1 : 0;
}

void Answer(int fd, const char* status) {
  const std::string text =
      absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  (void)!send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

std::unique_ptr<httplib::Server> HttpGate::NewRoutes() { return std::make_unique<GatedRoutes>(); }

absl::StatusOr<std::pair<int, int>> HttpGate::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    // Address reuse for a restart over TIME_WAIT, never port reuse: a
    // second server on a taken port must fail, not split the traffic.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 256) == 0) {
      std::string ip;
      int bound = 0;
      Address(fd, false, ip, bound);
      freeaddrinfo(found);
      return std::make_pair(fd, bound);
    }
    why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", why));
}

absl::StatusOr<std::unique_ptr<HttpGate>> HttpGate::Start(Options options, httplib::Server* routes,
                                                          int listen_fd, SSL_CTX* ssl) {
  if (options.workers < 1 || options.max_per_client < 1) {
    close(listen_fd);
    return absl::InvalidArgumentError("http gate: workers and max_per_client must be >= 1");
  }
  // A quarter of the process's descriptors at most: a flood of
  // connections must leave the rest (the gRPC port, the database) theirs.
  if (rlimit lim{}; getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    options.max_open = std::min<size_t>(options.max_open, std::max<rlim_t>(1, lim.rlim_cur / 4));
  }
  std::unique_ptr<HttpGate> g(new HttpGate(options, routes, listen_fd, ssl));
  if (pipe2(g->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError("http gate: pipe");
  }
  g->poller_ = std::thread([raw = g.get()] { raw->Poll(); });
  for (int i = 0; i < options.workers; ++i) {
    g->workers_.emplace_back([raw = g.get()] { raw->Work(); });
  }
  return g;
}

HttpGate::HttpGate(Options options, httplib::Server* routes, int listen_fd, SSL_CTX* ssl)
    : options_(options), routes_(routes), listen_fd_(listen_fd), ssl_(ssl) {}

HttpGate::~HttpGate() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [fd, since] : serving_) shutdown(fd, SHUT_RDWR);
  }
  ready_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  for (std::thread& w : workers_) {
    if (w.joinable()) w.join();
  }
  for (const Conn& c : ready_) close(c.fd);
  close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void HttpGate::Drop(const Conn& c) {
  close(c.fd);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_client_.find(c.client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --open_;
}

void HttpGate::Poll() {
  std::vector<Conn> waiting;
  // Out of descriptors (EMFILE): the listening socket stays readable, so it
  // is left out of poll() for a moment instead of spinning on it.
  absl::Time accept_after = absl::InfinitePast();
  while (!stop_) {
    const bool accepting = absl::Now() >= accept_after;
    std::vector<pollfd> fds = {{accepting ? listen_fd_ : -1, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    for (const Conn& w : waiting) fds.push_back({w.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    const absl::Time now = absl::Now();
    if (fds[1].revents != 0) {
      char drain[64];
      while (read(wake_[0], drain, sizeof(drain)) > 0) {
      }
    }
    // What arrived on the waiting connections: read it here (so that
    // poll() does not wake again for the same bytes); a complete request
    // goes to a worker.
    std::vector<Conn> still;
    auto ready = [&](Conn& c) {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(c));
      ready_cv_.notify_one();
    };
    for (size_t i = 0; i < waiting.size(); ++i) {
      Conn& w = waiting[i];
      const short rev = fds[i + 2].revents;
      bool keep = true;
      if (rev != 0) {
        if (ssl_ != nullptr) {
          // TLS: the handshake is the worker's, bounded by its deadline.
          ready(w);
          keep = false;
        } else {
          char chunk[8192];
          const ssize_t n = recv(w.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
          if (n > 0) w.first.append(chunk, static_cast<size_t>(n));
          const int complete = n > 0 ? RequestComplete(w.first) : 0;
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            Drop(w);
            keep = false;
          } else if (complete < 0 || w.first.size() > options_.max_request_bytes) {
            Answer(w.fd, complete < 0 ? "400 Bad Request" : "413 Content Too Large");
            Drop(w);
            keep = false;
          } else if (complete > 0) {
            ready(w);  // the bytes travel with it: the worker's stream reads them first
            keep = false;
          }
        }
      }
      if (keep && now - w.since > options_.head_deadline) {
        Answer(w.fd, "408 Request Timeout");
        Drop(w);
        ++expired_;
        keep = false;
      }
      if (keep) still.push_back(std::move(w));
    }
    waiting = std::move(still);
    // New connections: counted per client, refused past the cap.
    if (fds[0].revents != 0) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE) accept_after = now + absl::Milliseconds(100);
          break;
        }
        std::string ip;
        int port = 0;
        Address(fd, true, ip, port);
        bool refuse = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto& mine = per_client_[ip];
          refuse = mine >= options_.max_per_client || open_ >= options_.max_open;
          if (!refuse) {
            ++mine;
            ++open_;
          } else if (mine == 0) {
            per_client_.erase(ip);
          }
        }
        if (refuse) {
          // Counted before the answer: whoever reads the 503 then reads a
          // count that includes it (a loaded host showed the count first).
          ++refused_;
          Answer(fd, "503 Service Unavailable");
          close(fd);
          continue;
        }
        waiting.push_back(Conn{fd, ip, now, std::string()});
      }
    }
    // The watchdog: a worker's hold on a connection is bounded in total.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [fd, since] : serving_) {
      if (since != absl::InfiniteFuture() && now - since > options_.request_deadline) {
        shutdown(fd, SHUT_RDWR);
        since = absl::InfiniteFuture();
        ++expired_;
      }
    }
  }
  for (const Conn& w : waiting) Drop(w);
}

void HttpGate::Work() {
  // A client gone mid-answer makes a TLS write raise SIGPIPE in this
  // thread; blocked here, the write fails with EPIPE instead of ending the
  // server (plain writes use MSG_NOSIGNAL).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  for (;;) {
    Conn c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The oldest ready request whose client holds less than its share.
      const int share = std::max(1, options_.workers / 4);
      auto eligible = [&] {
        return std::find_if(ready_.begin(), ready_.end(), [&](const Conn& r) {
          auto it = serving_client_.find(r.client);
          return it == serving_client_.end() || it->second < share;
        });
      };
      ready_cv_.wait(lock, [&] { return stop_ || eligible() != ready_.end(); });
      if (stop_) return;
      auto pick = eligible();
      c = std::move(*pick);
      ready_.erase(pick);
      ++serving_client_[c.client];
      serving_[c.fd] = absl::Now();
    }
    const int timeout_ms = Millis(options_.io_timeout);
    auto* routes = static_cast<GatedRoutes*>(routes_);
    if (ssl_ == nullptr) {
      FdStream stream(c.fd, std::move(c.first), timeout_ms);
      routes->Handle(stream);
    } else {
      const int flags = fcntl(c.fd, F_GETFL);
      fcntl(c.fd, F_SETFL, flags & ~O_NONBLOCK);
      timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
      setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      SSL* ssl = SSL_new(ssl_);
      if (ssl != nullptr && SSL_set_fd(ssl, c.fd) == 1 && SSL_accept(ssl) == 1) {
        SslStream stream(c.fd, ssl, timeout_ms);
        routes->Handle(stream);
        SSL_shutdown(ssl);
      }
      if (ssl != nullptr) SSL_free(ssl);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_.erase(c.fd);
      if (--serving_client_[c.client] <= 0) serving_client_.erase(c.client);
    }
    ready_cv_.notify_all();  // its client may be under its share again
    Drop(c);
  }
}

}  // namespace infrarsi::server
