// infrarsi: the command line for cluster teams. Flags are parsed here only.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/credential_flags.h"
#include "client/cli/demo.h"
#include "client/cli/draft_cmd.h"
#include "client/cli/local_apply.h"
#include "client/cli/report_format.h"
#include "client/rpc_client.h"
#include "client/terminal_safe.h"
#include "base/file_util.h"
#include "core/web/pages.h"
#include "core/stage.h"
#include "core/sim_landscape.h"
#include "core/spec.h"

namespace {

using infrarsi::client::RpcClient;
namespace v1 = infrarsi::v1;

// `infrarsi sim optimum SPEC`: the simulator's ground truth for a spec.
int SimOptimum(const std::string& path, int top, bool json);

// The server address the CLI was given, for errors that never reached it.
std::string g_server;

// gRPC's words for a server that never answered, said in ours: the address
// tried, the flag that names it, and whether anything answered there.
std::string Unreachable(const absl::Status& st) {
  if (st.code() != absl::StatusCode::kUnavailable && st.code() != absl::StatusCode::kDeadlineExceeded) {
    return "";
  }
  const std::string m(st.message());
  std::string why;
  if (absl::StrContains(m, "http1.x") || absl::StrContains(m, "Trying to connect an http")) {
    why = "something answered, but not as an infrarsi-server's gRPC port (the dashboard's "
          "--http-listen port, or another HTTP server?)";
  } else if (absl::StrContains(m, "DNS resolution failed") || absl::StrContains(m, "Name or service not known")) {
    why = "the host name does not resolve (--server takes HOST:PORT, without http://)";
  } else if (absl::StrContains(m, "Connection refused") || absl::StrContains(m, "failed to connect") ||
             absl::StrContains(m, "Failed to connect")) {
    why = "nothing is listening there (is infrarsi-server running, on that port?)";
  } else if (st.code() == absl::StatusCode::kDeadlineExceeded && absl::StrContains(m, "onnect")) {
    why = "no answer in time (a firewall, or a host that is down?)";
  } else {
    return "";
  }
  return absl::StrCat("cannot reach infrarsi-server at ", g_server, ": ", why,
                      ". Point --server at the server's --listen address "
                      "(infrarsi --server HOST:PORT COMMAND ...). [gRPC said: ", m, "]");
}

// Exit codes by the failure's class (README.md and `infrarsi --help` list
// them): scripts tell a typo from a missing session from a server that is
// down without reading the message.
constexpr int kExitFailed = 1;       // the operation ran and failed (a stage failed, an internal error)
constexpr int kExitUsage = 2;        // bad flags, arguments or input (INVALID_ARGUMENT)
constexpr int kExitNotFound = 3;     // no such session, trial or agent (NOT_FOUND)
constexpr int kExitPermission = 4;   // PERMISSION_DENIED, UNAUTHENTICATED
constexpr int kExitUnavailable = 5;  // the server cannot be reached, or the wait ran out
constexpr int kExitState = 6;        // not now: the wrong stage, already done (FAILED_PRECONDITION, ALREADY_EXISTS)
constexpr int kExitInterrupted = 130;

int ExitCodeOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitPermission;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
      return kExitState;
    default:
      return kExitFailed;
  }
}

int Fail(const absl::Status& st) {
  if (std::string u = Unreachable(st); !u.empty()) {
    std::cerr << "error: " << u << " [" << absl::StatusCodeToString(st.code()) << "]\n";
    return kExitUnavailable;
  }
  std::cerr << "error: " << st.message() << " [" << absl::StatusCodeToString(st.code())
            << "]\n";
  return ExitCodeOf(st.code());
}

