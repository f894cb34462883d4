// Scale benchmark: the server core (SessionManager on SQLite in WAL mode)
// against a history of many finished sessions, as a team would have after
// a year. It runs one real session of the demo workload (the measured H200
// landscape, replayed through the agent's ReplayExecutor, steps reported as
// an agent reports them), copies it into histories of N finished sessions,
// and prints, for each N:
//
//   start-up    SessionManager::Create on that database, and RSS after it
//   list        ListSessions (first page of 100) latency
//   bank        QueryExperience latency, a query that matches and one that
//               matches nothing (the full-scan case before the indexes)
//   lease       TryLease latency with 1,000 queued trials no agent can run
//   live        finished trials/s of 20 live sessions served by 4 agents,
//               alone and with a client looping on bank queries beside
//               them, and the p99 of every call the agents made
//
// and, once, the RSS over many whole session runs on one manager (memory
// must stay bounded by the active sessions).
//
// The calls are in-process (no gRPC): the figures are the core's, which is
// where the issue's stalls were; gRPC adds its own fixed cost per call.
//
// Usage: scale_bench [--sizes 100,1000,10000] [--runs 1000] [--dir DIR] [--trial-ms 50]
//                    [--reuse yes]   (keep and reuse the histories built in DIR)
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sqlite3.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/agent/executors/replay_executor.h"
#include "core/session_manager.h"
#include "storage/sqlite_storage.h"

namespace {

using infrarsi::SessionManager;
using infrarsi::storage::SqliteStorage;
namespace v1 = infrarsi::v1;
using Clock = std::chrono::steady_clock;

// How long a trial holds its agent in the live phase (a GPU job takes no
// server CPU): without it, replayed trials finish in microseconds and the
// live phase measures how fast two cores fit models, not whether calls wait
// on each other.
int g_trial_ms = 50;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double RssMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      double kb = 0;
      (void)absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kb);
      return kb / 1024;
    }
  }
  return 0;
}

struct Pcts {
  double p50 = 0, p99 = 0, max = 0;
};
Pcts Percentiles(std::vector<double> v) {
  Pcts p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(v.size())))];
  p.max = v.back();
  return p;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kLandscapePath = "/bench/landscape.jsonl";

// The demo spec, its landscape sent as the CLI sends it.
v1::InitRequest DemoInit(const std::string& budget, const std::string& gpu = "H200") {
  std::string spec = ReadFile(std::string(INFRARSI_SOURCE_DIR) + "/data/specs/demo-h200-gpt-354m.yaml");
  spec = absl::StrReplaceAll(spec, {{"../landscapes/h200-gpt-354m-seq2048.jsonl", kLandscapePath},
                                    {"budget: {max_trials: 40}", budget},
                                    {"gpu: H200", "gpu: " + gpu}});
  static const std::string landscape =
      ReadFile(std::string(INFRARSI_SOURCE_DIR) + "/data/landscapes/h200-gpt-354m-seq2048.jsonl");
  v1::InitRequest r;
  r.set_spec_yaml(spec);
  v1::SpecFile* f = r.add_files();
  f->set_field("executor.replay.landscape");
  f->set_path(kLandscapePath);
  f->set_content(landscape);
  return r;
}

// Call latencies by method, from several threads.
struct Latencies {
  std::mutex mu;
  std::map<std::string, std::vector<double>> by_method;
  void Add(const std::string& method, double ms) {
    std::lock_guard<std::mutex> lock(mu);
    by_method[method].push_back(ms);
  }
};

// Sends the steps as an agent does, timing each call.
class Sink : public infrarsi::client::ProgressSink {
 public:
  Sink(SessionManager* m, const v1::TrialAssignment& a, Latencies* lat) : m_(m), a_(a), lat_(lat) {}
  bool OnSteps(const std::vector<v1::StepMetrics>& steps) override {
    v1::ReportProgressRequest r;
    r.set_trial_id(a_.trial_id());
    r.set_lease_token(a_.lease_token());
    for (const auto& s : steps) *r.add_steps() = s;
    const auto t0 = Clock::now();
    auto resp = m_->ReportProgress(r);
    lat_->Add("ReportProgress", Ms(Clock::now() - t0));
    return resp.ok() && !resp->cancelled();
  }

 private:
  SessionManager* m_;
  v1::TrialAssignment a_;
  Latencies* lat_;
};

