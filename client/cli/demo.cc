#include "client/cli/demo.h"

#include <git2.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/agent/agent.h"
#include "client/cli/local_apply.h"
#include "client/cli/report_format.h"
#include "client/rpc_client.h"
#include "base/status_macros.h"
#include "server/infrarsi_server.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

absl::Status WriteFile(const fs::path& p, const std::string& content) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary);
  out << content;
  if (!out) return absl::InternalError(absl::StrCat("demo: cannot write ", p.string()));
  return absl::OkStatus();
}

// A target repository with one commit, standing in for the team's repo.
absl::Status MakeRepo(const fs::path& dir) {
  git_libgit2_init();
  git_repository* repo = nullptr;
  absl::Status st = absl::OkStatus();
  git_oid blob, tree_oid, commit_oid;
  git_treebuilder* tb = nullptr;
  git_tree* tree = nullptr;
  git_signature* sig = nullptr;
  const std::string readme = "# training job\nTuned by the InfraRSI demo.\n";
  if (git_repository_init(&repo, dir.c_str(), 0) != 0 ||
      git_blob_create_from_buffer(&blob, repo, readme.data(), readme.size()) != 0 ||
      git_treebuilder_new(&tb, repo, nullptr) != 0 ||
      git_treebuilder_insert(nullptr, tb, "README.md", &blob, GIT_FILEMODE_BLOB) != 0 ||
      git_treebuilder_write(&tree_oid, tb) != 0 || git_tree_lookup(&tree, repo, &tree_oid) != 0 ||
      git_signature_now(&sig, "InfraRSI demo", "demo@localhost") != 0 ||
      git_commit_create(&commit_oid, repo, "HEAD", sig, sig, "UTF-8", "initial commit", tree, 0,
                        nullptr) != 0) {
    const git_error* e = git_error_last();
    st = absl::InternalError(absl::StrCat("demo: git: ", e ? e->message : "unknown"));
  }
  git_signature_free(sig);
  git_tree_free(tree);
  git_treebuilder_free(tb);
  git_repository_free(repo);
  git_libgit2_shutdown();
  return st;
}

}  // namespace

