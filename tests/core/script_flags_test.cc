// A script's flags as the draft reads them, and a knob put in a flag's place.
#include "core/script_flags.h"

#include <gtest/gtest.h>

namespace infrarsi::script_flags {
namespace {

TEST(ScriptFlagsTest, ThreeSpellingsOfAFlag) {
  const std::vector<std::string> cmd = {"python3", "train.py", "--micro-batch", "4",
                                        "--lr=3e-4", "--bf16", "--seq-len", "{x?--y}"};
  const std::vector<Arg> args = ParseArgs(cmd, 2);
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0].flag, "--micro-batch");
  EXPECT_EQ(args[0].value, "4");
  EXPECT_EQ(args[0].value_at, 3u);
  EXPECT_TRUE(args[1].equals);
  EXPECT_EQ(args[1].value, "3e-4");
  EXPECT_TRUE(args[2].bare);
  EXPECT_TRUE(args[3].bare) << "a drafted switch is a flag, not the previous flag's value";
  EXPECT_EQ(FindArg(args, {"--lr", "--learning-rate"}), &args[1]);
  EXPECT_EQ(FindArg(args, {"--nope"}), nullptr);
}

TEST(ScriptFlagsTest, SizesAreBoundedIntegers) {
  Arg a;
  a.value = "4096";
  EXPECT_EQ(IntOf(&a), 4096);
  a.value = "-1";
  EXPECT_FALSE(IntOf(&a).has_value());
  a.value = "99999999999999999999";
  EXPECT_FALSE(IntOf(&a).has_value());
  a.value = std::to_string(kMaxFlagInt + 1);
  EXPECT_FALSE(IntOf(&a).has_value());
  a.value = "8";
  a.bare = true;
  EXPECT_FALSE(IntOf(&a).has_value());
  EXPECT_FALSE(IntOf(nullptr).has_value());
}

TEST(ScriptFlagsTest, AKnobTakesTheFlagsPlace) {
  std::vector<std::string> cmd = {"t.py", "--mb", "4", "--lr=1", "--ckpt"};
  const std::vector<Arg> args = ParseArgs(cmd, 1);
  PlaceKnob(args[0], "micro_batch", &cmd);
  PlaceKnob(args[1], "lr", &cmd);
  PlaceKnob(args[2], "ckpt", &cmd);
  EXPECT_EQ(cmd, (std::vector<std::string>{"t.py", "--mb", "{micro_batch}", "--lr={lr}",
                                           "{ckpt?--ckpt}"}));
  EXPECT_EQ(KnobName("--micro-batch"), "micro_batch");
  EXPECT_EQ(KnobName("--training.Compile"), "training_compile");
  EXPECT_EQ(KnobName("--8bit"), "k_8bit");
  EXPECT_EQ(KnobName("--"), "k_");
}

}  // namespace
}  // namespace infrarsi::script_flags