// One agent's loop: lease, run (replay), complete, until `stop`. Returns
// trials completed; call latencies go to `lat`.
int AgentLoop(SessionManager* m, const std::string& agent, const std::atomic<bool>& stop,
              Latencies* lat) {
  infrarsi::client::ReplayExecutor exec;
  int done = 0;
  while (!stop) {
    const auto t0 = Clock::now();
    auto lease = m->TryLease(agent);
    lat->Add("LeaseTrial", Ms(Clock::now() - t0));
    if (!lease.ok()) return done;
    if (!lease->has_value()) {
      if (!m->WaitForWork(absl::Milliseconds(20))) return done;
      continue;
    }
    Sink sink(m, **lease, lat);
    auto out = exec.Run(**lease, &sink);
    std::this_thread::sleep_for(std::chrono::milliseconds(g_trial_ms));
    v1::CompleteTrialRequest c;
    c.set_trial_id((*lease)->trial_id());
    c.set_lease_token((*lease)->lease_token());
    if (out.ok()) {
      *c.mutable_outcome() = *out;
    } else {
      c.mutable_outcome()->set_status("failed");
      c.mutable_outcome()->set_error(std::string(out.status().message()));
    }
    const auto t1 = Clock::now();
    auto r = m->CompleteTrial(c);
    lat->Add("CompleteTrial", Ms(Clock::now() - t1));
    if (r.ok()) ++done;
  }
  return done;
}

std::string RegisterAgent(SessionManager* m, const std::string& gpu = "H200") {
  v1::RegisterAgentRequest r;
  r.set_host("bench");
  r.set_gpu_model(gpu);
  r.set_gpu_count(1);
  r.set_memory_per_gpu_gib(141);
  r.add_executors("replay");
  auto resp = m->RegisterAgent(r);
  if (!resp.ok()) {
    std::fprintf(stderr, "register: %s\n", resp.status().ToString().c_str());
    std::exit(1);
  }
  return resp->agent_id();
}

std::unique_ptr<SessionManager> NewManager(SqliteStorage* db, double* startup_ms = nullptr) {
  SessionManager::Options o;
  o.storage = db;
  const auto t0 = Clock::now();
  auto m = SessionManager::Create(o);
  if (startup_ms) *startup_ms = Ms(Clock::now() - t0);
  if (!m.ok()) {
    std::fprintf(stderr, "manager: %s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(m);
}

// Runs sessions to their end (doctor, search, verification) with one agent
// in this thread. Returns their ids.
std::vector<std::string> RunSessions(SessionManager* m, const std::string& agent, int n,
                                     const std::string& budget) {
  std::vector<std::string> ids;
  Latencies lat;
  for (int i = 0; i < n; ++i) {
    auto s = m->Init(DemoInit(budget));
    if (!s.ok()) {
      std::fprintf(stderr, "init: %s\n", s.status().ToString().c_str());
      std::exit(1);
    }
    v1::DoctorRequest d;
    d.set_session_id(s->session_id());
    (void)m->Doctor(d);
    // Drain: an agent loop that stops once the session has ended.
    infrarsi::client::ReplayExecutor exec;
    bool ran = false;
    while (true) {
      auto lease = m->TryLease(agent);
      if (!lease.ok()) break;
      if (!lease->has_value()) {
        auto g = m->GetSession(s->session_id());
        if (g->stage() == v1::STAGE_DOCTORED && !ran) {
          ran = true;
          v1::RunRequest r;
          r.set_session_id(s->session_id());
          (void)m->Run(r);
          continue;
        }
        break;
      }
      Sink sink(m, **lease, &lat);
      auto out = exec.Run(**lease, &sink);
      v1::CompleteTrialRequest c;
      c.set_trial_id((*lease)->trial_id());
      c.set_lease_token((*lease)->lease_token());
      *c.mutable_outcome() = out.ok() ? *out : v1::TrialOutcome();
      if (!out.ok()) c.mutable_outcome()->set_status("failed");
      (void)m->CompleteTrial(c);
    }
    ids.push_back(s->session_id());
    (void)m->ExpireLeases();  // the server's reaper ticks every second; a run takes longer
  }
  return ids;
}

bool Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::fprintf(stderr, "sql: %s\n  in: %.200s\n", err ? err : "?", sql.c_str());
    sqlite3_free(err);
    return false;
  }
  return true;
}

