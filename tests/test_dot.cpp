// dot on blocks: transposed operands, an explicit accumulator, computed (materialized)
// operands, batch broadcasting, bf16 data, every micro-kernel, and the errors.
#include <gtest/gtest.h>
#include <algorithm>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cpu/host.h"
#include "kernels/references.h"
#include "kernels/registry.h"
#include "parhelion/parhelion.h"
#include "runtime/gemm/gemm.h"
#include "tests/config_sweep.h"
#include "tune/accuracy.h"

namespace ph = parhelion;

namespace {

// out = a^T . b^T for a [K,M], b [N,K]: both operands transposed views of loads.
ph::Tensor dot_tt(ph::Tensor a, ph::Tensor b) {
  auto [k, m] = a.sizes<2>();
  auto n = b.size(0);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) acc = acc + ph::dot(ph::transpose(a[tk, tm]), ph::transpose(b[tn, tk]));
    out[tm, tn] = acc;
  }
  return out;
}

// out = bias + exp(x) . y, with dot(a, b, acc) and a computed left operand.
ph::Tensor dot_acc_computed(ph::Tensor x, ph::Tensor y, ph::Tensor bias) {
  auto [m, k] = x.sizes<2>();
  auto n = y.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    auto start = bias[tm, tn] * 1.0f;
    out[tm, tn] = ph::dot(ph::exp(x[tm, ph::all]), y[ph::all, tn], start);
  }
  return out;
}

ph::Array transpose_of(const ph::Array& a) {
  ph::Array t = ph::Array::empty({a.dim(1), a.dim(0)}, a.dtype());
  for (int64_t i = 0; i < a.dim(0); ++i)
    for (int64_t j = 0; j < a.dim(1); ++j) t.set(j * a.dim(0) + i, a.get(i * a.dim(1) + j));
  return t;
}

TEST(Dot, TransposedOperands) {
  ph::Kernel k("dot_tt", dot_tt);
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array a = ph::Array::random({45, 33}, dt, 1), b = ph::Array::random({21, 45}, dt, 2);
    ph::Array want = ph::ref::matmul(transpose_of(a), transpose_of(b));
    for (const char* cfg :
         {R"({"block_sizes":[8,16,16],"loop_orders":[[0,1]],"micro_kernels":[0],"num_threads":1})",
          R"({"block_sizes":[64,32,64],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":2})"}) {
      ph::Config c = ph::Config::from_json(cfg);
      c.micro_kernels.assign(1, 0);
      c.num_threads = std::min(c.num_threads, ph::backend::cpu::Host::detect().threads);  // a one-core host allows 1
      ph::Array out = k.compile({a, b}, &c).run({a, b})[0];
      auto cmp = ph::tune::compare(out, want, ph::DType::f32);
      EXPECT_TRUE(cmp.ok) << cfg << " " << ph::dtype_name(dt) << " err " << cmp.max_abs_err;
    }
  }
}

TEST(Dot, AccumulatorArgumentAndComputedOperand) {
  ph::Kernel k("dot_acc_computed", dot_acc_computed);
  ph::Array x = ph::Array::random({19, 23}, ph::DType::f32, 3), y = ph::Array::random({23, 31}, ph::DType::f32, 4),
            bias = ph::Array::random({19, 31}, ph::DType::f32, 5);
  ph::Array ex = ph::Array::empty({19, 23}, ph::DType::f32);
  for (int64_t i = 0; i < ex.numel(); ++i) ex.set(i, std::exp(x.get(i)));
  ph::Array want = ph::ref::matmul(ex, y);
  for (int64_t i = 0; i < want.numel(); ++i) want.set(i, want.get(i) + bias.get(i));
  auto compiled = k.compile({x, y, bias});
  EXPECT_NE(compiled.ir().find(" acc=%"), std::string::npos) << compiled.ir();
  auto cmp = ph::tune::compare(compiled.run({x, y, bias})[0], want, ph::DType::f32);
  EXPECT_TRUE(cmp.ok) << cmp.max_abs_err;
}

// Two loops over k blocks, each rescaling the accumulator before adding the block's product, as
// flash attention does: first by a per-row factor computed in the loop and broadcast (acc * s),
// then by a full block (f * acc, the factor first).
ph::Tensor rescaled_sums(ph::Tensor x, ph::Tensor y, ph::Tensor w, ph::Tensor f) {
  auto [m, k] = x.sizes<2>();
  auto n = y.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) {
      auto p = ph::dot(x[tm, tk], y[tk, tn]);
      acc = acc * ph::exp2(w[tm] * 0.25f).unsqueeze(-1) + p;
    }
    for (auto tk : ph::tile(k)) acc = f[tm, tn] * acc + ph::dot(x[tm, tk], y[tk, tn]);
    out[tm, tn] = acc;
  }
  return out;
}

