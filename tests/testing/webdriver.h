// Test helper: headless Chromium driven through ChromeDriver's W3C WebDriver
// protocol (JSON over HTTP on loopback), for tests that check what a
// browser renders. Debian's chromium and chromium-driver packages; no
// download, no network.
#ifndef INFRARSI_TESTS_TESTING_WEBDRIVER_H_
#define INFRARSI_TESTS_TESTING_WEBDRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "tests/testing/subprocess.h"

namespace infrarsi::testing {

class Browser {
 public:
  // Where Debian puts them; "" when either is missing (the test skips,
  // saying so).
  static std::string MissingBinaries();
  // Starts chromedriver (any free port) and one headless Chromium session
  // with a fresh profile and a `width` x `height` window; `log_dir` gets
  // chromedriver's log.
  static absl::StatusOr<std::unique_ptr<Browser>> Start(const std::string& log_dir, int width,
                                                        int height);
  ~Browser();  // ends the session and chromedriver

  absl::Status Navigate(const std::string& url);
  // Runs `script` (a function body: `return ...;`) in the page with `args`
  // (JSON values, e.g. "\"text\"" or "3") and returns its value.
  absl::StatusOr<google::protobuf::Value> Execute(const std::string& script,
                                                  const std::vector<std::string>& args = {});
  // Runs an async script: its last argument is the callback to call with
  // the result (the script may wait on the page's own events); fails after
  // `timeout_ms`.
  absl::StatusOr<google::protobuf::Value> ExecuteAsync(const std::string& script, int timeout_ms);
  // A real user's input: types into / clicks the element `css` selects.
  absl::Status Type(const std::string& css, const std::string& text);
  absl::Status Click(const std::string& css);
  // Clicks a link or a form's button and waits until the page it leads to
  // has loaded (a click returns before the navigation it starts ends).
  absl::Status ClickAndLoad(const std::string& css);
  // The page as the browser shows it (PNG bytes).
  absl::StatusOr<std::string> Screenshot();

 private:
  Browser() = default;
  absl::StatusOr<google::protobuf::Value> Call(const std::string& method, const std::string& path,
                                               const std::string& body);
  absl::StatusOr<std::string> Find(const std::string& css);
  std::unique_ptr<Subprocess> driver_;
  int port_ = 0;
  std::string session_;
};

// A JSON string literal of `text` (for Execute's args).
std::string JsonString(const std::string& text);

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_WEBDRIVER_H_
