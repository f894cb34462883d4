// A trial's Slurm job as the server keeps it (TrialRecord::slurm): what the
// agent last reported, checked and bounded, with the nodes that failed any
// attempt of the trial kept across attempts (a re-run after a NODE_FAIL
// must not erase which node failed).
//
// Thread safety: free functions over their arguments.
#ifndef INFRARSI_CORE_SLURM_JOB_H_
#define INFRARSI_CORE_SLURM_JOB_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi {

// INVALID_ARGUMENT naming the field ("<field>.queued_s") when a reported
// job is malformed: over-long text, a node name that is not one, a
// negative or non-finite queue time.
absl::Status ValidateSlurmJob(const v1::SlurmJob& job, const std::string& field);

// The stored form ("" for no job).
std::string EncodeSlurmJob(const v1::SlurmJob& job);
// An empty job for "" or an unreadable record.
v1::SlurmJob DecodeSlurmJob(const std::string& stored);

// `stored` updated with `reported`: the reported job replaces it, and the
// failed nodes of both are kept (each once, in order).
std::string MergeSlurmJob(const std::string& stored, const v1::SlurmJob& reported);

// The node names of a job's `nodes` ("node1,node2").
std::vector<std::string> SlurmNodes(const v1::SlurmJob& job);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_SLURM_JOB_H_
