// The command-line tool: output formats and clear, non-zero exits on bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {

struct Result {
  int status;
  std::string out;
};

Result cli(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(PARHELION_CLI) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

#define EXPECT_HAS(r, needle) EXPECT_NE((r).out.find(needle), std::string::npos) << (r).out

TEST(Cli, ListsKernels) {
  Result r = cli("list");
  EXPECT_EQ(r.status, 0);
  for (const char* k : {"add", "exp", "softmax", "softmax_two_pass", "layer_norm", "rms_norm", "swiglu", "geglu",
                        "cross_entropy", "welford", "batch_softmax"})
    EXPECT_HAS(r, k);
}

TEST(Cli, RunJsonHasTheContractFields) {
  Result r = cli("run layer_norm --shape 31,257 --dtype bf16 --reps 2 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"kernel", "shape", "dtype", "target", "config", "max_abs_err", "ok", "median_ms"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["kernel"], "layer_norm");
  EXPECT_EQ(j["shape"], nlohmann::json::array({31, 257}));
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_EQ(j["target"], "cpu");
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_GT(j["median_ms"].get<double>(), 0);
}

TEST(Cli, RunWithPinnedConfigAndHumanOutput) {
  Result r =
      cli("run softmax --shape 10,70 --reps 2 --config '{\"block_sizes\":[2],\"loop_orders\":[],\"num_threads\":1}'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_HAS(r, "config      {\"block_sizes\":[2],\"loop_orders\":[],\"num_threads\":1}");
  EXPECT_HAS(r, ": ok");
}

TEST(Cli, TuneJsonHasTheContractFields) {
  Result r = cli("tune softmax --shape 20,300 --effort quick --budget 20 --seed 3 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  for (const char* k : {"kernel", "shape", "dtype", "target", "best_config", "best_ms", "default_ms", "candidates",
                        "failed", "cache_hit", "seconds"})
    EXPECT_TRUE(j.contains(k)) << k;
  Result again = cli("run softmax --shape 20,300 --tune quick --reps 2 --json");
  ASSERT_EQ(again.status, 0) << again.out;
  auto k = nlohmann::json::parse(again.out.substr(again.out.find('{')));
  EXPECT_EQ(k["config"], j["best_config"]);  // the cached winner
  EXPECT_TRUE(k["ok"].get<bool>());
  EXPECT_NE(cli("tune softmax --shape 20,300 --effort fast").out.find("--effort must be none, quick or full"),
            std::string::npos);
}

TEST(Cli, BenchJsonRowsHaveTheContractFields) {
  Result r = cli("bench bmm --threads 1 --quick --json");
  ASSERT_EQ(r.status, 0) << r.out;
  int parhelion_rows = 0, peak_rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"kernel", "dtype", "impl", "threads", "gflops"}) EXPECT_TRUE(j.contains(k)) << line;
    if (j["impl"] == "peak") ++peak_rows;
    if (j["impl"] == "parhelion") {
      ++parhelion_rows;
      for (const char* k : {"shape", "median_ms"}) EXPECT_TRUE(j.contains(k)) << line;
      EXPECT_GT(j["gflops"].get<double>(), 0);
    }
  }
  EXPECT_EQ(parhelion_rows, 2);  // bmm in f32 and bf16
  EXPECT_EQ(peak_rows, 2);       // f32 and bf16 FMA peaks
  EXPECT_NE(cli("bench nosuchkernel").out.find("unknown kernel 'nosuchkernel'"), std::string::npos);
}

TEST(Cli, EmitsEveryStage) {
  EXPECT_HAS(cli("emit add --shape 5,7 --stage ir"), "kernel add(arg0: f32[5,7], arg1: f32[5,7]) -> (buf0)");
  EXPECT_HAS(cli("emit add --shape 5,7 --stage block"), "launch 0: grid");
  EXPECT_HAS(cli("emit add --shape 5,7 --stage code"), "extern \"C\" void ph_launch_0(");
  EXPECT_HAS(cli("emit add --shape 5,7 --stage spec"), "num_threads: 1..");
}

