#include "core/spec.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

#include "absl/strings/str_replace.h"
#include "core/contract.h"
#include "core/optimizer.h"
#include "core/planner.h"

namespace infrarsi {
namespace {

constexpr char kGood[] = R"(
name: gpt-354m-h200
workload: {model: gpt-354m, global_batch: 16, seq_len: 2048}
hardware: {gpu: H200, count: 1}
knobs:
  micro_batch: [1, 2, 4, 8, 16]
  attn: [math, sdpa]
  ckpt: [false, true]
baseline: {micro_batch: 2, attn: math, ckpt: False}
budget: {max_trials: 40}
executor:
  replay: {landscape: data/land.jsonl}
)";

// The files a submitter sends with the spec (the parser reads none).
const std::map<std::string, std::string>& SentFiles() {
  static const auto* files = new std::map<std::string, std::string>{
      {"executor.replay.landscape", "{\"meta\": {}}\n"},
      {"contract.protected[infrarsi_harness.py]", "# the harness\n"}};
  return *files;
}

SpecParseOptions Opts(bool files_sent = true) {
  SpecParseOptions o;
  o.spec_dir = "/specs";
  if (files_sent) o.files = &SentFiles();
  return o;
}

TEST(SpecTest, ParsesTheIssueExample) {
  auto spec = ParseSpec(kGood, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "gpt-354m-h200");
  EXPECT_EQ(spec->global_batch, 16);
  ASSERT_EQ(spec->knobs.size(), 3u);
  EXPECT_EQ(spec->knobs[0].name, "micro_batch");  // spec order kept
  EXPECT_EQ(spec->baseline.at("ckpt"), "false");   // False normalised
  EXPECT_EQ(spec->SpaceSize(), 20);
  EXPECT_EQ(spec->doctor_repeats, 5);  // the issue's default: at least 5
  EXPECT_EQ(spec->verify.busier_retries, 1);  // one round of fresh pairs after a busier one
  EXPECT_EQ(spec->contract.tokens_per_step, 16 * 2048);
  EXPECT_EQ(spec->executor_kind, SessionSpec::ExecutorKind::kReplay);
  // The landscape is what the submitter sent; the path is kept as written.
  EXPECT_EQ(spec->replay.landscape, "data/land.jsonl");
  EXPECT_EQ(spec->replay.landscape_content, SentFiles().at("executor.replay.landscape"));
  EXPECT_EQ(spec->WorkloadSignature(), "gpt-354m/gb16/seq2048");
}

struct BadCase {
  std::string what;
  std::string from;  // text in kGood to replace
  std::string to;
  std::string field;  // must appear at the start of the error
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.what; }

class BadSpecTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSpecTest, RefusedNamingTheField) {
  const BadCase& c = GetParam();
  const std::string yaml = absl::StrReplaceAll(kGood, {{c.from, c.to}});
  ASSERT_NE(yaml, kGood) << "test case does not change the spec";
  auto spec = ParseSpec(yaml, Opts());
  ASSERT_FALSE(spec.ok()) << c.what;
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
  EXPECT_EQ(spec.status().message().substr(0, c.field.size()), c.field)
      << c.what << ": " << spec.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadSpecTest,
    ::testing::Values(
        BadCase{"unknown knob in baseline", "ckpt: False}", "ckpt: false, flash: true}",
                "baseline.flash"},
        BadCase{"baseline outside the space", "attn: math, ckpt", "attn: flash, ckpt",
                "baseline.attn"},
        BadCase{"baseline misses a knob", "attn: math, ", "", "baseline.attn"},
        BadCase{"empty space", "knobs:\n  micro_batch: [1, 2, 4, 8, 16]\n  attn: [math, sdpa]\n  ckpt: [false, true]\n",
                "knobs: {}\n", "knobs"},
        BadCase{"empty value list", "attn: [math, sdpa]", "attn: []", "knobs.attn"},
        BadCase{"duplicate value", "attn: [math, sdpa]", "attn: [math, math]", "knobs.attn"},
        BadCase{"zero budget", "max_trials: 40", "max_trials: 0", "budget.max_trials"},
        BadCase{"non-integer budget", "max_trials: 40", "max_trials: many", "budget.max_trials"},
        BadCase{"missing budget", "budget: {max_trials: 40}\n", "", "budget"},
        BadCase{"unknown budget field", "max_trials: 40", "max_trials: 40, max_hours: 2",
                "budget.max_hours"},
        BadCase{"missing landscape", "replay: {landscape: data/land.jsonl}", "replay: {}",
                "executor.replay.landscape"},
        BadCase{"missing command", "replay: {landscape: data/land.jsonl}",
                "process: {workdir: .}", "executor.process.command"},
        BadCase{"empty command", "replay: {landscape: data/land.jsonl}",
                "process: {command: ''}", "executor.process.command"},
        BadCase{"placeholder that is not a knob", "replay: {landscape: data/land.jsonl}",
                "process: {command: 'train --mbs {mbs}'}", "executor.process.command"},
        BadCase{"unbalanced quote", "replay: {landscape: data/land.jsonl}",
                "process: {command: 'train \"--x'}", "executor.process.command"},
        BadCase{"two executors", "replay: {landscape: data/land.jsonl}",
                "replay: {landscape: a}\n  process: {command: b}", "executor"},
        BadCase{"unknown top-level field", "name: gpt-354m-h200", "name: gpt-354m-h200\nbugdet: 3",
                "bugdet"},
        BadCase{"bad name", "name: gpt-354m-h200", "name: 'has space'", "name"},
        BadCase{"negative global batch", "global_batch: 16", "global_batch: -16",
                "workload.global_batch"},
        BadCase{"missing model", "model: gpt-354m, ", "", "workload.model"},
        BadCase{"zero gpus", "count: 1", "count: 0", "hardware.count"},
        BadCase{"knobs not lists", "attn: [math, sdpa]", "attn: math", "knobs.attn"},
        BadCase{"invalid yaml", "knobs:", "knobs: [", "spec"},
        BadCase{"too many busier-host rounds", "budget: {max_trials: 40}",
                "budget: {max_trials: 40}\nverify: {busier_retries: 3}", "verify.busier_retries"},
        BadCase{"negative busier-host rounds", "budget: {max_trials: 40}",
                "budget: {max_trials: 40}\nverify: {busier_retries: -1}", "verify.busier_retries"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      std::string n;
      for (char ch : info.param.what) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return n;
    });

// The parser reads no file a spec names: what was not sent is refused,
// whatever exists on this host (a stored spec being re-loaded excepted).
TEST(SpecTest, AFileThatWasNotSentIsRefused) {
  auto spec = ParseSpec(kGood, Opts(/*files_sent=*/false));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "executor.replay.landscape: 'data/land.jsonl' was not sent with the spec: the server "
            "reads no file a spec names (`infrarsi session create` sends them)");
  SpecParseOptions stored = Opts(false);
  stored.stored = true;
  auto old = ParseSpec(kGood, stored);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->replay.landscape, "/specs/data/land.jsonl");  // its agents read the path
  // Which sent files were used, so that stray ones can be refused.
  std::set<std::string> used;
  SpecParseOptions o = Opts();
  o.files_used = &used;
  ASSERT_TRUE(ParseSpec(kGood, o).ok());
  EXPECT_EQ(used, std::set<std::string>{"executor.replay.landscape"});
}