std::vector<std::string> Columns(sqlite3* db, const std::string& table) {
  std::vector<std::string> cols;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    cols.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
  }
  sqlite3_finalize(st);
  return cols;
}

// INSERT INTO t (cols) SELECT cols-with-replacements FROM t WHERE cond.
std::string CopySql(sqlite3* db, const std::string& table,
                    const std::vector<std::pair<std::string, std::string>>& replace,
                    const std::string& where) {
  std::string cols, exprs;
  for (const std::string& c : Columns(db, table)) {
    std::string e = c;
    for (const auto& [col, expr] : replace) {
      if (col == c) e = expr;
    }
    absl::StrAppend(&cols, cols.empty() ? "" : ", ", c);
    absl::StrAppend(&exprs, exprs.empty() ? "" : ", ", e);
  }
  return absl::StrCat("INSERT INTO ", table, " (", cols, ") SELECT ", exprs, " FROM ", table,
                      " WHERE ", where, ";");
}

// Folds a database's WAL into its file, so that copying the file copies
// everything committed.
void Checkpoint(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  Exec(db, "PRAGMA wal_checkpoint(TRUNCATE);");
  sqlite3_close(db);
}

// Copies the template session `tpl` until the database holds `n` finished
// sessions (each copy with its own ids; trials, steps and bank entries
// with it).
void GrowHistory(const std::string& path, const std::string& tpl, int n) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  Exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;");
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sessions", -1, &st, nullptr);
  sqlite3_step(st);
  int have = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_prepare_v2(db, "SELECT MIN(id), MAX(id) FROM trials WHERE session_id = ?", -1, &st,
                     nullptr);
  sqlite3_bind_text(st, 1, tpl.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_step(st);
  const int64_t lo = sqlite3_column_int64(st, 0), hi = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  const std::string q = "'" + tpl + "'";
  // The template's knob rows by trial, once (bank_knobs has no index by
  // bank id to look them up per copy).
  Exec(db, absl::StrCat("CREATE TEMP TABLE tpl_knobs AS SELECT o.trial_id, k.knob, k.value FROM bank o ",
                        "JOIN bank_knobs k ON k.bank_id = o.id WHERE o.trial_id BETWEEN ", lo, " AND ",
                        hi, ";"));
  // The template's agent is long gone (a doctor pins runs to live agents).
  Exec(db, "UPDATE agents SET last_heartbeat_ms = 0;");
  Exec(db, "BEGIN;");
  for (int k = have; k < n; ++k) {
    const int64_t shift = static_cast<int64_t>(k) * 100000 + 10000000;  // fresh trial ids
    const std::string sid = absl::StrCat("'ses-copy", k, "'");
    const std::string off = absl::StrCat(shift - lo);
    Exec(db, CopySql(db, "sessions", {{"id", sid}, {"created_ms", absl::StrCat("created_ms + ", k)}},
                     "id = " + q));
    Exec(db, CopySql(db, "trials", {{"id", "id + " + off}, {"session_id", sid}},
                     "session_id = " + q));
    Exec(db, CopySql(db, "steps", {{"trial_id", "trial_id + " + off}},
                     absl::StrCat("trial_id BETWEEN ", lo, " AND ", hi)));
    // The copy's bank rows are those past the largest id before it (the
    // bank has no session index: a filter on session would scan it all).
    sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(id), 0) FROM bank", -1, &st, nullptr);
    sqlite3_step(st);
    const int64_t last_bank = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    Exec(db, CopySql(db, "bank", {{"id", "NULL"}, {"session_id", sid}, {"trial_id", "trial_id + " + off}},
                     absl::StrCat("trial_id BETWEEN ", lo, " AND ", hi)));
    Exec(db, absl::StrCat("INSERT INTO bank_knobs (knob, value, bank_id) SELECT t.knob, t.value, ",
                          "n.id FROM bank n JOIN tpl_knobs t ON t.trial_id = n.trial_id - ", off,
                          " WHERE n.id > ", last_bank, ";"));
    if ((k + 1) % 1000 == 0) {
      Exec(db, "COMMIT; BEGIN;");
    }
  }
  Exec(db, "COMMIT;");
  sqlite3_close(db);
}