// The same in doubles, with k blocks of `block_k`.
ph::Array rescaled_sums_reference(const ph::Array& x, const ph::Array& y, const ph::Array& w, const ph::Array& f,
                                  int64_t block_k) {
  const int64_t m = x.dim(0), k = x.dim(1), n = y.dim(1);
  std::vector<double> acc(m * n, 0.0);
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t k0 = 0; k0 < k; k0 += block_k)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double p = 0;
          for (int64_t q = k0; q < std::min(k, k0 + block_k); ++q) p += x.get(i * k + q) * y.get(q * n + j);
          const double scale = pass == 0 ? std::exp2(w.get(i) * 0.25) : f.get(i * n + j);
          acc[i * n + j] = acc[i * n + j] * scale + p;
        }
  ph::Array out = ph::Array::empty({m, n}, ph::DType::f32);
  for (int64_t i = 0; i < m * n; ++i) out.set(i, acc[i]);
  return out;
}

TEST(Dot, RescaledAccumulationIsComputedInPlace) {
  ph::Kernel k("rescaled_sums", rescaled_sums);
  ph::Array x = ph::Array::random({37, 70}, ph::DType::f32, 21), y = ph::Array::random({70, 45}, ph::DType::f32, 22),
            w = ph::Array::random({37}, ph::DType::f32, 23), f = ph::Array::random({37, 45}, ph::DType::f32, 24);
  // (block sizes: M, N, then the two loops' K)
  for (const char* cfg : {R"({"block_sizes":[16,32,16,16],"num_threads":1})", R"({"block_sizes":[32,32,64,64]})",
                          R"({"block_sizes":[8,16,32,32],"num_threads":2})"}) {
    ph::Config c = ph::Config::from_json(cfg);
    c.num_threads = std::min(c.num_threads, ph::backend::cpu::Host::detect().threads);
    auto compiled = k.compile({x, y, w, f}, &c);
    // Both loops add their dot into the Var after rescaling it; no dot has a buffer of its own.
    const std::string block = compiled.block_ir();
    size_t rescaled = 0;
    for (size_t p = block.find("after its rescale"); p != std::string::npos; p = block.find("after its rescale", p + 1))
      ++rescaled;
    EXPECT_EQ(rescaled, 2u) << block;
    ASSERT_EQ(c.block_sizes[2], c.block_sizes[3]);
    auto cmp = ph::tune::compare(compiled.run({x, y, w, f})[0], rescaled_sums_reference(x, y, w, f, c.block_sizes[2]),
                                 ph::DType::f32);
    EXPECT_TRUE(cmp.ok) << cfg << " err " << cmp.max_abs_err;
  }
}

// Dots that must not add into the Var in place: one whose operand is the Var itself (the
// micro-kernel would read the buffer it writes), and a rescaled one whose operand's tensor is
// stored to between the dot and the assignment (moving the dot there would read the new data).
ph::Tensor unsafe_in_place(ph::Tensor x, ph::Tensor y, ph::Tensor scratch) {
  auto n = x.size(0);
  auto out = ph::empty({n, n});
  for (auto [tm, tn] : ph::tile(n, n)) {
    ph::Var acc = x[tm, tn] * 1.0f;
    for ([[maybe_unused]] auto tk : ph::tile(n)) acc = acc + ph::dot(acc, y[tn, tn]);
    for (auto tk : ph::tile(n)) {
      auto p = ph::dot(scratch[tm, tk], y[tk, tn]);
      scratch[tm, tn] = scratch[tm, tn] * 2.0f;  // (one block of everything: no step reads another's)
      acc = acc * 0.5f + p;
    }
    out[tm, tn] = acc;
  }
  return out;
}

TEST(Dot, InPlaceAccumulationRefusesAliasedOperands) {
  ph::Kernel k("unsafe_in_place", unsafe_in_place);
  const int64_t n = 32;  // one block of everything: one trip of each loop
  ph::Array x = ph::Array::random({n, n}, ph::DType::f32, 31), y = ph::Array::random({n, n}, ph::DType::f32, 32),
            sc = ph::Array::random({n, n}, ph::DType::f32, 33);
  // acc = x + x y, then 0.5 acc + sc y, sc read before it is doubled.
  ph::Array xy = ph::ref::matmul(x, y), sy = ph::ref::matmul(sc, y);
  ph::Array want = ph::Array::empty({n, n}, ph::DType::f32);
  for (int64_t i = 0; i < n * n; ++i) want.set(i, 0.5 * (x.get(i) + xy.get(i)) + sy.get(i));
  ph::Config c = ph::Config::from_json(R"({"block_sizes":[32,32,32,32],"num_threads":1})");
  auto compiled = k.compile({x, y, sc}, &c);
  EXPECT_EQ(compiled.block_ir().find("in place"), std::string::npos) << compiled.block_ir();
  auto cmp = ph::tune::compare(compiled.run({x, y, sc})[0], want, ph::DType::f32);
  EXPECT_TRUE(cmp.ok) << cmp.max_abs_err;
}

