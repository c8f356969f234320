// The autotuner: reproducible seeded search, failing candidates skipped and counted, the cache
// (round trip, key sensitivity, corrupt files), and `none` compiling one config.
#include <gtest/gtest.h>
#include <algorithm>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "backend/cpu/host.h"
#include "backend/cpu/jit.h"
#include "kernels/kernels.h"
#include "kernels/references.h"
#include "tune/accuracy.h"
#include "tune/cache.h"
#include "tune/conditions.h"
#include "tune/search.h"

namespace ph = parhelion;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory for one test, restored afterwards.
class ScopedCache {
 public:
  explicit ScopedCache(const std::string& name)
      : dir_(fs::temp_directory_path() / ("ph-tune-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    const char* old = std::getenv("PARHELION_CACHE_DIR");
    old_ = old ? old : "";
    setenv("PARHELION_CACHE_DIR", dir_.c_str(), 1);
  }
  ~ScopedCache() {
    setenv("PARHELION_CACHE_DIR", old_.c_str(), 1);
    fs::remove_all(dir_);
  }

 private:
  fs::path dir_;
  std::string old_;
};

ph::ConfigSpec toy_spec() {
  ph::ConfigSpec s;
  s.block_sizes = {{0, 1024, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, "x"},
                   {1, 64, {1, 2, 4, 8, 16, 32, 64}, "y"}};
  s.loop_orders = {{0, 2}};
  s.max_threads = 2;
  return s;
}

// A synthetic objective with one optimum: block 64 x 8, order [1,0], 2 threads.
double objective(const ph::Config& c) {
  double a = std::log2(static_cast<double>(c.block_sizes[0])) - 6,
         b = std::log2(static_cast<double>(c.block_sizes[1])) - 3;
  return 1 + a * a + 2 * b * b + (c.loop_orders[0][0] == 1 ? 0 : 0.5) + (c.num_threads == 2 ? 0 : 0.7);
}

std::vector<std::string> drive(ph::tune::SearchStrategy& s, int steps, double* best) {
  std::vector<std::string> seen;
  *best = INFINITY;
  for (int i = 0; i < steps; ++i) {
    auto batch = s.propose(2);
    if (batch.empty()) break;
    for (const auto& c : batch) {
      seen.push_back(c.to_json());
      double v = objective(c);
      *best = std::min(*best, v);
      s.observe({c, v, true});
    }
  }
  return seen;
}

TEST(Search, SeededSearchesAreReproducible) {
  ph::ConfigSpec spec = toy_spec();
  ph::Config start{{1, 1}, {{0, 1}}, 1, {}, {}};
  for (int kind = 0; kind < 3; ++kind) {
    auto make = [&](uint64_t seed) -> std::unique_ptr<ph::tune::SearchStrategy> {
      if (kind == 0) return ph::tune::make_random_search(spec, seed);
      if (kind == 1) return ph::tune::make_pattern_search(spec, seed, {start});
      return ph::tune::make_differential_evolution(spec, seed, {start});
    };
    double b1, b2, b3;
    auto s1 = make(7), s2 = make(7), s3 = make(8);
    auto a = drive(*s1, 30, &b1), b = drive(*s2, 30, &b2), c = drive(*s3, 30, &b3);
    EXPECT_EQ(a, b) << s1->name();
    if (kind != 1) {  // pattern search from one seed point is seed-independent
      EXPECT_NE(a, c) << s1->name();
    }
    // No config is proposed twice.
    std::set<std::string> unique(a.begin(), a.end());
    EXPECT_EQ(unique.size(), a.size()) << s1->name();
  }
}

TEST(Search, PatternSearchAndEvolutionFindTheOptimum) {
  ph::ConfigSpec spec = toy_spec();
  ph::Config start{{1, 1}, {{0, 1}}, 1, {}, {}};
  double best;
  auto p = ph::tune::make_pattern_search(spec, 1, {start});
  drive(*p, 40, &best);
  EXPECT_EQ(best, 1.0);
  auto de = ph::tune::make_differential_evolution(spec, 1, {start});
  drive(*de, 80, &best);
  EXPECT_EQ(best, 1.0);
}

TEST(Search, CodecSnapsForeignConfigsIntoTheSpace) {
  ph::ConfigSpec spec = toy_spec();
  ph::tune::ConfigCodec codec(spec);
  ph::Config foreign{{3000, 5}, {{1, 0}}, 8, {}, {}};
  ph::Config snapped = codec.decode(codec.encode(foreign));
  EXPECT_NO_THROW(spec.validate(snapped));
  EXPECT_EQ(snapped.block_sizes, (std::vector<int64_t>{1024, 4}));
  EXPECT_EQ(snapped.num_threads, 2);
}

TEST(Search, VectorWidthsDecodeWithTheWidestAsTheDefault) {
  ph::ConfigSpec spec = toy_spec();
  spec.vector_bits = {512, 256, 128};
  ph::tune::ConfigCodec codec(spec);
  EXPECT_EQ(spec.size(), 11 * 7 * 2 * 2 * 3);
  ph::Config c{{64, 8}, {{1, 0}}, 2, {}, {}};
  for (int bits : {0, 512, 256, 128, 96}) {
    c.vector_bits = bits;
    ph::Config back = codec.decode(codec.encode(c));
    EXPECT_NO_THROW(spec.validate(back));
    // Decoded widths are explicit (an unset one would take a default that may be narrower); an
    // unset one and one the host lacks come back as the widest.
    EXPECT_EQ(back.vector_bits, bits == 0 || bits == 96 ? 512 : bits) << bits;
    EXPECT_EQ(back.block_sizes, c.block_sizes);
  }
  // Random points cover every width.
  std::mt19937_64 gen(7);
  std::set<int> seen;
  for (int i = 0; i < 200; ++i) seen.insert(codec.decode(codec.random(gen)).vector_bits);
  EXPECT_EQ(seen, (std::set<int>{512, 256, 128}));
}

ph::TuneOptions fast_options() {
  ph::TuneOptions o;
  o.effort = ph::Effort::quick;
  o.progress = false;
  o.budget_seconds = 60;
  return o;
}

TEST(Tuner, FailingCandidatesAreSkippedAndCounted) {
  ScopedCache cache("faults");
  ph::Array x = ph::Array::random({37, 300}, ph::DType::f32, 1);
  ph::TuneOptions o = fast_options();
  o.candidate_timeout_seconds = 1.5;  // below the 2 s floor of the too-slow limit: a hang is a timeout
  std::atomic<int> calls{0};
  int crash = 0, hang = 0, wrong = 0;
  bool saw_default = false;
  ph::Config default_config = ph::kernels::softmax.compile({x}).config();
  o.inject_fault = [&](const ph::Config& c) {
    // (the search's point of the default is the default: a vector width it leaves unset is not
    // another candidate)
    if (c == default_config) return saw_default = true, ph::Fault::none;
    int n = calls++;
    if (n == 1) return ++crash, ph::Fault::crash;
    if (n == 2) return ++hang, ph::Fault::hang;
    if (n == 3) return ++wrong, ph::Fault::wrong_result;
    return ph::Fault::none;
  };
  ph::TuneReport r = ph::kernels::softmax.tune({x}, o);
  EXPECT_TRUE(saw_default);
  ASSERT_EQ(crash + hang + wrong, 3);
  EXPECT_EQ(r.failed, 3);
  std::string all;
  for (const auto& f : r.failures) all += f + "\n";
  EXPECT_NE(all.find("crashed with signal 6"), std::string::npos) << all;
  EXPECT_NE(all.find("timed out after"), std::string::npos) << all;
  EXPECT_NE(all.find("wrong result"), std::string::npos) << all;
  EXPECT_GT(r.candidates, 4);
  EXPECT_GT(r.best_ms, 0);
  EXPECT_NO_THROW(ph::kernels::softmax.compile({x}, &r.best_config));
}

TEST(Tuner, RejectsConfigsThatDoNotFitBeforeCompiling) {
  ScopedCache cache("fit");
  // Sized from this host's fast-memory budget (L2 per core, or PARHELION_FAST_MEMORY), not an
  // assumed 1 MiB: a row is 1/16 of the budget, so 64 rows, materialized, are 4 times it.
  const int64_t budget = ph::backend::cpu::Host::detect().fast_memory_bytes;
  const int64_t cols = std::max<int64_t>(256, budget / 16 / static_cast<int64_t>(sizeof(float)));
  ph::Array x = ph::Array::random({64, cols}, ph::DType::f32, 1);
  ph::TuneReport r = ph::kernels::softmax.tune({x}, fast_options());
  EXPECT_GT(r.rejected, 0) << "64 rows of " << cols << " floats against a budget of " << budget << " bytes";
  EXPECT_EQ(r.failed, 0);
}

TEST(Tuner, CacheRoundTripKeysAndCorruptFiles) {
  ScopedCache cache("cache");
  ph::Array x = ph::Array::random({16, 100}, ph::DType::f32, 1);
  ph::TuneReport first = ph::kernels::exp.tune({x}, fast_options());
  EXPECT_FALSE(first.cache_hit);
  ph::TuneReport second = ph::kernels::exp.tune({x}, fast_options());
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.best_config, first.best_config);
  EXPECT_EQ(second.candidates, 0);
  // The machine's conditions while tuning are reported and kept with the entry.
  EXPECT_NE(first.conditions.find("reference loop"), std::string::npos) << first.conditions;
  EXPECT_EQ(second.conditions, first.conditions);
  EXPECT_EQ(second.noisy, first.noisy);

