#include "core/slurm_job.h"

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace infrarsi {
namespace {

absl::Status Bad(const std::string& field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool NodeName(absl::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

bool Printable(const std::string& s) {
  for (char c : s) {
    if (!absl::ascii_isprint(c)) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateSlurmJob(const v1::SlurmJob& job, const std::string& field) {
  if (job.job_id().size() > 32 || !Printable(job.job_id())) {
    return Bad(field + ".job_id", "at most 32 printable characters");
  }
  for (char c : job.job_id()) {
    if (!(absl::ascii_isdigit(c) || c == '_' || c == '+')) {
      return Bad(field + ".job_id", "a Slurm job id (digits, '_' or '+')");
    }
  }
  if (job.state().size() > 32) return Bad(field + ".state", "at most 32 characters");
  for (char c : job.state()) {
    if (!(absl::ascii_isupper(c) || c == '_')) {
      return Bad(field + ".state", "a Slurm job state (capitals and '_')");
    }
  }
  if (job.nodes().size() > 8192) return Bad(field + ".nodes", "at most 8192 characters");
  if (!job.nodes().empty()) {
    for (absl::string_view n : absl::StrSplit(job.nodes(), ',')) {
      if (!NodeName(n)) return Bad(field + ".nodes", "comma-separated node names");
    }
  }
  if (job.reason().size() > 256 || !Printable(job.reason())) {
    return Bad(field + ".reason", "at most 256 printable characters");
  }
  if (job.exit_code().size() > 16 || !Printable(job.exit_code())) {
    return Bad(field + ".exit_code", "at most 16 printable characters");
  }
  if (!(std::isfinite(job.queued_s()) && job.queued_s() >= 0 && job.queued_s() <= 365 * 86400.0)) {
    return Bad(field + ".queued_s", "a finite number of seconds in [0, 1 year]");
  }
  if (job.failed_nodes_size() > 64) return Bad(field + ".failed_nodes", "at most 64 nodes");
  for (const std::string& n : job.failed_nodes()) {
    if (!NodeName(n)) return Bad(field + ".failed_nodes", "node names");
  }
  return absl::OkStatus();
}

std::string EncodeSlurmJob(const v1::SlurmJob& job) {
  if (job.ByteSizeLong() == 0) return "";
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(job, &out, o);
  return out;
}

v1::SlurmJob DecodeSlurmJob(const std::string& stored) {
  v1::SlurmJob job;
  if (stored.empty() || !google::protobuf::util::JsonStringToMessage(stored, &job).ok()) {
    return v1::SlurmJob();
  }
  return job;
}

std::string MergeSlurmJob(const std::string& stored, const v1::SlurmJob& reported) {
  const v1::SlurmJob before = DecodeSlurmJob(stored);
  v1::SlurmJob merged = reported;
  merged.clear_failed_nodes();
  std::set<std::string> seen;
  for (const auto* list : {&before.failed_nodes(), &reported.failed_nodes()}) {
    for (const std::string& n : *list) {
      if (seen.insert(n).second && merged.failed_nodes_size() < 64) merged.add_failed_nodes(n);
    }
  }
  return EncodeSlurmJob(merged);
}

std::vector<std::string> SlurmNodes(const v1::SlurmJob& job) {
  std::vector<std::string> out;
  if (job.nodes().empty()) return out;
  for (absl::string_view n : absl::StrSplit(job.nodes(), ',', absl::SkipEmpty())) {
    out.emplace_back(n);
  }
  return out;
}

}  // namespace infrarsi