TEST(SpecTest, RelativeWorkdirWithoutSpecDirIsRefused) {
  SpecParseOptions o = Opts();
  o.spec_dir.clear();
  const std::string process = absl::StrReplaceAll(
      kGood, {{"replay: {landscape: data/land.jsonl}", "process: {command: train, workdir: job}"}});
  auto spec = ParseSpec(process, o);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("spec_dir"), std::string::npos) << spec.status();
  // Without a workdir either, the agents would not know where to run it.
  auto none = ParseSpec(absl::StrReplaceAll(process, {{", workdir: job", ""}}), o);
  EXPECT_EQ(none.status().message().rfind("executor.process.workdir: is required", 0), 0u)
      << none.status();
}

// The spec and the server's mirrors tell a URL from a local path alike,
// as git does.
TEST(SpecTest, RemoteRepositoryUrlsAreToldFromPathsAsGitDoes) {
  for (const char* remote : {"https://git.example/tiny.git", "ssh://git@host/r.git",
                             "git@github.com:org/repo.git", "host:repo"}) {
    EXPECT_TRUE(IsRemoteRepositoryUrl(remote)) << remote;
  }
  for (const char* local : {"/srv/repo", "repo", "./a:b", "/home/me@work/repo", "team@host/repo"}) {
    EXPECT_FALSE(IsRemoteRepositoryUrl(local)) << local;
  }
}

TEST(SpecTest, RepositoriesAreNamedNotPathsAndPoolsAreChecked) {
  const std::string process = absl::StrReplaceAll(
      kGood, {{"replay: {landscape: data/land.jsonl}", "process: {command: 'python3 train.py'}"}});
  SpecParseOptions o = Opts();
  o.repository_url = [](const std::string& name) -> absl::StatusOr<std::string> {
    if (name == "tiny") return std::string("https://git.example/tiny.git");
    return absl::NotFoundError(absl::StrCat("no repository '", name, "' is registered for your team"));
  };
  auto named = ParseSpec(process + "repository: {name: tiny}\n", o);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->repository.url, "https://git.example/tiny.git");
  EXPECT_EQ(named->repository.name, "tiny");
  EXPECT_EQ(ParseSpec(process + "repository: {name: other}\n", o).status().message(),
            "repository.name: no repository 'other' is registered for your team");
  // A path names a folder on the server's host: refused, with what to do.
  auto path = ParseSpec(process + "repository: {path: /srv/teamB}\n", o);
  EXPECT_EQ(path.status().message().rfind("repository.path: the server reads no path", 0), 0u)
      << path.status();
  // A URL only from those whose words the server may act on.
  auto url = ParseSpec(process + "repository: {url: /srv/teamB}\n", o);
  EXPECT_EQ(url.status().message().rfind("repository.url: only an admin", 0), 0u) << url.status();
  o.may_name_urls = true;
  auto admin = ParseSpec(process + "repository: {url: repo}\n", o);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->repository.url, "/specs/repo");
  // hardware.pool: team needs a team's session.
  const std::string team_pool = absl::StrReplaceAll(process, {{"count: 1}", "count: 1, pool: team}"}});
  EXPECT_EQ(ParseSpec(team_pool, o).status().message().rfind("hardware.pool: team needs", 0), 0u);
  o.team_known = true;
  auto pool = ParseSpec(team_pool, o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->pool, SessionSpec::Pool::kTeam);
  EXPECT_EQ(ParseSpec(absl::StrReplaceAll(process, {{"count: 1}", "count: 1, pool: mine}"}}), o)
                .status()
                .message()
                .rfind("hardware.pool:", 0),
            0u);
}

TEST(SpecTest, ProcessExecutorSplitsWithoutAShell) {
  const std::string yaml = absl::StrReplaceAll(
      kGood, {{"replay: {landscape: data/land.jsonl}",
               "process: {command: \"python3 train.py --mbs {micro_batch} --name 'a b; rm -rf /'\", "
               "workdir: job, timeout_s: 30}"}});
  auto spec = ParseSpec(yaml, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->process.argv.size(), 6u);
  EXPECT_EQ(spec->process.argv[3], "{micro_batch}");
  EXPECT_EQ(spec->process.argv[5], "a b; rm -rf /");  // one literal argument
  EXPECT_EQ(spec->process.workdir, "/specs/job");
  EXPECT_EQ(spec->process.timeout_s, 30);
}

