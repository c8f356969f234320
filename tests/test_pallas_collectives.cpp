// Collectives on the pallas backend (issue 21, docs/distributed.md): the library's kernels on a
// mesh, emitted as Pallas modules and run on 4 and 8 simulated devices in JAX's TPU interpret
// mode with race detection, against the reference interpreter (interpret_on) on the same inputs
// and against JAX's own collectives (lax.all_gather, psum, psum_scatter); each lowered for a TPU
// with jax.export. A racy kernel is reported as racy, a deadlocked one stopped by the timeout,
// and what the backend cannot express is refused at the user's line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "backend/pallas/interpret.h"
#include "backend/python_runner.h"
#include "kernels/kernels.h"
#include "parhelion/parhelion.h"

#include "tests/mesh_test_kernels.h"
#include "tests/user_error.h"

namespace ph = parhelion;
namespace kernels = ph::kernels;
namespace pallas = ph::backend::pallas;

namespace {

ph::Mesh ring(int64_t n) { return ph::Mesh{{"x", n}}; }

// A library kernel's arguments on every device of a ring of n, at TPU-friendly shapes.
struct Library {
  std::string name;
  ph::KernelBase* kernel;
  std::vector<std::vector<ph::Array>> tensors;  // per device
  std::vector<double> scalars;
  double tolerance;  // against the interpreter (sums in another order)
};

std::vector<Library> library(int64_t n, ph::DType dt) {
  std::vector<Library> out;
  auto per_device = [&](const std::function<std::vector<ph::Array>(uint64_t)>& f) {
    std::vector<std::vector<ph::Array>> t;
    for (int64_t d = 0; d < n; ++d) t.push_back(f(static_cast<uint64_t>(100 + 10 * d)));
    return t;
  };
  const double sums = dt == ph::DType::f32 ? 2e-5 : 2e-2;
  out.push_back({"all_gather",
                 &kernels::all_gather,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({8, 128}, dt, s)};
                 }),
                 {},
                 0});
  out.push_back({"all_reduce",
                 &kernels::all_reduce,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({16, 128}, dt, s)};
                 }),
                 {},
                 sums});
  out.push_back({"all_reduce_ring",
                 &kernels::all_reduce_ring,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({8 * n, 128}, dt, s)};
                 }),
                 {},
                 sums});
  const ph::Array b = ph::Array::random({128, 256}, dt, 7);
  out.push_back({"all_gather_matmul",
                 &kernels::all_gather_matmul,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({8, 128}, dt, s), b};
                 }),
                 {},
                 sums * 4});
  out.push_back({"matmul_reduce_scatter",
                 &kernels::matmul_reduce_scatter,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({8 * n, 128}, dt, s), ph::Array::random({128, 128}, dt, s + 1)};
                 }),
                 {},
                 sums * 4});
  const ph::Array bias = ph::Array::random({256}, dt, 8), weight = ph::Array::random({256}, dt, 9);
  out.push_back({"all_reduce_bias_rms_norm",
                 &kernels::all_reduce_bias_rms_norm,
                 per_device([&](uint64_t s) {
                   return std::vector{ph::Array::random({8, 256}, dt, s), bias, weight};
                 }),
                 {1e-6},
                 sums * 4});
  return out;
}

std::vector<std::vector<ph::Arg>> args_of(const Library& l) {
  std::vector<std::vector<ph::Arg>> args;
  for (const std::vector<ph::Array>& t : l.tensors) {
    args.emplace_back(t.begin(), t.end());
    for (double s : l.scalars) args.back().push_back(ph::Arg(s));
  }
  return args;
}

// A kernel of one tensor argument on `mesh`, each device's a random [rows, 128] f32: its module
// (at `config`, or the default) as a case, and the devices' arguments for interpret_on.
struct OneTensorCase {
  pallas::InterpretCase c;
  std::vector<std::vector<ph::Arg>> args;
};
OneTensorCase one_tensor_case(ph::Kernel<ph::Tensor(ph::Tensor)>& k, const ph::Mesh& mesh, int64_t rows, uint64_t seed,
                              const ph::Config* config = nullptr) {
  OneTensorCase r;
  r.c.name = k.name();
  r.c.function = k.name();
  r.c.mesh = mesh.axes();
  for (int64_t d = 0; d < mesh.devices(); ++d) {
    r.c.device_inputs.push_back({ph::Array::random({rows, 128}, ph::DType::f32, seed + static_cast<uint64_t>(d))});
    r.args.push_back({r.c.device_inputs.back()[0]});
  }
  r.c.source = k.emit_pallas_on(mesh, r.args[0], "v7x", config).source;
  return r;
}

