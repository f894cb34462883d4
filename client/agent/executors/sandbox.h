// A sealed box per trial on a process agent, from the kernel's own
// mechanisms (as Slurm's job_container/tmpfs and namespace/linux do it):
//
// - its own PID namespace: the trial's first process runs under a small
//   init (pid 1) that ends when that process ends, and the kernel then
//   kills every process left in the namespace (a setsid'd double fork
//   included); /proc is remounted, so it shows the trial's processes only;
// - its own mount namespace: private, empty tmpfs on /tmp, /var/tmp,
//   /dev/shm and /run/lock that vanish with it; the agent's scratch root
//   (and any other folder of the agent's it names, e.g. the git cache)
//   covered by an empty tmpfs, with only the trial's own folder bound back
//   in; a workdir outside the trial's folder bound read-only; the root
//   mount read-only (no world-writable folder the covers missed carries a
//   file to the next trial);
// - its own IPC namespace (System V shared memory, semaphores, queues);
// - its own uid: each running trial holds one id of the operator's pool
//   (`--trial-uids FIRST-LAST`, ids no account uses), released when the
//   trial ends, so no two trials that run at once share one; its folder is
//   0700 and owned by that id;
// - its own GPUs: a slot's share of the agent's devices, in
//   CUDA_VISIBLE_DEVICES.
//
// The host can lack a piece (not root, no namespaces): Create then fails
// naming it, and the operator may run without deliberately
// (`--sandbox=off`); every outcome says which isolation its trial ran
// under (TrialOutcome.isolation).
//
// Also here: the agent's own filesystem work on folders a trial owned,
// done without following symbolic links (descriptor-relative calls), and
// the scratch root the agent creates and owns.
#ifndef INFRARSI_CLIENT_AGENT_EXECUTORS_SANDBOX_H_
#define INFRARSI_CLIENT_AGENT_EXECUTORS_SANDBOX_H_

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/functional/function_ref.h"

namespace infrarsi::client {

// What the sandboxed child does before it runs the trial: prepared by the
// parent (all strings built there), carried out in the child after clone()
// with only system calls (no allocation: the agent is multithreaded).
struct SealPlan {
  // Folders covered by a private, empty tmpfs (mode 1777): /tmp and its like.
  std::vector<std::string> private_tmp;
  // Folders of the agent's covered by an empty tmpfs (mode 0755).
  std::vector<std::string> hidden;
  // Folders bound back in after the covers, at the same path: the child
  // opens each (O_PATH) before the covers, so a covered one stays
  // reachable; `fd` is the child's.
  struct Keep {
    int fd = -1;
    std::string path;
    bool read_only = false;
    bool is_file = false;  // a single file (a program), not a folder
  };
  std::vector<Keep> keep;
};

// Carries out `plan` in a process that has its own mount namespace (and
// PID namespace, for /proc). Returns 0, or -1 with the failing step in
// `err` (a static or plan-owned string, valid after the call). Only system
// calls: async-signal-safe.
int SealInChild(SealPlan& plan, const char** err);

// The body of a sandboxed trial's keeper: the child of fork() in the
// agent's PID namespace (so glibc's locks and thread list are a single
// thread's: no raw clone of a multithreaded agent). It enters new PID,
// mount and IPC namespaces, seals the mounts (SealInChild), and starts the
// namespace's init (pid 1), which mounts a fresh /proc, runs `trial` in a
// child of its own (`trial` must exec or _exit), writes that child's wait
// status (an int) to `status_fd` when it ends, and ends; the kernel then
// kills whatever the trial left in the namespace. Failures to seal are
// written to `err_fd` and exit 125. Never returns.
[[noreturn]] void RunSealed(SealPlan& plan, int status_fd, int err_fd,
                            absl::FunctionRef<void()> trial);

class Sandbox {
 public:
  struct Options {
    // Off: trials run as before (process group only, the host's /tmp and
    // /proc, run_as's uid); only deliberately. Default on.
    bool enabled = true;
    // The agent's scratch root: covered inside, but for the trial's folder.
    std::string scratch_root;
    // Other folders of the agent's to cover (e.g. the git cache when it is
    // outside the scratch root). Those that do not exist are skipped.
    std::vector<std::string> hidden;
    // The pool of ids trials run as (uid and gid alike): first_id ..
    // first_id + id_count - 1. Required when enabled (the agent must be
    // root to switch to them).
    uid_t first_id = 0;
    int id_count = 0;
    // The agent's GPU devices ("0".."7", or UUIDs) and how many trials run
    // at once: each trial gets devices.size() / slots of them, none shared.
    // Empty: trials keep the agent's CUDA_VISIBLE_DEVICES (a CPU host).
    std::vector<std::string> devices;
    int slots = 1;
  };
  // Checks the host provides every piece (root, PID, mount and IPC
  // namespaces, tmpfs and proc mounts: a probe child is started and must
  // seal itself); FAILED_PRECONDITION naming the missing piece, or
  // INVALID_ARGUMENT naming the option.
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(Options options);