// executor.process.metrics names a log reader; what it cannot feed is
// refused at Init, naming the contract's field.
TEST(SpecTest, LogReadersParseAndRefuseWhatTheyCannotCheck) {
  auto with = [](const std::string& metrics, const std::string& contract = "") {
    return ParseSpec(absl::StrReplaceAll(
                         kGood, {{"replay: {landscape: data/land.jsonl}",
                                  absl::StrCat("process: {command: \"python3 train.py --mbs "
                                               "{micro_batch}\", workdir: job, metrics: ",
                                               metrics, "}\n", contract)}}),
                     Opts());
  };
  auto spec = with("{reader: megatron}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->process.metrics.reader, "megatron");
  EXPECT_EQ(spec->process.metrics.stream, "stdout");
  EXPECT_EQ(spec->process.metrics.warmup_steps, 1);
  spec = with("{reader: regex, from: stderr, pattern: 'it (?P<step>\\d+) loss (?P<loss>\\S+)', "
              "warmup_steps: 2}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->process.metrics.stream, "stderr");
  EXPECT_EQ(spec->process.metrics.warmup_steps, 2);
  // The reader is part of the locked contract.
  auto harness = with("{reader: harness}");
  ASSERT_TRUE(harness.ok()) << harness.status();
  EXPECT_NE(ContractText(*spec), ContractText(*harness));

  struct Case {
    std::string metrics, contract, error;
  };
  for (const Case& c : std::vector<Case>{
           {"{reader: megatrom}", "", "executor.process.metrics.reader: unknown reader 'megatrom'"},
           {"{reader: megatron, from: file}", "", "executor.process.metrics.from:"},
           {"{reader: regex}", "", "executor.process.metrics.pattern: the regex reader needs one"},
           {"{reader: regex, pattern: '(?P<loss>'}", "", "executor.process.metrics.pattern: not a valid"},
           {"{reader: megatron, warmup_steps: -1}", "", "executor.process.metrics.warmup_steps"},
           {"{reader: megatron, colour: red}", "", "executor.process.metrics"},
           {"{reader: hf_trainer}", "contract: {optimizer_in_window: true}",
            "contract.optimizer_in_window: needs the harness"},
           {"{reader: megatron}", "contract: {data_seed: 7}", "contract.data_seed: the megatron reader"},
           {"{reader: regex, pattern: '(?P<loss>\\S+)'}", "contract: {data_seed: 7}",
            "contract.data_seed:"},
       }) {
    auto bad = with(c.metrics, c.contract);
    ASSERT_FALSE(bad.ok()) << c.metrics << " " << c.contract;
    EXPECT_EQ(bad.status().message().rfind(c.error, 0), 0u) << bad.status().message();
  }
  // jsonl can state the seed: the rule runs; so can a regex with the group
  // (the text "<data_seed>" outside a group is no group).
  EXPECT_TRUE(with("{reader: jsonl}", "contract: {data_seed: 7}").ok());
  EXPECT_TRUE(with("{reader: regex, pattern: '(?P<loss>\\S+) (?P<data_seed>\\d+)'}", "contract: {data_seed: 7}").ok());
  EXPECT_FALSE(with("{reader: regex, pattern: '(?P<loss>\\S+) <data_seed>'}", "contract: {data_seed: 7}").ok());
}

constexpr char kProcessSpec[] = R"yaml(
name: own-script
workload: {model: gpt, global_batch: 32, seq_len: 256}
hardware: {gpu: cpu, count: 2}
knobs:
  micro_batch: [1, 2, 4, 8, 16]
  bias: [True, False]
  threads: [1, 2, 4]
baseline: {micro_batch: 1, bias: true, threads: 2}
budget: {max_trials: 10}
derived:
  accum: "32 / (micro_batch * 2)"
executor:
  process:
    command: "python3 train.py --batch_size={micro_batch} --gradient_accumulation_steps={accum} --bias={bias}"
    workdir: job
    env: {OMP_NUM_THREADS: "{threads}"}
)yaml";

// A derived value ties accumulation to the micro-batch: stated once,
// checked at Init for every setting, filled into each trial's command.
TEST(SpecTest, DerivedValuesAreCheckedForEverySettingAndFillTheCommand) {
  auto spec = ParseSpec(kProcessSpec, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->derived.size(), 1u);
  Config c = spec->baseline;
  c["micro_batch"] = "4";
  const Config values = CommandValues(*spec, c);
  EXPECT_EQ(values.at("accum"), "4");
  const auto argv = SubstituteCommand(spec->process.argv, values);
  EXPECT_EQ(argv[3], "--gradient_accumulation_steps=4");
  // Values as written: the command gets `True`, not `true`.
  EXPECT_EQ(spec->baseline.at("bias"), "True");
  EXPECT_EQ(argv[4], "--bias=True");
  EXPECT_EQ(spec->process.env.at("OMP_NUM_THREADS"), "{threads}");

  struct Case {
    std::string from, to, error;
  };
  for (const Case& c : std::vector<Case>{
           {"accum: \"32 / (micro_batch * 2)\"", "accum: \"24 / micro_batch\"",
            "derived.accum: 24 / 16 is not a whole number at micro_batch=16"},
           {"accum: \"32 / (micro_batch * 2)\"", "accum: \"8 - micro_batch\"",
            "derived.accum: is 0 at micro_batch=8: a derived value must be a positive"},
           {"accum: \"32 / (micro_batch * 2)\"", "accum: \"32 / mbs\"", "derived.accum: 'mbs' is not a knob"},
           {"accum: \"32 / (micro_batch * 2)\"", "accum: \"32 / (micro_batch\"", "derived.accum: missing ')'"},
           {"accum: \"32 / (micro_batch * 2)\"", "accum: \"bias * 2\"", "derived.accum: bias=True is not an integer"},
           {"accum: \"32 / (micro_batch * 2)\"", "threads: \"2\"", "derived.threads: is a knob's name"},
           {"--gradient_accumulation_steps={accum}", "--gradient_accumulation_steps={acum}",
            "executor.process.command: placeholder {acum} is not a knob or a derived value"},
           {"OMP_NUM_THREADS: \"{threads}\"", "PATH: \"/tmp/x:{threads}\"",
            "executor.process.env.PATH: PATH is set by the agent"},
           {"OMP_NUM_THREADS: \"{threads}\"", "LD_PRELOAD: \"/tmp/x.so\"", "executor.process.env.LD_PRELOAD:"},
           {"OMP_NUM_THREADS: \"{threads}\"", "INFRARSI_TOKEN: \"x\"", "executor.process.env.INFRARSI_TOKEN:"},
           {"OMP_NUM_THREADS: \"{threads}\"", "omp: \"1\"", "executor.process.env.omp: variable names"},
           {"OMP_NUM_THREADS: \"{threads}\"", "OMP_NUM_THREADS: \"{thread}\"",
            "executor.process.env.OMP_NUM_THREADS: placeholder {thread}"},
           {"bias: [True, False]", "bias: [True, true]", "knobs.bias: duplicate value 'true'"},
       }) {
    const std::string yaml = absl::StrReplaceAll(kProcessSpec, {{c.from, c.to}});
    ASSERT_NE(yaml, kProcessSpec) << c.from;
    auto bad = ParseSpec(yaml, Opts());
    ASSERT_FALSE(bad.ok()) << c.to;
    EXPECT_EQ(bad.status().message().rfind(c.error, 0), 0u) << bad.status().message();
  }
  // A trial recorded when booleans were normalised reads as the knob's own
  // spelling (a process session across the upgrade).
  Config old_trial = {{"micro_batch", "2"}, {"bias", "false"}, {"threads", "1"}};
  FillKnobDefaults(*spec, &old_trial);
  EXPECT_EQ(old_trial.at("bias"), "False");
  // Derived values and environment knobs are part of the locked contract.
  auto other = ParseSpec(absl::StrReplaceAll(kProcessSpec, {{"(micro_batch * 2)", "micro_batch"}}), Opts());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(ContractText(*spec), ContractText(*other));
  // A replay landscape's booleans keep one spelling.
  auto replay = ParseSpec(kGood, Opts());
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->FindKnob("ckpt")->values[0], "false");
}