pallas::InterpretCase case_of(const Library& l, int64_t n) {
  const ph::PallasModule m = l.kernel->emit_pallas_on(ring(n), args_of(l).at(0));
  pallas::InterpretCase c;
  c.name = l.name + " on " + std::to_string(n) + " devices";
  c.source = m.source;
  c.function = l.kernel->name();
  c.scalars = l.scalars;
  c.export_for_tpu = true;
  c.mesh = ring(n).axes();
  c.device_inputs = l.tensors;
  return c;
}

TEST(PallasCollectives, TheLibrarysKernelsRunOn4And8SimulatedDevicesAsTheInterpreterDoes) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  std::vector<pallas::InterpretCase> cases;
  std::vector<Library> libs;
  for (int64_t n : {4, 8})
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
      if (dt == ph::DType::bf16 && n == 8) continue;  // (bf16 once: the dtype, not the ring, is new)
      for (Library& l : library(n, dt)) {
        cases.push_back(case_of(l, n));
        cases.back().name += " " + std::string(ph::dtype_name(dt));
        libs.push_back(std::move(l));
      }
    }
  const std::vector<pallas::InterpretResult> results = pallas::run_in_interpret_mode(cases);
  ASSERT_EQ(results.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const pallas::InterpretResult& r = results[i];
    ASSERT_TRUE(r.ok) << r.error << "\n" << cases[i].source;
    EXPECT_FALSE(r.races) << cases[i].source;
    EXPECT_EQ(r.export_status, "ok");
    const int64_t n = static_cast<int64_t>(cases[i].device_inputs.size());
    const std::vector<std::vector<ph::Array>> want = libs[i].kernel->interpret_on(ring(n), args_of(libs[i]));
    ASSERT_EQ(r.device_outputs.size(), want.size());
    for (int64_t d = 0; d < n; ++d) {
      ASSERT_EQ(r.device_outputs[d].size(), want[d].size());
      for (size_t o = 0; o < want[d].size(); ++o) {
        const ph::Array w = want[d][o].to(ph::DType::f32);
        ASSERT_EQ(r.device_outputs[d][o].shape(), w.shape());
        double scale = 1;
        for (int64_t e = 0; e < w.numel(); ++e) scale = std::max(scale, std::abs(w.get(e)));
        EXPECT_LE(ph::max_abs_diff(r.device_outputs[d][o], w), libs[i].tolerance * scale) << "device " << d;
      }
    }
  }
}

// Each module's outputs against JAX's collective on the same stacked inputs, under the same
// shard_map: lax.all_gather (tiled), psum, psum_scatter of the local product.
const char* kLaxScript = R"PY(
import importlib.util, json, sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