absl::Status RunDemo(const DemoOptions& options, std::ostream& out) {
  fs::path dir = options.workdir;
  bool remove_after = false;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "infrarsi-demo-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("demo: mkdtemp failed");
    dir = tmpl;
    remove_after = !options.keep;
  }
  const fs::path spec_path = dir / "specs" / "demo-h200-gpt-354m.yaml";
  RETURN_IF_ERROR(WriteFile(spec_path, kDemoSpecYaml));
  RETURN_IF_ERROR(WriteFile(dir / "landscapes" / "h200-gpt-354m-seq2048.jsonl",
                            kDemoLandscapeJsonl));
  const fs::path repo_dir = dir / "target-repo";
  RETURN_IF_ERROR(MakeRepo(repo_dir));

  out << "InfraRSI demo: embedded server, " << options.agents
      << " replay agents, outcomes measured on one NVIDIA H200\n  work folder: " << dir.string()
      << "\n";
  server::InfraRsiServer::Options so;
  so.listen = "127.0.0.1:0";
  so.db_path = (dir / "infrarsi.db").string();
  ASSIGN_OR_RETURN(auto srv, server::InfraRsiServer::Create(so));
  out << "  server:      " << srv->address() << "\n";

  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.agents; ++i) {
    Agent::Options ao;
    ao.server = srv->address();
    ao.host = absl::StrCat("demo-node-", i + 1);
    ao.gpu_model = "H200";
    ao.gpu_count = 1;
    ao.memory_per_gpu_gib = 139.8;
    ao.executors = {"replay"};
    ao.lease_wait = absl::Seconds(1);
    ASSIGN_OR_RETURN(auto a, Agent::Create(ao));
    agents.push_back(std::move(a));
  }
  for (auto& a : agents) threads.emplace_back([&a] { (void)a->RunLoop(); });
  auto stop_all = [&] {
    for (auto& a : agents) a->Stop();
    for (auto& t : threads) t.join();
    srv->Shutdown();
  };

  std::string applied_branch;  // set once the demo committed
  absl::Status result = [&]() -> absl::Status {
    RpcClient::Options co;
    co.server = srv->address();
    ASSIGN_OR_RETURN(auto client, RpcClient::Create(co));
    ASSIGN_OR_RETURN(v1::SessionSummary s, client->InitFromFile(spec_path.string()));
    const std::string id = s.session_id();
    out << "\n[init]    session " << id << " (" << s.name() << "), contract "
        << s.contract_hash() << "\n";

    v1::DoctorRequest dr;
    dr.set_session_id(id);
    RETURN_IF_ERROR(client->Doctor(dr).status());
    ASSIGN_OR_RETURN(s, client->WatchWhile(id, v1::STAGE_DOCTORING, absl::Seconds(120),
                                           [](const v1::SessionEvent&) {}));
    if (s.stage() != v1::STAGE_DOCTORED) {
      return absl::InternalError(absl::StrCat("demo: doctor ended in ", s.stage_name(), ": ", s.error()));
    }
    out << absl::StrFormat("[doctor]  baseline %.4f s/step, CV %.2f%%, noise floor %.2f%%\n",
                           s.baseline_step_time_s(), 100 * s.baseline_cv(),
                           100 * s.noise_floor());

    v1::RunRequest rr;
    rr.set_session_id(id);
    rr.set_max_trials(options.max_trials);
    RETURN_IF_ERROR(client->Run(rr).status());
    ASSIGN_OR_RETURN(s, client->Watch(
                            id, absl::Seconds(300),
                            [&out](const v1::SessionEvent& ev) {
                              const v1::Stage st = ev.session().stage();
                              const bool going =
                                  st == v1::STAGE_RUNNING || st == v1::STAGE_VERIFYING;
                              if (ev.kind() != "trial_finished") return going;
                              const auto& t = ev.trial();
                              if (t.purpose() == "verify") {
                                out << absl::StrFormat("[verify]  %-12s %-7s %.4fs on %s\n",
                                                       t.tag(), t.status(), t.step_time_s(),
                                                       t.agent());
                                return going;
                              }
                              out << absl::StrFormat(
                                  "[run]     %2d/%d  trial %-3d %-7s %-9s best %.4f s (%.2fx)  %s\n",
                                  ev.session().trials_done(), ev.session().trials_planned(),
                                  t.id(), t.status(),
                                  t.status() == "ok" ? absl::StrFormat("%.4fs", t.step_time_s())
                                                     : "-",
                                  ev.session().best_step_time_s(), ev.session().best_speedup(),
                                  FormatConfig(t.config()));
                              return going;
                            }));
    ASSIGN_OR_RETURN(v1::SessionReport rep, client->Report(id));
    out << "\n[report]\n" << FormatReport(rep) << "\n";

    // As `infrarsi apply` does: the server hands over the plan, the commit
    // is made here, in this (the team's) clone.
    const std::string branch = absl::StrCat("infrarsi/", s.name());
    auto applied = ApplyLocally(*client, id, repo_dir.string(), branch, /*dry_run=*/false);
    if (applied.ok()) {
      out << "[apply]   commit " << applied->commit << " on branch " << branch << " of "
          << repo_dir.string() << " (checked-out branch untouched)\n";
      for (const auto& f : applied->changed) {
        auto kind = applied->change_kinds.find(f);
        out << "          " << (kind == applied->change_kinds.end() ? 'M' : kind->second) << " " << f
            << "\n";
      }
      applied_branch = branch;
    } else if (absl::IsFailedPrecondition(applied.status())) {
      out << "[apply]   nothing applied: " << applied.status().message() << "\n";
    } else {
      return applied.status();
    }
    return absl::OkStatus();
  }();
  stop_all();
  if (remove_after) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    out << "\nRemoved the demo's temporary folder " << dir.string()
        << (applied_branch.empty() ? "" : " (the repository and the commit above with it)")
        << "; `infrarsi demo --keep` keeps it.\n";
  } else {
    out << "\nKept the work folder: " << dir.string() << "\n";
    if (!applied_branch.empty()) {
      out << "  the commit: git -C " << repo_dir.string() << " show " << applied_branch << "\n";
    }
  }
  if (result.ok()) {
    out << "\nNext: tune a job of your own. Draft its spec from the command you run,\n"
           "  infrarsi draft --gpu H100 --repo ~/src/job -o job.yaml -- torchrun train.py ...\n"
           "start infrarsi-server and an infrarsi-agent per GPU host, and follow README.md's\n"
           "\"From a request to a commit\": session create, doctor, run, report, apply.\n";
  }
  return result;
}

}  // namespace infrarsi::client
