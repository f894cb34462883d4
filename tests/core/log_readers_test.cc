// Log readers on lines in each framework's own format (taken from the
// frameworks' sources: Megatron-LM's training_log, torchtitan's
// MetricsProcessor.log, DeepSpeed's ThroughputTimer, the HF Trainer's log
// dict), and the builder that times them.
#include "core/log_readers.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace infrarsi {
namespace {

std::unique_ptr<LogReader> Reader(const std::string& name, const std::string& pattern = "",
                                  int64_t global_batch = 8) {
  LogReaderSpec spec;
  spec.reader = name;
  spec.pattern = pattern;
  auto r = LogReader::Create(spec, global_batch);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

TEST(LogReadersTest, MegatronIterationLine) {
  auto r = Reader("megatron");
  EXPECT_FALSE(r->Feed("> building GPT model ...").has_value());
  auto s = r->Feed(
      " [2024-05-01 12:00:00] iteration       10/     500 | consumed samples:         2560 | "
      "elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | "
      "learning rate: 1.500000E-04 | global batch size:   256 | lm loss: 1.023456E+01 | "
      "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan "
      "iterations:   0 |");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 10);
  EXPECT_DOUBLE_EQ(s->loss, 10.23456);
  EXPECT_DOUBLE_EQ(*s->step_time_s, 1.2345);
  EXPECT_EQ(*s->global_batch, 256);
  EXPECT_EQ(*s->consumed_samples, 2560);
  EXPECT_FALSE(s->peak_mem_gib.has_value());
  // The memory report (once, after the first interval) carries forward.
  EXPECT_FALSE(r->Feed("[Rank 0] (after 10 iterations) memory (MB) | allocated: 1000.5 | max "
                       "allocated: 2048.0 | reserved: 3000.0 | max reserved: 3000.0")
                   .has_value());
  s = r->Feed(
      " iteration       11/     500 | consumed samples:         2816 | elapsed time per "
      "iteration (ms): 1200.0 | global batch size:   256 | lm loss: nan | loss scale: 1.0 |");
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(std::isnan(s->loss));
  EXPECT_DOUBLE_EQ(*s->peak_mem_gib, 2.0);
}

TEST(LogReadersTest, TorchtitanColouredLine) {
  auto r = Reader("torchtitan");
  auto s = r->Feed(
      "[titan] 2025-01-01 12:00:00,000 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss: 11.8765  "
      "\x1b[38;2;180;60;0mgrad_norm:  3.1415  \x1b[38;2;54;234;195mmemory: 21.05GiB(26.60%)  "
      "\x1b[34mtps: 1,234  \x1b[36mtflops: 12.34  \x1b[35mmfu: 1.23%\x1b[39m");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 2);
  EXPECT_DOUBLE_EQ(s->loss, 11.8765);
  EXPECT_DOUBLE_EQ(*s->peak_mem_gib, 21.05);
  EXPECT_FALSE(s->step_time_s.has_value());
  EXPECT_FALSE(r->Feed("\x1b[33mvalidate step: 2  \x1b[32mloss: 11.9").has_value());
}

TEST(LogReadersTest, DeepSpeedTimerAndLossLinesInEitherOrder) {
  auto r = Reader("deepspeed", "", /*global_batch=*/32);
  EXPECT_FALSE(r->Feed("[2023-11-07 01:55:23,711] [INFO] [logging.py:96:log_dist] [Rank 0] "
                       "step=10, skipped=0, lr=[4.99e-05], mom=[(0.9, 0.95)]")
                   .has_value());
  EXPECT_FALSE(r->Feed("[2023-11-07 01:55:23,714] [INFO] [timer.py:260:stop] "
                       "epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.0, "
                       "CurrSamplesPerSec=16.0, MemAllocated=4.32GB, MaxMemAllocated=38.49GB")
                   .has_value());
  auto s = r->Feed("2023-08-02 00:41:17.936 | INFO | __main__:log_dist:54 - [Rank 0] Loss: 10.8766");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 10);
  EXPECT_DOUBLE_EQ(s->loss, 10.8766);
  EXPECT_DOUBLE_EQ(*s->step_time_s, 2.0);  // 32 samples at 16 per second
  EXPECT_DOUBLE_EQ(*s->peak_mem_gib, 38.49);
  // Loss first, then the timer.
  EXPECT_FALSE(r->Feed("[Rank 0] loss = 10.5").has_value());
  s = r->Feed("[timer.py:260:stop] 0/11, RunningAvgSamplesPerSec=25.0, CurrSamplesPerSec=32.0, "
              "MemAllocated=4.32GB, MaxMemAllocated=38.49GB");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 11);
  EXPECT_DOUBLE_EQ(s->loss, 10.5);
  EXPECT_DOUBLE_EQ(*s->step_time_s, 1.0);
}

