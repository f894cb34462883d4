#include "server/dashboard.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <spdlog/spdlog.h>

#include <deque>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/proto_util.h"
#include "base/status_macros.h"
#include "core/web/pages.h"
#include "server/http_gate.h"
#include "server/infrarsi_server.h"

namespace infrarsi::server {
namespace {

// The cookie holds a login session's opaque id (LoginSessions), never an
// API token: cookies are not separated by port, so any listener on this
// host name receives it.
constexpr char kCookie[] = "infrarsi_session";
// Under TLS: a browser keeps a "__Host-" cookie only if it is Secure, for
// this host alone and every path (no subdomain or plain-HTTP page can set
// or shadow it).
constexpr char kTlsCookie[] = "__Host-infrarsi_session";
constexpr char kHtml[] = "text/html; charset=utf-8";
// Nothing but this server: its script, inline styles (the pages' own) and
// fetches of its own pages; no frames, no forms elsewhere.
constexpr char kPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

int HttpCode(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

void Secure(httplib::Response& res) {
  res.set_header("Content-Security-Policy", kPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  // "same-origin", not "no-referrer": with the latter a browser sends
  // "Origin: null" on its own forms, which the login check must refuse.
  res.set_header("Referrer-Policy", "same-origin");
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Frame-Options", "DENY");
}

// "who" as the navigation bar shows it.
std::string WhoLabel(const Principal& p) {
  if (p.open) return "open server (no tokens yet)";
  return absl::StrCat(p.team.empty() ? "every team" : absl::StrCat("team ", p.team), " · ",
                      RoleName(p.role));
}

// A POST from another site's page (login CSRF): its Origin names another
// host. Browsers send Origin with every POST form.
bool CrossSite(const httplib::Request& req) {
  if (!req.has_header("Origin")) return false;
  std::string origin = req.get_header_value("Origin");
  const std::string host = req.get_header_value("Host");
  for (const char* scheme : {"http://", "https://"}) {
    if (absl::StartsWith(origin, scheme)) return origin.substr(strlen(scheme)) != host;
  }
  return true;  // "null" and anything else
}

// The Set-Cookie value that keeps login session `id` for this browser
// ("" clears it) as long as the session lives: HttpOnly (no page script
// reads it), SameSite=Strict (no other site's request carries it), and
// under TLS Secure and "__Host-".
std::string SessionCookie(bool tls, const std::string& id, absl::Duration lifetime) {
  return absl::StrCat(tls ? kTlsCookie : kCookie, "=", id, "; Path=/; HttpOnly; SameSite=Strict",
                      tls ? "; Secure" : "",
                      id.empty() ? "; Max-Age=0"
                                 : absl::StrCat("; Max-Age=", absl::ToInt64Seconds(lifetime)));
}

// Loads the server's PEM certificate chain, key and (optional) client CA
// into `ctx`; false when any of them cannot be used.
bool UsePem(SSL_CTX& ctx, const std::string& cert_pem, const std::string& key_pem,
            const std::string& client_ca_pem) {
  auto bio_of = [](const std::string& pem) {
    return BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  };
  BIO* cb = bio_of(cert_pem);
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  bool ok = cert != nullptr && SSL_CTX_use_certificate(&ctx, cert) == 1;
  // The rest of the chain, if the PEM holds one.
  while (ok) {
    X509* extra = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(&ctx, extra) != 1) {
      X509_free(extra);
      ok = false;
    }
  }
  ERR_clear_error();
  if (cert != nullptr) X509_free(cert);
  BIO_free(cb);
  BIO* kb = bio_of(key_pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  ok = ok && key != nullptr && SSL_CTX_use_PrivateKey(&ctx, key) == 1 &&
       SSL_CTX_check_private_key(&ctx) == 1;
  if (key != nullptr) EVP_PKEY_free(key);
  BIO_free(kb);
  if (ok && !client_ca_pem.empty()) {
    BIO* ab = bio_of(client_ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(&ctx);
    int n = 0;
    while (X509* ca = PEM_read_bio_X509(ab, nullptr, nullptr, nullptr)) {
      n += X509_STORE_add_cert(store, ca) == 1;
      X509_free(ca);
    }
    ERR_clear_error();
    BIO_free(ab);
    ok = n > 0;
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  return ok;
}

}  // namespace

class Dashboard::ReportCache {
 public:
  // The report of session `id` as of event `seq`: the cached one when it
  // was built at that seq, else `build`'s (cached when it succeeds). Every
  // change to a session's trials or stage is an event, so a report of the
  // same seq is the same report.
  absl::StatusOr<v1::SessionReport> Get(const std::string& id, int64_t seq,
                                        const std::function<absl::StatusOr<v1::SessionReport>()>& build) {
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(id);
      if (it != entries_.end() && it->second.first == seq) return *it->second.second;
    }
    absl::StatusOr<v1::SessionReport> r = build();
    if (!r.ok()) return r;
    absl::MutexLock lock(&mu_);
    ++builds_;
    if (!entries_.count(id)) {
      order_.push_back(id);
      if (order_.size() > kEntries) {
        entries_.erase(order_.front());
        order_.pop_front();
      }
    }
    entries_[id] = {seq, std::make_shared<const v1::SessionReport>(*r)};
    return r;
  }
  int64_t builds() const {
    absl::MutexLock lock(&mu_);
    return builds_;
  }

 private:
  static constexpr size_t kEntries = 64;
  mutable absl::Mutex mu_;
  std::map<std::string, std::pair<int64_t, std::shared_ptr<const v1::SessionReport>>> entries_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // insertion order, for eviction
  int64_t builds_ ABSL_GUARDED_BY(mu_) = 0;
};

Dashboard::Dashboard() : reports_(std::make_unique<ReportCache>()) {}

int64_t Dashboard::reports_built() const { return reports_->builds(); }

RequestCredential CredentialOf(const std::string& authorization,
                               const std::string& cookie_header) {
  RequestCredential c;
  absl::string_view a = absl::StripAsciiWhitespace(authorization);
  if (absl::ConsumePrefix(&a, "Bearer ")) {
    c.bearer = std::string(absl::StripAsciiWhitespace(a));
    return c;
  }
  for (const char* name : {kTlsCookie, kCookie}) {
    for (absl::string_view part : absl::StrSplit(cookie_header, ';')) {
      part = absl::StripAsciiWhitespace(part);
      if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
        c.session = std::string(part);
        return c;
      }
    }
  }
  return c;
}

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Create(const Options& options) {
  if (options.manager == nullptr) return absl::InvalidArgumentError("dashboard: manager is required");
  ASSIGN_OR_RETURN(const auto listen, ParseHostPort("http_listen", options.listen));
  const auto& [host, port] = listen;
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("http_listen: TLS needs both a certificate and a key");
  }
  // Tokens cross this port as they cross the gRPC one: the same rule.
  RETURN_IF_ERROR(CheckPlaintext("http_listen", "the dashboard on ", host, ResolvesToLoopbackOnly(host),
                                 !options.tls_cert_pem.empty(), options.insecure));
  std::unique_ptr<Dashboard> d(new Dashboard());
  d->options_ = options;
  LoginSessions::Options lo;
  lo.clock = options.clock;
  lo.lifetime = options.login_lifetime;
  d->logins_ = LoginSessions::Create(lo);
  // cpp-httplib parses, routes and answers; the gate owns the socket and
  // decides who gets a worker (http_gate.h).
  d->http_ = HttpGate::NewRoutes();
  if (!options.tls_cert_pem.empty()) {
    d->ssl_ctx_ = SSL_CTX_new(TLS_server_method());
    if (d->ssl_ctx_ == nullptr ||
        !UsePem(*d->ssl_ctx_, options.tls_cert_pem, options.tls_key_pem, options.tls_client_ca_pem)) {
      return absl::InvalidArgumentError(
          "http_listen: the TLS certificate, key or client CA could not be used");
    }
  }
  d->http_->set_payload_max_length(64 * 1024);  // a login form, nothing more
  d->Route();
  auto bound = HttpGate::Listen(host, port);
  if (!bound.ok()) {
    return absl::UnavailableError(
        absl::StrCat("http_listen: cannot listen on ", options.listen, ": ", bound.status().message()));
  }
  d->port_ = bound->second;
  ASSIGN_OR_RETURN(d->gate_, HttpGate::Start(options.gate, d->http_.get(), bound->first, d->ssl_ctx_));
  return d;
}

Dashboard::~Dashboard() {
  gate_.reset();  // no handler runs after this
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

int64_t Dashboard::refused_connections() const { return gate_ ? gate_->refused() : 0; }

void Dashboard::Route() {
  httplib::Server& h = *http_;
  const Options* o = &options_;  // outlives the server: captured by pointer
  const bool tls = !o->tls_cert_pem.empty();

  // The caller, or an answer already written (a redirect to the login
  // form for a browser, 401 for a script that sent a bad token).
  LoginSessions* logins = logins_.get();
  auto caller = [o, tls, logins](const httplib::Request& req,
                                 httplib::Response& res) -> std::optional<Principal> {
    const std::string authz = req.get_header_value("Authorization");
    const RequestCredential cred = CredentialOf(authz, req.get_header_value("Cookie"));
    if (o->auth == nullptr) return Principal::Open();
    // A login session stands for the token it was opened with, checked
    // again on every request: its revocation ends the session at once.
    const std::string token = cred.bearer.empty() ? logins->TokenOf(cred.session) : cred.bearer;
    absl::StatusOr<Principal> who = o->auth->Authenticate(token.empty() ? "" : absl::StrCat("Bearer ", token));
    if (who.ok()) {
      if (absl::Status st = Authorize(*who, Action::kRead); !st.ok()) {
        res.status = 403;
        res.set_content(web::ErrorPage(403, std::string(st.message()), web::PageStyle{false, WhoLabel(*who)}), kHtml);
        return std::nullopt;
      }
      return *who;
    }
    if (!authz.empty()) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content(std::string(who.status().message()) + "\n", "text/plain; charset=utf-8");
    } else {
      // A session that no longer works (expired, ended, its token revoked)
      // is ended and its cookie dropped with the visit.
      if (!cred.session.empty()) {
        logins->End(cred.session);
        res.set_header("Set-Cookie", SessionCookie(tls, "", absl::ZeroDuration()));
      }
      res.status = 303;
      res.set_header("Location", cred.session.empty() ? "/login" : "/login?expired=1");
    }
    return std::nullopt;
  };
  auto fail = [](httplib::Response& res, const absl::Status& st, const Principal& who) {
    res.status = HttpCode(st);
    res.set_content(web::ErrorPage(res.status, std::string(st.message()), web::PageStyle{false, WhoLabel(who)}), kHtml);
  };
  h.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) { Secure(res); });
  h.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(web::ErrorPage(res.status, res.status == 404 ? "no such page" : "the request failed",
                                     web::PageStyle{}),
                      kHtml);
    }
  });

  h.Get("/static/dashboard.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(web::kDashboardScript, "text/javascript; charset=utf-8");
  });
  h.Get("/login", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(web::LoginPage(req.has_param("expired") ? "That token no longer works: log in again." : ""), kHtml);
  });
  h.Post("/login", [o, tls, logins](const httplib::Request& req, httplib::Response& res) {
    if (CrossSite(req)) {
      res.status = 403;
      res.set_content(web::ErrorPage(403, "a login from another site is refused", web::PageStyle{}), kHtml);
      return;
    }
    const std::string token(absl::StripAsciiWhitespace(req.get_param_value("token")));
    absl::Status st = absl::OkStatus();
    if (token.empty()) {
      st = absl::InvalidArgumentError("token: paste an API token");
    } else if (o->auth != nullptr) {
      absl::StatusOr<Principal> who = o->auth->Authenticate(absl::StrCat("Bearer ", token));
      st = who.ok() ? Authorize(*who, Action::kRead) : who.status();
    }
    if (!st.ok()) {
      spdlog::warn("dashboard: login refused from {}: {}", req.remote_addr, std::string(st.message()));
      res.status = absl::IsInvalidArgument(st) ? 400 : absl::IsPermissionDenied(st) ? 403 : 401;
      res.set_content(web::LoginPage(std::string(st.message())), kHtml);
      return;
    }
    // An opaque session id, never the token: the page's script cannot
    // read it, no other site's request carries it, and it opens only
    // these read-only pages until logout, revocation or expiry.
    res.set_header("Set-Cookie", SessionCookie(tls, logins->Start(token), o->login_lifetime));
    res.status = 303;
    res.set_header("Location", "/");
  });
  h.Post("/logout", [tls, logins](const httplib::Request& req, httplib::Response& res) {
    if (CrossSite(req)) {  // another site must not log a user out either
      res.status = 403;
      res.set_content(web::ErrorPage(403, "a logout from another site is refused", web::PageStyle{}), kHtml);
      return;
    }
    // Ended on the server: the id is worthless even where it was copied.
    logins->End(CredentialOf("", req.get_header_value("Cookie")).session);
    res.set_header("Set-Cookie", SessionCookie(tls, "", absl::ZeroDuration()));
    res.status = 303;
    res.set_header("Location", "/login");
  });
  h.Get("/", [o, caller, fail](const httplib::Request& req, httplib::Response& res) {
    auto who = caller(req, res);
    if (!who) return;
    v1::ListSessionsRequest r;
    r.set_page_size(200);
    r.set_page_token(req.get_param_value("page_token"));
    auto list = o->manager->ListSessions(r, *who);
    if (!list.ok()) return fail(res, list.status(), *who);
    res.set_content(web::SessionListPage(*list, web::PageStyle{false, WhoLabel(*who)}), kHtml);
  });
  // /sessions/<id>, /sessions/<id>/content, /sessions/<id>/report.json
  ReportCache* cache = reports_.get();
  h.Get(R"(/sessions/([A-Za-z0-9._-]+)(/content|/report\.json)?)",
        [o, caller, fail, cache](const httplib::Request& req, httplib::Response& res) {
          auto who = caller(req, res);
          if (!who) return;
          const std::string id = req.matches[1];
          const std::string part = req.matches[2];
          // The summary first: it checks the caller may read the session
          // and names the event its state is as of.
          auto summary = o->manager->GetSession(id, *who);
          if (!summary.ok()) return fail(res, summary.status(), *who);
          auto report = cache->Get(id, summary->last_event_seq(),
                                   [&] { return o->manager->Report(id, *who); });
          if (!report.ok()) return fail(res, report.status(), *who);
          if (part == "/report.json") {
            res.set_content(ToStableJson(*report), "application/json");  // as `report --json`
            return;
          }
          res.set_content(part == "/content" ? web::SessionContent(*report, *summary)
                                             : web::SessionPage(*report, *summary,
                                                                web::PageStyle{false, WhoLabel(*who)}),
                          kHtml);
        });
  // What a trial printed, as text: the same team rules as its report.
  h.Get(R"(/sessions/([A-Za-z0-9._-]+)/trials/([0-9]{1,18})/(stdout|stderr))",
        [o, caller, fail](const httplib::Request& req, httplib::Response& res) {
          auto who = caller(req, res);
          if (!who) return;
          v1::GetTrialLogRequest r;
          r.set_session_id(req.matches[1]);
          r.set_trial_id(std::stoll(req.matches[2]));
          r.set_stream(req.matches[3]);
          auto log = o->manager->GetTrialLog(r, *who);
          if (!log.ok()) return fail(res, log.status(), *who);
          std::string text;
          if (log->dropped_bytes() > 0) {
            text = absl::StrCat("[the first ", log->dropped_bytes(), " bytes were not kept]\n");
          }
          text += log->content();
          res.set_header("Content-Disposition", "inline");
          res.set_content(text, "text/plain; charset=utf-8");
        });
  h.Get("/agents", [o, caller, fail](const httplib::Request& req, httplib::Response& res) {
    auto who = caller(req, res);
    if (!who) return;
    v1::ListAgentsRequest r;
    r.set_include_gone(req.get_param_value("gone") == "1");
    auto agents = o->manager->ListAgents(r, *who);
    if (!agents.ok()) return fail(res, agents.status(), *who);
    res.set_content(web::AgentsPage(*agents, absl::ToUnixMillis(o->clock->Now()), web::PageStyle{false, WhoLabel(*who)}),
                    kHtml);
  });
  h.Get("/bank", [o, caller, fail](const httplib::Request& req, httplib::Response& res) {
    auto who = caller(req, res);
    if (!who) return;
    v1::QueryExperienceRequest q;
    q.set_workload_signature(req.get_param_value("workload"));
    q.set_gpu_model(req.get_param_value("gpu"));
    q.set_status(req.get_param_value("status"));
    q.set_purpose(req.get_param_value("purpose"));
    q.set_order(req.get_param_value("order"));
    q.set_page_token(req.get_param_value("page_token"));
    q.set_page_size(100);
    auto entries = o->manager->QueryExperience(q, *who);
    if (!entries.ok()) return fail(res, entries.status(), *who);
    res.set_content(web::BankPage(*entries, q, web::PageStyle{false, WhoLabel(*who)}), kHtml);
  });
}

}  // namespace infrarsi::server