  // A new shape or dtype is a new entry.
  ph::Array y = ph::Array::random({16, 101}, ph::DType::f32, 1);
  EXPECT_FALSE(ph::kernels::exp.tune({y}, fast_options()).cache_hit);
  EXPECT_FALSE(ph::kernels::exp.tune({x.to(ph::DType::bf16)}, fast_options()).cache_hit);

  // Every field of the key changes the entry; only the shape-independent ones, the family.
  ph::tune::CacheKey k{"exp", "abc", "f32[16,100];", "f32,", "cpu", "hw", "g++"};
  for (auto field : {&ph::tune::CacheKey::kernel, &ph::tune::CacheKey::fingerprint, &ph::tune::CacheKey::signature,
                     &ph::tune::CacheKey::target, &ph::tune::CacheKey::hardware, &ph::tune::CacheKey::compiler}) {
    ph::tune::CacheKey k2 = k;
    k2.*field += "x";
    EXPECT_NE(k2.entry_id(), k.entry_id());
  }
  ph::tune::CacheKey other_shape = k;
  other_shape.signature = "f32[32,100];";
  EXPECT_EQ(other_shape.family_id(), k.family_id());
  ph::tune::CacheKey other_target = k;
  other_target.target = "pallas";
  EXPECT_NE(other_target.family_id(), k.family_id());

