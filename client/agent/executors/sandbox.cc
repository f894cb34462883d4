#include "client/agent/executors/sandbox.h"

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace infrarsi::client {
namespace {

namespace fs = std::filesystem;

// mkdir -p without allocation (the child of a multithreaded parent).
// Missing parents are made 0755; existing ones are left as they are.
bool MakeDirs(const char* path) {
  char buf[PATH_MAX];
  const size_t n = std::strlen(path);
  if (n == 0 || n >= sizeof(buf)) return false;
  std::memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] == '/' || buf[i] == '\0') {
      const char saved = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return false;
      buf[i] = saved;
    }
  }
  return true;
}

// "/proc/self/fd/<fd>" into buf, without allocation.
void FdPath(int fd, char* buf, size_t size) {
  static const char kPrefix[] = "/proc/self/fd/";
  char digits[16];
  int k = 0;
  unsigned v = static_cast<unsigned>(fd);
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && k < 15);
  size_t i = 0;
  for (; kPrefix[i] != '\0' && i + 1 < size; ++i) buf[i] = kPrefix[i];
  while (k > 0 && i + 1 < size) buf[i++] = digits[--k];
  buf[i] = '\0';
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Visits everything below the directory `dirfd` without following a
// link: each subdirectory is opened relative to its parent with
// O_NOFOLLOW and walked before `visit(parent_fd, name, is_dir)` is called
// for it (so a removal finds it empty). `shown` names `dirfd` in errors.
absl::Status WalkBelow(int dirfd, const std::string& shown, int depth,
                       const std::function<absl::Status(int, const char*, bool)>& visit) {
  if (depth > 256) return absl::FailedPreconditionError(absl::StrCat(shown, ": too deep"));
  const int listing = dup(dirfd);
  if (listing < 0) return Errno("dup", shown);
  DIR* d = fdopendir(listing);
  if (d == nullptr) {
    close(listing);
    return Errno("opendir", shown);
  }
  absl::Status result = absl::OkStatus();
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
    const bool is_dir = S_ISDIR(st.st_mode);
    if (is_dir) {
      const int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        result = Errno("open", shown + "/" + e->d_name);
        break;
      }
      result = WalkBelow(sub, shown + "/" + e->d_name, depth + 1, visit);
      close(sub);
      if (!result.ok()) break;
    }
    result = visit(dirfd, e->d_name, is_dir);
    if (!result.ok()) break;
  }
  closedir(d);
  return result;
}

}  // namespace

int SealInChild(SealPlan& plan, const char** err) {
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *err = "making the mounts private";
    return -1;
  }
  // Opened here, in this namespace (a bind's source must be one of its
  // mounts), and before the covers hide them.
  for (SealPlan::Keep& k : plan.keep) {
    k.fd = open(k.path.c_str(), O_PATH | O_CLOEXEC | (k.is_file ? 0 : O_DIRECTORY));
    if (k.fd < 0) {
      *err = k.path.c_str();
      return -1;
    }
  }
  for (const std::string& d : plan.private_tmp) {
    if (mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
      *err = d.c_str();
      return -1;
    }
  }
  // Bound back: read-only folders (an operator's workdir) before the
  // covers, so that a cover inside one (the scratch root in the workdir)
  // still hides; the trial's own folder after them, so that it shows.
  auto bind = [&](const SealPlan::Keep& k) {
    char src[64];
    FdPath(k.fd, src, sizeof(src));
    bool target = false;
    if (k.is_file) {
      // A file is bound onto a file: the parent folders, then an empty one.
      char parent[PATH_MAX];
      const size_t n = std::strlen(k.path.c_str());
      if (n < sizeof(parent)) {
        std::memcpy(parent, k.path.c_str(), n + 1);
        char* slash = std::strrchr(parent, '/');
        if (slash != nullptr && slash != parent) *slash = '\0';
        const int f = MakeDirs(parent) ? open(k.path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644) : -1;
        if (f >= 0 || errno == EEXIST) target = true;
        if (f >= 0) close(f);
      }
    } else {
      target = MakeDirs(k.path.c_str());
    }
    if (!target || mount(src, k.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      *err = k.path.c_str();
      return false;
    }
    if (k.read_only && mount(nullptr, k.path.c_str(), nullptr,
                             MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0) {
      *err = k.path.c_str();
      return false;
    }
    return true;
  };
  for (const SealPlan::Keep& k : plan.keep) {
    if (k.read_only && !bind(k)) return -1;
  }
  for (const std::string& d : plan.hidden) {
    if (!MakeDirs(d.c_str()) ||
        mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
      *err = d.c_str();
      return -1;
    }
  }
  for (const SealPlan::Keep& k : plan.keep) {
    if (!k.read_only && !bind(k)) return -1;
  }
  // The root mount read-only inside: a world-writable folder the covers
  // missed (/var/crash, a 1777 folder an admin made) would otherwise carry
  // a file to the next trial that gets the same id of the pool. The covers
  // and the trial's folder are mounts of their own and stay writable.
  if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    *err = "/ (read-only)";
    return -1;
  }
  return 0;
}

