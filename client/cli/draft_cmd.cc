#include "client/cli/draft_cmd.h"

#include <git2.h>

#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "server/llm_client.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

// A repository opened for reading its HEAD, libgit2 initialised for as
// long as it lives.
class HeadReader {
 public:
  static absl::StatusOr<std::unique_ptr<HeadReader>> Open(const std::string& path) {
    std::unique_ptr<HeadReader> r(new HeadReader);
    if (git_repository_open(&r->repo_, path.c_str()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--repo: '", path, "' is not a git repository"));
    }
    return r;
  }
  ~HeadReader() {
    git_repository_free(repo_);
    git_libgit2_shutdown();
  }
  // The object `spec` names ("HEAD^{tree}", "HEAD:train.py"), owned by the
  // caller; null when there is none.
  git_object* Find(const std::string& spec) const {
    git_object* obj = nullptr;
    return git_revparse_single(&obj, repo_, spec.c_str()) == 0 ? obj : nullptr;
  }

 private:
  HeadReader() { git_libgit2_init(); }
  git_repository* repo_ = nullptr;
};

using ObjectPtr = std::unique_ptr<git_object, void (*)(git_object*)>;

// The Python files committed at HEAD of the repository at `path`.
absl::StatusOr<std::vector<std::string>> CommittedPythonFiles(const std::string& path) {
  auto repo = HeadReader::Open(path);
  if (!repo.ok()) return repo.status();
  ObjectPtr tree((*repo)->Find("HEAD^{tree}"), git_object_free);
  if (tree == nullptr) return absl::InvalidArgumentError(absl::StrCat("--repo: '", path, "' has no commit"));
  std::vector<std::string> files;
  git_tree_walk(
      reinterpret_cast<git_tree*>(tree.get()), GIT_TREEWALK_PRE,
      [](const char* root, const git_tree_entry* e, void* payload) {
        const std::string name = git_tree_entry_name(e);
        if (git_tree_entry_type(e) == GIT_OBJECT_BLOB && absl::EndsWith(name, ".py")) {
          static_cast<std::vector<std::string>*>(payload)->push_back(std::string(root) + name);
        }
        return 0;
      },
      &files);
  std::sort(files.begin(), files.end());
  return files;
}

// A file as committed at HEAD of the repository at `path` (what trials run:
// a fresh work tree of the commit, never the folder's own copy).
absl::StatusOr<std::string> CommittedFile(const std::string& path, const std::string& file) {
  auto repo = HeadReader::Open(path);
  if (!repo.ok()) return repo.status();
  ObjectPtr obj((*repo)->Find(absl::StrCat("HEAD:", file)), git_object_free);
  if (obj == nullptr || git_object_type(obj.get()) != GIT_OBJECT_BLOB) {
    return absl::NotFoundError(absl::StrCat(file, " is not committed at HEAD of ", path));
  }
  const git_blob* blob = reinterpret_cast<const git_blob*>(obj.get());
  const auto size = git_blob_rawsize(blob);
  if (size > (4 << 20)) return absl::InvalidArgumentError(absl::StrCat(file, " is larger than 4 MiB"));
  return std::string(static_cast<const char*>(git_blob_rawcontent(blob)), static_cast<size_t>(size));
}

std::string Relative(const fs::path& target, const fs::path& from) {
  std::error_code ec;
  fs::path rel = fs::relative(fs::absolute(target), fs::absolute(from), ec);
  if (ec || rel.empty()) return fs::absolute(target).lexically_normal().string();
  return rel.string();
}

}  // namespace

