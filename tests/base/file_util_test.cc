// Reading named files safely, and unpredictable secrets.
#include "base/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "base/random.h"
#include "tests/testing/subprocess.h"

namespace infrarsi {
namespace {

TEST(FileUtilTest, ReadsRegularFilesWithinTheBoundOnly) {
  const std::string dir = testing::MakeTempDir("files");
  const std::string path = dir + "/patch.diff";
  std::ofstream(path) << "hello\n";
  auto got = ReadRegularFile(path, 100, "patches[p].file");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello\n");
  // Larger than the bound: refused before anything is read, naming the field.
  auto big = ReadRegularFile(path, 3, "patches[p].file");
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_EQ(big.status().message().rfind("patches[p].file: ", 0), 0u) << big.status();
  // A device that never ends is not a file.
  auto zero = ReadRegularFile("/dev/zero", 1 << 20, "f");
  EXPECT_TRUE(absl::IsInvalidArgument(zero.status())) << zero.status();
  EXPECT_NE(zero.status().message().find("not a regular file"), std::string::npos);
  // Nor is a FIFO; opening it must not wait for a writer.
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto f = ReadRegularFile(fifo, 1 << 20, "f");
  EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRegularFile(dir, 100, "f").status()));
  EXPECT_TRUE(absl::IsNotFound(ReadRegularFile(dir + "/none", 100, "f").status()));
  std::filesystem::remove_all(dir);
}

// Files somebody else may have put links into: nothing is followed out of
// the folder, and nothing blocks.
TEST(FileUtilTest, ReadsWithinAFolderWithoutFollowingLinksOut) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir("within");
  const std::string outside = testing::MakeTempDir("outside");
  fs::create_directories(dir + "/src");
  std::ofstream(dir + "/src/train.py") << "train\n";
  std::ofstream(outside + "/secret") << "TOPSECRET\n";
  auto ok = ReadRegularFileWithin(dir, "src/train.py", 100, "protected");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "train\n");
  // A link inside the folder to a file inside it is fine on the way ...
  fs::create_directory_symlink(dir + "/src", dir + "/alias");
  EXPECT_TRUE(ReadRegularFileWithin(dir, "alias/train.py", 100, "protected").ok());
  // ... but never as the file itself, nor out of the folder on the way.
  fs::create_symlink(outside + "/secret", dir + "/src/link.py");
  auto last = ReadRegularFileWithin(dir, "src/link.py", 100, "protected");
  EXPECT_TRUE(absl::IsInvalidArgument(last.status())) << last.status();
  fs::create_directory_symlink(outside, dir + "/out");
  auto way = ReadRegularFileWithin(dir, "out/secret", 100, "protected");
  EXPECT_TRUE(absl::IsInvalidArgument(way.status())) << way.status();
  EXPECT_NE(way.status().message().find("leads out of"), std::string::npos) << way.status();
  // A FIFO answers at once; paths that leave the folder by name are refused.
  ASSERT_EQ(mkfifo((dir + "/src/fifo").c_str(), 0600), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRegularFileWithin(dir, "src/fifo", 100, "p").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRegularFileWithin(dir, "../x", 100, "p").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadRegularFileWithin(dir, "/etc/passwd", 100, "p").status()));
  EXPECT_TRUE(absl::IsNotFound(ReadRegularFileWithin(dir, "src/none", 100, "p").status()));
  fs::remove_all(dir);
  fs::remove_all(outside);
}

TEST(RandomTest, SecretsAreLongHexAndNeverRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string s = SecureRandomHex(16);
    ASSERT_EQ(s.size(), 32u);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(s).second);
  }
}

}  // namespace
}  // namespace infrarsi