TEST(LogReadersTest, HfTrainerDictsAfterAProgressBar) {
  auto r = Reader("hf_trainer");
  auto s = r->Feed(
      "  5%|▌         | 1/20 [00:00<00:05,  3.2it/s]\r{'loss': 2.3456, 'grad_norm': 1.23, "
      "'learning_rate': 4.9e-05, 'epoch': 0.01}");
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->step.has_value());  // counted by the builder
  EXPECT_DOUBLE_EQ(s->loss, 2.3456);
  EXPECT_FALSE(r->Feed("{'eval_loss': 2.1, 'eval_runtime': 0.5, 'epoch': 1.0}").has_value());
  EXPECT_FALSE(r->Feed("{'train_runtime': 12.3, 'train_samples_per_second': 1.0, "
                       "'train_loss': 2.2, 'epoch': 1.0}")
                   .has_value());
}

TEST(LogReadersTest, JsonLinesAndOtherOutput) {
  auto r = Reader("jsonl");
  EXPECT_FALSE(r->Feed("loading data...").has_value());
  EXPECT_FALSE(r->Feed("{\"lr\": 0.1}").has_value());  // no loss: not a step
  auto s = r->Feed(R"({"step": 4, "loss": 2.5, "step_time_s": 0.25, "data_seed": 7})");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 4);
  EXPECT_DOUBLE_EQ(*s->step_time_s, 0.25);
  EXPECT_EQ(*s->data_seed, 7);
  s = r->Feed(R"({"step": 5, "loss": "NaN"})");
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(std::isnan(s->loss));
}

TEST(LogReadersTest, RegexWithNamedGroups) {
  auto r = Reader("regex", R"(iter (?P<step>\d+): loss (?P<loss>[0-9.]+), time (?P<step_time_ms>[0-9.]+)ms)");
  auto s = r->Feed("iter 3: loss 4.2, time 250.0ms, mfu 3%");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s->step, 3);
  EXPECT_DOUBLE_EQ(s->loss, 4.2);
  EXPECT_DOUBLE_EQ(*s->step_time_s, 0.25);
  EXPECT_FALSE(r->Feed("step 3 done").has_value());
}

TEST(LogReadersTest, SpecErrorsNameWhatIsWrong) {
  LogReaderSpec spec;
  spec.reader = "megatrom";
  EXPECT_NE(LogReaderSpecError(spec).find("unknown reader 'megatrom'"), std::string::npos);
  spec.reader = "regex";
  EXPECT_NE(LogReaderSpecError(spec).find("needs one"), std::string::npos);
  spec.pattern = "loss ([0-9.]+)";
  EXPECT_NE(LogReaderSpecError(spec).find("(?P<loss>"), std::string::npos);
  spec.pattern = "(?P<loss>[0-9.]+) (?P<lr>[0-9.]+)";
  EXPECT_NE(LogReaderSpecError(spec).find("unknown group 'lr'"), std::string::npos);
  spec.pattern = "(?P<loss>[0-9.]+";
  EXPECT_NE(LogReaderSpecError(spec).find("not a valid RE2"), std::string::npos);
  spec.pattern = "(?P<loss>[0-9.]+)";
  EXPECT_EQ(LogReaderSpecError(spec), "");
  spec.stream = "file";
  EXPECT_NE(LogReaderSpecError(spec).find("stdout or stderr"), std::string::npos);
  spec = LogReaderSpec();
  spec.reader = "megatron";
  spec.pattern = "x";
  EXPECT_NE(LogReaderSpecError(spec).find("only the regex reader"), std::string::npos);
}