absl::Status RunDraft(DraftOptions o, std::ostream& out, std::ostream& log) {
  if (!o.repo.empty() && !o.workdir.empty()) {
    return absl::InvalidArgumentError("--repo, --workdir: give one (trials run in the repository's work tree)");
  }
  if (!o.out.empty() && fs::exists(o.out)) {
    return absl::AlreadyExistsError(absl::StrCat("--out: ", o.out, " exists; choose another file"));
  }
  const fs::path spec_dir = o.out.empty() ? fs::current_path() : fs::absolute(o.out).parent_path();
  const fs::path job = !o.repo.empty() ? fs::path(o.repo) : !o.workdir.empty() ? fs::path(o.workdir)
                                                                              : fs::current_path();
  if (!fs::is_directory(job)) {
    return absl::InvalidArgumentError(absl::StrCat(o.repo.empty() ? "--workdir" : "--repo", ": '",
                                                   job.string(), "' is not a folder"));
  }
  DraftInput& in = o.input;
  // The script's own choices, when it can be read.
  for (const std::string& w : in.argv) {
    if (!absl::EndsWith(w, ".py")) continue;
    const fs::path script = fs::path(w).is_absolute() ? fs::path(w) : job / w;
    auto text = !o.repo.empty() && !fs::path(w).is_absolute() ? CommittedFile(o.repo, w)
                                                               : ReadRegularFile(script.string(), 4 << 20, "argv");
    if (text.ok()) {
      in.script_choices = ScriptChoices(*text);
      in.script_defaults = ScriptDefaults(*text);
      in.watches_optimizer = absl::StrContains(*text, "watch_optimizer(");
      in.uses_harness = absl::StrContains(*text, "infrarsi_harness");
    } else {
      log << "draft: cannot read " << script.string() << " (" << text.status().message()
          << "): its flags' choices are unknown\n";
    }
    break;
  }
  // The DeepSpeed config the command names: its batch sizes and print
  // interval are facts the draft needs.
  for (size_t i = 0; i < in.argv.size(); ++i) {
    std::string path;
    for (const char* flag : {"--deepspeed_config", "--deepspeed"}) {
      if (in.argv[i] == flag && i + 1 < in.argv.size()) path = in.argv[i + 1];
      if (absl::StartsWith(in.argv[i], std::string(flag) + "=")) path = in.argv[i].substr(std::string(flag).size() + 1);
    }
    if (path.empty() || !absl::EndsWith(path, ".json")) continue;
    const fs::path config = fs::path(path).is_absolute() ? fs::path(path) : job / path;
    auto text = !o.repo.empty() && !fs::path(path).is_absolute()
                    ? CommittedFile(o.repo, path)
                    : ReadRegularFile(config.string(), 1 << 20, "deepspeed config");
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("deepspeed config: cannot read ", config.string(),
                                                     ": ", text.status().message()));
    }
    in.ds_config = *text;
    break;
  }
  if (!o.repo.empty()) {
    auto files = CommittedPythonFiles(o.repo);
    if (!files.ok()) return files.status();
    in.files = *files;
    in.repository_url = Relative(o.repo, spec_dir);
  } else {
    in.workdir = Relative(job, spec_dir);
  }
  auto draft = DraftSpec(in);
  if (!draft.ok()) return draft.status();
  if (!o.llm_endpoint.empty()) {
    LlmPriorClient::Options lo;
    lo.endpoint = o.llm_endpoint;
    lo.model = o.llm_model;
    lo.api_key = o.llm_api_key;
    lo.timeout = o.llm_timeout;
    auto client = LlmPriorClient::Create(lo);
    if (!client.ok()) return client.status();
    auto body = (*client)->Post(DraftLlmRequestJson(*draft, in, o.llm_model));
    absl::Status st = body.ok() ? MergeLlmDraftAnswer(*body, in, o.llm_model, &*draft) : body.status();
    if (!st.ok()) {
      // The draft stands without it: deterministic, and said.
      draft->notes.push_back(absl::StrCat("llm (", o.llm_model, ") not used: ", st.message()));
      log << "draft: the LLM's answer was not used: " << st.message() << "\n";
    }
  }
  const std::string yaml = DraftYaml(*draft);
  if (o.out.empty()) {
    out << yaml;
    return absl::OkStatus();
  }
  if (absl::Status st = WriteFileAtomically(o.out, yaml, "--out"); !st.ok()) return st;
  log << "wrote " << o.out << " (" << draft->knobs.size() << " knobs)\n";
  return absl::OkStatus();
}

}  // namespace infrarsi::client