// executor.slurm places the process's command as a Slurm job; every
// field is checked, and options InfraRSI sets itself are refused.
TEST(SpecTest, SlurmPlacementParsesAndNamesBadFields) {
  auto with = [](const std::string& slurm, const std::string& count = "16") {
    return absl::StrReplaceAll(
        kGood, {{"replay: {landscape: data/land.jsonl}",
                 "process: {command: \"python3 train.py\", workdir: job}\n  slurm: " + slurm},
                {"count: 1", "count: " + count}});
  };
  auto spec = ParseSpec(with("{partition: gpu, qos: high, time_limit_min: 30, gpus_per_node: 8, "
                             "sbatch_options: [--constraint=h200, --exclusive]}"),
                        Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ExecutorName(), "slurm");
  EXPECT_EQ(spec->executor_kind, SessionSpec::ExecutorKind::kProcess);
  EXPECT_EQ(spec->slurm.partition, "gpu");
  EXPECT_EQ(spec->slurm.gpus_per_node, 8);
  EXPECT_EQ(spec->slurm.sbatch_options.size(), 2u);
  EXPECT_TRUE(spec->slurm.exclude_failed_nodes);
  struct Case {
    std::string slurm, count, error;
  };
  const std::vector<Case> cases = {
      {"{partition: 'gpu; rm'}", "16", "executor.slurm.partition: 1-64 letters"},
      {"{time_limit_min: -1}", "16", "executor.slurm.time_limit_min: must be in [0, 10080]"},
      {"{gpus_per_node: 8}", "12", "executor.slurm.gpus_per_node: hardware.count 12 is not a whole"},
      {"{sbatch_options: [--uid=0]}", "16", "executor.slurm.sbatch_options[0]: --uid is set by InfraRSI"},
      // sbatch takes any unambiguous prefix: these were --uid, --export and
      // --wrap to it, and only the agent's allowlist stopped them.
      {"{sbatch_options: [--ui=0]}", "16", "executor.slurm.sbatch_options[0]: --ui abbreviates --uid"},
      {"{sbatch_options: [--expor=ALL]}", "16", "executor.slurm.sbatch_options[0]: --expor abbreviates --export"},
      {"{sbatch_options: [--wra=id]}", "16", "executor.slurm.sbatch_options[0]: --wra abbreviates --wrap"},
      {"{sbatch_options: [--gre=gpu:8]}", "16", "executor.slurm.sbatch_options[0]: --gre abbreviates --gres"},
      {"{sbatch_options: ['--comment=a b']}", "16", "executor.slurm.sbatch_options[0]: no spaces"},
      {"{sbatch_options: [-N2]}", "16", "executor.slurm.sbatch_options[0]: '-N2' must be a long option"},
      {"{nodes: 2}", "16", "executor.slurm.nodes: unknown field"},
      {"{exclude_failed_nodes: maybe}", "16", "executor.slurm.exclude_failed_nodes: must be true or false"},
  };
  for (const Case& c : cases) {
    auto bad = ParseSpec(with(c.slurm, c.count), Opts());
    ASSERT_FALSE(bad.ok()) << c.slurm;
    EXPECT_EQ(bad.status().message().rfind(c.error, 0), 0u) << bad.status().message();
  }
  auto alone = ParseSpec(absl::StrReplaceAll(kGood, {{"replay: {landscape: data/land.jsonl}",
                                                      "slurm: {partition: gpu}"}}),
                         Opts());
  EXPECT_EQ(alone.status().message().rfind("executor.slurm: places a process executor's command", 0),
            0u)
      << alone.status();
}

constexpr char kSim[] = R"(
name: sim-job
workload: {model: llama-8b, global_batch: 64, seq_len: 4096}
hardware: {gpu: H100, count: 8}
knobs:
  tp: [1, 2, 4, 8]
  recompute: [none, full]
baseline: {tp: 8, recompute: full}
budget: {max_trials: 10}
executor:
  sim:
    model: {layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, vocab: 128256}
    cluster: {gpus_per_node: 8, nodes: 1}
    fixed: {flash_attn: true}
)";

TEST(SpecTest, SimExecutorParses) {
  auto spec = ParseSpec(kSim, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ExecutorName(), "sim");
  EXPECT_EQ(spec->sim.cluster.gpu.name, "H100");
  EXPECT_EQ(spec->sim.model.seq_len, 4096);
  EXPECT_EQ(spec->sim.fixed.at("flash_attn"), "true");
  const auto k = SimKnobs(*spec, Config{{"tp", "2"}, {"recompute", "none"}});
  EXPECT_EQ(k.tp, 2);
  EXPECT_TRUE(k.flash_attn);
}

TEST(SpecTest, SimExecutorErrorsNameTheField) {
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::vector<Case>{
           {"recompute: [none, full]\nbaseline: {tp: 8, recompute: full}",
            "recompute: [none, full]\n  warp: [1, 2]\nbaseline: {tp: 8, recompute: full, warp: 1}",
            "knobs.warp"},
           {"recompute: [none, full]\nbaseline: {tp: 8, recompute: full}",
            "recompute: [none, sometimes]\nbaseline: {tp: 8, recompute: none}", "knobs.recompute"},
           {"gpu: H100, count: 8", "gpu: H100, count: 16", "hardware.count"},
           {"gpu: H100, count: 8", "gpu: TPUv5, count: 8", "hardware.gpu"},
           {"fixed: {flash_attn: true}", "fixed: {tp: 2}", "executor.sim.fixed.tp"},
           {"fixed: {flash_attn: true}", "fixed: {flash_attn: maybe}", "executor.sim.fixed.flash_attn"},
           {"heads: 32,", "heads: 30,", "executor.sim.model.hidden"},
           {"layers: 32,", "", "executor.sim.model.layers"},
       }) {
    const std::string yaml = absl::StrReplaceAll(kSim, {{c.from, c.to}});
    ASSERT_NE(yaml, kSim) << c.field;
    auto spec = ParseSpec(yaml, Opts());
    ASSERT_FALSE(spec.ok()) << c.field;
    EXPECT_EQ(spec.status().message().substr(0, c.field.size()), c.field) << spec.status();
  }
}

// A real job (here a process) may declare its model shape for the search's
// textbook estimates: the simulator's model keys, how its GPUs make nodes,
// the simulator knobs it holds.
constexpr char kShaped[] = R"yaml(
name: shaped-job
workload:
  model: llama-8b
  global_batch: 64
  seq_len: 4096
  shape:
    layers: 32
    hidden: 4096
    heads: 32
    kv_heads: 8
    ffn: 14336
    vocab: 128256
    gpus_per_node: 8
    fixed: {flash_attn: true}
