#include "tests/testing/webdriver.h"

#include <httplib.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi::testing {
namespace {

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kDriver[] = "/usr/bin/chromedriver";
// W3C WebDriver's key for an element reference.
constexpr char kElement[] = "element-6066-11e4-a52e-4f735466cecf";

}  // namespace

std::string JsonString(const std::string& text) {
  google::protobuf::Value v;
  v.set_string_value(text);
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(v, &out);
  return out;
}

std::string Browser::MissingBinaries() {
  std::vector<std::string> missing;
  for (const char* p : {kChromium, kDriver}) {
    if (access(p, X_OK) != 0) missing.push_back(p);
  }
  return absl::StrJoin(missing, ", ");
}

absl::StatusOr<std::unique_ptr<Browser>> Browser::Start(const std::string& log_dir, int width,
                                                        int height) {
  if (const std::string missing = MissingBinaries(); !missing.empty()) {
    return absl::NotFoundError(absl::StrCat("not installed: ", missing));
  }
  std::unique_ptr<Browser> b(new Browser());
  b->driver_ = std::make_unique<Subprocess>(
      std::vector<std::string>{kDriver, "--port=0", absl::StrCat("--log-path=", log_dir, "/chromedriver.log")},
      log_dir + "/chromedriver.err");
  const std::string port = b->driver_->WaitForLinePrefix("ChromeDriver was started successfully on port ");
  if (!absl::SimpleAtoi(absl::StripSuffix(port, "."), &b->port_) || b->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("chromedriver did not start (said '", port, "')"));
  }
  // Headless, with a fresh profile, and without the background traffic a
  // closed network refuses (see the machine notes).
  std::vector<std::string> args = {"--headless=new", "--no-sandbox", "--disable-gpu",
                                   "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                                   "--disable-background-networking", "--disable-component-update",
                                   "--disable-sync", "--hide-scrollbars",
                                   absl::StrCat("--user-data-dir=", log_dir, "/profile"),
                                   absl::StrCat("--window-size=", width, ",", height)};
  std::vector<std::string> quoted;
  for (const std::string& a : args) quoted.push_back(JsonString(a));
  const std::string caps = absl::StrCat(
      R"({"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"binary":)",
      JsonString(kChromium), R"(,"args":[)", absl::StrJoin(quoted, ","), "]}}}}");
  auto v = b->Call("POST", "/session", caps);
  if (!v.ok()) return v.status();
  const auto& fields = v->struct_value().fields();
  auto it = fields.find("sessionId");
  if (it == fields.end()) return absl::UnavailableError("chromedriver: no session id");
  b->session_ = it->second.string_value();
  return b;
}

Browser::~Browser() {
  if (!session_.empty()) (void)Call("DELETE", "/session/" + session_, "");
  if (driver_) driver_->Signal(SIGTERM);
}

absl::StatusOr<google::protobuf::Value> Browser::Call(const std::string& method, const std::string& path,
                                                      const std::string& body) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(120, 0);
  httplib::Result res = method == "GET"      ? c.Get(path.c_str())
                        : method == "DELETE" ? c.Delete(path.c_str())
                                             : c.Post(path.c_str(), body, "application/json");
  if (!res) return absl::UnavailableError(absl::StrCat("chromedriver: ", httplib::to_string(res.error())));
  google::protobuf::Value whole;
  if (!google::protobuf::util::JsonStringToMessage(res->body, &whole).ok()) {
    return absl::InternalError(absl::StrCat("chromedriver answered non-JSON: ", res->body.substr(0, 200)));
  }
  const auto& f = whole.struct_value().fields();
  auto value = f.find("value");
  google::protobuf::Value out = value == f.end() ? google::protobuf::Value() : value->second;
  if (res->status != 200) {
    const auto& e = out.struct_value().fields();
    auto msg = e.find("message");
    return absl::InternalError(absl::StrCat(method, " ", path, ": HTTP ", res->status, ": ",
                                            msg == e.end() ? res->body.substr(0, 300)
                                                           : msg->second.string_value().substr(0, 600)));
  }
  return out;
}

absl::Status Browser::Navigate(const std::string& url) {
  return Call("POST", absl::StrCat("/session/", session_, "/url"), absl::StrCat("{\"url\":", JsonString(url), "}"))
      .status();
}

absl::StatusOr<google::protobuf::Value> Browser::Execute(const std::string& script,
                                                         const std::vector<std::string>& args) {
  return Call("POST", absl::StrCat("/session/", session_, "/execute/sync"),
              absl::StrCat("{\"script\":", JsonString(script), ",\"args\":[", absl::StrJoin(args, ","), "]}"));
}

absl::StatusOr<google::protobuf::Value> Browser::ExecuteAsync(const std::string& script, int timeout_ms) {
  auto t = Call("POST", absl::StrCat("/session/", session_, "/timeouts"),
                absl::StrCat("{\"script\":", timeout_ms, "}"));
  if (!t.ok()) return t.status();
  return Call("POST", absl::StrCat("/session/", session_, "/execute/async"),
              absl::StrCat("{\"script\":", JsonString(script), ",\"args\":[]}"));
}

absl::StatusOr<std::string> Browser::Find(const std::string& css) {
  auto v = Call("POST", absl::StrCat("/session/", session_, "/element"),
                absl::StrCat(R"({"using":"css selector","value":)", JsonString(css), "}"));
  if (!v.ok()) return v.status();
  const auto& f = v->struct_value().fields();
  auto it = f.find(kElement);
  if (it == f.end()) return absl::NotFoundError(absl::StrCat("no element ", css));
  return it->second.string_value();
}

absl::Status Browser::Type(const std::string& css, const std::string& text) {
  auto e = Find(css);
  if (!e.ok()) return e.status();
  return Call("POST", absl::StrCat("/session/", session_, "/element/", *e, "/value"),
              absl::StrCat("{\"text\":", JsonString(text), "}"))
      .status();
}

absl::Status Browser::Click(const std::string& css) {
  auto e = Find(css);
  if (!e.ok()) return e.status();
  return Call("POST", absl::StrCat("/session/", session_, "/element/", *e, "/click"), "{}").status();
}

absl::Status Browser::ClickAndLoad(const std::string& css) {
  auto marked = Execute("window.__infrarsiOldPage = true; return 0;");
  if (!marked.ok()) return marked.status();
  if (absl::Status st = Click(css); !st.ok()) return st;
  // The old page never answers: the driver reports its unloading and the
  // next try runs in the new page, which answers once it has loaded.
  absl::Status last;
  for (int i = 0; i < 5; ++i) {
    auto v = ExecuteAsync(
        "const done = arguments[arguments.length - 1];"
        "if (window.__infrarsiOldPage) return;"
        "if (document.readyState === 'complete') done(true);"
        "else window.addEventListener('load', () => done(true));",
        20000);
    if (v.ok()) return absl::OkStatus();
    last = v.status();
  }
  return absl::DeadlineExceededError(absl::StrCat("clicking ", css, " loaded no page: ", last.message()));
}

absl::StatusOr<std::string> Browser::Screenshot() {
  auto v = Call("GET", absl::StrCat("/session/", session_, "/screenshot"), "");
  if (!v.ok()) return v.status();
  std::string png;
  if (!absl::Base64Unescape(v->string_value(), &png)) return absl::InternalError("screenshot: not base64");
  return png;
}

}  // namespace infrarsi::testing
