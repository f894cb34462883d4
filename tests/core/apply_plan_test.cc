#include "core/apply_plan.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "core/spec.h"

namespace infrarsi {
namespace {

// Issue 17: the launch file wrote `patch_x: on` and `mode: no` bare, which
// YAML reads back as booleans, and did not say what command the promoted
// trial ran. It is typed YAML now: booleans and numbers as such, every
// string quoted, and the exact command line with the knobs filled in.
TEST(ApplyPlanTest, TheLaunchFileIsTypedYamlWithTheCommandThatRan) {
  const char* yaml = R"(
name: job
workload: {model: toy-1b, global_batch: 8, seq_len: 1024}
hardware: {gpu: H200, count: 1}
knobs:
  mbs: [1, 2]
  ckpt: [false, true]
  mode: ["no", "yes"]
  lr_scale: ["0.5", "1.5"]
baseline: {mbs: 1, ckpt: false, mode: "no", lr_scale: "0.5"}
budget: {max_trials: 4}
executor:
  process: {command: "python3 train.py --mbs {mbs} --mode={mode}", workdir: /srv/job}
)";
  SpecParseOptions po;
  auto spec = ParseSpec(yaml, po);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ApplyInputs in;
  in.spec = &*spec;
  in.session_id = "ses-1";
  in.session_name = "job";
  in.workload_signature = "toy-1b/gb8/seq1024";
  in.contract_hash = "abc";
  in.baseline_step_time_s = 1.0;
  in.promoted.set_speedup(1.25);
  in.config = {{"mbs", "2"}, {"ckpt", "true"}, {"mode", "no"}, {"lr_scale", "1.5"}};
  v1::ApplyResponse out;
  BuildApplyPlan(in, &out);
  ASSERT_EQ(out.new_files_size(), 1);
  const YAML::Node n = YAML::Load(out.new_files(0).content());
  const YAML::Node s = n["setting"];
  EXPECT_EQ(s["mbs"].Tag(), "?");  // a plain scalar: an int to any YAML reader
  EXPECT_EQ(s["mbs"].as<int>(), 2);
  EXPECT_EQ(s["ckpt"].as<bool>(), true);
  EXPECT_EQ(s["mode"].Tag(), "!");  // quoted: the string "no", not false
  EXPECT_EQ(s["mode"].as<std::string>(), "no");
  EXPECT_DOUBLE_EQ(s["lr_scale"].as<double>(), 1.5);
  EXPECT_EQ(n["session_id"].Tag(), "!");
  EXPECT_EQ(n["session_id"].as<std::string>(), "ses-1");
  EXPECT_DOUBLE_EQ(n["speedup"].as<double>(), 1.25);
  ASSERT_TRUE(n["command"].IsSequence()) << out.new_files(0).content();
  std::vector<std::string> argv;
  for (const auto& a : n["command"]) argv.push_back(a.as<std::string>());
  EXPECT_EQ(argv, (std::vector<std::string>{"python3", "train.py", "--mbs", "2", "--mode=no"}));
  EXPECT_EQ(n["workdir"].as<std::string>(), "/srv/job");
  EXPECT_TRUE(n["patches"].IsSequence());
  EXPECT_EQ(n["patches"].size(), 0u);
}

}  // namespace
}  // namespace infrarsi