  // One running trial's identity and devices, returned to the pool when
  // destroyed. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    uid_t uid() const { return uid_; }
    gid_t gid() const { return static_cast<gid_t>(uid_); }
    // "" when the trial keeps the agent's devices.
    const std::string& visible_devices() const { return devices_; }

   private:
    friend class Sandbox;
    Sandbox* owner_ = nullptr;
    uid_t uid_ = 0;
    std::vector<int> device_slots_;
    std::string devices_;
  };
  // An id no running trial holds, and a share of the devices.
  // RESOURCE_EXHAUSTED when every id (or device share) is taken.
  // Thread-safe.
  absl::StatusOr<Lease> Acquire();

  bool enabled() const { return options_.enabled; }
  // The namespaces a sandboxed trial gets (unshare flags).
  static int CloneFlags();
  // The plan for one trial whose folder is `trial_dir` (inside the scratch
  // root) and whose code runs in `workdir` (its tree inside trial_dir, or
  // an operator's folder, then bound read-only).
  // `argv`: the trial's command; an absolute path in it that lies under a
  // private tmp folder (a program or script an operator keeps in /tmp) is
  // bound back read-only, so the command still finds it.
  absl::StatusOr<SealPlan> PlanFor(const std::string& trial_dir, const std::string& workdir,
                                   const std::vector<std::string>& argv = {}) const;
  // What a trial ran under, for its outcome and the report.
  std::string Describe(const Lease& lease) const;

 private:
  explicit Sandbox(Options options) : options_(std::move(options)) {}
  void Release(Lease* lease);

  Options options_;
  std::vector<std::string> private_tmp_;  // resolved at Create
  std::mutex mu_;
  std::set<uid_t> ids_in_use_;      // guarded by mu_
  std::vector<bool> device_share_in_use_;  // guarded by mu_
};

// The agent's scratch root: created by the agent (0711: trials reach only
// their own 0700 folders inside) or, if it exists, a real folder (not a
// link) the agent's user owns that no one else may write. FAILED_PRECONDITION
// naming the folder otherwise. An empty `path` makes a fresh, unguessable
// one under $TMPDIR (or /tmp); the path is returned.
absl::StatusOr<std::string> OwnScratchRoot(const std::string& path);

// Gives `dir` and everything below it to uid:gid, never following a
// symbolic link (descriptor-relative walk; links themselves are changed,
// not what they point to). `dir` itself must not be a link.
absl::Status ChownTreeNoFollow(const std::string& dir, uid_t uid, gid_t gid);

// Removes `path` and everything below it without following a symbolic
// link anywhere (a link is removed, never what it points to). Missing: ok.
absl::Status RemoveTreeNoFollow(const std::string& path);

// Parses "FIRST-LAST" (inclusive) into a first id and a count; ids 0 and
// above 2^31 are refused. INVALID_ARGUMENT naming `field`.
absl::Status ParseIdRange(const std::string& text, const std::string& field, uid_t* first,
                          int* count);

}  // namespace infrarsi::client

#endif  // INFRARSI_CLIENT_AGENT_EXECUTORS_SANDBOX_H_