// dot(a, b, bf16): the product rounded to bf16 before the epilogue sees it.
ph::Tensor dot_rounded(ph::Tensor a, ph::Tensor b) {
  auto out = ph::empty({a.size(0), b.size(1)});
  for (auto [tm, tn] : ph::tile(a.size(0), b.size(1)))
    out[tm, tn] = ph::dot(a[tm, ph::all], b[ph::all, tn], ph::DType::bf16);
  return out;
}

TEST(Dot, OutputDtypeRoundsTheProduct) {
  ph::Kernel k("dot_rounded", dot_rounded);
  ph::Array a = ph::Array::random({9, 40}, ph::DType::f32, 8), b = ph::Array::random({40, 11}, ph::DType::f32, 9);
  ph::Array out = k(a, b);
  ph::Array want = ph::ref::matmul(a, b);
  for (int64_t i = 0; i < want.numel(); ++i) {
    float exact = static_cast<float>(want.get(i));
    EXPECT_EQ(out.get(i), ph::bf16_to_f32(ph::f32_to_bf16(static_cast<float>(out.get(i)))));  // representable
    EXPECT_NEAR(out.get(i), exact, std::abs(exact) * 0.008 + 1e-5);
  }
}

TEST(Dot, EveryMicroKernelOfThisHost) {
  const auto& names = ph::runtime::gemm_kernel_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "generic_4x4");
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16, ph::DType::f16}) {
    ph::Array a = ph::Array::random({29, 70}, dt, 6), b = ph::Array::random({70, 41}, dt, 7);
    ph::Array want = ph::ref::matmul(a, b);
    for (size_t i = 0; i < names.size(); ++i) {
      ph_gemm_args g{};
      std::vector<float> c(29 * 41, 1.0f);
      std::vector<char> ws(ph::runtime::gemm_workspace_bytes(29, 41, 70) + 64);
      g = {29,
           41,
           70,
           a.data(),
           70,
           1,
           dt == ph::DType::f32    ? PH_F32
           : dt == ph::DType::bf16 ? PH_BF16
                                   : PH_F16,
           b.data(),
           41,
           1,
           dt == ph::DType::f32    ? PH_F32
           : dt == ph::DType::bf16 ? PH_BF16
                                   : PH_F16,
           c.data(),
           41,
           1,
           static_cast<int>(i),
           reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64),
           0,         // workspace_bytes: 0 = sized for the full packing
           nullptr};  // b_panels: packed on every call
      ph::runtime::gemm(g);
      double err = 0;
      for (int64_t j = 0; j < want.numel(); ++j) err = std::max(err, std::abs(c[j] - 1.0 - want.get(j)));
      EXPECT_LT(err, 1e-4) << names[i] << " " << ph::dtype_name(dt);
    }
  }
}