hardware: {gpu: H100, count: 16}
knobs:
  tp: [1, 2, 4, 8]
  recompute: [none, full]
  bias: [True, False]
baseline: {tp: 8, recompute: full, bias: True}
budget: {max_trials: 10}
executor:
  process:
    command: "torchrun train.py --tp={tp} --recompute={recompute} --bias={bias}"
    workdir: job
)yaml";

TEST(SpecTest, ARealJobMayDeclareItsModelShape) {
  auto spec = ParseSpec(kShaped, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->shape.has_value());
  EXPECT_EQ(spec->shape->model.layers, 32);
  EXPECT_EQ(spec->shape->model.kv_heads, 8);
  EXPECT_EQ(spec->shape->model.seq_len, 4096);      // from the workload
  EXPECT_EQ(spec->shape->model.global_batch, 64);
  EXPECT_EQ(spec->shape->cluster.gpu.name, "H100");  // from hardware.gpu
  EXPECT_EQ(spec->shape->cluster.gpus_per_node, 8);
  EXPECT_EQ(spec->shape->cluster.nodes, 2);          // hardware.count / gpus_per_node
  EXPECT_EQ(spec->shape->fixed.at("flash_attn"), "true");
  EXPECT_FALSE(spec->shape->launch_rules);           // opt-in
  EXPECT_EQ(spec->sim.model.layers, 0);              // the simulator's stays empty
  // The search's estimates read the simulator-named knobs; `bias` is none
  // of the simulator's and changes nothing in them.
  const Planner planner = PlannerFor(*spec);
  ASSERT_TRUE(planner.memory_estimate_gib && planner.time_estimate_s);
  EXPECT_FALSE(static_cast<bool>(planner.launch_check));
  Config c = spec->baseline, other = spec->baseline;
  other["bias"] = "False";
  EXPECT_DOUBLE_EQ(planner.memory_estimate_gib(c), planner.memory_estimate_gib(other));
  EXPECT_DOUBLE_EQ(planner.time_estimate_s(c), planner.time_estimate_s(other));
  other = c;
  other["tp"] = "2";
  EXPECT_GT(planner.memory_estimate_gib(other), planner.memory_estimate_gib(c));
  // A knob of another name is read as the simulator knob the shape maps it
  // to: the same estimates.
  auto renamed = ParseSpec(
      absl::StrReplaceAll(kShaped, {{"  tp: [1, 2, 4, 8]", "  tensor_model_parallel_size: [1, 2, 4, 8]"},
                                    {"baseline: {tp: 8", "baseline: {tensor_model_parallel_size: 8"},
                                    {"--tp={tp}", "--tp={tensor_model_parallel_size}"},
                                    {"    fixed: {flash_attn: true}\n",
                                     "    fixed: {flash_attn: true}\n    knobs: {tensor_model_parallel_size: tp}\n"}}),
      Opts());
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->shape->SimKnobOf("tensor_model_parallel_size"), "tp");
  EXPECT_EQ(renamed->shape->SimKnobOf("recompute"), "recompute");
  EXPECT_EQ(renamed->shape->SimKnobOf("bias"), "");
  const Planner renamed_planner = PlannerFor(*renamed);
  for (const char* tp : {"1", "2", "4", "8"}) {
    Config a = spec->baseline, b = renamed->baseline;
    a["tp"] = tp;
    b["tensor_model_parallel_size"] = tp;
    EXPECT_DOUBLE_EQ(planner.memory_estimate_gib(a), renamed_planner.memory_estimate_gib(b)) << tp;
    EXPECT_DOUBLE_EQ(planner.time_estimate_s(a), renamed_planner.time_estimate_s(b)) << tp;
    const int64_t i = IndexOf(*spec, a), j = IndexOf(*renamed, b);
    EXPECT_DOUBLE_EQ(planner.memory_estimate_gib_at(i), renamed_planner.memory_estimate_gib_at(j)) << tp;
    EXPECT_EQ(planner.rules_refuse_at(i), renamed_planner.rules_refuse_at(j)) << tp;
  }
  // The MFU check does not read the shape (a textbook count that runs high
  // over a real trainer would call honest steps impossible): params do.
  EXPECT_EQ(SpecFlopsPerToken(*spec), 0);
  // Without gpus_per_node: the count up to a node of 8.
  auto small = ParseSpec(absl::StrReplaceAll(kShaped, {{"    gpus_per_node: 8\n", ""}, {"count: 16", "count: 4"}}), Opts());
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->shape->cluster.gpus_per_node, 4);
  EXPECT_EQ(small->shape->cluster.nodes, 1);
  auto rules = ParseSpec(absl::StrReplaceAll(kShaped, {{"    gpus_per_node: 8\n", "    launch_rules: true\n"}}), Opts());
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_TRUE(rules->shape->launch_rules);
  // Without one, nothing is declared.
  auto none = ParseSpec(kProcessSpec, Opts());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->shape.has_value());
}

// A script's own knob vocabulary read as the simulator's: values mapped
// (attn's sdpa is flash attention; ckpt true is full recompute), a knob
// named as a simulator knob but with values the simulator has not (tf32)
// left out by mapping it to none.
constexpr char kMappedShape[] = R"(
name: gpt-354m-h200
workload:
  model: gpt-354m
  global_batch: 16
  seq_len: 2048
  shape:
    layers: 24
    hidden: 1024
    heads: 16
    ffn: 4096
    vocab: 50304
    swiglu: false
    tied_embeddings: true
    knobs:
      attn: {as: flash_attn, values: {math: false, sdpa: true}}
      ckpt: {as: recompute, values: {false: none, true: full}}
      fused_adam: fused_kernels
      precision: null
hardware: {gpu: H200, count: 1}
knobs:
  micro_batch: [1, 2, 4, 8, 16]
  attn: [math, sdpa]
  ckpt: [False, True]
  precision: [bf16, tf32]
  fused_adam: [false, true]
baseline: {micro_batch: 2, attn: math, ckpt: false, precision: tf32, fused_adam: false}
budget: {max_trials: 40}
executor:
  replay: {landscape: data/land.jsonl}
)";