  // A corrupt entry is ignored, and rewritten by the next tuning.
  std::string path;
  for (const auto& f : fs::recursive_directory_iterator(std::getenv("PARHELION_CACHE_DIR") + std::string("/tune")))
    if (f.path().extension() == ".json") {
      std::ifstream in(f.path());
      std::string text((std::istreambuf_iterator<char>(in)), {});
      if (text.find("f32[16,100]") != std::string::npos) path = f.path();
    }
  ASSERT_FALSE(path.empty());
  { std::ofstream(path, std::ios::trunc) << "{\"best_config\": [not json"; }
  ph::TuneReport third = ph::kernels::exp.tune({x}, fast_options());
  EXPECT_FALSE(third.cache_hit);
  EXPECT_TRUE(ph::kernels::exp.tune({x}, fast_options()).cache_hit);

  // PARHELION_FORCE_TUNE=1 tunes again despite the entry.
  setenv("PARHELION_FORCE_TUNE", "1", 1);
  EXPECT_FALSE(ph::kernels::exp.tune({x}, fast_options()).cache_hit);
  unsetenv("PARHELION_FORCE_TUNE");
}

// A noisy machine is told apart from a quiet one by the reference loop's drift, the every-core
// loop's slowdown and the winner's spread over its rounds, any over 5% (the agreement with
// `run` the tuner promises).
TEST(Tuner, MachineConditionsTellNoiseApart) {
  ph::tune::MachineConditions quiet;
  quiet.reference_before_ms = 2.0;
  quiet.reference_after_ms = 2.08;
  quiet.spread = ph::tune::spread_of({1.00, 1.02, 1.04});
  quiet.rounds = 3;
  EXPECT_NEAR(quiet.spread, 0.04 / 1.02, 1e-9);
  EXPECT_FALSE(quiet.noisy());
  quiet.threads = 2;
  quiet.contention = 1.04;
  EXPECT_FALSE(quiet.noisy());
  EXPECT_EQ(quiet.describe(),
            "quiet: reference loop 2.00 -> 2.08 ms, 1.04x on 2 cores at once, winner's spread 4% over 3 rounds");
  ph::tune::MachineConditions drifted = quiet;
  drifted.reference_after_ms = 2.12;
  EXPECT_TRUE(drifted.noisy());
  ph::tune::MachineConditions spread = quiet;
  spread.spread = ph::tune::spread_of({1.0, 1.07, 1.03});
  EXPECT_TRUE(spread.noisy());
  EXPECT_EQ(ph::tune::spread_of({1.0}), 0);
  EXPECT_GT(ph::tune::reference_loop_ms(), 0);
  // Load on one core of two: the one-core loop keeps its time, the every-core loop does not.
  ph::tune::MachineConditions contended = quiet;
  contended.contention = 1.06;
  EXPECT_TRUE(contended.noisy());
  ph::tune::MachineConditions measured;
  ph::tune::measure_contention(measured, 2);
  EXPECT_EQ(measured.threads, 2);
  EXPECT_GT(measured.contention, 0.5);
  EXPECT_GT(ph::tune::parallel_reference_loop_ms(2), 0);
}