// Every micro-kernel against the reference over the packing paths: A read in place or packed
// (row-major with a power-of-two row stride, or column-major), B row- or column-major (k odd, or
// even: a column's k-pairs read as words), k not a multiple of 8, of a bf16 pair or of a 32-deep
// tile step, ragged 8-, 12- and 32-row strips and 8-, 13- and 18-column panels, whole tiles of C,
// accumulation into C; and more rows of A than one pass over B's panels takes (600 rows of a
// 2048-deep A: several passes on any L2 under 64 MiB), the last pass ragged. The tile kernel reads
// a row-major A of whole 32 x 32 blocks in place (rows 192 bytes, or 2 KiB, apart; with ragged
// column panels) and packs one whose rows lie 4 KiB apart; a column-major bf16 B is transposed
// in registers when k is whole 32-deep steps (64, 96), gathered a k-pair at a time otherwise (48).
// And one panel narrower than a 16-column packing step, k of 1 (one row, paired with zeros) and 2.
TEST(Dot, EveryMicroKernelOverPackingPaths) {
  const auto& names = ph::runtime::gemm_kernel_names();
  struct Case {
    int64_t m, n, k, lda;
    bool a_column_major, b_column_major = false;
  };
  for (Case cs : {Case{48, 64, 256, 1024, false}, Case{37, 50, 131, 136, false}, Case{24, 33, 9, 9, false},
                  Case{25, 40, 64, 32, true}, Case{64, 96, 96, 96, false}, Case{33, 70, 45, 45, false, true},
                  Case{40, 40, 64, 64, false, true}, Case{33, 50, 96, 96, false, true},
                  Case{600, 45, 2048, 2048, false}, Case{64, 40, 64, 1024, false}, Case{32, 64, 128, 2048, false},
                  Case{40, 40, 48, 48, false, true}, Case{7, 5, 1, 1, false}, Case{9, 13, 2, 2, false}}) {
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
      const int code = dt == ph::DType::f32 ? PH_F32 : PH_BF16;
      // A lives in a wider buffer (row stride lda), or transposed (column stride lda).
      const int64_t rows = cs.a_column_major ? cs.k : cs.m, cols = cs.lda;
      ph::Array storage = ph::Array::random({rows, cols}, dt, 11);
      ph::Array a = ph::Array::empty({cs.m, cs.k}, dt);
      for (int64_t i = 0; i < cs.m; ++i)
        for (int64_t p = 0; p < cs.k; ++p)
          a.set(i * cs.k + p, cs.a_column_major ? storage.get(p * cs.lda + i) : storage.get(i * cs.lda + p));
      ph::Array b = ph::Array::random({cs.k, cs.n}, dt, 12);
      ph::Array want = ph::ref::matmul(a, b);
      ph::Array b_storage = b;  // column-major: element (p, j) at p + j * k
      if (cs.b_column_major) {
        b_storage = ph::Array::empty({cs.n, cs.k}, dt);
        for (int64_t p = 0; p < cs.k; ++p)
          for (int64_t j = 0; j < cs.n; ++j) b_storage.set(j * cs.k + p, b.get(p * cs.n + j));
      }
      for (size_t i = 0; i < names.size(); ++i) {
        std::vector<float> c(cs.m * cs.n, 0.5f);
        // The workspace the lowering reserves for this kernel and these operands (a tile kernel
        // handed f32 ones falls back to a vector kernel), then a canary it must not touch.
        const int64_t bytes = ph::runtime::gemm_workspace_bytes(cs.m, cs.n, cs.k, names[i], dt == ph::DType::bf16);
        constexpr int64_t kCanary = 4096;
        std::vector<char> ws(bytes + kCanary + 64, '\x5a');
        ph_gemm_args g{};
        g.m = cs.m, g.n = cs.n, g.k = cs.k;
        g.a = storage.data(), g.a_rs = cs.a_column_major ? 1 : cs.lda, g.a_cs = cs.a_column_major ? cs.lda : 1;
        g.a_dtype = code;
        g.b = b_storage.data(), g.b_rs = cs.b_column_major ? 1 : cs.n, g.b_cs = cs.b_column_major ? cs.k : 1;
        g.b_dtype = code;
        g.c = c.data(), g.ldc = cs.n, g.accumulate = 1, g.kernel = static_cast<int>(i);
        g.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
        ph::runtime::gemm(g);
        double err = 0;
        for (int64_t j = 0; j < want.numel(); ++j) err = std::max(err, std::abs(c[j] - 0.5 - want.get(j)));
        EXPECT_LT(err, 1e-3 * std::sqrt(static_cast<double>(cs.k)))
            << names[i] << " " << ph::dtype_name(dt) << " m " << cs.m << " n " << cs.n << " k " << cs.k;
        const char* end = static_cast<const char*>(g.workspace) + bytes;
        EXPECT_TRUE(std::all_of(end, end + kCanary, [](char x) { return x == '\x5a'; }))
            << names[i] << " wrote past its workspace of " << bytes << " bytes";
      }
    }
  }
}