TEST(SpecTest, DeclaredShapeMapsAScriptsValuesToTheSimulators) {
  auto spec = ParseSpec(kMappedShape, Opts());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ShapeSpec& shape = *spec->shape;
  EXPECT_EQ(shape.SimKnobOf("attn"), "flash_attn");
  EXPECT_EQ(shape.SimValueOf("attn", "sdpa"), "true");
  EXPECT_EQ(shape.SimValueOf("ckpt", "True"), "full");  // as written in a knob list
  EXPECT_EQ(shape.SimKnobOf("precision"), "");          // mapped to none
  EXPECT_EQ(shape.SimKnobOf("micro_batch"), "micro_batch");
  EXPECT_EQ(shape.SimValueOf("micro_batch", "4"), "4");
  const Planner planner = PlannerFor(*spec);
  ASSERT_TRUE(planner.memory_estimate_gib);
  auto peak = [&](const std::string& knob, const std::string& value) {
    Config c = spec->baseline;
    c[knob] = value;
    return planner.memory_estimate_gib(c);
  };
  EXPECT_LT(peak("attn", "sdpa"), peak("attn", "math"));   // no attention scores kept
  EXPECT_LT(peak("ckpt", "true"), peak("ckpt", "false"));  // full recompute
  EXPECT_DOUBLE_EQ(peak("precision", "bf16"), peak("precision", "tf32"));  // left out
  for (int64_t i = 0; i < spec->SpaceSize(); ++i) {
    EXPECT_DOUBLE_EQ(planner.memory_estimate_gib_at(i), planner.memory_estimate_gib(ConfigAt(*spec, i))) << i;
    EXPECT_DOUBLE_EQ(planner.time_estimate_s_at(i), planner.time_estimate_s(ConfigAt(*spec, i))) << i;
  }
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::vector<Case>{
           {"values: {math: false, sdpa: true}", "values: {math: false}", "workload.shape.knobs.attn.values"},
           {"values: {math: false, sdpa: true}", "values: {math: false, sdpa: true, flash: true}",
            "workload.shape.knobs.attn.values.flash"},
           {"values: {math: false, sdpa: true}", "values: {math: false, sdpa: maybe}", "workload.shape.knobs.attn"},
           {"{as: flash_attn, values:", "{as: warp, values:", "workload.shape.knobs.attn.as"},
           {"{as: flash_attn, values:", "{values:", "workload.shape.knobs.attn.as"},
           {"{as: flash_attn, values:", "{as: flash_attn, kind: x, values:", "workload.shape.knobs.attn.kind"},
           {"      precision: null\n", "", "knobs.precision"},  // tf32 is no simulator precision
       }) {
    const std::string yaml = absl::StrReplaceAll(kMappedShape, {{c.from, c.to}});
    ASSERT_NE(yaml, kMappedShape) << c.field;
    auto bad = ParseSpec(yaml, Opts());
    ASSERT_FALSE(bad.ok()) << c.field;
    EXPECT_EQ(bad.status().message().substr(0, c.field.size()), c.field) << bad.status();
  }
}

TEST(SpecTest, DeclaredShapeErrorsNameTheField) {
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::vector<Case>{
           {"    layers: 32\n", "", "workload.shape.layers"},
           {"    layers: 32\n", "    layers: 32\n    depth: 3\n", "workload.shape.depth"},
           {"    heads: 32\n", "    heads: 30\n", "workload.shape.hidden"},
           {"    gpus_per_node: 8\n", "    gpus_per_node: 3\n", "workload.shape.gpus_per_node"},
           {"    gpus_per_node: 8\n", "    gpus_per_node: 0\n", "workload.shape.gpus_per_node"},
           {"    gpus_per_node: 8\n", "    launch_rules: maybe\n", "workload.shape.launch_rules"},
           {"fixed: {flash_attn: true}", "fixed: {tp: 2}", "workload.shape.fixed.tp"},
           {"fixed: {flash_attn: true}", "fixed: {warp: 2}", "workload.shape.fixed.warp"},
           {"fixed: {flash_attn: true}", "fixed: {flash_attn: maybe}", "workload.shape.fixed.flash_attn"},
           {"gpu: H100, count: 16", "gpu: TPUv5, count: 16", "hardware.gpu"},
           // A knob named as a simulator knob is read as one.
           {"recompute: [none, full]", "recompute: [none, full, sometimes]", "knobs.recompute"},
           // Knobs read as the simulator's under another name.
           {"    gpus_per_node: 8\n", "    knobs: {nothing_here: tp}\n", "workload.shape.knobs.nothing_here"},
           {"    gpus_per_node: 8\n", "    knobs: {bias: warp}\n", "workload.shape.knobs.bias"},
           {"    gpus_per_node: 8\n", "    knobs: {bias: tp}\n", "workload.shape.knobs.bias"},
           {"    gpus_per_node: 8\n", "    knobs: {bias: micro_batch}\n", "workload.shape.knobs.bias"},
           {"    gpus_per_node: 8\n", "    knobs: {bias: flash_attn}\n", "workload.shape.fixed.flash_attn"},
       }) {
    const std::string yaml = absl::StrReplaceAll(kShaped, {{c.from, c.to}});
    ASSERT_NE(yaml, kShaped) << c.field;
    auto spec = ParseSpec(yaml, Opts());
    ASSERT_FALSE(spec.ok()) << c.field;
    EXPECT_EQ(spec.status().message().substr(0, c.field.size()), c.field) << spec.status();
  }
  // The simulator's spec has its own shape.
  auto sim = ParseSpec(absl::StrReplaceAll(kSim, {{"seq_len: 4096}", "seq_len: 4096, shape: {layers: 2}}"}}), Opts());
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().message().rfind("workload.shape: is for real jobs", 0), 0u) << sim.status();
}

// A repository whose patches apply unless they say "CONFLICT" after another
// patch, or "NOAPPLY" at all.
class FakeRepo : public SourceRepo {
 public:
  absl::StatusOr<std::string> ResolveCommit(const std::string& repo,
                                            const std::string& rev) const override {
    if (repo != "/repo") return absl::FailedPreconditionError("not a git repository: " + repo);
    if (rev != "HEAD" && rev != "main") return absl::NotFoundError("'" + rev + "' names no commit");
    return std::string(40, 'c');
  }
  absl::StatusOr<std::vector<std::string>> CheckPatch(const std::string&, const std::string& base,
                                                      const std::vector<std::string>& earlier,
                                                      const std::string& diff) const override {
    EXPECT_EQ(base, std::string(40, 'c'));
    if (diff.find("NOAPPLY") != std::string::npos) {
      return absl::FailedPreconditionError("does not apply: model/attn.py: hunk 1 failed");
    }
    if (!earlier.empty() && diff.find("CONFLICT") != std::string::npos) {
      return absl::FailedPreconditionError("does not apply: model/attn.py");
    }
    return std::vector<std::string>{"model/attn.py"};
  }
  absl::StatusOr<std::string> BlobAt(const std::string&, const std::string& base,
                                     const std::string& path) const override {
    return base.substr(0, 4) + ":" + path;
  }
};