// Load on a core while tuning: the tuner calls the machine noisy, whatever else runs beside this
// test, and re-times its finalists more than the three rounds of a quiet one, past the budget of
// its search.
TEST(Tuner, LoadOnACoreIsCalledNoisyAndRetimedMore) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "the every-core loop needs two cores";
  ScopedCache cache("load");
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    volatile uint64_t x = 1;
    while (!stop.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
  });
  ph::Array x = ph::Array::random({64, 256}, ph::DType::f32, 1);
  // A search that spends its whole budget still gets the extra rounds: they are not the search's.
  ph::TuneOptions o = fast_options();
  o.budget_seconds = 2;
  ph::TuneReport r = ph::kernels::exp.tune({x}, o);
  stop = true;
  spinner.join();
  EXPECT_TRUE(r.noisy) << r.conditions;
  int rounds = 0;
  const size_t at = r.conditions.find(" over ");
  ASSERT_NE(at, std::string::npos) << r.conditions;
  ASSERT_EQ(std::sscanf(r.conditions.c_str() + at, " over %d rounds", &rounds), 1) << r.conditions;
  EXPECT_GT(rounds, 3) << r.conditions;
  EXPECT_LE(r.seconds, 60) << "a quick tune stays within its minute";
}

// The final re-timing runs in this process; a kernel that stores to its arguments runs there on
// copies, so tuning leaves the caller's arrays as they were.

TEST(Tuner, TuningAnInPlaceKernelLeavesItsArgumentsAlone) {
  ScopedCache cache("in-place");
  ph::Kernel k(
      "add_one_in_place", +[](ph::Tensor x) {
        for (auto t : ph::tile(x.sizes())) x[t] = x[t] + 1.0f;
      });
  ph::Array x = ph::Array::random({37, 129}, ph::DType::f32, 5);
  ph::Array before = x.clone();
  ph::TuneReport r = k.tune({x}, fast_options());
  EXPECT_GT(r.best_ms, 0);
  EXPECT_EQ(ph::max_abs_diff(x, before), 0);
  EXPECT_NE(r.conditions.find("cores at once"), std::string::npos) << r.conditions;
}

TEST(Tuner, EffortNoneCompilesAtMostOneConfig) {
  ScopedCache cache("none");
  ph::Array x = ph::Array::random({9, 77}, ph::DType::f32, 3);
  int before = ph::backend::cpu::compiler_invocations();
  ph::TuneOptions o = fast_options();
  o.effort = ph::Effort::none;
  ph::TuneReport r = ph::kernels::rms_norm.tune({x, ph::Array::random({77}, ph::DType::f32, 4), 1e-5}, o);
  EXPECT_LE(ph::backend::cpu::compiler_invocations() - before, 1);
  EXPECT_EQ(r.candidates, 1);
  EXPECT_EQ(r.best_config, r.default_config);
}

