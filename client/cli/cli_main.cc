// infrarsi: the command line for cluster teams. Flags are parsed here only.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

int Fail(const absl::Status& st) {
  if (std::string u = Unreachable(st); !u.empty()) {
    std::cerr << "error: " << u << " [" << absl::StatusCodeToString(st.code()) << "]\n";
    return 1;
  }
  std::cerr << "error: " << st.message() << " [" << absl::StatusCodeToString(st.code())
            << "]\n";
  return 1;
}

// Follows a Doctor or Run stage (with its verification; any stage to the
// session's end for kAny) from event `after_seq`, printing each finished
// trial and, once each, why work waits and which hosts were quarantined.
constexpr v1::Stage kAny = v1::STAGE_UNSPECIFIED;
absl::StatusOr<v1::SessionSummary> Follow(RpcClient& c, const std::string& id, v1::Stage stage,
                                          double timeout_s, int64_t after_seq = 0) {
  std::string said;  // the notice last printed
  return c.Watch(id, absl::Seconds(timeout_s), [stage, &said](const v1::SessionEvent& ev) {
    const v1::Stage now = ev.session().stage();
    const bool going = stage == kAny ? !infrarsi::IsFinishedStage(now)
                                     : now == stage || (stage == v1::STAGE_RUNNING &&
                                                        now == v1::STAGE_VERIFYING);
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
    const auto& t = ev.trial();
    const auto& s = ev.session();
    const std::string time =
        t.status() == "ok" ? absl::StrFormat("%.4fs", t.step_time_s()) : std::string("-");
    if (t.purpose() == "doctor" || t.purpose() == "verify") {
      std::cerr << absl::StrFormat("  %s: trial %-4d %-9s %-10s on %s %s\n",
                                   t.purpose() == "doctor" ? "baseline run" : "verify",
                                   t.id(), t.status(), time, t.agent(), t.tag());
      return going;
    }
    std::cerr << absl::StrFormat(
        "  trial %-4d %-7s %-10s done %d/%d  best %.4f s (%.2fx)  %s\n", t.id(), t.status(),
        time, s.trials_done(), s.trials_planned(), s.best_step_time_s(), s.best_speedup(),
        infrarsi::client::FormatConfig(t.config()));
    return going;
  }, after_seq);
}

}  // namespace

int main(int argc, char** argv) {
  // Whatever a server sends is printed with its control characters shown,
  // never obeyed by the terminal.
  infrarsi::client::InstallTerminalSafeOutput();
  CLI::App app{
      "infrarsi: submit and follow InfraRSI tuning sessions (init, doctor, run, report, "
      "apply), query the experience bank, or run the self-contained demo."};
  app.set_version_flag("--version", std::string("infrarsi ") + INFRARSI_VERSION);
  app.require_subcommand(1);
  RpcClient::Options co;
  double wait_s = 3600;
  app.add_option("--server", co.server, "infrarsi-server HOST:PORT")->capture_default_str();
  app.add_option("--wait-s", wait_s, "how long doctor/run wait for their stage to finish")
      ->capture_default_str();

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

  int max_trials = 0;
  auto* run = app.add_subcommand("run", "search the knob space, then re-verify the top candidates against the baseline (A/B); "
                        "shows progress");
  run->add_option("id", id, "session id")->required();
  run->add_option("--max-trials", max_trials, "trial budget (0: the spec's budget.max_trials)");

  bool json = false;
  auto* report = app.add_subcommand("report", "contract, doctor, best setting, verification intervals, every trial, violations and "
                           "failure costs");
  report->add_option("id", id, "session id")->required();
  report->add_flag("--json", json, "stable JSON output");
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
  agents->add_flag("--json", json, "JSON output");
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
  status->add_flag("--json", json, "JSON output");

  auto* sessions = app.add_subcommand("sessions", "list sessions, newest first");
  sessions->add_flag("--json", json, "JSON output");
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
  query->add_option("--status", bstatus, "ok, oom, failed, timeout, violation, cancelled");
  query->add_option("--purpose", purpose, "doctor, search or verify");
  query->add_option("--order", order, "newest (default), oldest, or fastest (ok trials by step time)");
  query->add_option("--page-size", page_size, "entries per page (max 1000)")
      ->capture_default_str();
  query->add_option("--page-token", page_token, "from a previous page");
  query->add_flag("--json", json, "JSON output");

  auto* sim = app.add_subcommand("sim", "the cluster simulator");
  sim->require_subcommand(1);
  int top = 5;
  auto* optimum = sim->add_subcommand(
      "optimum", "enumerate a sim spec's whole knob space (noise-free) and print the true best "
                 "setting, its step time and MFU, and how many settings OOM or fail");
  optimum->add_option("spec", spec_path, "session spec with an executor.sim section")->required();
  optimum->add_option("--top", top, "how many of the fastest settings to list")
      ->capture_default_str();
  optimum->add_flag("--json", json, "JSON output");

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
  CLI11_PARSE(app, argc, argv);
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
    std::cout << s->session_id() << "\n";
    return 0;
  }
  if (*doctor) {
    v1::DoctorRequest r;
    r.set_session_id(id);
    r.set_repeats(repeats);
    auto started = c.Doctor(r);
    if (!started.ok()) return Fail(started.status());
    auto s = Follow(c, id, v1::STAGE_DOCTORING, wait_s, started->last_event_seq());
    if (!s.ok()) return Fail(s.status());
    if (s->stage() != v1::STAGE_DOCTORED) {
      return Fail(absl::FailedPreconditionError(
          absl::StrCat("doctor ended in stage ", s->stage_name(), ": ", s->error())));
    }
    std::cout << absl::StrFormat("baseline %.4f s/step, CV %.2f%%, noise floor %.2f%%\n",
                                 s->baseline_step_time_s(), 100 * s->baseline_cv(),
                                 100 * s->noise_floor());
    // What the doctor warns of (a noisy host, lost runs, drift) is said here
    // too, not only in the report.
    if (auto rep = c.Report(id); rep.ok() && !rep->doctor().warning().empty()) {
      std::cout << "warning: " << rep->doctor().warning() << "\n";
    }
    return 0;
  }
  if (*run) {
    v1::RunRequest r;
    r.set_session_id(id);
    r.set_max_trials(max_trials);
    auto started = c.Run(r);
    if (!started.ok()) return Fail(started.status());
    auto s = Follow(c, id, v1::STAGE_RUNNING, wait_s, started->last_event_seq());
    if (!s.ok()) return Fail(s.status());
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
    if (dry_run) {
      std::cout << "dry run: would commit on top of " << a->plan.base_commit() << " as new branch "
                << branch << " of " << repo << "\n";
    } else {
      std::cout << (a->existed ? "already committed " : "committed ") << a->commit
                << " on branch " << branch << " of " << repo << "; recorded\n";
    }
    if (!a->note.empty()) std::cout << "note: " << a->note << "\n";
    for (const auto& f : a->changed) std::cout << "  M " << f << "\n";
    std::cout << "\n" << a->plan.message();
    return 0;
  }
  if (*watch) {
    auto s = Follow(c, id, kAny, wait_s);
    if (!s.ok()) return Fail(s.status());
    std::cout << infrarsi::client::FormatSummary(*s) << "\n";
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
      std::cout << infrarsi::client::FormatAgents(one);
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
    std::cout << infrarsi::client::FormatSummary(*s) << "\n";
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