for case in json.load(open(sys.argv[1])):
    spec = importlib.util.spec_from_file_location("m", case["module"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = [jnp.stack([jnp.asarray(np.fromfile(d[i]["path"], np.float32).reshape(d[i]["shape"]))
                       for d in case["device_inputs"]]) for i in range(len(case["device_inputs"][0]))]
    got = getattr(mod, case["function"])(*args, interpret=pltpu.InterpretParams(detect_races=True))
    mesh = mod._mesh()
    hi = jax.lax.Precision.HIGHEST
    lax_fn = {
        "all_gather": lambda x: lax.all_gather(x[0], "x", tiled=True)[None],
        "psum": lambda x: lax.psum(x[0], "x")[None],
        "all_gather_matmul": lambda a, b: jnp.dot(lax.all_gather(a[0], "x", tiled=True), b[0], precision=hi)[None],
        "psum_scatter_matmul": lambda a, b: lax.psum_scatter(jnp.dot(a[0], b[0], precision=hi), "x",
                                                             scatter_dimension=0, tiled=True)[None],
    }[case["lax"]]
    want = jax.jit(jax.shard_map(lax_fn, mesh=mesh, in_specs=(P("x"),) * len(args), out_specs=P("x"),
                                 check_vma=False))(*args)
    print(json.dumps({"ok": True, "name": case["name"], "max_abs_diff": float(jnp.max(jnp.abs(got - want))),
                      "max_abs": float(jnp.max(jnp.abs(want)))}), flush=True)
)PY";

TEST(PallasCollectives, TheLibrarysKernelsAgreeWithJaxsOwnCollectives) {
  ASSERT_FALSE(pallas::interpret_python().empty()) << "no Python with jax (run `make test`)";
  const int64_t n = 4;
  const std::map<std::string, std::string> lax_of = {{"all_gather", "all_gather"},
                                                     {"all_reduce", "psum"},
                                                     {"all_reduce_ring", "psum"},
                                                     {"all_gather_matmul", "all_gather_matmul"},
                                                     {"matmul_reduce_scatter", "psum_scatter_matmul"}};
  ph::backend::ScratchDir dir;
  nlohmann::json manifest = nlohmann::json::array();
  for (const Library& l : library(n, ph::DType::f32)) {
    if (!lax_of.count(l.name)) continue;
    const pallas::InterpretCase c = case_of(l, n);
    const std::string stem = (dir.path / l.name).string();
    std::ofstream(stem + ".py") << c.source;
    nlohmann::json devices = nlohmann::json::array();
    for (size_t d = 0; d < l.tensors.size(); ++d) {
      nlohmann::json one = nlohmann::json::array();
      for (size_t i = 0; i < l.tensors[d].size(); ++i)
        one.push_back(
            ph::backend::write_input(l.tensors[d][i], stem + "_d" + std::to_string(d) + "_" + std::to_string(i)));
      devices.push_back(one);
    }
    manifest.push_back({{"name", l.name},
                        {"module", stem + ".py"},
                        {"function", l.kernel->name()},
                        {"device_inputs", devices},
                        {"lax", lax_of.at(l.name)}});
  }
  const std::vector<nlohmann::json> results = ph::backend::run_python_cases(
      "the lax comparison", kLaxScript, manifest, dir, {{"NPROC", "9"}, {"JAX_NUM_CPU_DEVICES", "8"}});
  ASSERT_EQ(results.size(), manifest.size());
  for (const nlohmann::json& r : results) {
    SCOPED_TRACE(r.value("name", ""));
    EXPECT_LE(r.value("max_abs_diff", 1e9), 2e-5 * std::max(1.0, r.value("max_abs", 0.0)));
  }
}

TEST(PallasCollectives, ARingAlongOneAxisOfA2DMesh) {
  ph::Kernel<ph::Tensor(ph::Tensor)> k("gather_along_y", ph::testing::gather_along_y);
  const ph::Mesh mesh{{"x", 2}, {"y", 4}};
  auto [c, args] = one_tensor_case(k, mesh, 8, 70);
  c.export_for_tpu = true;
  const pallas::InterpretResult r = pallas::run_in_interpret_mode({c}).at(0);
  ASSERT_TRUE(r.ok) << r.error << "\n" << c.source;
  EXPECT_FALSE(r.races);
  EXPECT_EQ(r.export_status, "ok");
  const std::vector<std::vector<ph::Array>> want = k.interpret_on(mesh, args);
  for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(ph::max_abs_diff(r.device_outputs[d][0], want[d][0]), 0) << "device " << d;
}

// A launch of several grid steps, each sending its rows of x in place to the next device (one copy
// in flight towards a device at a time: a barrier per step): x stays
// in HBM (a VMEM block would be refilled by the next step's while a copy may still read it), and
// a scalar-masked store into the landing tensor moves its region only when the mask is on.
ph::Tensor shift_rows(ph::Tensor x) {
  auto out = ph::empty({x.size(0), x.size(1)});
  auto seen = ph::zeros({x.size(0), x.size(1)});
  for (auto rows : ph::tile(x.size(0))) {
    auto send = ph::remote_copy(out, {rows, ph::all}, x[rows, ph::all], ph::ring_next("x"));
    send.start();
    send.wait();
    ph::store(seen, {rows, ph::all}, out[rows, ph::all] * 2.0f, ph::device_index("x") > 0);
    ph::barrier("x");  // (each step's copies before the next's: waits pair with copies by count)
  }
  return seen;
}

TEST(PallasCollectives, ALaunchOfSeveralStepsSendsFromHbmAndAScalarMaskedStoreMovesItsRegionOrNot) {
  ph::Kernel<ph::Tensor(ph::Tensor)> k("shift_rows", shift_rows);
  const ph::Config cfg = ph::Config::from_json(R"({"block_sizes": [8]})");
  auto [c, args] = one_tensor_case(k, ring(4), 32, 80, &cfg);
  EXPECT_NE(c.source.find("grid=(4,)"), std::string::npos) << c.source;
  EXPECT_NE(c.source.find("s0_ref.at[pl.ds(off_"), std::string::npos) << "sent from x in HBM\n" << c.source;
  const pallas::InterpretResult r = pallas::run_in_interpret_mode({c}).at(0);
  ASSERT_TRUE(r.ok) << r.error << "\n" << c.source;
  EXPECT_FALSE(r.races);
  const std::vector<std::vector<ph::Array>> want = k.interpret_on(ring(4), args);
  for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(ph::max_abs_diff(r.device_outputs[d][0], want[d][0]), 0) << "device " << d;
}

// A semaphore signalled in one launch and waited for in another: each pallas_call has its own.
ph::Tensor signal_across_launches(ph::Tensor x) {
  auto out = ph::empty({x.size(0), x.size(1)});
  auto ready = ph::semaphore();
  for (auto g : ph::grid(1)) {
    (void)g;
    ph::signal(ready, ph::ring_next("x"));
  }
  for (auto g : ph::grid(1)) {
    (void)g;
    ph::wait(ready);
    out[ph::all, ph::all] = x[ph::all, ph::all];
  }
  return out;
}

// A masked store into a landing tensor whose mask is elementwise.
ph::Tensor elementwise_masked_landing(ph::Tensor x) {
  auto buf = ph::empty({x.size(0), x.size(1)});
  for (auto g : ph::grid(1)) {
    (void)g;
    auto send = ph::remote_copy(buf, {ph::all, ph::all}, x[ph::all, ph::all], ph::ring_next("x"));
    send.start();
    send.wait();
    ph::store(buf, {ph::all, ph::all}, x[ph::all, ph::all], x[ph::all, ph::all] > 0.0f);
  }
  return buf;
}

// --- a race and a deadlock ----------------------------------------------------------------------

// Each device copies its x into `buf` of the next one, then reads `buf` into out: after the
// receive (correct), or before it (a race), or with only device 0 sending (a deadlock).
enum class Ring { correct, read_before_recv, only_device_0_sends };

template <Ring R>
ph::Tensor ring_send(ph::Tensor x) {
  auto buf = ph::zeros({x.size(0), x.size(1)});
  auto out = ph::empty({x.size(0), x.size(1)});
  for (auto g : ph::grid(1)) {
    (void)g;
    auto me = ph::device_index("x");
    auto send = ph::remote_copy(buf, {ph::all, ph::all}, x[ph::all, ph::all] * 2.0f, ph::ring_next("x"));
    if (R == Ring::only_device_0_sends)
      ph::when(me == 0, [&] { send.start(); });
    else
      send.start();
    if (R == Ring::read_before_recv) out[ph::all, ph::all] = buf[ph::all, ph::all];
    send.wait();
    if (R != Ring::read_before_recv) out[ph::all, ph::all] = buf[ph::all, ph::all];
  }
  return out;
}

pallas::InterpretCase ring_case(ph::Kernel<ph::Tensor(ph::Tensor)>& k, int64_t n, int timeout_s = 600) {
  pallas::InterpretCase c = one_tensor_case(k, ring(n), 8, 60).c;
  c.timeout_s = timeout_s;
  return c;
}

TEST(PallasCollectives, ACorrectRingHasNoRaceAndReadingBeforeTheReceiveIsReportedAsOne) {
  ph::Kernel<ph::Tensor(ph::Tensor)> good("ring_send", ring_send<Ring::correct>);
  ph::Kernel<ph::Tensor(ph::Tensor)> racy("ring_send_racy", ring_send<Ring::read_before_recv>);
  const std::vector<pallas::InterpretCase> cases = {ring_case(good, 4), ring_case(racy, 4)};
  const std::vector<pallas::InterpretResult> r = pallas::run_in_interpret_mode(cases);
  ASSERT_TRUE(r[0].ok) << r[0].error;
  EXPECT_FALSE(r[0].races);
  for (int64_t d = 0; d < 4; ++d) {
    const ph::Array& from = cases[0].device_inputs[static_cast<size_t>((d + 3) % 4)][0];
    for (int64_t e = 0; e < from.numel(); ++e) ASSERT_EQ(r[0].device_outputs[d][0].get(e), 2 * from.get(e));
  }
  ASSERT_TRUE(r[1].ok) << r[1].error;
  EXPECT_TRUE(r[1].races) << cases[1].source;
  // (the oracle says where)
  std::vector<std::vector<ph::Arg>> args;
  for (const auto& t : cases[1].device_inputs) args.push_back({t[0]});
  EXPECT_HAS(user_error_of([&] { racy.interpret_on(ring(4), args); }), "may still be landing there");
}

TEST(PallasCollectives, ADeadlockedRunIsStoppedByTheTimeout) {
  ph::Kernel<ph::Tensor(ph::Tensor)> k("ring_send_deadlock", ring_send<Ring::only_device_0_sends>);
  const std::vector<pallas::InterpretResult> r = pallas::run_in_interpret_mode({ring_case(k, 4, 10)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_HAS(r[0].error, "timed out after 10 s: a deadlock?");
}

// --- refusals ------------------------------------------------------------------------------------

// Copies land in `buf` in blocks of the row tile: a block size that leaves a ragged last block
// cannot be DMAed whole, so the pallas config space does not offer it.
ph::Tensor ragged_landing(ph::Tensor x) {
  auto buf = ph::empty({x.size(0), x.size(1)});
  for (auto rows : ph::tile(x.size(0))) {
    auto send = ph::remote_copy(buf, {rows, ph::all}, x[rows, ph::all], ph::ring_next("x"));
    send.start();
    send.wait();
  }
  return buf;
}

// A copy into a view of a tensor: the peer's copy would land in another array than the tensor's.
ph::Tensor copy_into_view(ph::Tensor x) {
  auto buf = ph::empty({x.size(0), x.size(1)});
  auto rows = buf.narrow(0, 0, x.size(0) / 2);
  auto half = x.narrow(0, 0, x.size(0) / 2);
  for (auto g : ph::grid(1)) {
    (void)g;
    auto send = ph::remote_copy(rows, {ph::all, ph::all}, half[ph::all, ph::all], ph::ring_next("x"));
    send.start();
    send.wait();
  }
  return buf;
}

TEST(PallasCollectives, WhatTheBackendCannotExpressIsRefusedAtTheUsersLine) {
  const ph::Array x = ph::Array::random({20, 128}, ph::DType::f32, 1);
  ph::Kernel<ph::Tensor(ph::Tensor)> ragged("ragged_landing", ragged_landing);
  const ph::Config cfg = ph::Config::from_json(R"({"block_sizes": [16]})");
  std::string e = user_error_of([&] { ragged.emit_pallas_on(ring(2), {x}, "v7x", &cfg); });
  EXPECT_HAS(e, "block_sizes[0] = 16 is out of its domain {32} (the loop at ");
  EXPECT_HAS(e, "test_pallas_collectives.cpp:");
  EXPECT_NO_THROW(ragged.emit_pallas_on(ring(2), {x}));  // (the default: one block of 20 rows)

  ph::Kernel<ph::Tensor(ph::Tensor)> view("copy_into_view", copy_into_view);
  e = user_error_of([&] { view.emit_pallas_on(ring(2), {x}); });
  EXPECT_HAS(e, "test_pallas_collectives.cpp:");
  EXPECT_HAS(e, "the pallas backend does not support a copy into a view");

  ph::Kernel<ph::Tensor(ph::Tensor)> across("signal_across_launches", signal_across_launches);
  e = user_error_of([&] { across.emit_pallas_on(ring(2), {x}); });
  EXPECT_HAS(e, "test_pallas_collectives.cpp:");
  EXPECT_HAS(e, "semaphore s0 is used here and in the launch at ");

  ph::Kernel<ph::Tensor(ph::Tensor)> masked("elementwise_masked_landing", elementwise_masked_landing);
  e = user_error_of([&] { masked.emit_pallas_on(ring(2), {x}); });
  EXPECT_HAS(e, "test_pallas_collectives.cpp:");
  EXPECT_HAS(e, "an elementwise-masked store into buf0, kept in HBM (copies land in it)");
}

}  // namespace
