// InfraRsiServer's own start-up and shutdown.
#include "server/infrarsi_server.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/testing/subprocess.h"

namespace infrarsi::server {
namespace {

TEST(InfraRsiServerTest, FailedStartReturnsTheErrorWithoutCrashing) {
  const std::string dir = testing::MakeTempDir("server");
  InfraRsiServer::Options o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/db";
  o.priors_yaml = "knobs:\n  attn: {sdpa: {time: fast}}\n";
  auto s = InfraRsiServer::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "knobs.attn.sdpa.time: must be a number");
  o.priors_yaml = "";
  o.listen = "127.0.0.1:70000";
  EXPECT_EQ(InfraRsiServer::Create(o).status().message(),
            "listen: expected HOST:PORT, got '127.0.0.1:70000'");
  std::filesystem::remove_all(dir);
}

TEST(InfraRsiServerTest, StartsOnAFreePortWithOrWithoutPriors) {
  const std::string dir = testing::MakeTempDir("server");
  for (const char* priors : {"", "knobs:\n  attn: {sdpa: {time: -0.3}}\n"}) {
    InfraRsiServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir + "/db";
    o.priors_yaml = priors;
    auto s = InfraRsiServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_GT((*s)->port(), 0);
    (*s)->Shutdown();
    (*s)->Shutdown();  // idempotent
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace infrarsi::server