TEST(SpecTest, PatchesAreCheckedAgainstTheRepository) {
  const std::string process = absl::StrReplaceAll(
      kGood, {{"replay: {landscape: data/land.jsonl}", "process: {command: 'python3 train.py'}"}});
  FakeRepo repo;
  SpecParseOptions o = Opts();
  o.source_repo = &repo;
  o.may_name_urls = true;
  auto patch = [](const std::string& name, const std::string& marker) {
    return "  - name: " + name + "\n    prior: {time: -0.2}\n    diff: |\n      --- a/model/attn.py\n"
           "      +++ b/model/attn.py\n      @@ -1 +1 @@\n      -a\n      +b " + marker + "\n";
  };
  const std::string head =
      "repository: {url: /repo, base: main}\n"
      "contract: {editable: ['model/**'], protected: [data.py]}\npatches:\n";
  auto ok = ParseSpec(process + head + patch("a", "") + patch("b", "CONFLICT") + patch("c", ""), o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->repository.base_commit, std::string(40, 'c'));
  // Protected files are locked as committed at the base.
  EXPECT_EQ(ok->contract.protected_hashes.at("data.py"), "cccc:data.py");
  EXPECT_TRUE(ok->patches[0].has_prior);
  EXPECT_DOUBLE_EQ(ok->patches[0].prior_time, -0.2);
  // Trials apply patches in spec order, and b does not apply after a: that
  // pair is never switched on together (c after b applies).
  const std::vector<std::pair<std::string, std::string>> conflicts = {{"a", "b"}};
  EXPECT_EQ(ok->patch_conflicts, conflicts);
  Config both = ok->baseline;
  both["patch_a"] = "on";
  both["patch_b"] = "on";
  EXPECT_EQ(ok->PatchConflict(both), "patches a and b do not apply together");
  both["patch_b"] = "off";
  both["patch_c"] = "on";
  EXPECT_EQ(ok->PatchConflict(both), "");
  EXPECT_EQ(ok->PatchesOn(both).size(), 2u);
  // The base commit and the conflicts are part of the locked contract.
  SessionSpec moved = *ok;
  moved.repository.base_commit = std::string(40, 'd');
  EXPECT_NE(ContractText(*ok), ContractText(moved));

  struct Case {
    std::string yaml, expect;
  };
  const std::vector<Case> bad = {
      {process + head + patch("x", "NOAPPLY"), "patches[x]: does not apply: model/attn.py: hunk 1 failed"},
      {absl::StrReplaceAll(process + head + patch("x", ""), {{"base: main", "base: nope"}}),
       "repository: 'nope' names no commit"},
      {absl::StrReplaceAll(process + head + patch("x", ""), {{"url: /repo", "url: /elsewhere"}}),
       "repository: not a git repository: /elsewhere"},
      {absl::StrReplaceAll(process + head + patch("x", ""), {{"prior: {time: -0.2}", "prior: {time: -9}"}}),
       "patches[x].prior.time: must be in [-2, 2], got -9"},
      {process + "contract: {editable: ['model/**']}\npatches:\n" + patch("x", ""),
       "patches[x]: patches need a repository to apply to (repository: {name: ...})"},
      {absl::StrReplaceAll(process, {{"python3 train.py'", "python3 train.py', workdir: /other"}}) + head +
           patch("x", ""),
       "executor.process.workdir: with a repository, trials run at the root of a fresh work tree"},
  };
  for (const Case& c : bad) {
    auto spec = ParseSpec(c.yaml, o);
    ASSERT_FALSE(spec.ok()) << c.expect;
    EXPECT_EQ(spec.status().message().substr(0, c.expect.size()), c.expect) << spec.status();
  }
}

TEST(SpecTest, OverLimitInputsAreRefusedNamingTheLimit) {
  auto big = ParseSpec(std::string(kGood) + "# " + std::string(1 << 20, 'x') + "\n", Opts());
  EXPECT_EQ(big.status().message(), "spec: larger than the limit of 1048576 bytes");
  std::string many = "knobs:\n";
  for (int i = 0; i < 65; ++i) many += "  k" + std::to_string(i) + ": [a, b]\n";
  auto knobs = ParseSpec(absl::StrReplaceAll(kGood, {{"knobs:\n", many + "  unused_marker: [x]\n"}}), Opts());
  EXPECT_EQ(knobs.status().message(), "knobs: at most 64 knobs");
  std::string values = "[";
  for (int i = 0; i < 257; ++i) values += (i ? ", " : "") + std::to_string(i);
  values += "]";
  auto vals = ParseSpec(absl::StrReplaceAll(kGood, {{"micro_batch: [1, 2, 4, 8, 16]", "micro_batch: " + values}}), Opts());
  EXPECT_EQ(vals.status().message(), "knobs.micro_batch: at most 256 values");
}