namespace {

void WriteAll(int fd, const char* text) { (void)!write(fd, text, std::strlen(text)); }

// "infrarsi: sandbox: <what><detail>: <errno's text>" to `fd`, then exit 125
// (no allocation: the child of a multithreaded parent).
[[noreturn]] void SealFailed(int fd, const char* what, const char* detail) {
  const int e = errno;
  WriteAll(fd, "infrarsi: sandbox: ");
  WriteAll(fd, what);
  WriteAll(fd, detail);
  WriteAll(fd, ": ");
  WriteAll(fd, strerror(e));
  WriteAll(fd, "\n");
  _exit(125);
}

}  // namespace

void RunSealed(SealPlan& plan, int status_fd, int err_fd, absl::FunctionRef<void()> trial) {
  // Namespaces for this process's mounts and for the processes it starts.
  if (unshare(Sandbox::CloneFlags()) != 0) SealFailed(err_fd, "cannot create namespaces", "");
  const char* err = "";
  if (SealInChild(plan, &err) != 0) SealFailed(err_fd, "cannot seal ", err);
  const pid_t init = fork();
  if (init < 0) _exit(125);
  if (init == 0) {
    // pid 1 of the new namespace: when it ends, the kernel kills every
    // process left in it. It ends with its keeper too (the agent kills the
    // keeper's process group on a timeout; this is the backstop).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      SealFailed(err_fd, "cannot mount /proc", "");
    }
    const pid_t child = fork();
    if (child < 0) _exit(125);
    if (child == 0) {
      trial();
      _exit(127);
    }
    for (;;) {
      int st = 0;
      const pid_t r = waitpid(-1, &st, 0);
      if (r == child) {
        (void)!write(status_fd, &st, sizeof(st));
        _exit(0);
      }
      if (r < 0 && errno != EINTR) _exit(125);
    }
  }
  close(status_fd);  // the init's alone now: its end closes the pipe
  int st = 0;
  while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
  }
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 125);
}

int Sandbox::CloneFlags() { return CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC; }