// Ctrl-C while the CLI follows a session: the session goes on on the
// server, and the user is told so and how to come back. The message is
// made before the handler is installed (a handler may only write).
std::string g_interrupt_message;
void OnInterrupt(int) {
  const ssize_t n = ::write(STDERR_FILENO, g_interrupt_message.data(), g_interrupt_message.size());
  (void)n;
  ::_exit(kExitInterrupted);
}
void HintOnInterrupt(const std::string& id) {
  g_interrupt_message = absl::StrCat(
      "\ninterrupted: session ", id, " goes on on the server (interrupting does not stop it).\n"
      "  re-attach: infrarsi watch ", id, "\n  stop it:   infrarsi cancel ", id, "\n");
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// What the user runs next in a stage that waits for them, or to read what
// a finished one did.
std::string NextCommand(const v1::SessionSummary& s) {
  const std::string& id = s.session_id();
  switch (s.stage()) {
    case v1::STAGE_INITIALIZED:
      return absl::StrCat("infrarsi doctor ", id);
    case v1::STAGE_DOCTORED:
      return absl::StrCat("infrarsi run ", id);
    case v1::STAGE_SEARCHED:
      return s.promoted() ? absl::StrCat("infrarsi report ", id, "; then infrarsi apply ", id,
                                         " --repo CLONE --branch infrarsi/tuned --dry-run")
                          : absl::StrCat("infrarsi report ", id);
    case v1::STAGE_FAILED:
    case v1::STAGE_CANCELLED:
    case v1::STAGE_APPLIED:
      return absl::StrCat("infrarsi report ", id);
    default:
      return "";
  }
}

// One trial's line as `doctor`, `run` and `watch` print it.
void PrintTrialLine(const v1::TrialView& t, const v1::SessionSummary& s) {
  const std::string time =
      t.status() == "ok" ? absl::StrFormat("%.4fs", t.step_time_s()) : std::string("-");
  if (t.purpose() == "doctor" || t.purpose() == "verify") {
    std::cerr << absl::StrFormat("  %s: trial %-4d %-9s %-10s on %s %s\n",
                                 t.purpose() == "doctor" ? "baseline run" : "verify", t.id(),
                                 t.status(), time, t.agent(), t.tag());
    return;
  }
  // A search trial's "best" is unverified until the A/B runs promote it.
  std::cerr << absl::StrFormat(
      "  trial %-4d %-7s %-10s done %d/%d  best so far %.4f s (%.2fx, unverified)  %s\n", t.id(),
      t.status(), time, s.trials_done(), s.trials_planned(), s.best_step_time_s(),
      s.best_speedup(), infrarsi::client::FormatConfig(t.config()));
}

// Follows a Doctor or Run stage (with its verification; any stage to the
// session's end for kAny) from event `after_seq`, printing each finished
// trial and, once each, why work waits and which hosts were quarantined.
constexpr v1::Stage kAny = v1::STAGE_UNSPECIFIED;
absl::StatusOr<v1::SessionSummary> Follow(RpcClient& c, const std::string& id, v1::Stage stage,
                                          double timeout_s, int64_t after_seq = 0) {
  std::string said;  // the notice last printed
  std::set<int64_t> printed;  // trials whose line was printed
  // Trials already finished when a `watch` began are not news; those of
  // the stage a `doctor` or `run` follows always are.
  std::set<int64_t> known;
  bool first = true;
  HintOnInterrupt(id);
  return c.Watch(id, absl::Seconds(timeout_s), [&](const v1::SessionEvent& ev) {
    const v1::Stage now = ev.session().stage();
    // `watch` stops where the session waits for its user (nothing happens
    // until they run the next command) or is finished.
    const bool going = stage == kAny ? !infrarsi::IsFinishedStage(now) &&
                                           !infrarsi::WaitsForUser(now)
                                     : now == stage || (stage == v1::STAGE_RUNNING &&
                                                        now == v1::STAGE_VERIFYING);
    if (ev.kind() == "snapshot" && (!first || after_seq > 0 || stage == kAny)) {
      // A snapshot mid-stream: the server restarted (or let go of the
      // events after the last one seen). What finished meanwhile is read
      // from the report and printed, so no trial's line is missed.
      auto rep = c.Report(id);
      if (rep.ok()) {
        const bool catch_up = !first || after_seq > 0;
        int missed = 0;
        for (const v1::TrialView& t : rep->trials()) {
          const bool done = t.status() != "queued" && t.status() != "leased" && t.status() != "running";
          if (!done || printed.count(t.id()) || known.count(t.id())) continue;
          const bool of_stage = stage == kAny ||
                                (stage == v1::STAGE_DOCTORING ? t.purpose() == "doctor"
                                                              : t.purpose() != "doctor");
          if (!catch_up || !of_stage) {
            known.insert(t.id());  // before this follow began
            continue;
          }
          if (missed++ == 0) {
            std::cerr << "  (reconnected: the server restarted or let go of events; the trials "
                         "that finished meanwhile follow)\n";
          }
          printed.insert(t.id());
          PrintTrialLine(t, ev.session());
        }
      }
    }
    first = false;
    const std::string& notice = ev.session().notice();
    if ((ev.kind() == "notice" || ev.kind() == "snapshot") && notice != said) {
      if (!notice.empty()) std::cerr << "  waiting: " << notice << "\n";
      else if (!said.empty()) std::cerr << "  " << ev.message() << "\n";
      said = notice;
    }
    if (ev.kind() == "agent_quarantined") std::cerr << "  ! " << ev.message() << "\n";
    if (stage == kAny && ev.kind() == "stage_changed") {
      std::cerr << "  stage: " << ev.session().stage_name() << "\n";
    }
    if (ev.kind() != "trial_finished") return going;
    if (!printed.insert(ev.trial().id()).second) return going;  // printed on a catch-up
    PrintTrialLine(ev.trial(), ev.session());
    return going;
  }, after_seq);
}

// The client config file: $INFRARSI_CONFIG (which must exist), else
// ~/.config/infrarsi/config if there is one. `key = value` lines; `#`
// starts a comment. It fills only what no flag and no environment variable
// set. An unknown key is an error naming the file and line.
absl::Status ApplyClientConfig(CLI::Option* server_opt, std::string* server,
                               infrarsi::client::CredentialFlags* creds, CLI::Option* wait_opt,
                               double* wait_s) {
  std::string path;
  bool must_exist = false;
  if (const char* env = std::getenv("INFRARSI_CONFIG"); env != nullptr && env[0] != '\0') {
    path = env;
    must_exist = true;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    path = absl::StrCat(home, "/.config/infrarsi/config");
  } else {
    return absl::OkStatus();
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return must_exist ? absl::InvalidArgumentError(absl::StrCat(
                            "INFRARSI_CONFIG: no such file: ", path))
                      : absl::OkStatus();
  }
  auto text = infrarsi::ReadRegularFile(path, 64 << 10, "config");
  if (!text.ok()) return text.status();
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": expected `key = value`, got '", line, "'"));
    }
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (key == "server") {
      if (server_opt->count() == 0) *server = value;
    } else if (key == "token-file") {
      if (creds->token_file.empty() && std::getenv("INFRARSI_TOKEN") == nullptr) creds->token_file = value;
    } else if (key == "tls-ca") {
      if (creds->tls_ca.empty()) creds->tls_ca = value;
    } else if (key == "tls-cert") {
      if (creds->tls_cert.empty()) creds->tls_cert = value;
    } else if (key == "tls-key") {
      if (creds->tls_key.empty()) creds->tls_key = value;
    } else if (key == "wait-s") {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || v <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_no, ": wait-s: expected seconds, got '", value, "'"));
      }
      if (wait_opt->count() == 0) *wait_s = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": unknown key '", key,
          "' (known: server, token-file, tls-ca, tls-cert, tls-key, wait-s)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // Whatever a server sends is printed with its control characters shown,
  // never obeyed by the terminal.
  infrarsi::client::InstallTerminalSafeOutput();
  // Logs go to stderr: stdout carries what the user asked for (--json a
  // script parses); spdlog's default logger writes to stdout.
  spdlog::set_default_logger(spdlog::stderr_color_mt("infrarsi"));
  CLI::App app{
      "infrarsi: submit and follow InfraRSI tuning sessions (init, doctor, run, report, "
      "apply), query the experience bank, or run the self-contained demo."};
  app.set_version_flag("--version", std::string("infrarsi ") + INFRARSI_VERSION);
  app.require_subcommand(1);
  // Global flags work anywhere on the line (`infrarsi status ID --server
  // H:P`): every subcommand hands what it does not know to its parent.
  app.fallthrough();
  app.footer(
      "Global flags (--server, --json, --wait-s, --token-file, --tls-*) go before or after the "
      "command. --server defaults to $INFRARSI_SERVER, then the config file's `server`, then "
      "127.0.0.1:7420; --token-file to $INFRARSI_TOKEN_FILE, then the config file's "
      "`token-file`. Config file: $INFRARSI_CONFIG or ~/.config/infrarsi/config (key = value "
      "lines: server, token-file, tls-ca, tls-cert, tls-key, wait-s).\n"
      "Exit codes: 0 ok; 1 failed (a stage failed, an internal error); 2 usage (bad flags, "
      "arguments or input); 3 not found; 4 permission denied; 5 server unreachable or the wait "
      "ran out; 6 not now (the wrong stage, already done); 130 interrupted (the session goes "
      "on).");
  RpcClient::Options co;
  co.server = "";
  double wait_s = 3600;
  CLI::Option* server_opt =
      app.add_option("--server", co.server,
                     "infrarsi-server HOST:PORT (default: $INFRARSI_SERVER, the config file, "
                     "127.0.0.1:7420)")
          ->envname("INFRARSI_SERVER");
  CLI::Option* wait_opt =
      app.add_option("--wait-s", wait_s, "how long doctor/run/watch wait for their stage to finish")
          ->capture_default_str();
  bool json = false;
  app.add_flag("--json", json, "JSON output (every command that prints)");

  // session create
  auto* session = app.add_subcommand("session", "manage sessions");
  session->require_subcommand(1);
  std::string spec_path;
  auto* create = session->add_subcommand(
      "create", "init: validate SPEC.yaml, lock its contract; prints the new session id");
  create->add_option("spec", spec_path, "session spec (YAML)")->required();

  std::string id;
  int repeats = 0;
  auto* doctor = app.add_subcommand("doctor", "run the baseline repeatedly: median, CV, drift, phases, outlier hosts, noise floor");
  doctor->add_option("id", id, "session id")->required();
  doctor->add_option("--repeats", repeats, "baseline runs (0: the spec's doctor.repeats)");
  bool detach = false;
  doctor->add_flag("--detach", detach,
                   "start the stage and return (follow it later with `infrarsi watch ID`)");

  int max_trials = 0;
  auto* run = app.add_subcommand("run", "search the knob space, then re-verify the top candidates against the baseline (A/B); "
                        "shows progress");
  run->add_option("id", id, "session id")->required();
  run->add_option("--max-trials", max_trials, "trial budget (0: the spec's budget.max_trials)");
  run->add_flag("--detach", detach,
                "start the stage and return (follow it later with `infrarsi watch ID`)");
  auto* report = app.add_subcommand("report", "contract, doctor, best setting, verification intervals, every trial, violations and "
                           "failure costs");
  report->add_option("id", id, "session id")->required();
  std::string html_path;
  report->add_option("--html", html_path,
                     "write the report as one self-contained HTML file instead (plots included; "
                     "opens without a network); with --json, the JSON too");

  int64_t log_trial = 0;
  bool log_stderr = false, log_raw = false;
  auto* logs = app.add_subcommand(
      "logs", "what a trial printed: the last MiB of its stdout (or --stderr), kept by the server");
  logs->add_option("id", id, "session id")->required();
  logs->add_option("trial", log_trial, "trial id (report lists them)")->required();
  logs->add_flag("--stderr", log_stderr, "the trial's stderr instead of its stdout");
  logs->add_flag("--raw", log_raw,
                 "the bytes as the trial wrote them (default: control characters shown escaped)");

  std::string repo, branch;
  bool dry_run = false;
  auto* apply = app.add_subcommand(
      "apply", "commit the promoted setting to a new branch of a git repository");
  apply->add_option("id", id, "session id")->required();
  repo = ".";
  apply->add_option("--repo", repo,
                    "your clone of the repository to commit into, on this host (the server "
                    "writes into no repository)")
      ->capture_default_str();
  apply->add_option("--branch", branch,
                    "new branch to create (a retry finds the same commit there)")
      ->required();
  apply->add_flag("--dry-run", dry_run, "show the commit without making it");

  auto* watch = app.add_subcommand(
      "watch", "re-attach to a session in any stage: its progress until it finishes");
  watch->add_option("id", id, "session id")->required();

  auto* agents = app.add_subcommand(
      "agents", "the agents you may see: host, GPUs, executors, last seen, trials, state");
  bool all_agents = false;
  agents->add_flag("--all", all_agents, "deregistered agents too");
  std::string agent_id, agent_reason;
  std::map<std::string, CLI::App*> agent_actions;
  for (const auto& [name, help] :
       std::vector<std::pair<std::string, std::string>>{
           {"drain", "admin: finish what it holds, take no more work"},
           {"quarantine", "admin: take no work until resumed"},
           {"resume", "admin: take work again"}}) {
    CLI::App* a = agents->add_subcommand(name, help);
    a->add_option("agent_id", agent_id, "agent id")->required();
    if (name != "resume") a->add_option("--reason", agent_reason, "shown with its state");
    agent_actions[name] = a;
  }

  auto* cancel = app.add_subcommand("cancel", "cancel a session and its queued trials");
  cancel->add_option("id", id, "session id")->required();

  auto* status = app.add_subcommand("status", "one session's summary");
  status->add_option("id", id, "session id")->required();

  auto* sessions = app.add_subcommand("sessions", "list sessions, newest first");
  v1::ListSessionsRequest lq;
  int list_page_size = 100;
  std::string list_page_token;
  sessions->add_option("--page-size", list_page_size, "sessions per page (max 1000)")
      ->capture_default_str();
  sessions->add_option("--page-token", list_page_token, "from a previous page");

  auto* bank = app.add_subcommand("bank", "the experience bank");
  bank->require_subcommand(1);
  v1::QueryExperienceRequest bq;
  std::string gpu, workload, bstatus, page_token, purpose, order;
  std::vector<std::string> knobs;
  int page_size = 50;
  auto* query = bank->add_subcommand("query", "finished trials of every session");
  query->add_option("--gpu", gpu, "GPU model (case-insensitive)");
  query->add_option("--workload", workload, "workload signature, e.g. gpt-354m/gb16/seq2048");
  query->add_option("--knob", knobs, "KNOB=VALUE the setting must have (repeatable)");
  query->add_option("--status", bstatus, "ok, oom, failed, timeout, violation, cancelled, pruned");
  query->add_option("--purpose", purpose, "doctor, search or verify");
  query->add_option("--order", order, "newest (default), oldest, or fastest (ok trials by step time)");
  query->add_option("--page-size", page_size, "entries per page (max 1000)")
      ->capture_default_str();
  query->add_option("--page-token", page_token, "from a previous page");

  auto* sim = app.add_subcommand("sim", "the cluster simulator");
  sim->require_subcommand(1);
  int top = 5;
  auto* optimum = sim->add_subcommand(
      "optimum", "enumerate a sim spec's whole knob space (noise-free) and print the true best "
                 "setting, its step time and MFU, and how many settings OOM or fail");
  optimum->add_option("spec", spec_path, "session spec with an executor.sim section")->required();
  optimum->add_option("--top", top, "how many of the fastest settings to list")
      ->capture_default_str();

  infrarsi::client::DemoOptions demo_opts;
  auto* demo = app.add_subcommand(
      "demo", "embedded server + 2 replay agents on the measured H200 landscape, all five "
              "stages, nothing to set up");
  demo->add_option("--workdir", demo_opts.workdir, "keep everything in this folder");
  demo->add_flag("--keep", demo_opts.keep, "keep the temporary work folder");
  demo->add_option("--agents", demo_opts.agents, "replay agents")->capture_default_str()
      ->check(CLI::Range(1, 16));
  demo->add_option("--max-trials", demo_opts.max_trials, "trial budget (0: the spec's)");

  infrarsi::client::DraftOptions draft_opts;
  std::vector<std::string> draft_cmd;
  int64_t draft_seed = -1;
  double llm_timeout_s = 60;
  auto* draft = app.add_subcommand(
      "draft", "draft a session spec from the training command you run: "
               "infrarsi draft --gpu H100 [--gpus N] [--intent TEXT] [-o spec.yaml] -- torchrun ... train.py --flags");
  draft->add_option("--gpu", draft_opts.input.gpu, "the GPU model (hardware.gpu), e.g. H100, A100-80GB, cpu")
      ->required();
  draft->add_option("--gpus", draft_opts.input.gpus, "GPUs in all (default: what the launcher starts)");
  draft->add_option("--intent", draft_opts.input.intent, "what you want, in a sentence (kept as a comment)");
  draft->add_option("--name", draft_opts.input.name, "the session's name (default: script-gpu-xN)");
  draft->add_option("--model", draft_opts.input.model, "workload.model (default: from the script and its sizes)");
  draft->add_option("--global-batch", draft_opts.input.global_batch,
                    "global batch, when the command has no batch flag");
  draft->add_option("--seq-len", draft_opts.input.seq_len, "sequence length, when the command has no such flag");
  draft->add_option("--data-seed", draft_seed, "the data seed, when the command has no --seed flag");
  draft->add_option("--repo", draft_opts.repo,
                    "the job's git repository: trials run in its work trees; its Python files give the "
                    "editable and protected scope");
  draft->add_option("--workdir", draft_opts.workdir, "else the folder the command runs in (default: here)");
  draft->add_option("-o,--out", draft_opts.out, "write the spec to this new file (default: stdout)");
  draft->add_option("--timeout-s", draft_opts.input.timeout_s, "a trial's time limit (default 1800; 300 on cpu)");
  draft->add_option("--reader", draft_opts.input.reader,
                    "where the steps come from: megatron, torchtitan, deepspeed, hf_trainer, jsonl, regex "
                    "or harness (default: chosen from the command's framework)");
  draft->add_option("--pattern", draft_opts.input.reader_pattern,
                    "with --reader regex: an RE2 pattern with named groups, (?P<loss>...) at least "
                    "(step, step_time_s, step_time_ms, tokens, peak_mem_gib also read)");
  draft->add_option("--llm-endpoint", draft_opts.llm_endpoint,
                    "an OpenAI-compatible base URL whose model may add knobs (each validated); API key "
                    "from INFRARSI_LLM_API_KEY");
  draft->add_option("--llm-model", draft_opts.llm_model, "the model's name (with --llm-endpoint)");
  draft->add_option("--llm-timeout-s", llm_timeout_s, "how long to wait for its answer")->capture_default_str();
  draft->add_option("command", draft_cmd, "the launch command, after --")->required();

  infrarsi::client::CredentialFlags cred_flags;
  cred_flags.AddTo(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    (void)app.exit(e);  // prints what is wrong
    return kExitUsage;
  }
  // The client config file fills what neither a flag nor the environment
  // gave.
  if (absl::Status st = ApplyClientConfig(server_opt, &co.server, &cred_flags, wait_opt, &wait_s);
      !st.ok()) {
    std::cerr << "error: " << st.message() << "\n";
    return kExitUsage;
  }
  if (co.server.empty()) co.server = "127.0.0.1:7420";
  {
    auto creds = cred_flags.Resolve();
    if (!creds.ok()) {
      std::fprintf(stderr, "%s\n", std::string(creds.status().message()).c_str());
      return 2;
    }
    co.token = creds->token;
    co.tls = creds->tls;
  }
  spdlog::set_level(spdlog::level::warn);

  if (*optimum) return SimOptimum(spec_path, top, json);
  if (*draft) {
    draft_opts.input.argv = draft_cmd;
    if (draft_seed >= 0) draft_opts.input.data_seed = draft_seed;
    if (const char* key = std::getenv("INFRARSI_LLM_API_KEY")) draft_opts.llm_api_key = key;
    draft_opts.llm_timeout = absl::Seconds(llm_timeout_s);
    const absl::Status st = infrarsi::client::RunDraft(draft_opts, std::cout, std::cerr);
    return st.ok() ? 0 : Fail(st);
  }
  if (*demo) {
    const absl::Status st = infrarsi::client::RunDemo(demo_opts, std::cout);
    return st.ok() ? 0 : Fail(st);
  }

  g_server = co.server;
  auto client_or = RpcClient::Create(co);
  if (!client_or.ok()) return Fail(client_or.status());
  RpcClient& c = **client_or;

  if (*create) {
    auto s = c.InitFromFile(spec_path);
    if (!s.ok()) return Fail(s.status());
    std::cout << (json ? infrarsi::client::ToJson(*s) : s->session_id()) << "\n";
    if (!json) std::cerr << "next: infrarsi doctor " << s->session_id() << "\n";
    return 0;
  }
  if (*doctor) {
    v1::DoctorRequest r;
    r.set_session_id(id);
    r.set_repeats(repeats);
    auto started = c.Doctor(r);
    if (!started.ok()) return Fail(started.status());
    if (detach) {
      std::cout << (json ? infrarsi::client::ToJson(*started) : infrarsi::client::FormatSummary(*started))
                << "\n";
      if (!json) std::cerr << "follow it: infrarsi watch " << id << "\n";
      return 0;
    }
    auto s = Follow(c, id, v1::STAGE_DOCTORING, wait_s, started->last_event_seq());
    if (!s.ok()) return Fail(s.status());
    if (s->stage() != v1::STAGE_DOCTORED) {
      if (json) std::cout << infrarsi::client::ToJson(*s) << "\n";
      Fail(absl::FailedPreconditionError(
          absl::StrCat("doctor ended in stage ", s->stage_name(), ": ", s->error())));
      return kExitFailed;
    }
    if (json) {
      std::cout << infrarsi::client::ToJson(*s) << "\n";
      return 0;
    }
    std::cout << absl::StrFormat("baseline %.4f s/step, CV %.2f%%, noise floor %.2f%%\n",
                                 s->baseline_step_time_s(), 100 * s->baseline_cv(),
                                 100 * s->noise_floor());
    // What the doctor warns of (a noisy host, lost runs, drift) is said here
    // too, not only in the report.
    if (auto rep = c.Report(id); rep.ok() && !rep->doctor().warning().empty()) {
      std::cout << "warning: " << rep->doctor().warning() << "\n";
    }
    std::cerr << "next: " << NextCommand(*s) << "\n";
    return 0;
  }
  if (*run) {
    v1::RunRequest r;
    r.set_session_id(id);
    r.set_max_trials(max_trials);
    auto started = c.Run(r);
    if (!started.ok()) return Fail(started.status());
    if (detach) {
      std::cout << (json ? infrarsi::client::ToJson(*started) : infrarsi::client::FormatSummary(*started))
                << "\n";
      if (!json) std::cerr << "follow it: infrarsi watch " << id << "\n";
      return 0;
    }
    auto s = Follow(c, id, v1::STAGE_RUNNING, wait_s, started->last_event_seq());
    if (!s.ok()) return Fail(s.status());
    if (json) {
      std::cout << infrarsi::client::ToJson(*s) << "\n";
      return s->stage() == v1::STAGE_SEARCHED ? 0 : kExitFailed;
    }
    if (s->stage() != v1::STAGE_SEARCHED) {
      Fail(absl::FailedPreconditionError(absl::StrCat("run ended in stage ", s->stage_name(),
                                                      s->error().empty() ? "" : ": ", s->error())));
      return kExitFailed;
    }
    std::cerr << "next: " << NextCommand(*s) << "\n";
    if (s->promoted()) {
      std::cout << absl::StrFormat("%s: %d trials; promoted: %.4f s/step, speedup %.3fx (verified A/B)  %s\n",
                                   s->stage_name(), s->trials_done(), s->best_step_time_s(),
                                   s->best_speedup(), infrarsi::client::FormatConfig(s->best_config()));
    } else {
      std::cout << absl::StrFormat(
          "%s: %d trials; nothing promoted: %s%s\n", s->stage_name(), s->trials_done(),
          s->not_promoted().empty() ? "the run did not finish" : s->not_promoted(),
          s->best_speedup() > 1
              ? absl::StrFormat(" (the fastest search trial ran %.4f s/step, %.3fx, unverified)",
                                s->best_step_time_s(), s->best_speedup())
              : "");
    }
    return 0;
  }
  if (*report) {
    auto r = c.Report(id);
    if (!r.ok()) return Fail(r.status());
    if (!html_path.empty()) {
      auto summary = c.GetSession(id);
      if (!summary.ok()) return Fail(summary.status());
      infrarsi::web::PageStyle style;
      style.standalone = true;
      if (absl::Status st = infrarsi::WriteFileAtomically(
              html_path, infrarsi::web::SessionPage(*r, *summary, style), "--html");
          !st.ok()) {
        return Fail(st);
      }
      std::cerr << "wrote " << html_path << "\n";
      if (!json) return 0;
    }
    std::cout << (json ? infrarsi::client::ToJson(*r) : infrarsi::client::FormatReport(*r));
    if (json) std::cout << "\n";
    return 0;
  }
  if (*logs) {
    auto l = c.GetTrialLog(id, log_trial, log_stderr ? "stderr" : "stdout");
    if (!l.ok()) return Fail(l.status());
    if (json) {
      std::cout << infrarsi::client::ToJson(*l) << "\n";
      return 0;
    }
    if (l->dropped_bytes() > 0) {
      std::cerr << "(the first " << l->dropped_bytes() << " bytes were not kept; the last "
                << l->content().size() << " follow)\n";
    }
    if (log_raw) {
      std::cout.flush();
      std::fwrite(l->content().data(), 1, l->content().size(), stdout);
      std::fflush(stdout);
    } else {
      std::cout << l->content();
      if (!l->content().empty() && l->content().back() != '\n') std::cout << "\n";
    }
    return 0;
  }
  if (*apply) {
    auto a = infrarsi::client::ApplyLocally(c, id, repo, branch, dry_run);
    if (!a.ok()) return Fail(a.status());
    auto kind_of = [&](const std::string& f) {
      auto k = a->change_kinds.find(f);
      return k == a->change_kinds.end() ? 'M' : k->second;
    };
    if (json) {
      std::vector<std::string> files;
      for (const auto& f : a->changed) {
        files.push_back(absl::StrCat("{\"path\": ", infrarsi::JsonQuote(f), ", \"change\": \"",
                                     std::string(1, kind_of(f)), "\"}"));
      }
      std::cout << "{\"dry_run\": " << (dry_run ? "true" : "false")
                << ", \"commit\": " << infrarsi::JsonQuote(a->commit)
                << ", \"already_committed\": " << (a->existed ? "true" : "false")
                << ", \"base\": " << infrarsi::JsonQuote(a->base)
                << ", \"branch\": " << infrarsi::JsonQuote(branch)
                << ", \"repo\": " << infrarsi::JsonQuote(repo)
                << ", \"note\": " << infrarsi::JsonQuote(a->note) << ", \"files\": ["
                << absl::StrJoin(files, ", ") << "], \"message\": " << infrarsi::JsonQuote(a->plan.message())
                << "}\n";
      return 0;
    }
    // The base named as the commit the branch would start from (HEAD of
    // the clone), and, if it differs, where the session ran.
    const std::string base = a->base.empty() ? a->plan.base_commit() : a->base;
    if (dry_run) {
      std::cout << "dry run: would commit on top of " << (base.empty() ? "HEAD" : base)
                << " as new branch " << branch << " of " << repo << "\n";
    } else {
      std::cout << (a->existed ? "already committed " : "committed ") << a->commit
                << " on branch " << branch << " (on top of " << base << ") of " << repo
                << "; recorded\n";
    }
    if (!a->note.empty()) std::cout << "note: " << a->note << "\n";
    for (const auto& f : a->changed) std::cout << "  " << kind_of(f) << " " << f << "\n";
    std::cout << "\n" << a->plan.message();
    return 0;
  }
  if (*watch) {
    auto s = Follow(c, id, kAny, wait_s);
    if (!s.ok()) return Fail(s.status());
    std::cout << (json ? infrarsi::client::ToJson(*s) : infrarsi::client::FormatSummary(*s)) << "\n";
    if (!json && infrarsi::WaitsForUser(s->stage())) {
      std::cerr << "session " << id << " waits for you in stage " << s->stage_name()
                << ": nothing happens until you run\n  " << NextCommand(*s) << "\n";
    } else if (!json && !NextCommand(*s).empty()) {
      std::cerr << "next: " << NextCommand(*s) << "\n";
    }
    return 0;
  }
  if (*agents) {
    for (const auto& [name, a] : agent_actions) {
      if (!*a) continue;
      v1::SetAgentStateRequest r;
      r.set_agent_id(agent_id);
      r.set_state(name == "drain" ? "draining" : name == "quarantine" ? "quarantined" : "active");
      r.set_reason(agent_reason);
      auto info = c.SetAgentState(r);
      if (!info.ok()) return Fail(info.status());
      v1::ListAgentsResponse one;
      *one.add_agents() = *info;
      std::cout << (json ? infrarsi::client::ToJson(one) + "\n" : infrarsi::client::FormatAgents(one));
      return 0;
    }
    v1::ListAgentsRequest r;
    r.set_include_gone(all_agents);
    auto l = c.ListAgents(r);
    if (!l.ok()) return Fail(l.status());
    std::cout << (json ? infrarsi::client::ToJson(*l) + "\n" : infrarsi::client::FormatAgents(*l));
    return 0;
  }
  if (*cancel) {
    auto s = c.Cancel(id);
    if (!s.ok()) return Fail(s.status());
    std::cout << (json ? infrarsi::client::ToJson(*s) : infrarsi::client::FormatSummary(*s)) << "\n";
    return 0;
  }
  if (*status) {
    auto s = c.GetSession(id);
    if (!s.ok()) return Fail(s.status());
    std::cout << (json ? infrarsi::client::ToJson(*s) + "\n"
                       : infrarsi::client::FormatSummary(*s) + "\n");
    return 0;
  }
  if (*sessions) {
    lq.set_page_size(list_page_size);
    lq.set_page_token(list_page_token);
    auto l = c.ListSessions(lq);
    if (!l.ok()) return Fail(l.status());
    if (json) {
      std::cout << infrarsi::client::ToJson(*l) << "\n";
    } else {
      for (const auto& s : l->sessions()) std::cout << infrarsi::client::FormatSummary(s) << "\n";
      if (!l->next_page_token().empty()) {
        std::cout << "more: --page-token " << l->next_page_token() << "\n";
      }
    }
    return 0;
  }
  if (*query) {
    bq.set_gpu_model(gpu);
    bq.set_workload_signature(workload);
    bq.set_status(bstatus);
    bq.set_purpose(purpose);
    bq.set_order(order);
    bq.set_page_size(page_size);
    bq.set_page_token(page_token);
    for (const std::string& kv : knobs) {
      std::vector<std::string> parts = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (parts.size() != 2 || parts[0].empty()) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--knob: expected KNOB=VALUE, got '", kv, "'")));
      }
      (*bq.mutable_knobs())[parts[0]] = parts[1];
    }
    auto r = c.QueryExperience(bq);
    if (!r.ok()) return Fail(r.status());
    std::cout << (json ? infrarsi::client::ToJson(*r) + "\n" : infrarsi::client::FormatBank(*r));
    return 0;
  }
  return 0;
}

