// Deployable config tables: which entry a call takes (exact, nearest legal, the same hardware's
// first, none), how tables and pins rank, the JSON form and its errors, and tuning a table.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "backend/registry.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "parhelion/config_table.h"
#include "parhelion/parhelion.h"

namespace ph = parhelion;

namespace {

const std::string kHere = ph::backend::host_cpu().machine().identity();

// A matmul kernel of its own (the library's Kernel objects are shared by other tests, and a
// table or a pin here would change their configs).
ph::Tensor matmul_body(ph::Tensor a, ph::Tensor b) {
  auto [m, k] = a.sizes<2>();
  auto n = b.size(1);
  auto out = ph::empty({m, n}, a.dtype());
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(a[tm, tk], b[tk, tn]);
    out[tm, tn] = acc;
  }
  return out;
}

ph::ConfigTableEntry entry(int64_t m, int64_t k, int64_t n, std::vector<int64_t> blocks, std::string hardware = kHere,
                           ph::DType dtype = ph::DType::f32) {
  ph::ConfigTableEntry e;
  e.kernel = "table_matmul";
  e.args = {{ph::TableArg::TensorK, dtype, {m, k}, 0}, {ph::TableArg::TensorK, dtype, {k, n}, 0}};
  e.target = "cpu";
  e.hardware = std::move(hardware);
  e.config.block_sizes = std::move(blocks);
  e.ms = 1;
  return e;
}

struct Call {
  ph::Array a, b;
  std::vector<ph::Arg> args() const { return {a, b}; }
};

Call call(int64_t m, int64_t k, int64_t n, ph::DType dtype = ph::DType::f32) {
  return {ph::Array::random({m, k}, dtype, 1), ph::Array::random({k, n}, dtype, 2)};
}

}  // namespace

TEST(ConfigTable, ACallTakesItsExactEntryElseTheNearestElseTheDefault) {
  ph::Kernel k("table_matmul", matmul_body);
  auto table = std::make_shared<ph::ConfigTable>();
  table->add(entry(64, 64, 64, {16, 16, 16}));
  table->add(entry(512, 512, 512, {64, 64, 32}));
  k.use_config_table(table);

  Call exact = call(64, 64, 64);
  auto c = k.config_for(exact.args());
  EXPECT_EQ(c.source, "table: exact");
  EXPECT_EQ(c.config.block_sizes, (std::vector<int64_t>{16, 16, 16}));
  // Keys an entry leaves out take the default's values.
  EXPECT_FALSE(c.config.loop_orders.empty());

  Call near_big = call(400, 600, 300);
  c = k.config_for(near_big.args());
  EXPECT_EQ(c.source, "table: nearest (f32[512,512] f32[512,512])");
  EXPECT_EQ(c.config.block_sizes, (std::vector<int64_t>{64, 64, 32}));

  // Another dtype shares no entry: the default.
  Call bf16 = call(64, 64, 64, ph::DType::bf16);
  EXPECT_EQ(k.config_for(bf16.args()).source, "default");

  // The configs run, and give the right numbers.
  std::vector<ph::Array> out = k.run(near_big.args());
  std::vector<ph::Array> want = k.interpret(near_big.args());
  EXPECT_LT(ph::max_abs_diff(out[0], want[0]), 1e-3);
}

TEST(ConfigTable, AnEntryWhoseConfigIsIllegalForTheCallIsSkipped) {
  ph::Kernel k("table_matmul", matmul_body);
  auto table = std::make_shared<ph::ConfigTable>();
  table->add(entry(16, 16, 16, {16, 16, 16}));  // the nearest, but 16 is no block choice for a dim of 3
  table->add(entry(16, 16, 16, {1, 1, 1, 1}));  // wrong arity: never legal (a bad table)
  table->add(entry(1024, 1024, 1024, {4, 4, 4}));
  k.use_config_table(table);
  Call small = call(3, 3, 3);
  ph::KernelBase::ConfigChoice c = k.config_for(small.args());
  EXPECT_EQ(c.source, "table: nearest (f32[1024,1024] f32[1024,1024])") << c.config.to_json();
  EXPECT_EQ(c.config.block_sizes, (std::vector<int64_t>{4, 4, 4}));
  // With no legal entry, the default.
  table->entries.pop_back();
  k.use_config_table(table);
  EXPECT_EQ(k.config_for(small.args()).source, "default");
}

TEST(ConfigTable, ThisMachinesEntryWinsAtEqualDistanceAndAnExactOneFromElsewhereBeatsANearOne) {
  ph::Kernel k("table_matmul", matmul_body);
  auto table = std::make_shared<ph::ConfigTable>();
  table->add(entry(128, 128, 128, {32, 32, 32}, "another machine"));
  table->add(entry(128, 128, 128, {16, 16, 16}));
  table->add(entry(256, 256, 256, {64, 64, 64}, "another machine"));
  k.use_config_table(table);
  Call c128 = call(128, 128, 128);
  auto c = k.config_for(c128.args());
  EXPECT_EQ(c.source, "table: exact");
  EXPECT_EQ(c.config.block_sizes, (std::vector<int64_t>{16, 16, 16}));
  Call c256 = call(256, 256, 256);
  c = k.config_for(c256.args());
  EXPECT_EQ(c.source, "table: exact, tuned on another machine");
  EXPECT_EQ(c.config.block_sizes, (std::vector<int64_t>{64, 64, 64}));
}