absl::Status ParseIdRange(const std::string& text, const std::string& field, uid_t* first,
                          int* count) {
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  uint64_t lo = 0, hi = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", text, "' is not a range FIRST-LAST of numeric ids"));
  }
  if (lo == 0 || hi < lo || hi >= (1ULL << 31) || hi - lo >= 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", text, "' must be ids from 1 to 2^31-1, first <= last, at most 1000000"));
  }
  *first = static_cast<uid_t>(lo);
  *count = static_cast<int>(hi - lo + 1);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(Options options) {
  if (options.slots < 1) return absl::InvalidArgumentError("slots: at least 1");
  if (!options.devices.empty() && static_cast<int>(options.devices.size()) < options.slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slots: ", options.slots, " trials at once need at least as many GPUs; this agent has ",
        options.devices.size(), " (", absl::StrJoin(options.devices, ","), ")"));
  }
  std::unique_ptr<Sandbox> sb(new Sandbox(std::move(options)));
  sb->device_share_in_use_.assign(static_cast<size_t>(sb->options_.slots), false);
  if (!sb->options_.enabled) return sb;
  const Options& o = sb->options_;
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "sandbox: a uid of its own per trial and private mounts need an agent started as root "
        "(it switches each trial to an id of --trial-uids); start it as root, or run without "
        "isolation deliberately with --sandbox=off");
  }
  if (o.id_count <= 0) {
    return absl::InvalidArgumentError(
        "trial_uids: name the pool of ids trials run as (--trial-uids FIRST-LAST, ids no "
        "account uses, at least --slots of them), or --sandbox=off");
  }
  if (o.id_count < o.slots) {
    return absl::InvalidArgumentError(absl::StrCat("trial_uids: ", o.id_count, " ids for ",
                                                   o.slots, " slots: each running trial needs one"));
  }
  // "Ids no account uses" is checked, not trusted: a trial run as a real
  // account's uid (nobody's 65534, a person's 1000) reads and writes what
  // that account may, its home included.
  const uid_t last = o.first_id + static_cast<uid_t>(o.id_count - 1);
  auto taken = [&](uid_t id) { return id >= o.first_id && id <= last; };
  setpwent();
  while (const passwd* pw = getpwent()) {
    if (taken(pw->pw_uid)) {
      const std::string who = pw->pw_name;
      endpwent();
      return absl::InvalidArgumentError(absl::StrCat(
          "trial_uids: ", o.first_id, "-", last, " holds uid ", pw->pw_uid, " of account '",
          who, "': name ids no account uses"));
    }
  }
  endpwent();
  setgrent();
  while (const group* gr = getgrent()) {
    if (taken(gr->gr_gid)) {
      const std::string which = gr->gr_name;
      endgrent();
      return absl::InvalidArgumentError(absl::StrCat(
          "trial_uids: ", o.first_id, "-", last, " holds gid ", gr->gr_gid, " of group '",
          which, "': name ids no group uses"));
    }
  }
  endgrent();
  if (o.scratch_root.empty()) return absl::InvalidArgumentError("scratch_root: required");
  // The host's shared scratch folders, each once (/var/lock is often a
  // link to /run/lock).
  std::set<std::string> seen;
  for (const char* d : {"/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock"}) {
    std::error_code ec;
    const fs::path real = fs::canonical(d, ec);
    if (ec || !fs::is_directory(real, ec)) continue;
    if (seen.insert(real.string()).second) sb->private_tmp_.push_back(real.string());
  }
  // The probe: a child in the namespaces seals itself as a trial would.
  SealPlan plan;
  plan.private_tmp = sb->private_tmp_;
  plan.hidden = {o.scratch_root};
  int status_pipe[2], err_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) return absl::InternalError("sandbox: pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(status_pipe[0]);
    close(status_pipe[1]);
    return absl::InternalError("sandbox: pipe");
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("sandbox: fork: ", std::strerror(errno)));
  if (pid == 0) {
    close(status_pipe[0]);
    close(err_pipe[0]);
    RunSealed(plan, status_pipe[1], err_pipe[1], [&] {
      // pid 1's child in a namespace of its own: /proc shows the two.
      const bool alone = getpid() == 2 && access("/proc/1", F_OK) == 0 && access("/proc/3", F_OK) != 0;
      if (!alone) WriteAll(err_pipe[1], "the new /proc shows other processes");
      _exit(alone ? 0 : 1);
    });
  }
  close(status_pipe[1]);
  close(err_pipe[1]);
  std::string why;
  char buf[256];
  for (ssize_t n; (n = read(err_pipe[0], buf, sizeof(buf))) > 0;) why.append(buf, static_cast<size_t>(n));
  int trial_status = -1;
  const bool reported = read(status_pipe[0], &trial_status, sizeof(trial_status)) ==
                        static_cast<ssize_t>(sizeof(trial_status));
  close(err_pipe[0]);
  close(status_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!reported || !WIFEXITED(trial_status) || WEXITSTATUS(trial_status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox: this host cannot seal a trial (", why.empty() ? "the probe died" : why,
        "); run without isolation deliberately with --sandbox=off"));
  }
  return sb;
}