// Every micro-kernel at every count of rows up to 33 (a whole strip or none, then a ragged one
// of each size below any MR, which runs the kernel of its rows): A read in place (row-major, its
// rows wider than k) or packed (column-major), f32 and bf16, whole and ragged column panels. C
// has canary rows after its m: a kernel that wrote past its rows would change them.
TEST(Dot, EveryMicroKernelAtEveryRowCount) {
  const auto& names = ph::runtime::gemm_kernel_names();
  constexpr int64_t n = 40, k = 20, lda = 26;
  constexpr float kCanary = 7.0f;
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16})
    for (bool column_major : {false, true})
      for (int64_t m = 1; m <= 33; ++m) {
        const int code = dt == ph::DType::f32 ? PH_F32 : PH_BF16;
        // Exactly A's elements (a sanitizer build catches a read past them).
        ph::Array storage = ph::Array::random({column_major ? k : m, column_major ? m : lda}, dt, 21 + m);
        ph::Array a = ph::Array::empty({m, k}, dt);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p)
            a.set(i * k + p, column_major ? storage.get(p * m + i) : storage.get(i * lda + p));
        ph::Array b = ph::Array::random({k, n}, dt, 22);
        ph::Array want = ph::ref::matmul(a, b);
        for (size_t ki = 0; ki < names.size(); ++ki) {
          std::vector<float> c((m + 2) * n, 0.5f);
          std::fill(c.begin() + m * n, c.end(), kCanary);
          std::vector<char> ws(ph::runtime::gemm_workspace_bytes(m, n, k, names[ki], dt == ph::DType::bf16) + 64);
          ph_gemm_args g{};
          g.m = m, g.n = n, g.k = k;
          g.a = storage.data(), g.a_rs = column_major ? 1 : lda, g.a_cs = column_major ? m : 1, g.a_dtype = code;
          g.b = b.data(), g.b_rs = n, g.b_cs = 1, g.b_dtype = code;
          g.c = c.data(), g.ldc = n, g.accumulate = 1, g.kernel = static_cast<int>(ki);
          g.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
          ph::runtime::gemm(g);
          double err = 0;
          for (int64_t j = 0; j < want.numel(); ++j) err = std::max(err, std::abs(c[j] - 0.5 - want.get(j)));
          EXPECT_LT(err, 1e-3) << names[ki] << " " << ph::dtype_name(dt) << " m " << m
                               << (column_major ? " (A packed)" : " (A in place)");
          EXPECT_TRUE(std::all_of(c.begin() + m * n, c.end(), [&](float x) { return x == kCanary; }))
              << names[ki] << " " << ph::dtype_name(dt) << " m " << m << ": wrote past C's rows";
        }
      }
}

// Kept B panels (ph_gemm_args::b_panels) with every micro-kernel, f32 and bf16, B row- or
// column-major with ragged panels: the first call packs B there, within the bytes
// gemm_b_panels_bytes gives; a second call with the same B uses the panels as they are (B's
// memory changed in between, its key not cleared: the product is still the old B's, which shows
// the panels were reused); a B at another address, or with other strides, is packed afresh; and a
// cleared key packs the new contents. The workspace is the one sized for a B in kept panels.
TEST(Dot, KeptPanelsAreReusedForTheSameBOnly) {
  const auto& names = ph::runtime::gemm_kernel_names();
  struct Case {
    int64_t m, n, k;
    bool b_column_major;
  };
  for (Case cs : {Case{20, 45, 70, false}, Case{13, 40, 33, true}})
    for (ph::DType dt : {ph::DType::f32, ph::DType::bf16})
      for (size_t i = 0; i < names.size(); ++i) {
        const int code = dt == ph::DType::f32 ? PH_F32 : PH_BF16;
        const int64_t kept = ph::runtime::gemm_b_panels_bytes(cs.n, cs.k, names[i], dt == ph::DType::bf16);
        if (kept == 0) continue;  // a tile kernel packs B its own way
        const std::string what = names[i] + " " + std::string(ph::dtype_name(dt)) + " n " + std::to_string(cs.n);
        ph::Array a = ph::Array::random({cs.m, cs.k}, dt, 21);
        ph::Array b1 = ph::Array::random({cs.k, cs.n}, dt, 22), b2 = ph::Array::random({cs.k, cs.n}, dt, 23);
        // B's storage: column-major keeps element (p, j) at p + j * k.
        auto stored = [&](const ph::Array& b) {
          if (!cs.b_column_major) return b.clone();
          ph::Array t = ph::Array::empty({cs.n, cs.k}, dt);
          for (int64_t p = 0; p < cs.k; ++p)
            for (int64_t j = 0; j < cs.n; ++j) t.set(j * cs.k + p, b.get(p * cs.n + j));
          return t;
        };
        ph::Array s1 = stored(b1), s2 = stored(b2);
        // The workspace sized for a B that goes to kept panels: A's strips alone, then a canary.
        constexpr int64_t kCanary = 4096;
        const int64_t ws_bytes = ph::runtime::gemm_workspace_bytes(cs.m, cs.n, cs.k, names[i], dt == ph::DType::bf16,
                                                                   /*a_in_place=*/false, /*b_kept=*/true);
        std::vector<char> ws(ws_bytes + kCanary + 64, '\x5a');
        std::vector<char> panels(kept + kCanary + 64, '\x5a');
        void* kept_at = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(panels.data()) + 63) / 64 * 64);
        std::memset(kept_at, 0, sizeof(ph_gemm_panels_key));
        auto product = [&](const ph::Array& b) {
          std::vector<float> c(cs.m * cs.n);
          ph_gemm_args g{};
          g.m = cs.m, g.n = cs.n, g.k = cs.k;
          g.a = a.data(), g.a_rs = cs.k, g.a_cs = 1, g.a_dtype = code;
          g.b = b.data(), g.b_rs = cs.b_column_major ? 1 : cs.n, g.b_cs = cs.b_column_major ? cs.k : 1;
          g.b_dtype = code;
          g.c = c.data(), g.ldc = cs.n, g.accumulate = 0, g.kernel = static_cast<int>(i);
          g.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
          g.b_panels = kept_at;
          ph::runtime::gemm(g);
          return c;
        };
        auto error = [&](const std::vector<float>& c, const ph::Array& b) {
          ph::Array want = ph::ref::matmul(a, b);
          double err = 0;
          for (int64_t j = 0; j < want.numel(); ++j) err = std::max(err, std::abs(c[j] - want.get(j)));
          return err;
        };
        const double tol = 1e-3 * std::sqrt(static_cast<double>(cs.k));
        EXPECT_LT(error(product(s1), b1), tol) << what << ": first call";
        const char* end = static_cast<const char*>(kept_at) + kept;
        EXPECT_TRUE(std::all_of(end, end + kCanary, [](char x) { return x == '\x5a'; }))
            << what << ": wrote past its " << kept << " bytes of kept panels";
        ph::Array old_s1 = s1.clone();
        std::memcpy(s1.data(), s2.data(), static_cast<size_t>(s2.numel() * ph::dtype_size(dt)));
        EXPECT_LT(error(product(s1), b1), tol) << what << ": the same B, key kept: its panels reused";
        EXPECT_LT(error(product(s2), b2), tol) << what << ": another B";
        std::memcpy(s1.data(), old_s1.data(), static_cast<size_t>(s1.numel() * ph::dtype_size(dt)));
        EXPECT_LT(error(product(s1), b1), tol) << what << ": back to the first B";
        std::memcpy(s1.data(), s2.data(), static_cast<size_t>(s2.numel() * ph::dtype_size(dt)));
        std::memset(kept_at, 0, sizeof(ph_gemm_panels_key));
        EXPECT_LT(error(product(s1), b2), tol) << what << ": key cleared, the new contents";
        const char* ws_end =
            static_cast<const char*>(reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64)) +
            ws_bytes;
        EXPECT_TRUE(std::all_of(ws_end, ws_end + kCanary, [](char x) { return x == '\x5a'; }))
            << what << ": wrote past its workspace of " << ws_bytes << " bytes (B in kept panels)";
      }
}