// A pattern that makes a backtracking engine take exponential time is
// linear for RE2: a trial cannot stall its agent with its own output.
TEST(LogReadersTest, HostilePatternAndLongLineStayLinear) {
  auto r = Reader("regex", "(?P<loss>(a+)+)b");
  const std::string line(100000, 'a');
  EXPECT_FALSE(r->Feed(line).has_value());
}

TEST(LogStepBuilderTest, TimesOnTheAgentsClockWhereTheLogStatesNoTime) {
  LogStepBuilder b({/*warmup_steps=*/1, /*tokens_per_step=*/4096, /*global_batch=*/8});
  LogStep s;
  s.loss = 3.0;
  auto m = b.Add(s, 2.0, 0.001);  // step 1: warm-up, timed from the start
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step(), 1);
  EXPECT_TRUE(m->warmup());
  EXPECT_DOUBLE_EQ(m->step_time_s(), 2.0);
  EXPECT_EQ(m->tokens(), 4096);  // the contract's: the log states none
  m = b.Add(s, 2.5, 0.001);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step(), 2);
  EXPECT_FALSE(m->warmup());
  EXPECT_DOUBLE_EQ(m->step_time_s(), 0.5);
  EXPECT_DOUBLE_EQ(m->arrival_s(), 2.5);
  // Lines that arrive together get the smallest time, for the timing rule.
  m = b.Add(s, 2.5, 0.001);
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->step_time_s(), 1e-6);
}

TEST(LogStepBuilderTest, MegatronsStatedBatchAndConsumedSamplesGiveTheTokens) {
  LogStepBuilder b({0, /*tokens_per_step=*/8 * 1024, /*global_batch=*/8});
  LogStep s;
  s.step = 1;
  s.global_batch = 8;
  s.consumed_samples = 8;
  s.step_time_s = 0.5;
  EXPECT_EQ(b.Add(s, 1.0, 0.001)->tokens(), 8 * 1024);
  // Says 8, fed 4: the consumed samples tell.
  s.step = 2;
  s.consumed_samples = 12;
  EXPECT_EQ(b.Add(s, 1.5, 0.001)->tokens(), 4 * 1024);
  // States a smaller batch outright.
  s.step = 3;
  s.global_batch = 4;
  s.consumed_samples.reset();
  EXPECT_EQ(b.Add(s, 2.0, 0.001)->tokens(), 4 * 1024);
}

// torchtitan states tokens per second per GPU: over the timed steps, the
// time the contract's tokens take at those rates must match the agent's
// clock, or the step says what the rates imply.
TEST(LogStepBuilderTest, TorchtitansRateIsCheckedAgainstTheContract) {
  LogStepBuilder b({1, /*tokens_per_step=*/8192, /*global_batch=*/8, /*world=*/2});
  LogStep s;
  s.step = 1;
  s.tokens_per_second = 1000;
  ASSERT_TRUE(b.Add(s, 1.0, 0.001).has_value());  // warm-up: not judged
  s.step = 2;
  s.tokens_per_second = 4096 / 0.5 * 1.1;  // 10% off: an honest clock difference
  EXPECT_EQ(b.Add(s, 1.5, 0.001)->tokens(), 8192);
  // Then every step takes 0.25 s where the rate says the contract's tokens
  // take 0.5 s: half the batch. Shown once the window outweighs a step's
  // print delay, and from then on.
  s.tokens_per_second = 4096 / 0.5;
  std::vector<int64_t> tokens;
  for (int step = 3; step <= 8; ++step) {
    s.step = step;
    tokens.push_back(b.Add(s, 1.5 + 0.25 * (step - 2), 0.001)->tokens());
  }
  EXPECT_EQ(tokens[0], 8192) << "one short step is not yet a cut batch";
  for (size_t i = 3; i < tokens.size(); ++i) {
    EXPECT_LT(tokens[i], 0.75 * 8192) << "step " << i + 3;
  }
  // Twice the contract's tokens: each step takes 1 s where the rates say 0.5 s.
  LogStepBuilder more({1, 8192, 8, 2});
  s.step = 1;
  ASSERT_TRUE(more.Add(s, 1.0, 0.001).has_value());
  int64_t last = 0;
  for (int step = 2; step <= 6; ++step) {
    s.step = step;
    last = more.Add(s, 1.0 + (step - 1), 0.001)->tokens();
  }
  EXPECT_GT(last, 1.25 * 8192);
  // A rate of 0 says nothing went through.
  LogStepBuilder none({1, 8192, 8, 2});
  s.step = 1;
  ASSERT_TRUE(none.Add(s, 1.0, 0.001).has_value());
  s.step = 2;
  s.tokens_per_second = 0;
  EXPECT_EQ(none.Add(s, 1.5, 0.001)->tokens(), 0);
  // A rate no count fits in is said as the bound the server refuses by name.
  LogStepBuilder huge({1, 8192, 8, 2});
  s.step = 1;
  ASSERT_TRUE(huge.Add(s, 1.0, 0.001).has_value());
  s.step = 2;
  s.tokens_per_second = 1e300;
  EXPECT_EQ(huge.Add(s, 1.5, 0.001)->tokens(), int64_t{1} << 40);
  auto r = Reader("torchtitan");
  auto line = r->Feed("\x1b[31mstep:  3  \x1b[32mloss:  9.0000  \x1b[34mtps: 12,345  \x1b[36mtflops: 1.0");
  ASSERT_TRUE(line.has_value());
  EXPECT_DOUBLE_EQ(*line->tokens_per_second, 12345);
}