TEST(SpecTest, ContractAndPatchesAreValidatedAtInit) {
  const std::string process = absl::StrReplaceAll(
      kGood, {{"replay: {landscape: data/land.jsonl}",
               "process: {command: 'python3 train.py --mbs {micro_batch}'}"}});
  SpecParseOptions o = Opts();
  o.blob_hash = [](const std::string& content) {
    return std::string(40, content == "# the harness\n" ? 'a' : 'b');
  };
  o.may_name_urls = true;
  // Without a repository, a protected file is locked by the content sent.
  auto sent = ParseSpec(process + "contract: {protected: [infrarsi_harness.py]}\n", o);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->contract.protected_hashes.at("infrarsi_harness.py"), std::string(40, 'a'));
  EXPECT_EQ(ParseSpec(process + "contract: {protected: [data.py]}\n", o).status().message(),
            "contract.protected[data.py]: 'data.py' was not sent with the spec: the server reads no "
            "file a spec names (`infrarsi session create` sends them)");
  const std::string contract =
      "repository: {url: /repo}\n"
      "contract: {editable: ['model/**'], protected: [infrarsi_harness.py], data_seed: 5}\n";
  auto ok = ParseSpec(process + contract +
                          "patches:\n  - name: fast-attn\n    diff: |\n      --- a/model/attn.py\n"
                          "      +++ b/model/attn.py\n      @@ -1 +1 @@\n      -a\n      +b\n",
                      o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->patches.size(), 1u);
  EXPECT_EQ(ok->patches[0].paths, std::vector<std::string>{"model/attn.py"});
  // Each patch is a switch in the search space, off in the baseline.
  EXPECT_EQ(ok->patches[0].knob, "patch_fast_attn");
  ASSERT_NE(ok->FindKnob("patch_fast_attn"), nullptr);
  EXPECT_EQ(ok->baseline.at("patch_fast_attn"), "off");
  EXPECT_EQ(ok->process.workdir, "");  // trials run at the root of a fresh work tree
  EXPECT_TRUE(ok->contract.data_seed_set);
  // The contract text (what Init hashes) changes with any locked field.
  SessionSpec other = *ok;
  other.contract.loss_abs_tol *= 2;
  EXPECT_NE(ContractText(*ok), ContractText(other));

  auto bad = ParseSpec(process + contract +
                           "patches:\n  - name: sneaky\n    diff: |\n      --- a/infrarsi_harness.py\n"
                           "      +++ b/infrarsi_harness.py\n      @@ -1 +1 @@\n      -a\n      +b\n",
                       o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "patches[sneaky]: 'infrarsi_harness.py' is a protected file");
  // The precision policy bounds the knob space.
  auto prec = ParseSpec(absl::StrReplaceAll(kGood, {{"ckpt: [false, true]", "ckpt: [false, true]\n  precision: [bf16, fp8]"},
                                                    {"ckpt: False}", "ckpt: False, precision: bf16}"}}) +
                            "contract: {precision: [bf16, tf32]}\n",
                        Opts());
  ASSERT_FALSE(prec.ok());
  EXPECT_EQ(prec.status().message().substr(0, 16), "knobs.precision:");
  // Protected files exist only for a process executor.
  auto replay = ParseSpec(std::string(kGood) + "contract: {protected: [x.py]}\n", Opts());
  EXPECT_EQ(replay.status().message().substr(0, 19), "contract.protected:");
}

TEST(SpecTest, SplitCommandLine) {
  auto a = SplitCommandLine(R"(a  "b c" 'd "e"' f\ g "h\"i")");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<std::string>{"a", "b c", "d \"e\"", "f g", "h\"i"}));
  EXPECT_FALSE(SplitCommandLine("a 'b").ok());
  EXPECT_FALSE(SplitCommandLine("a \\").ok());
}

TEST(SpecTest, SubstituteKnobs) {
  Config c{{"mbs", "4"}, {"attn", "sdpa"}};
  EXPECT_EQ(SubstituteKnobs("--mbs={mbs}", c), "--mbs=4");
  EXPECT_EQ(SubstituteKnobs("{attn}-{mbs}-{other}", c), "sdpa-4-{other}");
  EXPECT_EQ(SubstituteKnobs("plain", c), "plain");
}

// Bare flags (Megatron's `--sequence-parallel`) as true/false knobs: a
// switch "{knob?TEXT}" is TEXT when on and the argument is gone when off.
TEST(SpecTest, SwitchesAddOrDropABareFlag) {
  const std::vector<std::string> argv = {"train.py", "{sp?--sequence-parallel}", "--mbs", "{mbs}",
                                         "--x={sp?1}"};
  EXPECT_EQ(SubstituteCommand(argv, {{"sp", "true"}, {"mbs", "2"}}),
            (std::vector<std::string>{"train.py", "--sequence-parallel", "--mbs", "2", "--x=1"}));
  EXPECT_EQ(SubstituteCommand(argv, {{"sp", "false"}, {"mbs", "2"}}),
            (std::vector<std::string>{"train.py", "--mbs", "2", "--x="}));
  auto spec = ParseSpec(R"(
name: s
workload: {model: m, global_batch: 8, seq_len: 64}
hardware: {gpu: cpu, count: 1}
knobs: {sp: [false, true], mbs: [1, 2]}
baseline: {sp: false, mbs: 1}
budget: {max_trials: 4}
executor:
  process: {command: "python3 train.py {sp?--sequence-parallel} --mbs {mbs}", workdir: /tmp}
)", Opts());
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto bad = ParseSpec(R"(
name: s
workload: {model: m, global_batch: 8, seq_len: 64}
hardware: {gpu: cpu, count: 1}
knobs: {sp: [false, true], mbs: [1, 2]}
baseline: {sp: false, mbs: 1}
budget: {max_trials: 4}
executor:
  process: {command: "python3 train.py {mbs?--sequence-parallel}", workdir: /tmp}
)", Opts());
  EXPECT_EQ(std::string(bad.status().message()),
            "executor.process.command: switch {mbs?...} needs knobs.mbs to take only true and false, not '1'");
  auto unknown = ParseSpec(R"(
name: s
workload: {model: m, global_batch: 8, seq_len: 64}
hardware: {gpu: cpu, count: 1}
knobs: {mbs: [1, 2]}
baseline: {mbs: 1}
budget: {max_trials: 4}
executor:
  process: {command: "python3 train.py {sp?--sequence-parallel}", workdir: /tmp}
)", Opts());
  EXPECT_EQ(std::string(unknown.status().message()), "executor.process.command: placeholder {sp?...} is not a knob");
}

TEST(SpecTest, ConfigEncodingRoundTrips) {
  Config c{{"a", "1"}, {"quote\"d", "x\\y"}, {"z", "line\nbreak"}};
  const std::string json = EncodeConfigJson(c);
  auto back = DecodeConfigJson(json);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, c);
  EXPECT_EQ(ConfigKey(Config{{"b", "2"}, {"a", "1"}}), "a=1,b=2");
  EXPECT_FALSE(DecodeConfigJson("not json").ok());
  // Read directly or by protobuf's parser (UTF-8, control characters, a
  // \u escape): the same settings either way.
  const Config wide{{"caf\xc3\xa9", "\x01\x7f"}, {"tab", "a\tb"}, {"", "/"}};
  back = DecodeConfigJson(EncodeConfigJson(wide));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, wide);
  back = DecodeConfigJson(" {\"tp\" : \"\\u0032\", \"pp\":\"4\"} ");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, (Config{{"tp", "2"}, {"pp", "4"}}));
  // What neither reads is refused, naming the field or the text.
  EXPECT_FALSE(DecodeConfigJson("{\"tp\": 2}").ok());
  EXPECT_FALSE(DecodeConfigJson("{\"tp\": \"2\"").ok());
}

TEST(SpecTest, StableHashIsStableAndSensitive) {
  EXPECT_EQ(StableHash("abc"), StableHash("abc"));
  EXPECT_NE(StableHash("abc"), StableHash("abd"));
  EXPECT_EQ(StableHash("").size(), 16u);
}

}  // namespace
}  // namespace infrarsi