// A compiled matmul whose grid walks M fastest keeps B's panels across steps (its Block IR
// says so); run again after B's contents change in place (the same array, the same address),
// it packs the new contents: each launch starts with no panels kept. (B is one column of blocks:
// a thread's last panels of one run are those its next run starts with. The library's matmul
// stores in its inputs' dtype, compared at that dtype's tolerance: stale panels miss by ~15.)
TEST(Dot, KeptPanelsDoNotOutliveALaunch) {
  ph::KernelBase& k = *ph::kernels::find_kernel("matmul").kernel;  // the library's tiled matmul
  for (ph::DType dt : {ph::DType::f32, ph::DType::bf16}) {
    ph::Array a = ph::Array::random({70, 90}, dt, 31), b = ph::Array::random({90, 30}, dt, 32);
    ph::Config c = ph::Config::from_json(
        R"({"block_sizes":[16,32,32],"loop_orders":[[1,0]],"micro_kernels":[0],"num_threads":2})");
    c.num_threads = std::min(c.num_threads, ph::backend::cpu::Host::detect().threads);
    // The first vector kernel among the dot's choices (a tile kernel packs B its own way).
    const auto choices = ph::runtime::gemm_kernel_choices(dt == ph::DType::bf16);
    const auto vector = std::find_if(choices.begin(), choices.end(), [&](const std::string& n) {
      return ph::runtime::gemm_b_panels_bytes(8, 8, n, dt == ph::DType::bf16) > 0;
    });
    ASSERT_NE(vector, choices.end());
    c.micro_kernels = {static_cast<int>(vector - choices.begin())};
    auto compiled = k.compile({a, b}, &c);
    EXPECT_NE(compiled.block_ir().find("keeps B's panels: 3 x"), std::string::npos) << compiled.block_ir();
    for (uint64_t seed : {32, 33, 34}) {
      ph::Array fresh = ph::Array::random({90, 30}, dt, seed);
      std::memcpy(b.data(), fresh.data(), static_cast<size_t>(b.numel() * ph::dtype_size(dt)));
      auto cmp = ph::tune::compare(compiled.run({a, b})[0], ph::ref::matmul(a, b), dt, 2.0);
      EXPECT_TRUE(cmp.ok) << ph::dtype_name(dt) << " seed " << seed << " err " << cmp.max_abs_err;
    }
  }
}

