// Not a test: how long `infrarsi-server backup` takes on a database of
// DB_MB megabytes (default 150) while another connection commits without
// pause, as agents reporting to a live server do; and what the WAL does
// meanwhile. Issue 32 measured 44.7 s on 150 MB under steady writes (the
// copy restarted on every commit and finished once the writes stopped),
// with the WAL grown from 4 MB to 129 MB.
//
//   build/tests/backup_bench            # 150 MB, the real binary
//   DB_MB=50 build/tests/backup_bench
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "storage/sqlite_storage.h"
#include "tests/testing/subprocess.h"

namespace fs = std::filesystem;
using infrarsi::storage::SqliteStorage;

int main() {
  const char* env = std::getenv("DB_MB");
  const int mb = env != nullptr ? std::atoi(env) : 150;
  const std::string dir = infrarsi::testing::MakeTempDir("backup-bench");
  const std::string db = dir + "/infrarsi.db";
  SqliteStorage::Options o;
  o.path = db;
  auto live = SqliteStorage::Create(o);
  if (!live.ok()) {
    std::fprintf(stderr, "%s\n", live.status().ToString().c_str());
    return 1;
  }
  for (int i = 1; i <= mb; ++i) {  // 1 MB of trial output per row
    infrarsi::storage::TrialLogRecord log;
    log.trial_id = i;
    log.stream = "stdout";
    log.content = std::string(1 << 20, static_cast<char>('a' + i % 26));
    if (!(*live)->PutTrialLog(log).ok()) return 1;
  }
  auto wal_mb = [&] {
    std::error_code ec;
    const auto n = fs::file_size(db + "-wal", ec);
    return ec ? 0.0 : static_cast<double>(n) / (1 << 20);
  };
  std::printf("database: %.1f MB, WAL %.1f MB before\n",
              static_cast<double>(fs::file_size(db)) / (1 << 20), wal_mb());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> commits{0};
  double wal_peak = 0;
  std::thread writer([&] {
    for (int64_t n = 1; !stop.load(); ++n) {
      infrarsi::storage::SessionRecord rec;
      rec.id = absl::StrCat("w-", n);
      rec.stage = "initialized";
      rec.spec_yaml = std::string(2000, 'y');  // a session's spec: a small write
      if ((*live)->InsertSession(rec).ok()) ++commits;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // writing steadily
  const int64_t before = commits.load();
  const auto t0 = std::chrono::steady_clock::now();
  infrarsi::testing::Subprocess backup(
      {INFRARSI_SERVER_BIN, "--db", db, "backup", "--to", dir + "/copy.db"}, dir + "/backup.err");
  std::thread sampler([&] {
    while (!stop.load()) {
      wal_peak = std::max(wal_peak, wal_mb());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::string out = backup.ReadAll();
  const int status = backup.Wait();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t during = commits.load() - before;
  std::this_thread::sleep_for(std::chrono::seconds(1));  // writing on after the backup
  const double wal_after = wal_mb();
  stop = true;
  writer.join();
  sampler.join();
  std::printf("backup under steady writes: %.2f s (exit %d), %lld commits by the writer meanwhile "
              "(%.0f/s), WAL peak %.1f MB, %.1f MB after another second of writes\n%s",
              secs, WIFEXITED(status) ? WEXITSTATUS(status) : -1, static_cast<long long>(during),
              static_cast<double>(during) / secs, wal_peak, wal_after, out.c_str());
  fs::remove_all(dir);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