TEST(Cli, BadInputExitsNonZeroWithAClearMessage) {
  struct Case {
    std::string args, message;
  } cases[] = {
      {"run nosuchkernel --shape 4", "unknown kernel 'nosuchkernel'; known kernels: add"},
      {"run add --shape 4,x", "--shape: 'x' is not a positive integer"},
      {"run add --shape 4,-3", "--shape: '-3' is not a positive integer"},
      {"run softmax --shape 4", "softmax takes a shape M,N, got [4]"},
      {"run add --shape 4 --dtype f64", "--dtype f64 is not supported by add"},
      {"run add --shape 4 --config '{\"block_sizes\":'", "invalid config JSON"},
      {"run add --shape 4 --config '{\"block_sizes\":[5],\"loop_orders\":[],\"num_threads\":1}'",
       "block_sizes[0] = 5 is out of its domain"},
      {"emit add --shape 4 --stage asm", "--stage must be one of ir, spec, block, code"},
      {"run add --shape", "option --shape needs a value"},
      {"run add --shape 4 --frobnicate 2", "unknown option --frobnicate"},
      {"frobnicate", "unknown command 'frobnicate'"},
  };
  for (const Case& c : cases) {
    Result r = cli(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_HAS(r, "error: ");
    EXPECT_HAS(r, c.message);
  }
}

}  // namespace

namespace {

TEST(Cli, PallasEmitPredictAndModelTune) {
  Result code = cli("emit softmax --target pallas --tpu v5e --shape 64,512");
  ASSERT_EQ(code.status, 0) << code.out;
  EXPECT_HAS(code, "def softmax(arg0, *, interpret=False):");
  Result p = cli("emit attention --target pallas --tpu v7x --shape 8,32,8192,256 --dtype bf16 --predict --json");
  ASSERT_EQ(p.status, 0) << p.out;
  auto j = nlohmann::json::parse(p.out);
  for (const char* k : {"predicted_ms", "tflops", "strategy", "fits", "bound"}) EXPECT_TRUE(j.contains(k)) << k;
  Result t = cli("tune attention --target pallas --tpu v7x --shape 8,32,32768,256 --dtype bf16 --model --json");
  ASSERT_EQ(t.status, 0) << t.out;
  auto tj = nlohmann::json::parse(t.out);
  EXPECT_EQ(tj["best"]["strategy"].get<std::string>().rfind("pipeline", 0), 0u) << t.out;
  EXPECT_NE(tj["why"].get<std::string>().find("resident does not fit"), std::string::npos);
  Result human = cli("tune attention --target pallas --tpu v7x --shape 8,32,8192,256 --dtype bf16 --model");
  EXPECT_HAS(human, "why         chose resident");
  Result no_model = cli("tune attention --target pallas --shape 1,2,256,128");
  EXPECT_NE(no_model.status, 0);
  EXPECT_HAS(no_model, "--model");
  Result bad_tpu = cli("emit add --target pallas --tpu v9 --shape 8,128");
  EXPECT_NE(bad_tpu.status, 0);
  EXPECT_HAS(bad_tpu, "unknown TPU generation 'v9' (known: v5e, v6e, v5p, v7x)");
  Result bad_target = cli("emit add --target gpu --shape 8,128");
  EXPECT_NE(bad_target.status, 0);
  EXPECT_HAS(bad_target, "--target must be cpu or pallas");
}

}  // namespace

namespace {

// The suite's failure paths (its baselines need the bench venv, which `make test` does not
// create): a missing interpreter and a malformed suite file are said, not crashed on.
TEST(Cli, SuiteSaysWhatIsMissing) {
  setenv("PARHELION_BENCH_PYTHON", "/nonexistent/python", 1);
  Result missing = cli("bench --suite softmax");
  unsetenv("PARHELION_BENCH_PYTHON");
  EXPECT_NE(missing.status, 0);
  EXPECT_HAS(missing, "the suite needs the torch baselines: no bench Python at /nonexistent/python");
  std::string bad = testing::TempDir() + "/bad-suite.json";
  FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs("{\"cases\": [", f);
  std::fclose(f);
  Result corrupt = cli("bench --suite --suite-file " + bad);
  EXPECT_NE(corrupt.status, 0);
  EXPECT_HAS(corrupt, "is not valid JSON");
  Result absent = cli("bench --suite --suite-file /nonexistent/suite.json");
  EXPECT_HAS(absent, "cannot read the suite file /nonexistent/suite.json");
}

}  // namespace