// A workspace sized for an A the tile kernel reads in place (gemm_workspace_bytes' a_in_place:
// what the lowering reserves for a materialized bf16 A whose k is whole 32-deep steps) holds B's
// panels and one strip of A: the kernel reads whole strips in place, packs a ragged last strip
// into that slot, and an A it cannot read in place after all (rows 4 KiB apart, a column-major
// one, k ragged) one strip at a time. Each is the reference's product, and nothing is written
// past the workspace.
TEST(Dot, TheTileKernelFitsAWorkspaceSizedForAnAReadInPlace) {
  const auto& names = ph::runtime::gemm_kernel_names();
  const auto tile = std::find(names.begin(), names.end(), "amx_32x32");
  if (tile == names.end()) GTEST_SKIP() << "no AMX on this host";
  struct Case {
    int64_t m, n, k, lda;
    bool a_column_major = false;
  };
  for (Case cs : {Case{64, 96, 128, 128}, Case{37, 50, 64, 96}, Case{600, 45, 256, 256}, Case{5, 33, 32, 32},
                  Case{70, 40, 64, 2048}, Case{45, 40, 96, 96, true}, Case{41, 30, 50, 50}}) {
    const int64_t rows = cs.a_column_major ? cs.k : cs.m;
    ph::Array storage = ph::Array::random({rows, cs.lda}, ph::DType::bf16, 13);
    ph::Array a = ph::Array::empty({cs.m, cs.k}, ph::DType::bf16);
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t p = 0; p < cs.k; ++p)
        a.set(i * cs.k + p, cs.a_column_major ? storage.get(p * cs.lda + i) : storage.get(i * cs.lda + p));
    ph::Array b = ph::Array::random({cs.k, cs.n}, ph::DType::bf16, 14);
    ph::Array want = ph::ref::matmul(a, b);
    const int64_t bytes = ph::runtime::gemm_workspace_bytes(cs.m, cs.n, cs.k, "amx_32x32", true, true);
    if (cs.m > 32) {
      EXPECT_LT(bytes, ph::runtime::gemm_workspace_bytes(cs.m, cs.n, cs.k, "amx_32x32", true, false));
    }
    constexpr int64_t kCanary = 4096;
    std::vector<char> ws(bytes + kCanary + 64, '\x5a');
    std::vector<float> c(cs.m * cs.n, 0.5f);
    ph_gemm_args g{};
    g.m = cs.m, g.n = cs.n, g.k = cs.k;
    g.a = storage.data(), g.a_rs = cs.a_column_major ? 1 : cs.lda, g.a_cs = cs.a_column_major ? cs.lda : 1;
    g.a_dtype = PH_BF16;
    g.b = b.data(), g.b_rs = cs.n, g.b_cs = 1, g.b_dtype = PH_BF16;
    g.c = c.data(), g.ldc = cs.n, g.accumulate = 1, g.kernel = static_cast<int>(tile - names.begin());
    g.workspace = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
    g.workspace_bytes = bytes;
    ph::runtime::gemm(g);
    double err = 0;
    for (int64_t j = 0; j < want.numel(); ++j) err = std::max(err, std::abs(c[j] - 0.5 - want.get(j)));
    EXPECT_LT(err, 1e-3 * std::sqrt(static_cast<double>(cs.k))) << "m " << cs.m << " n " << cs.n << " k " << cs.k;
    const char* end = static_cast<const char*>(g.workspace) + bytes;
    EXPECT_TRUE(std::all_of(end, end + kCanary, [](char x) { return x == '\x5a'; }))
        << "wrote past its workspace of " << bytes << " bytes, m " << cs.m << " k " << cs.k;
  }
}

