#include "client/spec_files.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "core/spec.h"
#include "base/status_macros.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

std::string Resolve(const std::string& path, const fs::path& dir) {
  fs::path p(path);
  return (p.is_absolute() ? p : dir / p).lexically_normal().string();
}

}  // namespace

absl::StatusOr<v1::InitRequest> ReadSpecRequest(const std::string& spec_path) {
  v1::InitRequest req;
  ASSIGN_OR_RETURN(std::string yaml, ReadRegularFile(spec_path, kMaxSpecBytes, "spec"));
  req.set_spec_yaml(yaml);
  std::error_code ec;
  const fs::path dir = fs::absolute(spec_path, ec).parent_path().lexically_normal();
  if (ec) return absl::InvalidArgumentError(absl::StrCat("spec: bad path ", spec_path));
  req.set_spec_dir(dir.string());
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception&) {
    return req;  // the server names what is wrong
  }
  if (!root.IsMap()) return req;
  auto attach = [&](const std::string& field, const std::string& written, const std::string& path,
                    size_t limit) -> absl::Status {
    auto read = ReadRegularFile(path, limit, field);
    // A spec naming a file that is not there (or not a file) is a bad spec.
    if (!read.ok()) return absl::InvalidArgumentError(read.status().message());
    std::string content = *std::move(read);
    v1::SpecFile* f = req.add_files();
    f->set_field(field);
    f->set_path(written);
    f->set_content(std::move(content));
    return absl::OkStatus();
  };
  try {
    const YAML::Node landscape = root["executor"]["replay"]["landscape"];
    if (landscape && landscape.IsScalar()) {
      RETURN_IF_ERROR(attach("executor.replay.landscape", landscape.Scalar(),
                             Resolve(landscape.Scalar(), dir), kMaxSpecFileBytes));
    }
    const YAML::Node patches = root["patches"];
    if (patches && patches.IsSequence()) {
      for (const auto& p : patches) {
        if (!p.IsMap() || !p["file"] || !p["file"].IsScalar() || !p["name"] || !p["name"].IsScalar()) {
          continue;
        }
        RETURN_IF_ERROR(attach(absl::StrCat("patches[", p["name"].Scalar(), "].file"),
                               p["file"].Scalar(), Resolve(p["file"].Scalar(), dir),
                               kMaxPatchBytes));
      }
    }
    // Protected files are locked by their content as the submitter has it,
    // unless a repository holds them (the server reads those from it).
    const YAML::Node prot = root["contract"]["protected"];
    if (!root["repository"] && prot && prot.IsSequence()) {
      const YAML::Node wd = root["executor"]["process"]["workdir"];
      const fs::path workdir =
          wd && wd.IsScalar() ? fs::path(Resolve(wd.Scalar(), dir)) : dir;
      for (const auto& p : prot) {
        if (!p.IsScalar() || fs::path(p.Scalar()).is_absolute() ||
            p.Scalar().find("..") != std::string::npos) {
          continue;  // the server refuses it, naming the field
        }
        RETURN_IF_ERROR(attach(absl::StrCat("contract.protected[", p.Scalar(), "]"), p.Scalar(),
                               (workdir / p.Scalar()).lexically_normal().string(),
                               kMaxSpecFileBytes));
      }
    }
  } catch (const YAML::Exception&) {
    // A malformed shape: the server names it.
  }
  return req;
}

}  // namespace infrarsi::client
