// The command-line tool: output formats and clear, non-zero exits on bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/pallas/interpret.h"
#include "parhelion/config_table.h"

namespace {

struct Result {
  int status;  // the exit code, or -1 if a signal ended the process
  std::string out;
  int signal = 0;  // the signal that ended it, if any
};

Result cli(const std::string& args) {
  std::string out;
  FILE* p = popen((std::string(PARHELION_CLI) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  // The shell reports a child killed by signal N as exit status 128 + N.
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  int sig = WIFSIGNALED(st) ? WTERMSIG(st) : code > 128 ? code - 128 : 0;
  return {code, out, sig};
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
  // The second check, against the Tile IR interpreter.
  ASSERT_TRUE(j.contains("interpreter_max_abs_err"));
  EXPECT_LT(j["interpreter_max_abs_err"].get<double>(), 0.05);
}

TEST(Cli, RunWithPinnedConfigAndHumanOutput) {
  Result r =
      cli("run softmax --shape 10,70 --reps 2 --config '{\"block_sizes\":[2],\"loop_orders\":[],\"num_threads\":1}'");
  ASSERT_EQ(r.status, 0) << r.out;
  // (the knob the pinned config leaves out, at its first choice)
  EXPECT_HAS(r, "config      {\"block_sizes\":[2],\"cache_hints\":[\"none\"],\"loop_orders\":[],\"num_threads\":1}");
  EXPECT_HAS(r, ": ok");
  EXPECT_HAS(r, "vs the Tile IR interpreter: ok");
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

TEST(Cli, TuneShapesWritesATableThatRunAndEmitApply) {
  const std::string path = ::testing::TempDir() + "/cli-configs.json";
  std::remove(path.c_str());
  Result r = cli("tune softmax --shapes 20,300 64,1000 --budget 10 --seed 1 -o " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_HAS(r, "wrote 2 entries to " + path);
  // A second kernel's shapes go into the same file; its entries stay.
  Result tpu = cli("tune rms_norm --shapes 256,1024 --dtype bf16 --target pallas --tpu v7x --model -o " + path);
  ASSERT_EQ(tpu.status, 0) << tpu.out;
  EXPECT_HAS(tpu, "wrote 3 entries");
  parhelion::ConfigTable t = parhelion::ConfigTable::load(path);
  ASSERT_EQ(t.entries.size(), 3u);
  EXPECT_EQ(t.entries[2].target, "pallas:v7x");
  Result exact = cli("run softmax --shape 64,1000 --reps 2 --config-table " + path);
  ASSERT_EQ(exact.status, 0) << exact.out;
  EXPECT_HAS(exact, "(table: exact)");
  EXPECT_HAS(exact, ": ok");
  Result nearest = cli("run softmax --shape 50,900 --reps 2 --config-table " + path);
  ASSERT_EQ(nearest.status, 0) << nearest.out;
  EXPECT_HAS(nearest, "(table: nearest (f32[64,1000]))");
  Result emitted =
      cli("emit rms_norm --target pallas --shape 256,1024 --dtype bf16 --stage spec --config-table " + path);
  ASSERT_EQ(emitted.status, 0) << emitted.out;
  EXPECT_HAS(emitted, "(table: exact, tuned on ");
  // Refusals: no -o, --shape beside --shapes, a table that does not parse.
  EXPECT_HAS(cli("tune softmax --shapes 20,300"), "name it with -o FILE");
  EXPECT_HAS(cli("tune softmax --shape 1,2 --shapes 20,300 -o x.json"), "--shape and --shapes exclude each other");
  {
    std::ofstream bad(path);
    bad << "{\"entries\": 3}";
  }
  Result broken = cli("run softmax --shape 64,1000 --config-table " + path);
  EXPECT_EQ(broken.status, 2);
  EXPECT_HAS(broken, path + ": config table: expected");
}

TEST(Cli, BenchJsonRowsHaveTheContractFields) {
  Result r = cli("bench bmm --threads 1 --quick --json");
  ASSERT_EQ(r.status, 0) << r.out;
  int parhelion_rows = 0, peak_rows = 0, openblas_rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"kernel", "dtype", "impl", "threads", "gflops"}) EXPECT_TRUE(j.contains(k)) << line;
    if (j["impl"] == "peak") ++peak_rows;
    if (j["impl"] == "openblas") ++openblas_rows;
    if (j["impl"] == "parhelion") {
      ++parhelion_rows;
      for (const char* k : {"shape", "median_ms"}) EXPECT_TRUE(j.contains(k)) << line;
      EXPECT_GT(j["gflops"].get<double>(), 0);
    }
  }
  EXPECT_EQ(parhelion_rows, 2);  // bmm in f32 and bf16
  EXPECT_EQ(peak_rows, 2);       // f32 and bf16 FMA peaks
  // A baseline is measured, or the run says it is missing and why: never silently absent.
  if (openblas_rows == 0) {
    EXPECT_HAS(r, "# baseline missing: openblas: ");
  }
  EXPECT_NE(cli("bench nosuchkernel").out.find("unknown kernel 'nosuchkernel'"), std::string::npos);
}

// bench KERNEL --shape S --dtype D times that one case (a slow host's whole table takes many
// minutes); a shape the kernel cannot take, a dtype it does not support, several kernels, or
// --shape with --suite are refused with the flag named.
TEST(Cli, BenchTimesOneCase) {
  Result r = cli("bench bmm --shape 2,24,40,16 --dtype bf16 --threads 1 --quick --json");
  ASSERT_EQ(r.status, 0) << r.out;
  int parhelion_rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    if (j["impl"] != "parhelion") continue;
    ++parhelion_rows;
    EXPECT_EQ(j["shape"], nlohmann::json::array({2, 24, 40, 16})) << line;
    EXPECT_EQ(j["dtype"], "bf16") << line;
  }
  EXPECT_EQ(parhelion_rows, 1);
  EXPECT_HAS(cli("bench bmm --shape 24,40"), "error: bmm takes a shape B,M,K,N, got [24,40]");
  EXPECT_HAS(cli("bench bmm --shape 2,24,40,16 --dtype f8e4m3"), "--dtype f8e4m3 is not supported by bmm");
  EXPECT_HAS(cli("bench bmm matmul --shape 2,24,40,16"), "bench --shape and --dtype need exactly one KERNEL");
  EXPECT_HAS(cli("bench --suite --shape 2,24,40,16"),
             "--shape does not apply to --suite (the suite file names its cases)");
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
  // (at 65536 keys one head's K and V are 64 MiB even single-buffered: resident does not fit)
  Result t = cli("tune attention --target pallas --tpu v7x --shape 8,32,65536,256 --dtype bf16 --model --json");
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
  // What a prediction rests on: device time, a call's dispatch apart, and no TPU's confirmation.
  Result text = cli("emit attention --target pallas --tpu v7x --shape 1,2,1024,128 --dtype bf16 --predict");
  EXPECT_HAS(text, "ms of device time");
  EXPECT_HAS(text, "per call    ");
  EXPECT_HAS(text, "no TPU has confirmed this prediction");
  EXPECT_FALSE(nlohmann::json::parse(p.out)["measured"].get<bool>());
  // The seed's published table beside the model's tuned predictions.
  Result table = cli("bench --tpu-table --json");
  ASSERT_EQ(table.status, 0) << table.out;
  auto tj2 = nlohmann::json::parse(table.out);
  EXPECT_EQ(tj2["rows"].size(), 16u);
  EXPECT_FALSE(tj2["measured"].get<bool>());
  Result table_flag = cli("bench --tpu-table --threads 2");
  EXPECT_NE(table_flag.status, 0);
  EXPECT_HAS(table_flag, "does not apply to --tpu-table");
  // The script that times an emitted module on a TPU beside its prediction (for users with a
  // TPU, to recalibrate the model): its path checked here in interpret mode.
  const std::string py = parhelion::backend::pallas::interpret_python();
  ASSERT_FALSE(py.empty()) << "no Python with jax (run `make test`)";
  const std::string dir = testing::TempDir();
  ASSERT_EQ(cli("emit softmax --target pallas --tpu v7x --shape 64,512 -o " + dir + "/sm.py").status, 0);
  ASSERT_EQ(cli("emit softmax --target pallas --tpu v7x --shape 64,512 --predict --json > " + dir + "/sm.json").status,
            0);
  const std::string script = py + " " + PARHELION_SOURCE_DIR + "/scripts/tpu_time.py " + dir + "/sm.py";
  auto shell = [](const std::string& command) {
    std::string out;
    FILE* f = popen((command + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    const int st = pclose(f);
    return Result{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, 0};
  };
  Result timed = shell(script + " --predicted " + dir + "/sm.json --interpret --reps 2 --json");
  ASSERT_EQ(timed.status, 0) << timed.out;
  auto row = nlohmann::json::parse(timed.out.substr(timed.out.rfind("{\"kernel\"")));
  EXPECT_EQ(row["kernel"], "softmax");
  EXPECT_EQ(row["tpu"], "v7x");
  for (const char* k : {"measured_call_ms", "measured_device_ms", "predicted_device_ms", "device_ratio"})
    EXPECT_TRUE(row.contains(k)) << k;
  Result no_tpu = shell(script);
  EXPECT_NE(no_tpu.status, 0);
  EXPECT_HAS(no_tpu, "JAX sees no TPU");
  Result table_file = cli("bench --tpu-table --suite-file /nonexistent/table.json");
  EXPECT_NE(table_file.status, 0);
  EXPECT_HAS(table_file, "cannot read the published TPU table /nonexistent/table.json");
}

}  // namespace

namespace {

// The suite's failure paths (its baselines need the bench venv, which `make test` does not
// create): a missing interpreter and a malformed suite file are said, not crashed on.
// Kernels on a mesh: the pallas module under shard_map, the cpu backend's code, the TPU model's
// exposed communication, and what --mesh refuses.
TEST(Cli, EmitOnAMesh) {
  Result code = cli("emit all_gather --mesh x=4 --target pallas --shape 8,128");
  ASSERT_EQ(code.status, 0) << code.out;
  EXPECT_HAS(code, "def all_gather(arg0, *, interpret=False, mesh=None):");
  EXPECT_HAS(code, "pltpu.make_async_remote_copy(");
  EXPECT_HAS(code, "jax.shard_map(");
  Result cpu = cli("emit all_reduce_ring --mesh x=4 --shape 16,128");
  ASSERT_EQ(cpu.status, 0) << cpu.out;
  EXPECT_HAS(cpu, "mesh_tensor(");
  Result p =
      cli("emit all_gather_matmul --mesh x=4 --target pallas --tpu v5e --shape 128,1024,8192 --dtype bf16 "
          "--predict --json");
  ASSERT_EQ(p.status, 0) << p.out;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["mesh"], "x=4");
  EXPECT_GT(j["comm_ms"].get<double>(), j["exposed_comm_ms"].get<double>());
  Result text = cli("emit all_gather --mesh x=8 --target pallas --predict");
  EXPECT_HAS(text, "of copies and synchronization over the inter-chip links");
  EXPECT_HAS(text, "ICI-bound");
  Result bad = cli("emit softmax --mesh x=4 --target pallas");
  EXPECT_NE(bad.status, 0);
  EXPECT_HAS(bad, "'softmax' is not a kernel that runs on a mesh; those are: all_gather, ");
  Result axis = cli("emit all_gather --mesh y=4 --target pallas");
  EXPECT_NE(axis.status, 0);
  EXPECT_HAS(axis, "collectives.cpp:");  // (the library's line that names axis x)
  Result form = cli("emit all_gather --mesh x4");
  EXPECT_HAS(form, "--mesh: 'x4' is not NAME=SIZE");
  Result rows = cli("emit all_reduce_ring --mesh x=3 --shape 16,128");
  EXPECT_HAS(rows, "M = 16 must be a multiple of the 3 devices");
}

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

namespace {

// Every bad input gets a clear error and exit status 2: no signal, no hang, no library
// exception text, no "internal error" for what is the user's mistake.
void expect_refused(const std::string& args, std::initializer_list<const char*> key_words) {
  Result r = cli(args);
  EXPECT_EQ(r.signal, 0) << args << "\n" << r.out;
  EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
  EXPECT_HAS(r, "error: ");
  for (const char* w : key_words)
    EXPECT_NE(r.out.find(w), std::string::npos) << args << "\nwanted: " << w << "\n" << r.out;
  for (const char* leak : {"internal error", "std::", "stoi", "stoull", "stod", "bad_alloc", "what()"})
    EXPECT_EQ(r.out.find(leak), std::string::npos) << args << "\nleaked: " << leak << "\n" << r.out;
}

TEST(CliBadInput, RepsMustBeAPositiveWholeNumber) {
  expect_refused("run add --shape 8 --reps 0", {"--reps", "'0'", "from 1"});
  expect_refused("run add --shape 8 --reps -3", {"--reps", "'-3'", "from 1"});
  expect_refused("run add --shape 8 --reps 1x", {"--reps", "'1x'"});
  expect_refused("run add --shape 8 --reps ''", {"--reps", "''"});
  expect_refused("run add --shape 8 --reps 99999999999999999999", {"--reps", "out of range"});
}

TEST(CliBadInput, SeedBudgetRoundsAndThreadsAreParsedStrictly) {
  expect_refused("run add --shape 8 --seed abc", {"--seed", "'abc'"});
  expect_refused("run add --shape 8 --seed -1", {"--seed", "'-1'"});
  expect_refused("run add --shape 8 --seed 99999999999999999999", {"--seed", "out of range"});
  expect_refused("tune add --shape 8 --budget 2s", {"--budget", "'2s'"});
  expect_refused("tune add --shape 8 --budget nan", {"--budget", "'nan'"});
  expect_refused("tune add --shape 8 --budget 0", {"--budget", "'0'"});
  expect_refused("run add --shape 8 --threads two", {"--threads", "'two'"});
  expect_refused("run add --shape 8 --threads 0", {"--threads", "'0'"});
  expect_refused("bench --threads 1,x", {"--threads", "'x'"});
  expect_refused("bench --threads 1,", {"--threads", "'1,'"});
  expect_refused("bench --suite --rounds 3x", {"--rounds", "'3x'"});
  expect_refused("bench --suite --budget -5", {"--budget", "'-5'"});
  expect_refused("run add --shape 8,", {"--shape", "ends with a comma"});
  expect_refused("run add --shape 99999999999999999999", {"--shape", "'99999999999999999999'"});
}

TEST(CliBadInput, ElementCountsThatOverflowAreRefused) {
  expect_refused("emit add --shape 4000000000000,4000000000000", {"[4000000000000,4000000000000]", "64-bit"});
  expect_refused("run add --shape 3037000500,3037000500", {"[3037000500,3037000500]", "64-bit"});
  // The count fits, the bytes do not: 2^61 f32 elements are 2^63 bytes.
  expect_refused("emit add --shape 2305843009213693952", {"[2305843009213693952]", "64-bit"});
}

TEST(CliBadInput, AShapeTooLargeForMemorySaysTheBytesNeededAndAvailable) {
  // 1e12 f32 elements are 4 TB: more than any test host has; no overcommitted allocation, no
  // std::bad_alloc, but the bytes it needs and the bytes there are.
  expect_refused("run add --shape 1000000,1000000", {"f32[1000000,1000000] needs 4000000000000 bytes", "available"});
  // A budget makes the same path testable at a small size (4 MB against 1 MiB).
  setenv("PARHELION_MEMORY_LIMIT", "1M", 1);
  Result r = cli("run add --shape 1000,1000 --reps 1");
  unsetenv("PARHELION_MEMORY_LIMIT");
  EXPECT_EQ(r.signal, 0) << r.out;
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_HAS(r, "needs 4000000 bytes");
  EXPECT_HAS(r, "only 1048576 bytes (1.0 MiB) are available");
  // Emitting never touches the data: a TPU-sized input is a placeholder, not an allocation.
  setenv("PARHELION_MEMORY_LIMIT", "1M", 1);
  Result emit = cli("emit add --shape 1000,1000 --stage ir");
  unsetenv("PARHELION_MEMORY_LIMIT");
  EXPECT_EQ(emit.status, 0) << emit.out;
}

TEST(CliBadInput, FlagsThatDoNotApplyAreRefusedNotIgnored) {
  expect_refused("emit add --shape 8,128 --predict", {"--predict needs --target pallas"});
  expect_refused("emit add --shape 8,128 --tpu v7x", {"--tpu needs --target pallas"});
  expect_refused("emit add --shape 8,128 -o /tmp/x.py", {"-o needs --target pallas"});
  expect_refused("emit add --shape 8,128 --json", {"--json for emit needs --predict"});
  expect_refused("emit add --shape 8,128 --seed 3", {"--seed does not apply to `parhelion emit`"});
  expect_refused("emit add --shape 8,128 --reps 3", {"--reps does not apply to `parhelion emit`"});
  expect_refused("tune add --shape 8,128 --model", {"--model needs --target pallas"});
  expect_refused("tune add --shape 8,128 --target pallas --model --effort full", {"--effort does not apply"});
  expect_refused("tune add --shape 8,128 --target gpu", {"--target must be cpu or pallas"});
  expect_refused("run add --shape 8,128 --target pallas", {"--target for run must be cpu", "emit add --target pallas"});
  expect_refused("run add --shape 8,128 --budget 3", {"--budget needs --tune"});
  expect_refused("run add --shape 8,128 --tune quick --threads 1", {"--threads and --tune exclude each other"});
  expect_refused("list --shape 8", {"--shape does not apply to `parhelion list`"});
  expect_refused("bench --png out.png", {"--png needs --suite"});
  expect_refused("bench --suite --quick", {"--quick does not apply to --suite"});
  expect_refused("bench --suite softmax add", {"at most one KERNEL"});
}

TEST(CliBadInput, UnparsableEnvironmentOverridesAreRefused) {
  for (const char* value : {"2x", "0", "many"}) {
    setenv("PARHELION_NUM_THREADS", value, 1);
    Result r = cli("run add --shape 8 --reps 1");
    unsetenv("PARHELION_NUM_THREADS");
    EXPECT_EQ(r.signal, 0) << r.out;
    EXPECT_EQ(r.status, 2) << value << "\n" << r.out;
    EXPECT_HAS(r, "PARHELION_NUM_THREADS");
    EXPECT_HAS(r, std::string("'") + value + "'");
  }
  setenv("PARHELION_FAST_MEMORY", "lots", 1);
  Result fast = cli("run add --shape 8 --reps 1");
  unsetenv("PARHELION_FAST_MEMORY");
  EXPECT_EQ(fast.status, 2) << fast.out;
  EXPECT_HAS(fast, "PARHELION_FAST_MEMORY must be a byte count");
  setenv("PARHELION_MEMORY_LIMIT", "1 GB", 1);  // read when a large (>= 1 MiB) block is allocated
  Result limit = cli("run add --shape 1000,1000 --reps 1");
  unsetenv("PARHELION_MEMORY_LIMIT");
  EXPECT_EQ(limit.status, 2) << limit.out;
  EXPECT_HAS(limit, "PARHELION_MEMORY_LIMIT must be a byte count");
}

TEST(Cli, RunThreadsSetsTheConfigsThreadCount) {
  // PARHELION_NUM_THREADS makes the host look like 4 threads whatever it has, so the default
  // (4) and the asked-for count (3) differ on any machine.
  setenv("PARHELION_NUM_THREADS", "4", 1);
  Result r = cli("run add --shape 64,1024 --threads 3 --reps 1 --json");
  Result pinned =
      cli("run add --shape 64,1024 --threads 2 --reps 1 --json "
          "--config '{\"block_sizes\":[8,1024],\"loop_orders\":[[0,1]],\"num_threads\":1}'");
  unsetenv("PARHELION_NUM_THREADS");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["config"]["num_threads"], 3) << r.out;
  ASSERT_EQ(pinned.status, 0) << pinned.out;
  auto j = nlohmann::json::parse(pinned.out);
  EXPECT_EQ(j["config"]["num_threads"], 2) << pinned.out;
  EXPECT_EQ(j["config"]["block_sizes"], nlohmann::json::array({8, 1024})) << pinned.out;
}

// `parhelion opt`: one stage on a Tile IR file (tests/passes holds the golden cases).
const std::string kPassDir = std::string(PARHELION_SOURCE_DIR) + "/tests/passes/";

TEST(Cli, OptRunsOneStageOnATirFile) {
  Result ir = cli("opt " + kPassDir + "ir-strided-round-trip.tir --stage ir");
  EXPECT_EQ(ir.status, 0) << ir.out;
  EXPECT_HAS(ir, "kernel add(arg0: f32[64,96] strides=[1,64], arg1: f32[64,96]) -> (buf0)");
  Result block = cli("opt " + kPassDir + "block-cpu-ragged-extent.tir --stage block --fast-memory 2M --threads 4");
  EXPECT_EQ(block.status, 0) << block.out;
  EXPECT_HAS(block, "target=cpu (fast memory 2.0 MiB, 4 threads)");
  Result plan = cli("opt " + kPassDir + "pallas-plan-resident-inner-loop.tir --stage pallas-plan --target pallas");
  EXPECT_EQ(plan.status, 0) << plan.out;
  EXPECT_HAS(plan, "slot 0 arg0 in pipeline in t1 x2");  // the pallas default: pipelined
}

TEST(CliBadInput, OptRefusesBadStagesFilesAndFlags) {
  const std::string file = kPassDir + "fusion-in-place-accumulation.tir";
  Result stage = cli("opt " + file + " --stage lowering");
  EXPECT_EQ(stage.status, 2);
  EXPECT_HAS(stage, "--stage must be one of ir, fusion, spec, block, pallas-plan, code; got 'lowering'");
  Result plan = cli("opt " + file + " --stage pallas-plan");
  EXPECT_EQ(plan.status, 2);
  EXPECT_HAS(plan, "--stage pallas-plan needs --target pallas");
  Result threads = cli("opt " + file + " --stage block --target pallas --threads 2");
  EXPECT_EQ(threads.status, 2);
  EXPECT_HAS(threads, "--threads describes the cpu target");
  Result missing = cli("opt /nonexistent/k.tir --stage ir");
  EXPECT_EQ(missing.status, 2);
  EXPECT_HAS(missing, "cannot read /nonexistent/k.tir");
  Result memory = cli("opt " + file + " --stage block --fast-memory 2X");
  EXPECT_EQ(memory.status, 2);
  EXPECT_HAS(memory, "--fast-memory");
}

TEST(CliBadInput, OptNamesTheLineAndColumnOfATextError) {
  char path[] = "/tmp/ph-opt-XXXXXX.tir";
  int fd = mkstemps(path, 4);
  ASSERT_GE(fd, 0);
  const std::string text = "kernel k(arg0: f32[8]) -> (buf0)\n  $b0 = block_size(extent=8)\n  buf0 = empty f32[8\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  Result r = cli(std::string("opt ") + path + " --stage ir");
  unlink(path);
  EXPECT_EQ(r.status, 2);
  EXPECT_HAS(r, std::string(path) + ":3:21: expected ']' after the dimensions of allocation buf0, got end of line");
}

}  // namespace