TEST(Tuner, NeighbouringShapesSeedTheSearch) {
  ScopedCache cache("neighbours");
  ph::Array a = ph::Array::random({64, 512}, ph::DType::f32, 1);
  ph::TuneReport first = ph::kernels::softmax.tune({a}, fast_options());
  std::vector<fs::path> entries;
  for (const auto& f : fs::recursive_directory_iterator(std::getenv("PARHELION_CACHE_DIR") + std::string("/tune")))
    if (f.path().extension() == ".json") entries.push_back(f.path());
  ASSERT_EQ(entries.size(), 1u);
  // The stored key, with another shape, finds the first winner as its neighbour.
  std::ifstream in(entries[0]);
  auto j = nlohmann::json::parse(in);
  ph::tune::CacheKey k{j["key"]["kernel"], j["key"]["fingerprint"], "f32[64,520];",      j["key"]["dtypes"],
                       j["key"]["target"], j["key"]["hardware"],    j["key"]["compiler"]};
  auto seeds = ph::tune::cache_neighbours(k);
  ASSERT_EQ(seeds.size(), 1u);
  EXPECT_EQ(seeds[0], first.best_config);
  ph::Array b = ph::Array::random({64, 520}, ph::DType::f32, 1);
  ph::TuneReport r = ph::kernels::softmax.tune({b}, fast_options());
  EXPECT_FALSE(r.cache_hit);
  EXPECT_GT(r.best_ms, 0);
}

// With no reference, candidates are checked against the reference interpreter: a kernel that
// reads out of bounds for these inputs is reported (by the interpreter, with its line) instead
// of being tuned against its own default config's garbage.
ph::Tensor gather_rows(ph::Tensor table, ph::Tensor idx) {
  auto out = ph::empty({idx.size(0), table.size(1)}, table.dtype());
  for (auto r : ph::grid(idx.size(0))) out[r, ph::all] = table[idx[r], ph::all];
  return out;
}

TEST(Tuner, WithoutAReferenceTheInterpreterIsTheOracle) {
  ScopedCache cache("oracle");
  ph::Kernel k("gather_rows", gather_rows);
  ph::Array table = ph::Array::random({5, 8}, ph::DType::f32, 1);
  ph::Array idx = ph::Array::full({3}, 2.0, ph::DType::i32);
  ph::TuneOptions o = fast_options();
  o.effort = ph::Effort::none;
  EXPECT_GT(k.tune({table, idx}, o).best_ms, 0);
  idx.set(1, 7);
  try {
    k.tune({table, idx}, o);
    FAIL() << "no error";
  } catch (const ph::UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("reference interpreter"), std::string::npos) << m;
    EXPECT_NE(m.find("index 7 is out of bounds"), std::string::npos) << m;
  }
}

// Expected NaN (the interpreter's unwritten memory) accepts only NaN.
TEST(Accuracy, ExpectedNaNOrInfAcceptsOnlyThemselves) {
  auto arr = [](std::vector<float> v) { return ph::Array::from_floats({static_cast<int64_t>(v.size())}, v); };
  EXPECT_TRUE(ph::tune::compare(arr({NAN, INFINITY, 1}), arr({NAN, INFINITY, 1}), ph::DType::f32).ok);
  EXPECT_FALSE(ph::tune::compare(arr({0, INFINITY, 1}), arr({NAN, INFINITY, 1}), ph::DType::f32).ok);
  EXPECT_FALSE(ph::tune::compare(arr({NAN, INFINITY, 1}), arr({0, INFINITY, 1}), ph::DType::f32).ok);
  EXPECT_FALSE(ph::tune::compare(arr({NAN, 1e30f, 1}), arr({NAN, INFINITY, 1}), ph::DType::f32).ok);
  EXPECT_FALSE(ph::tune::compare(arr({NAN, INFINITY, 1.1f}), arr({NAN, INFINITY, 1}), ph::DType::bf16).ok);
}

}  // namespace