Sandbox::Lease::Lease(Lease&& other) noexcept { *this = std::move(other); }

Sandbox::Lease& Sandbox::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Release(this);
    owner_ = other.owner_;
    uid_ = other.uid_;
    device_slots_ = std::move(other.device_slots_);
    devices_ = std::move(other.devices_);
    other.owner_ = nullptr;
    other.device_slots_.clear();
  }
  return *this;
}

Sandbox::Lease::~Lease() {
  if (owner_ != nullptr) owner_->Release(this);
}

absl::StatusOr<Sandbox::Lease> Sandbox::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  Lease lease;
  if (options_.enabled) {
    bool found = false;
    for (int i = 0; i < options_.id_count && !found; ++i) {
      const uid_t id = options_.first_id + static_cast<uid_t>(i);
      if (ids_in_use_.count(id) == 0) {
        lease.uid_ = id;
        found = true;
      }
    }
    if (!found) return absl::ResourceExhaustedError("sandbox: every trial id is in use");
  }
  if (!options_.devices.empty()) {
    const size_t share = options_.devices.size() / static_cast<size_t>(options_.slots);
    size_t k = 0;
    while (k < device_share_in_use_.size() && device_share_in_use_[k]) ++k;
    if (k == device_share_in_use_.size()) {
      return absl::ResourceExhaustedError("sandbox: every GPU share is in use");
    }
    device_share_in_use_[k] = true;
    lease.device_slots_.push_back(static_cast<int>(k));
    std::vector<std::string> mine(options_.devices.begin() + static_cast<long>(k * share),
                                  options_.devices.begin() + static_cast<long>((k + 1) * share));
    lease.devices_ = absl::StrJoin(mine, ",");
  }
  if (options_.enabled) ids_in_use_.insert(lease.uid_);
  lease.owner_ = this;
  return lease;
}

void Sandbox::Release(Lease* lease) {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.enabled) ids_in_use_.erase(lease->uid_);
  for (int k : lease->device_slots_) device_share_in_use_[static_cast<size_t>(k)] = false;
  lease->device_slots_.clear();
  lease->owner_ = nullptr;
}

absl::StatusOr<SealPlan> Sandbox::PlanFor(const std::string& trial_dir,
                                          const std::string& workdir,
                                          const std::vector<std::string>& argv) const {
  SealPlan plan;
  plan.private_tmp = private_tmp_;
  plan.hidden.push_back(options_.scratch_root);
  for (const std::string& h : options_.hidden) {
    // One inside the scratch root is covered with it (a cover of its own
    // would show an empty folder where there is none).
    std::error_code ec;
    const bool covered =
        h == options_.scratch_root || absl::StartsWith(h, options_.scratch_root + "/");
    if (!covered && fs::is_directory(h, ec)) plan.hidden.push_back(h);
  }
  auto keep = [&](const std::string& path, bool ro) -> absl::Status {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox: ", path, " is not a folder"));
    }
    plan.keep.push_back({-1, path, ro});
    return absl::OkStatus();
  };
  absl::Status st = keep(trial_dir, false);
  const bool inside = workdir == trial_dir || absl::StartsWith(workdir, trial_dir + "/");
  for (const std::string& h : plan.hidden) {
    if (st.ok() && !inside && (workdir == h || absl::StartsWith(workdir, h + "/"))) {
      st = absl::FailedPreconditionError(absl::StrCat(
          "sandbox: workdir ", workdir, " is inside the agent's own folder ", h,
          ", which trials never see"));
    }
  }
  if (st.ok() && !workdir.empty() && !inside) st = keep(workdir, true);
  if (!st.ok()) return st;
  // The command's own files that a tmp cover would hide (never anything of
  // the agent's: those stay covered).
  for (const std::string& a : argv) {
    if (a.empty() || a[0] != '/') continue;
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(a, ec);
    if (ec || !fs::exists(real, ec)) continue;
    const std::string r = real.string();
    auto under = [&](const std::string& d) { return r == d || absl::StartsWith(r, d + "/"); };
    const bool in_tmp = std::any_of(private_tmp_.begin(), private_tmp_.end(), under);
    const bool agents = std::any_of(plan.hidden.begin(), plan.hidden.end(), under) ||
                        under(trial_dir) || (!workdir.empty() && under(workdir));
    if (!in_tmp || agents) continue;
    plan.keep.push_back({-1, r, true, !fs::is_directory(real, ec)});
  }
  return plan;
}

