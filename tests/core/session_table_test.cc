// SessionTable: pins keep a session in memory, the cache lets the least
// recently found finished sessions go, active ones never leave.
#include "core/session_table.h"

#include <gtest/gtest.h>

namespace infrarsi {
namespace {

std::shared_ptr<SessionState> State(const std::string& id) {
  auto s = std::make_shared<SessionState>();
  s->rec.id = id;
  return s;
}

TEST(SessionTableTest, InsertKeepsTheFirstStateForAnId) {
  SessionTable table(4);
  auto first = State("a");
  SessionTable::Ref r1 = table.Insert(first, /*active=*/false);
  SessionTable::Ref r2 = table.Insert(State("a"), /*active=*/false);
  EXPECT_EQ(r1.get(), first.get());
  EXPECT_EQ(r2.get(), first.get()) << "a second read-back must not replace the one in use";
  EXPECT_EQ(table.size(), 1u);
  EXPECT_FALSE(table.Pin("nope"));
}

TEST(SessionTableTest, TrimDropsTheLeastRecentlyFoundFinishedBeyondTheCache) {
  SessionTable table(2);
  for (const char* id : {"a", "b", "c", "d"}) table.Insert(State(id), /*active=*/false);
  table.Pin("a");  // found again: now the most recent (the Ref is dropped at once)
  SessionTable::Trimmed t = table.Trim();
  ASSERT_EQ(t.dropped.size(), 2u);
  EXPECT_EQ(t.dropped[0], "b");
  EXPECT_EQ(t.dropped[1], "c");
  EXPECT_EQ(t.kept.size(), 2u);
  EXPECT_TRUE(table.Pin("a"));
  EXPECT_TRUE(table.Pin("d"));
  EXPECT_FALSE(table.Pin("b"));
}

TEST(SessionTableTest, PinnedAndActiveSessionsStay) {
  SessionTable table(0);
  SessionTable::Ref held = table.Insert(State("pinned"), /*active=*/false);
  table.Insert(State("active"), /*active=*/true);
  table.Insert(State("idle"), /*active=*/false);
  SessionTable::Trimmed t = table.Trim();
  ASSERT_EQ(t.dropped.size(), 1u);
  EXPECT_EQ(t.dropped[0], "idle");
  EXPECT_TRUE(table.Pin("pinned"));
  EXPECT_TRUE(table.Pin("active"));
  // Once its pin goes and it is no longer active, it may leave.
  held = SessionTable::Ref();
  SessionTable::Ref a = table.Pin("active");
  table.SetActive("active", a.get(), false);
  a = SessionTable::Ref();
  EXPECT_EQ(table.Trim().dropped.size(), 2u);
  EXPECT_EQ(table.size(), 0u);
}

TEST(SessionTableTest, SetActiveIgnoresAStaleState) {
  SessionTable table(0);
  auto old_state = State("a");
  table.Insert(State("a"), /*active=*/true);
  table.SetActive("a", old_state.get(), false);  // not the state the table holds
  EXPECT_TRUE(table.Trim().dropped.empty());
}

TEST(SessionTableTest, PeekDoesNotPin) {
  SessionTable table(0);
  table.Insert(State("a"), /*active=*/false);
  auto peeked = table.Peek({"a", "b"});
  ASSERT_EQ(peeked.size(), 2u);
  EXPECT_NE(peeked[0], nullptr);
  EXPECT_EQ(peeked[1], nullptr);
  EXPECT_EQ(table.Trim().dropped.size(), 1u) << "a peek must not keep a session in memory";
}

}  // namespace
}  // namespace infrarsi