namespace {

std::string PointLine(const infrarsi::SimPoint& p) {
  std::map<std::string, std::string> c(p.config.begin(), p.config.end());
  return absl::StrFormat("%9.3f s/step  MFU %5.1f%%  %6.1f GiB  %s", p.result.step_time_s,
                         100 * p.result.mfu, p.result.peak_mem_gib,
                         absl::StrJoin(c, ",", absl::PairFormatter("=")));
}

std::string PointJson(const infrarsi::SimPoint& p) {
  return absl::StrFormat(
      R"({"config": %s, "status": "%s", "step_time_s": %.6f, "mfu": %.5f, "peak_mem_gib": %.3f, "tokens_per_s": %.1f})",
      infrarsi::EncodeConfigJson(p.config), infrarsi::models::sim::StatusName(p.result.status),
      p.result.step_time_s, p.result.mfu, p.result.peak_mem_gib, p.result.tokens_per_s);
}

int SimOptimum(const std::string& path, int top, bool json) {
  auto yaml = infrarsi::ReadRegularFile(path, infrarsi::kMaxSpecBytes, "spec");
  if (!yaml.ok()) return Fail(yaml.status());
  infrarsi::SpecParseOptions po;
  po.spec_dir = std::filesystem::absolute(path).parent_path().lexically_normal().string();
  po.stored = true;  // a local look at a sim spec: it names no files to send
  po.may_name_urls = true;
  auto spec = infrarsi::ParseSpec(*yaml, po);
  if (!spec.ok()) return Fail(spec.status());
  const absl::Time start = absl::Now();
  auto land = infrarsi::EnumerateSimLandscape(*spec, std::max(1, top));
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  if (!land.ok()) return Fail(land.status());
  if (land->best.empty()) {
    return Fail(absl::FailedPreconditionError("no setting of this space runs"));
  }
  const auto& best = land->best.front();
  const auto& base = land->baseline;
  const double us = 1e6 * secs / static_cast<double>(land->settings + 1);
  if (json) {
    std::vector<std::string> tops;
    for (const auto& p : land->best) tops.push_back(PointJson(p));
    std::cout << absl::StrFormat(
        R"({"spec": "%s", "settings": %d, "ok": %d, "oom": %d, "failed": %d, "sim_us_per_setting": %.3f, "baseline": %s, "best": %s, "speedup": %.4f, "top": [%s]})",
        spec->name, land->settings, land->ok, land->oom, land->failed, us, PointJson(base),
        PointJson(best),
        base.result.status == infrarsi::models::sim::Status::kOk
            ? base.result.step_time_s / best.result.step_time_s
            : 0.0,
        absl::StrJoin(tops, ", "))
              << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "%s: %s x%d, %s\n"
      "space: %d settings: %d run, %d OOM, %d fail at launch\n"
      "simulated in %.2f s (%.2f us per setting)\n",
      spec->name, spec->sim.cluster.gpu.name, spec->gpu_count, spec->WorkloadSignature(),
      land->settings, land->ok, land->oom, land->failed, secs, us);
  std::cout << "baseline  " << (base.result.status == infrarsi::models::sim::Status::kOk
                                    ? PointLine(base)
                                    : std::string(infrarsi::models::sim::StatusName(
                                          base.result.status)) + ": " + base.result.message)
            << "\n";
  std::cout << "optimum   " << PointLine(best) << "\n";
  if (base.result.status == infrarsi::models::sim::Status::kOk) {
    std::cout << absl::StrFormat("speedup over the baseline: %.3fx\n",
                                 base.result.step_time_s / best.result.step_time_s);
  }
  for (size_t i = 1; i < land->best.size(); ++i) {
    std::cout << absl::StrFormat("top %-4d  ", i + 1) << PointLine(land->best[i]) << "\n";
  }
  return 0;
}

}  // namespace