// On a busy host an honest trainer is descheduled between timing a step
// and printing it, or the agent reads its line late: one step's gap on the
// agent's clock is then half again what the rate was measured over, and the
// next one short by as much. Judged step by step, that step was said to
// have processed 1.5x the contract's tokens (a real-jobs run under load).
TEST(LogStepBuilderTest, TorchtitansRateIsNotJudgedOnOneLateLine) {
  for (double read_error : {0.001, 0.3}) {  // printed late; read late
    SCOPED_TRACE(read_error);
    LogStepBuilder b({1, /*tokens_per_step=*/2048, /*global_batch=*/16, /*world=*/1});
    LogStep s;
    s.step = 1;
    s.tokens_per_second = 2048 / 0.5;  // honest: every step takes 0.5 s
    ASSERT_TRUE(b.Add(s, 1.0, 0.001).has_value());
    const double arrivals[] = {1.0 + 0.765, 2.0, 2.5, 3.0, 3.5 + 0.2, 4.0};
    for (int i = 0; i < 6; ++i) {
      s.step = i + 2;
      auto m = b.Add(s, arrivals[i], i == 0 || i == 4 ? read_error : 0.001);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->tokens(), 2048) << "step " << i + 2;
    }
  }
}

// A line with none before it has a gap from the process's start (imports,
// loading): not a step's time, so its rate is not judged by it.
TEST(LogStepBuilderTest, TorchtitansFirstLineWithoutWarmUpIsNotJudgedOnStartUp) {
  LogStepBuilder b({0, 2048, 16, 1});
  LogStep s;
  s.step = 1;
  s.tokens_per_second = 2048 / 0.5;
  EXPECT_EQ(b.Add(s, 30.0, 0.001)->tokens(), 2048);
  s.step = 2;
  EXPECT_EQ(b.Add(s, 30.5, 0.001)->tokens(), 2048);
}

TEST(LogStepBuilderTest, ALogThatSkipsStepsIsAnErrorThatSaysHowToLogEveryStep) {
  LogStepBuilder b({1, 100, 1});
  LogStep s;
  s.step = 10;
  ASSERT_TRUE(b.Add(s, 1.0, 0.001).has_value());
  s.step = 20;
  EXPECT_FALSE(b.Add(s, 2.0, 0.001).has_value());
  EXPECT_NE(b.error().find("--log-interval 1"), std::string::npos);
  // A repeated line is dropped, not an error.
  LogStepBuilder c({1, 100, 1});
  s.step = 1;
  ASSERT_TRUE(c.Add(s, 1.0, 0.001).has_value());
  EXPECT_FALSE(c.Add(s, 1.1, 0.001).has_value());
  EXPECT_EQ(c.error(), "");
}

}  // namespace
}  // namespace infrarsi