// The config space offers the widened kernels only to dots of two bf16 operands, and every
// host kernel to each dot.
TEST(Dot, KernelChoicesWidenAndTileOnlyBf16Operands) {
  const auto& names = ph::runtime::gemm_kernel_names();
  const auto f32 = ph::runtime::gemm_kernel_choices(false), bf16 = ph::runtime::gemm_kernel_choices(true);
  for (const std::string& name : f32) {
    EXPECT_FALSE(name.ends_with("_widened")) << name;
    EXPECT_FALSE(name.starts_with("amx")) << name;  // tiles of bf16 only
  }
  std::vector<std::string> sorted_bf16 = bf16, sorted_names = names;
  std::sort(sorted_bf16.begin(), sorted_bf16.end());
  std::sort(sorted_names.begin(), sorted_names.end());
  EXPECT_EQ(sorted_bf16, sorted_names);
  const bool has_widened =
      std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.ends_with("_widened"); });
  EXPECT_EQ(has_widened, ph::runtime::bf16_dot_speedup() > 0);
  const bool has_tiles = std::find(names.begin(), names.end(), "amx_32x32") != names.end();
  if (has_tiles) {
    EXPECT_EQ(bf16.front(), "amx_32x32");
  } else if (has_widened) {
    EXPECT_EQ(bf16.front().ends_with("_widened"), ph::runtime::bf16_dot_speedup() < 0.8);
  }
}

constexpr int kLineK = __LINE__ + 5;
ph::Tensor mismatched_k(ph::Tensor a, ph::Tensor b) {
  auto out = ph::empty({a.size(0), b.size(1)});
  for (auto [tm, tn] : ph::tile(a.size(0), b.size(1))) {
    auto x = a[tm, ph::all];
    out[tm, tn] = ph::dot(x, b[ph::all, tn]);
  }
  return out;
}

TEST(Dot, ContractedDimensionsMustMatch) {
  ph::Kernel k("mismatched_k", mismatched_k);
  try {
    k(ph::Array::zeros({4, 6}, ph::DType::f32), ph::Array::zeros({7, 3}, ph::DType::f32));
    FAIL();
  } catch (const ph::UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("test_dot.cpp:" + std::to_string(kLineK)), std::string::npos) << msg;
    EXPECT_NE(msg.find("dot: the contracted dimensions differ: [6] (last of [t0, 6]) and [7]"), std::string::npos)
        << msg;
  }
}

// acc = acc + dot(x, y) is computed into the Var in place, where the dot is. That is the
// assignment's value only where the assignment runs whenever the dot does, and where nothing
// between them reads or assigns the Var. These kernels break one of the two; each must take its
// dot into scratch and add it at the assignment.
//
// The product added under ph::when(flag != 0): all of x . y, or zeros.
ph::Tensor dot_added_when(ph::Tensor x, ph::Tensor y, ph::Int flag) {
  auto [m, k] = x.sizes<2>();
  auto n = y.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) {
      auto p = ph::dot(x[tm, tk], y[tk, tn]);
      ph::when(flag != 0, [&] { acc = acc + p; });
    }
    out[tm, tn] = acc;
  }
  return out;
}

// The Var read around the dot: `total` adds what each assignment added to acc (acc after it less
// acc before it), which is x . y whatever the blocks. The read is between the dot and the
// assignment, or (kReadEarly) before the dot, its value used between the two (fused, the value
// would read the Var where it is used: after the dot added into it).
template <bool kReadEarly>
ph::Tensor var_read_around_its_dot(ph::Tensor x, ph::Tensor y) {
  auto [m, k] = x.sizes<2>();
  auto n = y.size(1);
  auto out = ph::empty({m, n});
  for (auto [tm, tn] : ph::tile(m, n)) {
    ph::Var acc = ph::zeros({tm, tn});
    ph::Var total = ph::zeros({tm, tn});
    for (auto tk : ph::tile(k)) {
      std::optional<ph::Tensor> before;
      if (kReadEarly) before = acc * 1.0f;
      auto p = ph::dot(x[tm, tk], y[tk, tn]);
      if (!kReadEarly) before = acc * 1.0f;
      total = total - *before;
      acc = acc + p;
      total = total + acc;
    }
    out[tm, tn] = total;
  }
  return out;
}

TEST(Dot, AnInPlaceDotRunsOnlyWhereItsAssignmentDoes) {
  ph::Array x = ph::Array::random({70, 96}, ph::DType::f32, 41), y = ph::Array::random({96, 50}, ph::DType::f32, 42);
  const ph::Array product = ph::ref::matmul(x, y);
  ph::Kernel when("dot_added_when", dot_added_when);
  for (int64_t flag : {1, 0}) {
    SCOPED_TRACE("flag " + std::to_string(flag));
    check_configs(when, {x, y, flag}, flag ? product : ph::Array::zeros({70, 50}, ph::DType::f32), 1e-3);
  }
  ph::Kernel between("var_read_between_its_dot_and_assignment", var_read_around_its_dot<false>);
  check_configs(between, {x, y}, product, 1e-3);
  ph::Kernel early("var_read_early_used_after_its_dot", var_read_around_its_dot<true>);
  check_configs(early, {x, y}, product, 1e-3);
}

}  // namespace