TEST(ConfigTable, PinsRankAboveTheTableAndASignaturesPinAboveAGlobalOne) {
  ph::Kernel k("table_matmul", matmul_body);
  auto table = std::make_shared<ph::ConfigTable>();
  table->add(entry(64, 64, 64, {16, 16, 16}));
  k.use_config_table(table);
  Call a = call(64, 64, 64), b = call(32, 32, 32);
  ph::Config global;
  global.block_sizes = {8, 8, 8};
  k.pin_config(global);
  EXPECT_EQ(k.config_for(a.args()).source, "pinned");
  ph::Config for_a;
  for_a.block_sizes = {32, 32, 32};
  k.pin_config(for_a, a.args());
  EXPECT_EQ(k.config_for(a.args()).source, "pinned for this signature");
  EXPECT_EQ(k.config_for(a.args()).config.block_sizes, (std::vector<int64_t>{32, 32, 32}));
  EXPECT_EQ(k.config_for(b.args()).source, "pinned");
  // The compiled kernel uses the chosen config.
  EXPECT_EQ(k.compile(a.args()).config().block_sizes, (std::vector<int64_t>{32, 32, 32}));
  k.unpin_config();
  EXPECT_EQ(k.config_for(a.args()).source, "table: exact");
  EXPECT_EQ(k.compile(a.args()).config().block_sizes, (std::vector<int64_t>{16, 16, 16}));
  k.use_config_table(nullptr);
  EXPECT_EQ(k.config_for(a.args()).source, "default");
}

TEST(ConfigTable, RoundTripsThroughJsonOneEntryALine) {
  ph::ConfigTable t;
  t.add(entry(64, 64, 64, {16, 16, 16}));
  t.add(entry(64, 64, 64, {8, 8, 8}));  // the same key: replaces
  ph::ConfigTableEntry c = entry(8, 8, 8, {8, 8, 8});
  c.args.push_back({ph::TableArg::ConstantK, ph::DType::f32, {}, 5});
  c.args.push_back({ph::TableArg::ScalarK, ph::DType::f32, {}, 0});
  t.add(c);
  ASSERT_EQ(t.entries.size(), 2u);
  std::string text = t.to_json();
  EXPECT_NE(text.find("\"signature\":\"f32[8,8] f32[8,8] 5 scalar\""), std::string::npos) << text;
  ph::ConfigTable back = ph::ConfigTable::from_json(text);
  EXPECT_EQ(back.to_json(), text);
  EXPECT_EQ(back.entries[0].config.block_sizes, (std::vector<int64_t>{8, 8, 8}));
}

TEST(ConfigTable, BadTablesAreRefusedNamingWhatIsWrong) {
  auto refused = [](const std::string& text, const std::string& want) {
    try {
      ph::ConfigTable::from_json(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ph::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("{", "config table: not JSON");
  refused("[]", "expected {\"parhelion_config_table\": 1, \"entries\": [...]}");
  refused(R"({"entries":[{"kernel":"k","args":[{"tensor":"f64","shape":[1]}],"target":"cpu","config":{}}]})",
          "config table entry 0: unknown dtype 'f64'");
  refused(R"({"entries":[{"kernel":"k","args":[{"what":1}],"target":"cpu","config":{}}]})",
          "an argument is {\"tensor\": dtype");
  refused(R"({"entries":[{"args":[],"target":"cpu","config":{}}]})", "config table entry 0:");
  refused(R"({"entries":[{"kernel":"k","args":[],"target":"cpu","config":{"block_size":[1]}}]})", "block_size");
  EXPECT_THROW(ph::ConfigTable::load("/nonexistent/configs.json"), ph::UserError);
}

TEST(ConfigTable, TunesATableWithTheTpuModelAndPallasEmitsItsEntries) {
  ph::Kernel k("table_matmul", matmul_body);
  Call small = call(256, 512, 256), big = call(2048, 2048, 2048);
  ph::ConfigTable t = ph::tune_table(k, {small.args(), big.args()}, {}, "pallas");
  ASSERT_EQ(t.entries.size(), 2u);
  for (const ph::ConfigTableEntry& e : t.entries) {
    EXPECT_EQ(e.target, "pallas:v7x");
    EXPECT_NE(e.hardware.find("(timing model)"), std::string::npos);
    EXPECT_GT(e.ms, 0);
    EXPECT_LE(e.ms, e.default_ms * 1.0001);
  }
  k.use_config_table(std::make_shared<ph::ConfigTable>(t));
  EXPECT_EQ(k.emit(big.args(), "pallas").config.block_sizes, t.entries[1].config.block_sizes);
  EXPECT_EQ(k.config_for(big.args(), "pallas:v7x").source, "table: exact, tuned on " + t.entries[1].hardware);
  // The cpu's calls take no pallas entry.
  EXPECT_EQ(k.config_for(big.args()).source, "default");
  EXPECT_THROW(ph::tune_table(k, {small.args()}, {}, "triton"), ph::UserError);
}