std::string Sandbox::Describe(const Lease& lease) const {
  std::string gpus = lease.visible_devices().empty()
                         ? std::string()
                         : absl::StrCat("; GPUs ", lease.visible_devices());
  if (!options_.enabled) {
    return absl::StrCat("none (--sandbox=off): the host's /tmp and /proc, a process group", gpus);
  }
  return absl::StrCat("sandbox: own PID, mount and IPC namespaces; private ",
                      absl::StrJoin(private_tmp_, " "), "; agent folders hidden; uid ",
                      lease.uid(), gpus);
}

absl::StatusOr<std::string> OwnScratchRoot(const std::string& path) {
  if (path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/infrarsi-agent-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("scratch: cannot create ", templ, ": ", std::strerror(errno)));
    }
    if (chmod(templ.c_str(), 0711) != 0) return Errno("scratch: chmod", templ);
    return templ;
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Errno("scratch:", path);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (mkdir(path.c_str(), 0700) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("scratch: cannot create ", path, ": ", std::strerror(errno)));
    }
    if (lstat(path.c_str(), &st) != 0) return Errno("scratch:", path);
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scratch: ", path, " is not a folder (a symbolic link or another file): the agent "
        "creates and owns its scratch root; name a path that does not exist yet"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scratch: ", path, " is owned by uid ", st.st_uid, ", not the agent's (", geteuid(),
        "): someone else could reach the trials' files; name a path that does not exist yet"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "scratch: ", path, " is writable by others (mode ",
        absl::StrFormat("%03o", st.st_mode & 0777),
        "): another user could swap a trial's folder; name a path that does not exist yet"));
  }
  // Others may pass through to a trial's own 0700 folder, never list it.
  if (chmod(path.c_str(), 0711) != 0) return Errno("scratch: chmod", path);
  return path;
}

absl::Status ChownTreeNoFollow(const std::string& dir, uid_t uid, gid_t gid) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("open", dir);
  absl::Status st = fchown(fd, uid, gid) == 0 ? absl::OkStatus() : Errno("chown", dir);
  if (st.ok()) {
    st = WalkBelow(fd, dir, 0, [&](int parent, const char* name, bool) {
      // A link is changed itself, never what it points to.
      if (fchownat(parent, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT) {
        return Errno("chown", dir + "/.../" + name);
      }
      return absl::OkStatus();
    });
  }
  close(fd);
  return st;
}

absl::Status RemoveTreeNoFollow(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("lstat", path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return unlink(path.c_str()) == 0 || errno == ENOENT ? absl::OkStatus() : Errno("unlink", path);
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  absl::Status result = WalkBelow(fd, path, 0, [&](int parent, const char* name, bool is_dir) {
    if (unlinkat(parent, name, is_dir ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
      return Errno("remove", path + "/.../" + name);
    }
    return absl::OkStatus();
  });
  close(fd);
  if (result.ok() && rmdir(path.c_str()) != 0 && errno != ENOENT) result = Errno("rmdir", path);
  return result;
}

}  // namespace infrarsi::client