void Measure(const std::string& path, int n) {
  auto db = SqliteStorage::Create({.path = path});
  if (!db.ok()) {
    std::fprintf(stderr, "db: %s\n", db.status().ToString().c_str());
    std::exit(1);
  }
  const double rss0 = RssMb();
  double startup_ms = 0;
  auto m = NewManager(db->get(), &startup_ms);
  std::printf("\n== %d finished sessions (%.0f MB on disk, %lld bank rows)\n", n,
              static_cast<double>(std::filesystem::file_size(path)) / 1e6,
              static_cast<long long>(*(*db)->CountBank()));
  std::printf("start-up               %8.1f ms   RSS +%.1f MB, %zu sessions in memory\n",
              startup_ms, RssMb() - rss0, m->GetStats().resident_sessions);

  std::vector<double> lat;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    auto l = m->ListSessions();
    lat.push_back(Ms(Clock::now() - t0));
    if (!l.ok() || l->sessions_size() == 0) std::fprintf(stderr, "list failed\n");
  }
  Pcts p = Percentiles(lat);
  std::printf("ListSessions (100)     p50 %6.2f ms  p99 %6.2f ms\n", p.p50, p.p99);

  for (const bool match : {true, false}) {
    lat.clear();
    size_t rows = 0;
    for (int i = 0; i < 30; ++i) {
      v1::QueryExperienceRequest q;
      q.set_workload_signature("gpt-354m/gb16/seq2048");
      (*q.mutable_knobs())["attn"] = match ? "sdpa" : "flash3";
      q.set_status("ok");
      const auto t0 = Clock::now();
      auto r = m->QueryExperience(q);
      lat.push_back(Ms(Clock::now() - t0));
      rows = r.ok() ? static_cast<size_t>(r->entries_size()) : 0;
    }
    p = Percentiles(lat);
    std::printf("bank query %-11s p50 %6.2f ms  p99 %6.2f ms  (%zu rows)\n",
                match ? "(matches)" : "(no match)", p.p50, p.p99, rows);
  }

  // 1,000 queued trials no agent can run (an A100 session's), beside an
  // idle H200 agent.
  std::vector<std::string> agents;
  {
    auto a100 = m->Init(DemoInit("budget: {max_trials: 4}", "A100"));
    v1::DoctorRequest d;
    d.set_session_id(a100->session_id());
    d.set_repeats(3);
    (void)m->Doctor(d);
    (void)(*db)->Transaction([&]() -> absl::Status {
      for (int i = 0; i < 1000; ++i) {
        infrarsi::storage::TrialRecord t;
        t.session_id = a100->session_id();
        t.purpose = "doctor";
        t.config = R"({"attn":"math","ckpt":"false","fused_adam":"false","micro_batch":"2","precision":"tf32"})";
        t.status = "queued";
        auto id = (*db)->InsertTrial(t);
        if (!id.ok()) return id.status();
      }
      return absl::OkStatus();
    });
    m.reset();
    m = NewManager(db->get());  // the queue as storage has it
    // The live phase below uses these agents too: a doctor pins its runs to
    // the agents it sees live, and an idle one would hold them.
    for (int i = 0; i < 4; ++i) agents.push_back(RegisterAgent(m.get()));
    const std::string agent = agents[0];
    lat.clear();
    for (int i = 0; i < 200; ++i) {
      const auto t0 = Clock::now();
      auto l = m->TryLease(agent);
      lat.push_back(Ms(Clock::now() - t0));
      if (!l.ok() || l->has_value()) std::fprintf(stderr, "unexpected lease\n");
    }
    p = Percentiles(lat);
    std::printf("lease, 1,000 unrunnable p50 %6.1f us p99 %6.1f us  (%zu queued)\n", 1000 * p.p50,
                1000 * p.p99,
                m->GetStats().queued_trials);
    auto h = m->Init(DemoInit("budget: {max_trials: 4}"));
    d.set_session_id(h->session_id());
    d.set_repeats(static_cast<int>(agents.size()));  // one run pinned to each live agent
    (void)m->Doctor(d);
    auto l = m->TryLease(agent);
    std::printf("  a runnable doctor run beside them: %s\n",
                l.ok() && l->has_value() ? "leased at once" : "NOT LEASED");
    (void)m->Cancel(h->session_id());
    (void)m->Cancel(a100->session_id());
  }

  // 20 live sessions, 4 agents; then the same with a bank client looping.
  for (const bool hammer : {false, true}) {
    std::vector<std::string> live;
    for (int i = 0; i < 20; ++i) {
      auto s = m->Init(DemoInit("budget: {max_trials: 1000}"));
      live.push_back(s->session_id());
      v1::DoctorRequest d;
      d.set_session_id(s->session_id());
      (void)m->Doctor(d);
    }
    std::atomic<bool> stop{false};
    Latencies calls;
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    for (const std::string& a : agents) {
      threads.emplace_back([&, a] { done += AgentLoop(m.get(), a, stop, &calls); });
    }
    // The sessions move on to Run as their doctors finish; the clock stops
    // when every session has ended (or after 60 s).
    const auto t0 = Clock::now();
    std::atomic<int64_t> end_ns{0};
    std::thread driver([&] {
      std::vector<bool> started(live.size(), false);
      while (!stop) {
        int ended = 0;
        for (size_t i = 0; i < live.size(); ++i) {
          const auto g0 = Clock::now();
          auto g = m->GetSession(live[i]);
          calls.Add("GetSession", Ms(Clock::now() - g0));
          if (g.ok() && (g->stage() == v1::STAGE_SEARCHED || g->stage() == v1::STAGE_FAILED)) ++ended;
          if (started[i]) continue;
          if (g.ok() && g->stage() == v1::STAGE_DOCTORED) {
            v1::RunRequest r;
            r.set_session_id(live[i]);
            const auto r0 = Clock::now();
            (void)m->Run(r);
            calls.Add("Run", Ms(Clock::now() - r0));
            started[i] = true;
          }
        }
        if (ended == static_cast<int>(live.size()) ||
            Clock::now() - t0 > std::chrono::seconds(60)) {
          end_ns = (Clock::now() - t0).count();
          stop = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    std::atomic<int> queries{0};
    std::thread bank;
    if (hammer) {
      bank = std::thread([&] {
        while (!stop) {
          // Both kinds, in turn: one that matches little (a full scan
          // before the bank had indexes) and one that returns a page.
          v1::QueryExperienceRequest q;
          q.set_workload_signature("gpt-354m/gb16/seq2048");
          (*q.mutable_knobs())["attn"] = queries % 2 ? "sdpa" : "flash3";
          const auto q0 = Clock::now();
          (void)m->QueryExperience(q);
          calls.Add("QueryExperience", Ms(Clock::now() - q0));
          ++queries;
        }
      });
    }
    driver.join();
    const double secs = static_cast<double>(end_ns.load()) / 1e9;
    for (auto& t : threads) t.join();
    if (bank.joinable()) bank.join();
    std::map<std::string, int> stages;
    int search_done = 0;
    for (const std::string& id : live) {
      auto g = m->GetSession(id);
      if (g.ok()) {
        ++stages[g->stage_name()];
        search_done += g->trials_done();
      }
    }
    std::string where;
    for (const auto& [stage, k] : stages) absl::StrAppend(&where, k, " ", stage, " ");
    std::printf("live: 20 sessions, 4 agents%s: %d trials in %.1f s, %.1f trials/s (%s; %d search trials)\n",
                hammer ? ", a bank client looping" : "", done.load(), secs, done / secs,
                where.c_str(), search_done);
    if (hammer) std::printf("  %d bank queries meanwhile\n", queries.load());
    for (auto& [method, v] : calls.by_method) {
      const Pcts c = Percentiles(v);
      std::printf("  %-15s p50 %7.2f ms  p99 %7.2f ms  max %7.1f ms  (%zu calls)\n", method.c_str(),
                  c.p50, c.p99, c.max, v.size());
    }
    for (const std::string& id : live) (void)m->Cancel(id);
  }

  // A restart (kill -9 and start again) with 20 sessions mid-search.
  {
    std::vector<std::string> running;
    for (int i = 0; i < 20; ++i) {
      auto s = m->Init(DemoInit("budget: {max_trials: 1000}"));
      v1::DoctorRequest d;
      d.set_session_id(s->session_id());
      (void)m->Doctor(d);
      running.push_back(s->session_id());
    }
    std::atomic<bool> stop{false};
    Latencies unused;
    std::vector<std::thread> threads;
    for (const std::string& a : agents) {
      threads.emplace_back([&, a] { AgentLoop(m.get(), a, stop, &unused); });
    }
    size_t started = 0;
    while (started < running.size()) {
      started = 0;
      for (const std::string& id : running) {
        auto g = m->GetSession(id);
        if (g.ok() && g->stage() == v1::STAGE_DOCTORED) {
          v1::RunRequest r;
          r.set_session_id(id);
          (void)m->Run(r);
        }
        started += g.ok() && g->stage() != v1::STAGE_DOCTORING && g->stage() != v1::STAGE_DOCTORED;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop = true;
    for (auto& t : threads) t.join();
    m->Shutdown();
    m.reset();
    double restart_ms = 0;
    m = NewManager(db->get(), &restart_ms);
    int still_running = 0;
    for (const std::string& id : running) {
      auto g = m->GetSession(id);
      still_running += g.ok() && g->stage() == v1::STAGE_RUNNING;
    }
    std::printf("restart with 20 sessions mid-search: %.1f ms (%d running again)\n", restart_ms,
                still_running);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {100, 1000, 10000};
  int runs = 1000;
  std::string dir = "/tmp/infrarsi-scale-bench";
  bool reuse = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(argv[i + 1], ',')) {
        int v = 0;
        if (absl::SimpleAtoi(s, &v)) sizes.push_back(v);
      }
    } else if (flag == "--runs") {
      (void)absl::SimpleAtoi(argv[i + 1], &runs);
    } else if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--reuse") {
      reuse = std::string(argv[i + 1]) == "yes";
    } else if (flag == "--trial-ms") {
      (void)absl::SimpleAtoi(argv[i + 1], &g_trial_ms);
    } else {
      std::fprintf(stderr, "usage: scale_bench [--sizes 100,1000,10000] [--runs N] [--dir DIR] [--trial-ms 50] "
                   "[--reuse yes]\n");
      return 2;
    }
  }
  if (!reuse) std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // The template: one real session of the demo workload.
  const std::string tpl_db = dir + "/template.db";
  std::string tpl = ReadFile(dir + "/template.id");
  if (tpl.empty()) {
    std::filesystem::remove(tpl_db);
    auto db = SqliteStorage::Create({.path = tpl_db});
    auto m = NewManager(db->get());
    const std::string agent = RegisterAgent(m.get());
    tpl = RunSessions(m.get(), agent, 1, "budget: {max_trials: 40}")[0];
    auto rep = m->Report(tpl);
    std::printf("template session %s: %d trials, stage %s\n", tpl.c_str(), rep->trials_size(),
                rep->stage().c_str());
    m.reset();   // the manager's readers first: the writer, closing last,
    db->reset();  // folds the WAL into the file that is copied below
    std::ofstream(dir + "/template.id") << tpl;
  }
  for (int n : sizes) {
    // Built once per size (and kept with --reuse yes); measured on a copy,
    // since measuring adds sessions.
    const std::string built = absl::StrCat(dir, "/history-", n, ".db");
    if (!std::filesystem::exists(built)) {
      // A half-built one (an interrupted run) is grown on from where it is.
      if (!std::filesystem::exists(built + ".tmp")) {
        Checkpoint(tpl_db);
        std::filesystem::copy_file(tpl_db, built + ".tmp");
      }
      GrowHistory(built + ".tmp", tpl, n);
      std::filesystem::rename(built + ".tmp", built);
    }
    const std::string path = dir + "/work.db";
    std::filesystem::remove(path + "-wal");
    std::filesystem::remove(path + "-shm");
    Checkpoint(built);
    std::filesystem::copy_file(built, path, std::filesystem::copy_options::overwrite_existing);
    Measure(path, n);
    std::filesystem::remove(path);
    std::filesystem::remove(path + "-wal");
    std::filesystem::remove(path + "-shm");
  }

  // Memory over many session runs on one manager.
  if (runs > 0) {
    const std::string path = dir + "/runs.db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
    auto db = SqliteStorage::Create({.path = path});
    auto m = NewManager(db->get());
    const std::string agent = RegisterAgent(m.get());
    const double started = RssMb();
    (void)RunSessions(m.get(), agent, 10, "budget: {max_trials: 8}");
    const double fresh = RssMb();
    std::printf("\n== memory: RSS %.1f MB at start, %.1f MB after 10 session runs\n", started, fresh);
    const auto t0 = Clock::now();
    (void)RunSessions(m.get(), agent, runs, "budget: {max_trials: 8}");
    (void)m->ExpireLeases();
    std::printf("memory: RSS %.1f MB after %d more session runs (%.2fx of after 10; "
                "%zu sessions in memory; %.1f s)\n",
                RssMb(), runs, RssMb() / fresh, m->GetStats().resident_sessions,
                Ms(Clock::now() - t0) / 1000);
  }
  return 0;
}
