#include "backend/pallas/codegen.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "backend/pallas/collectives.h"
#include "backend/pallas/plan.h"
#include "backend/pallas/random.h"
#include "backend/pallas/scan.h"
#include "backend/pallas/views.h"
#include "ir/collectives.h"
#include "ir/printer.h"
#include "ir/trip_guard.h"
#include "ir/type_rules.h"
#include "parhelion/error.h"
#include "runtime/format_bytes.h"

namespace parhelion::backend::pallas {
namespace {

using ir::BinaryFn;
using ir::Dim;
using ir::Op;
using ir::OpKind;
using ir::ReduceFn;
using ir::UnaryFn;
using pallas::DmaRows;
using pallas::PallasLaunch;
using pallas::PallasSlot;

std::string jnp_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return "jnp.float32";
    case DType::bf16:
      return "jnp.bfloat16";
    case DType::f16:
      return "jnp.float16";
    case DType::i32:
    case DType::i64:  // JAX runs with 32-bit integers unless x64 is enabled
      return "jnp.int32";
    case DType::boolean:
      return "jnp.bool_";
    case DType::i8:
      return "jnp.int8";
    case DType::u8:
      return "jnp.uint8";
    case DType::f8e4m3:
      return "jnp.float8_e4m3fn";
    case DType::f8e5m2:
      return "jnp.float8_e5m2";
  }
  return "?";
}

// The f32 expression `e` converted to storage dtype `d` as the language defines it: fp8
// saturates (jnp's astype would give NaN or inf beyond the max finite), others as astype.
std::string to_storage(const std::string& e, DType d) {
  if (d == DType::f8e4m3) return "_to_f8(" + e + ", jnp.float8_e4m3fn, 448.0, False)";
  if (d == DType::f8e5m2) return "_to_f8(" + e + ", jnp.float8_e5m2, 57344.0, True)";
  return e + ".astype(" + jnp_dtype(d) + ")";
}

std::string py_number(double v, DType compute) {
  if (compute == DType::boolean) return v != 0 ? "True" : "False";
  if (compute == DType::i64) return std::to_string(static_cast<long long>(v));
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string tuple_str(const std::vector<std::string>& items) {
  std::string s = "(";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + (items.size() == 1 ? ",)" : ")");
}

class Emitter {
 public:
  Emitter(const lower::BlockProgram& p, const TpuGeneration& tpu) : p_(p), fn_(*p.fn), tpu_(tpu) {}

  std::string run() {
    launches_ = plan_pallas(p_);
    header();
    // Kernels in program order, knowing which tensors hold a value by then (written in place).
    for (int i = 0; i < fn_.num_tensor_params; ++i) has_value_.insert(i);
    size_t launch = 0;
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc && op.has_fill) has_value_.insert(op.tensor);
      if (op.kind == OpKind::Launch) {
        views_before(launches_[launch], false);
        kernel(launches_[launch]);
        views_after(launches_[launch++], false);
      }
    }
    host();
    return os_.str();
  }

 private:
  // --- output ---
  void line(const std::string& s) { os_ << std::string(depth_ * 4, ' ') << s << "\n"; }
  std::string tname(int tile) const { return ir::tile_name(fn_, tile); }
  const ir::Type& type(int v) const { return fn_.type_of(v); }
  bool unit(int tile) const { return pallas_unit_tile(p_, tile); }
  // A tile's block, at most its extent (a block may not exceed the array's dimension).
  int64_t block(int tile) const { return std::min(p_.block_of_tile(tile), fn_.tiles[tile].extent()); }

  // The dims of an IR shape that exist in Pallas values (unit tiles are squeezed out).
  std::vector<Dim> kept(const std::vector<Dim>& shape) const {
    std::vector<Dim> k;
    for (const Dim& d : shape)
      if (!(d.kind == Dim::Tile && unit(d.tile))) k.push_back(d);
    return k;
  }
  int kept_axis(const std::vector<Dim>& shape, int axis) const {
    int a = axis;
    for (int i = 0; i < axis; ++i)
      if (shape[i].kind == Dim::Tile && unit(shape[i].tile)) --a;
    return a;
  }
  // A dim's size in a value: the block (or, in a resident loop's trip, the trip's length).
  std::string dim_size(const Dim& d) const {
    if (d.kind == Dim::Const) return std::to_string(d.size);
    if (resident_tiles_.count(d.tile)) return "n_" + tname(d.tile);
    return std::to_string(block(d.tile));
  }
  std::string shape_str(const std::vector<Dim>& shape) const {
    std::vector<std::string> s;
    for (const Dim& d : kept(shape)) s.push_back(dim_size(d));
    return tuple_str(s);
  }
  // Whether values along a tile can hold padding that must be masked (a ragged last block
  // that Pallas pads: grid tiles and pipelined trips; resident trips are sliced exactly).
  bool masked(const Dim& d) const {
    if (d.kind != Dim::Tile || unit(d.tile) || resident_tiles_.count(d.tile)) return false;
    if (jagged_tiles_.count(d.tile)) return true;  // a trip's rows are a window of its block
    const ir::TileInfo& t = fn_.tiles[d.tile];
    return t.extent() % block(d.tile) != 0;
  }

  void header() {
    line("# Generated by Parhelion: kernel " + fn_.name + ", target pallas (TPU " + tpu_.name + ")");
    line("# config " + p_.config.to_json());
    line("# Run on a TPU VM with jax[tpu]; on any machine with interpret=pltpu.InterpretParams().");
    line("import contextlib");
    if (!fn_.mesh.empty()) line("import math");
    line("");
    line("import jax");
    line("import jax.numpy as jnp");
    line("from jax.experimental import pallas as pl");
    line("from jax.experimental.pallas import tpu as pltpu");
    if (!fn_.mesh.empty()) {
      line("from jax.sharding import PartitionSpec as P");
      line("import numpy as np");
    }
    line("");
    line("KERNEL = \"" + fn_.name + "\"");
    line("TPU = \"" + tpu_.name + "\"");
    line("DEVICE_KIND = \"" + std::string(tpu_.device_kind) + "\"  # JAX's device_kind of the target chip");
    line("CONFIG = " + python_literal(nlohmann::json::parse(p_.config.to_json())));
    std::string sig = "SIGNATURE = [";
    for (int i = 0; i < fn_.num_tensor_params; ++i) {
      const ir::TensorInfo& t = fn_.tensors[i];
      sig +=
          std::string(i ? ", " : "") + "(" + shape_tuple(t.shape) + ", \"" + std::string(dtype_name(t.dtype)) + "\")";
    }
    line(sig + "]");
    line("");
    line("");
    line("def _tpu_context(interpret):");
    line("    \"\"\"The TPU the kernel is traced and lowered for: on a machine without one (interpret mode,");
    line("    or lowering for export), the target generation's device kind, which DMA tiling, block");
    line("    checks and interpret mode's padded buffer bounds ask for.\"\"\"");
    line("    if jax.default_backend() == \"tpu\":");
    line("        return contextlib.nullcontext()");
    if (!fn_.mesh.empty()) {  // (inside shard_map, whose mesh is the target's when exported: _mesh)
      line("    return contextlib.nullcontext()  # on a mesh: shard_map's mesh (_mesh) names the target");
    } else {
      line("    device = jax.sharding.AbstractDevice(device_kind=DEVICE_KIND, num_cores=1, platform=\"tpu\")");
      line(
          "    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), (\"x\",), "
          "abstract_device=device))");
    }
    line("");
    line("");
    line("def _to_f8(x, dtype, max_finite, keep_inf):");
    line("    \"\"\"f32 -> fp8, round to nearest even, saturating finite values to +-max_finite (NaN stays");
    line("    NaN; infinities saturate unless the format has them and keep_inf).\"\"\"");
    line("    x = jnp.asarray(x, jnp.float32)");
    line("    c = jnp.clip(x, -max_finite, max_finite)");
    line("    if keep_inf:");
    line("        c = jnp.where(jnp.isinf(x), x, c)");
    line("    return c.astype(dtype)");
    line("");
    line("");
    line("def _floordiv(a, b):");
    line("    \"\"\"Integer a // b rounding toward -inf; b == 0 gives 0.\"\"\"");
    line("    z = b == 0");
    line("    return jnp.where(z, 0, jnp.floor_divide(a, jnp.where(z, 1, b)))");
    line("");
    line("");
    line("def _mod(a, b):");
    line("    \"\"\"Integer torch.remainder (the divisor's sign); b == 0 gives 0.\"\"\"");
    line("    z = b == 0");
    line("    return jnp.where(z, 0, jnp.remainder(a, jnp.where(z, 1, b)))");
    line("");
    line("");
    line("def _shl(a, n):");
    line("    \"\"\"a << n; a count outside [0, 31] (the compute integer's width) gives 0.\"\"\"");
    line("    out = (n < 0) | (n > 31)");
    line("    return jnp.where(out, 0, jnp.left_shift(a, jnp.where(out, 0, n)))");
    line("");
    line("");
    line("def _shr(a, n):");
    line("    \"\"\"Arithmetic a >> n; a count outside [0, 31] gives the sign fill (a >> 31).\"\"\"");
    line("    return jnp.right_shift(a, jnp.where((n < 0) | (n > 31), 31, n))");
    line("");
    line("");
    if (!fn_.mesh.empty()) {
      for (const std::string& l : collective_helpers(fn_, tpu_.device_kind)) line(l);
      line("");
      line("");
    }
    if (ir::uses_random(fn_)) os_ << random_helpers();
    if (uses_scan(fn_)) os_ << scan_helpers();
    if (has_jagged_loop()) {
      line("def _mask_window(x, axis, start, valid, fill):");
      line("    \"\"\"Elements outside [start, start + valid) along axis become fill (a jagged trip's rows");
      line("    are a window of the block it reads).\"\"\"");
      line("    idx = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)");
      line("    return jnp.where((idx >= start) & (idx < start + valid), x, jnp.asarray(fill, x.dtype))");
      line("");
      line("");
    }
    if (has_dot()) dot_helper();
    bool lane_dense = false;
    for (const PallasLaunch& pl : launches_) lane_dense |= !pl.row_stats.vars.empty();
    if (lane_dense) lanes_helper();
    line("def _mask(x, axis, valid, fill):");
    line("    \"\"\"Elements at index >= valid along axis (a ragged block's padding) become fill.\"\"\"");
    line("    idx = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)");
    line("    return jnp.where(idx < valid, x, jnp.asarray(fill, x.dtype))");
    line("");
    line("");
    gather_helper();
    if (has_atomic_rows()) atomic_rows_helper();
    for (const PallasLaunch& pl : launches_)
      if (!pl.dma_rows.empty()) return dma_rows_helper();
  }

  // Whether a launch updates rows atomically through an index block (plan.cpp, add_whole_atomic).
  bool has_atomic_rows() const {
    for (const PallasLaunch& pl : launches_)
      for (const auto& [op, slot] : pl.slot_of)
        if (ir::is_atomic(*op) && ir::has_gather(*op) && pl.slots[slot].whole_tensor) return true;
    return false;
  }

  // An atomic update through an index block, on the whole tensor in VMEM (the launch's steps run
  // in order on one core: a TPU core has no atomics across cores). A repeated index must count
  // each time, so rows are not scattered in one vector store: a rank-1 table combines, per
  // table element, every row that hits it with a masked reduction over the (rows, size) one-hot
  // compare (exact: selects and a sum, max or min, never a product, so an inf or NaN in one row
  // reaches only its own element; a one-hot matmul would spread it, and is not exact for
  // integers); a rank-2 table takes its rows one after another in a fori_loop, each row's index
  // and values picked out of the block by a masked reduction (Mosaic reads no vector element at
  // a dynamic position) and combined into the rows of the table it hits.
  void atomic_rows_helper() {
    const char* text[] = {
        "def _atomic_rows(table, idx, vals, ok, combine):",
        "    \"\"\"table (the whole tensor, compute dtype) with vals (idx's rows, the row's width) combined",
        "    (\"add\", \"max\", \"min\") into rows idx where ok (vals' shape), a repeated index once per",
        "    time it appears. An index outside [0, rows) updates nothing (a TPU kernel cannot raise).\"\"\"",
        "    idx = idx.astype(jnp.int32)",
        "    floating = jnp.issubdtype(vals.dtype, jnp.floating)",
        "    big = jnp.inf if floating else jnp.iinfo(vals.dtype).max",
        "    small = -jnp.inf if floating else jnp.iinfo(vals.dtype).min",
        "    ident = jnp.asarray({\"add\": 0, \"max\": small, \"min\": big}[combine], vals.dtype)",
        "    red = {\"add\": jnp.sum, \"max\": jnp.max, \"min\": jnp.min}[combine]",
        "    comb = {\"add\": jnp.add, \"max\": jnp.maximum, \"min\": jnp.minimum}[combine]",
        "    r, size = idx.shape[0], table.shape[0]",
        "    if table.ndim == 1:",
        "        hit = (idx[:, None] == jax.lax.broadcasted_iota(jnp.int32, (r, size), 1)) & ok[:, None]",
        "        part = red(jnp.where(hit, vals[:, None], ident), axis=0)",
        "        # (elements no row hits combine with the identity: they keep their value)",
        "        return jnp.where(jnp.max(jnp.where(hit, 1, 0), axis=0) > 0, comb(table, part), table)",
        "    rows = jax.lax.broadcasted_iota(jnp.int32, (r, 1), 0)",
        "    where = jax.lax.broadcasted_iota(jnp.int32, (size, 1), 0)",
        "    idx2 = idx[:, None]",
        "",
        "    def one(k, t):",
        "        sel = rows == k",
        "        i = jnp.sum(jnp.where(sel, idx2, 0), axis=0, keepdims=True)  # (1, 1)",
        "        on = sel & ok",
        "        o = jnp.max(jnp.where(on, 1, 0), axis=0, keepdims=True) > 0  # (1, width)",
        "        v = red(jnp.where(on, vals, ident), axis=0, keepdims=True)  # (1, width)",
        "        return jnp.where((where == i) & o, comb(t, v), t)",
        "",
        "    return jax.lax.fori_loop(0, r, one, table)",
        "",
        "",
    };
    for (const char* l : text) os_ << l << "\n";
  }

  // (printed as part of header() when a launch moves rows by DMA: gather.h)
  void dma_rows_helper() {
    const char* text[] = {
        "def _dma_rows(hbm, idx, buf, sem, n, size, col, width, tail, scatter):",
        "    \"\"\"One DMA per row r < n between row r of buf (VMEM) and row idx[r] of hbm (HBM), all started,",
        "    then all waited for: hbm -> buf for a gather, buf -> hbm for a scatter. A TPU DMA cannot fault:",
        "    out of [0, size), a gather copies a row clamped into range (the caller overwrites it with the",
        "    fill) and a scatter copies nothing. width: the columns from col that a row moves (None: a",
        "    rank-1 tensor); tail: the width of a ragged last column block (None: the blocks divide the",
        "    row), moved instead where col + width passes the row's end.\"\"\"",
        "    def copy(r, w):",
        "        row = jnp.clip(idx[r], 0, size - 1)",
        "        if width is None:",
        "            a, b = hbm.at[pl.ds(row, 1)], buf.at[pl.ds(r, 1)]",
        "        else:",
        "            a, b = hbm.at[pl.ds(row, 1), pl.ds(col, w)], buf.at[pl.ds(r, 1), pl.ds(0, w)]",
        "        return pltpu.make_async_copy(b, a, sem.at[r]) if scatter else pltpu.make_async_copy(a, b, sem.at[r])",
        "",
        "    def each(act):",
        "        def row_copy(r):",
        "            if tail is None:",
        "                act(copy(r, width))",
        "                return",
        "            last = col + width > hbm.shape[1]",
        "            if isinstance(last, bool):  # a static column offset (a trace-time loop's trip)",
        "                act(copy(r, tail if last else width))",
        "                return",
        "",
        "            @pl.when(jnp.logical_not(last))",
        "            def _whole():",
        "                act(copy(r, width))",
        "",
        "            @pl.when(last)",
        "            def _tail():",
        "                act(copy(r, tail))",
        "",
        "        def body(r, carry):",
        "            if scatter:",
        "                pl.when((idx[r] >= 0) & (idx[r] < size))(lambda: row_copy(r))",
        "            else:",
        "                row_copy(r)",
        "            return carry",
        "",
        "        jax.lax.fori_loop(0, n, body, 0)",
        "",
        "    each(lambda c: c.start())",
        "    each(lambda c: c.wait())",
        "",
        "",
    };
    for (const char* l : text) line(l);
  }

  bool has_dot() const {
    bool any = false;
    ir::walk(fn_.body, [&](const Op& op) { any |= op.kind == OpKind::Dot; });
    return any;
  }

  // (printed as part of header())
  // A lane-dense row statistic [..., rows, 128] (every lane equal: row_stats.h) broadcast over a
  // row of w elements: whole registers repeated (as JAX's flash attention does), its first w
  // lanes, or, for another width, its first lane, which the consumer broadcasts.
  void lanes_helper() {
    line("def _lanes(x, w):");
    line("    \"\"\"A lane-replicated block [..., 128] as [..., w] (or [..., 1] to broadcast).\"\"\"");
    line("    if w % 128 == 0:");
    line("        return jnp.tile(x, (1,) * (x.ndim - 1) + (w // 128,))");
    line("    return x[..., :w] if w < 128 else x[..., :1]");
    line("");
    line("");
  }

  void dot_helper() {
    const char* text[] = {
        "def _dot(a, b, dims):",
        "    \"\"\"dot_general into f32. A matrix operand whose free dim is one row (a resident loop's",
        "    ragged last trip) is broadcast to 8 rows and the product's extra rows or columns dropped:",
        "    Mosaic lowers a one-row right operand of a.b^T as a matrix-vector product, which fails",
        "    for 16-bit data (jax/_src/pallas/mosaic/lowering.py, _dot_general_lowering_rule).\"\"\"",
        "    (ca, cb), (ba, _) = dims",
        "    if not ba and a.ndim == 2 and b.ndim == 2:",
        "        fa, fb = 1 - ca[0], 1 - cb[0]",
        "        if b.shape[fb] == 1:",
        "            wide = list(b.shape)",
        "            wide[fb] = 8",
        "            return _dot(a, jnp.broadcast_to(b, tuple(wide)), dims)[:, :1]",
        "        if a.shape[fa] == 1:",
        "            wide = list(a.shape)",
        "            wide[fa] = 8",
        "            return _dot(jnp.broadcast_to(a, tuple(wide)), b, dims)[:1, :]",
        "    return jax.lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)",
        "",
        "",
    };
    for (const char* l : text) line(l);
  }

  // (printed as part of header())
  void gather_helper() {
    line("def _gather(x, axis, idx, size):");
    line("    \"\"\"Rows (axis 0) or columns (axis 1) idx of x, which holds the whole gathered dim (size): a");
    line("    one-hot matrix times x on the MXU at precision HIGHEST (exact for f32 data; bf16 and f16");
    line("    data are gathered as f32, also exact). An index outside [0, size) gives NaN; a non-finite");
    line("    element of x gives NaN in every row gathered with its column (0 * inf).\"\"\"");
    line("    idx = idx.astype(jnp.int32)");
    line("    ok = (idx >= 0) & (idx < size)");
    line("    oh = idx[:, None] == jax.lax.broadcasted_iota(jnp.int32, (idx.shape[0], size), 1)");
    line("    if x.ndim == 1:");
    line("        return jnp.where(ok, jnp.sum(jnp.where(oh, x[None, :], 0.0), axis=1), jnp.nan)");
    line("    hi = jax.lax.Precision.HIGHEST");
    line("    oh = oh.astype(jnp.float32)");
    line("    if axis == 0:");
    line("        g = jnp.dot(oh, x, precision=hi, preferred_element_type=jnp.float32)");
    line("        return jnp.where(ok[:, None], g, jnp.nan)");
    line(
        "    g = jax.lax.dot_general(x, oh, (((1,), (1,)), ((), ())), precision=hi, "
        "preferred_element_type=jnp.float32)");
    line("    return jnp.where(ok[None, :], g, jnp.nan)");
    line("");
  }

  // A JSON value as the Python literal that reads the same (true -> True).
  static std::string python_literal(const nlohmann::json& j) {
    if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
    if (j.is_null()) return "None";
    if (j.is_array()) {
      std::string s = "[";
      for (size_t i = 0; i < j.size(); ++i) s += (i ? "," : "") + python_literal(j[i]);
      return s + "]";
    }
    if (j.is_object()) {
      std::string s = "{";
      bool first = true;
      for (auto& [k, v] : j.items()) {
        s += (first ? "" : ",") + nlohmann::json(k).dump() + ":" + python_literal(v);
        first = false;
      }
      return s + "}";
    }
    return j.dump();
  }
  static std::string shape_tuple(const Shape& s) {
    std::vector<std::string> v;
    for (int64_t d : s) v.push_back(std::to_string(d));
    return tuple_str(v);
  }

  // --- one launch: the kernel function ---
  struct LaunchInfo {
    std::vector<int> inputs;   // slot ids read through a BlockSpec (or HBM for pipelines)
    std::vector<int> outputs;  // slot ids written
    // Tensors written in place: they have a value, and some of their blocks are not written
    // back by the launch (writes_every_block): passed in again in HBM (ANY) and aliased to the
    // output, so those blocks keep it.
    std::vector<int> aliased;
    std::vector<int> vars;
    // A launch with collectives' scratch operands (plan.h, LaunchCollectives): kernel parameter
    // name and pltpu scratch shape.
    std::vector<std::pair<std::string, std::string>> comm;
  };

  std::vector<LaunchInfo> infos_;

  std::string slot_ref(int slot, bool out) const { return (out ? "o" : "s") + std::to_string(slot) + "_ref"; }
  // Whether a slot of the current launch has an input: it is loaded, or its prior contents
  // come in for stores that keep part of the block.
  bool reads(int slot) const { return cur_slots_->at(slot).read || prior_in_.count(slot); }

  void kernel(const PallasLaunch& pl) {
    const lower::LaunchPlan& L = *pl.plan;
    cur_slots_ = &pl.slots;
    rows_ = &pl.row_stats;
    find_folded(*L.op, pl);
    LaunchInfo info;
    // A slot whose stores keep the rest of the block (masked, slice stores) reads the block's
    // prior contents in through the same BlockSpec, when the tensor has any (before its first
    // write a tensor's elements are undefined, as on every backend).
    prior_in_.clear();
    for (size_t i = 0; i < pl.slots.size(); ++i)
      if (pl.slots[i].keeps_prior && pl.slots[i].written && has_value_.count(pl.slots[i].tensor))
        prior_in_.insert(static_cast<int>(i));
    for (size_t i = 0; i < pl.slots.size(); ++i) {
      // (a slot sharing another's resident copy has no operand: plan.h, PallasSlot::shares)
      // (a tensor in HBM that the launch writes is its output's buffer, read and written in place)
      const bool hbm_output = pl.slots[i].mode == PallasSlot::Hbm && pl.slots[i].written;
      if (reads(static_cast<int>(i)) && pl.slots[i].shares < 0 && !hbm_output)
        info.inputs.push_back(static_cast<int>(i));
      if (pl.slots[i].written) info.outputs.push_back(static_cast<int>(i));
    }
    std::set<int> written;
    cur_ = &pl;
    for (int o : info.outputs) {
      int t = pl.slots[o].tensor;
      PH_CHECK(written.insert(t).second, "a tensor written through two block patterns (the plan refuses it)");
      if (has_value_.count(t) && !writes_every_block(p_, pl, pl.slots[o])) info.aliased.push_back(t);
    }
    ir::walk(L.op->body, [&](const Op& op) {
      if (op.kind == OpKind::VarDecl) info.vars.push_back(op.var);
    });
    std::vector<std::string> params;
    if (!fn_.scalar_params.empty()) params.push_back("scalars_ref");
    for (int s : info.inputs) params.push_back(slot_ref(s, false));
    for (size_t g = 0; g < pl.dma_rows.size(); ++g) params.push_back("gi" + std::to_string(g) + "_ref");
    for (int t : info.aliased) params.push_back("alias_t" + std::to_string(t));
    for (int s : info.outputs) params.push_back(slot_ref(s, true));
    for (int v : info.vars) params.push_back("var" + std::to_string(v) + "_ref");
    for (size_t g = 0; g < pl.dma_rows.size(); ++g) {
      params.push_back("gb" + std::to_string(g) + "_ref");
      params.push_back("gs" + std::to_string(g) + "_ref");
    }
    for (int k : streamed_slots(pl)) {  // a streamed slot's two buffers and their DMA semaphores
      params.push_back("sb" + std::to_string(k) + "_ref");
      params.push_back("ss" + std::to_string(k) + "_ref");
    }
    comm_scratch(pl, &info);
    for (const auto& [name, shape] : info.comm) params.push_back(name);
    find_copy_only_loads(pl);
    line("");
    line("def _kernel_" + std::to_string(L.index) + "(" + join(params) + "):");
    ++depth_;
    line("# launch " + std::to_string(L.index) + " at " + L.op->loc.str());
    for (size_t i = 0; i < pl.grid.size(); ++i) {
      line("g_" + tname(pl.grid[i].tile) + " = pl.program_id(" + std::to_string(i) + ")");
      grid_offsets(pl.grid[i]);
    }
    for (const std::string& note : pl.order_notes) line("# " + note);
    if (pl.comm.any) handshake(pl);
    for (size_t i = 0; i < pl.slots.size(); ++i)
      if (pl.slots[i].shares >= 0)
        line(slot_ref(static_cast<int>(i), false) + " = " + slot_ref(pl.slots[i].shares, false) + "  # " +
             fn_.tensors[pl.slots[i].tensor].name + " at " + pl.slots[i].first->loc.str() +
             ": the same resident block, fetched once");
    // The output block starts as the prior contents; every store then updates it in place (an
    // output block is written back whole). A pipelined slot copies its own blocks per trip. A
    // block that stays in VMEM across steps (atomic updates that meet on it, a whole tensor)
    // takes them at the first step of each run of those steps only: later steps update it.
    for (int s : prior_in_) {
      const PallasSlot& slot = pl.slots[s];
      if (slot.mode == PallasSlot::Pipeline) continue;
      const std::string copy = slot_ref(s, true) + "[...] = " + slot_ref(s, false) + "[...]";
      if (!slot.revisit_dims.empty()) {
        std::vector<std::string> first;
        for (int g : slot.revisit_dims) first.push_back("(g_" + tname(pl.grid[g].tile) + " == 0)");
        line("@pl.when(" + join(first, " & ") + ")");
        line("def _prior_" + std::to_string(s) + "():");
        line("    " + copy + "  # prior contents: " +
             (slot.atomic != ir::AtomicFn::none ? "the first step of the run of steps that update this block"
                                                : "the rows no jagged store writes keep them"));
        continue;
      }
      line(copy + "  # prior contents: masked and slice stores keep the rest");
    }
    if (pl.grid_loop)
      grid_loop_body(pl);
    else
      body(L.op->body, nullptr);
    --depth_;
    infos_.push_back(info);
    for (int s : info.outputs) has_value_.insert(pl.slots[s].tensor);
  }

  // --- collectives (collectives.h; plan.h, LaunchCollectives) ---

  // A value's shape with every tile at its block (a buffer's: the plan refused ragged blocks).
  std::string static_shape(const std::vector<Dim>& shape) const {
    std::vector<std::string> s;
    for (const Dim& d : kept(shape)) s.push_back(std::to_string(d.kind == Dim::Const ? d.size : block(d.tile)));
    return tuple_str(s);
  }
  int hbm_slot(int tensor) const {
    for (size_t k = 0; k < cur_->slots.size(); ++k)
      if (cur_->slots[k].tensor == tensor && cur_->slots[k].mode == PallasSlot::Hbm) return static_cast<int>(k);
    PH_CHECK(false, "a landing tensor without its HBM slot");
    return -1;
  }
  // The region of a tensor in HBM that an access or a copy names (`at_origin`: the same shape at
  // index 0, for a wait's descriptor, which counts only the bytes).
  std::string hbm_region(const Op& op, bool at_origin = false) {
    std::vector<std::string> idx;
    for (const ir::IndexItem& ix : op.index) {
      switch (ix.kind) {
        case ir::IndexItem::All:
          idx.push_back(":");
          break;
        case ir::IndexItem::Scalar:
          idx.push_back(at_origin ? "0" : operand(ix.value));
          break;
        case ir::IndexItem::Slice:
          idx.push_back("pl.ds(" + (at_origin ? std::string("0") : operand(ix.value)) + ", " +
                        std::to_string(ix.length) + ")");
          break;
        case ir::IndexItem::Tile: {
          const std::string off = at_origin ? "0" : "off_" + tname(ix.tile);
          idx.push_back(unit(ix.tile) ? off : "pl.ds(" + off + ", " + std::to_string(block(ix.tile)) + ")");
          break;
        }
        default:
          PH_CHECK(false, "a gather on a tensor in HBM (the plan refuses it)");
      }
    }
    const int slot = hbm_slot(op.tensor);
    return slot_ref(slot, cur_->slots[slot].written) + ".at[" + join(idx) + "]";
  }
  std::string hbm_buffer(const Op& op) const { return "hb" + std::to_string(cur_->comm.hbm_of.at(&op)) + "_ref"; }
  // A load or store's DMA between its region in HBM and its VMEM buffer (`in`: into the buffer).
  // A load under a scalar mask moves nothing when the mask is off: the region may be where a
  // copy is landing.
  void hbm_transfer(const Op& op, bool in) {
    const std::string region = hbm_region(op), buf = hbm_buffer(op);
    const std::string copy = "_hbm_copy(" + (in ? region + ", " + buf : buf + ", " + region) + ", hsem_ref)";
    if (in && op.kind == OpKind::Load && ir::is_masked(op) && type(op.operands[0]).rank() == 0) {
      const std::string name = "_when_" + std::to_string(when_counter_++);
      line("@pl.when(" + operand(op.operands[0]) + ")");
      line("def " + name + "():");
      line("    " + copy);
      return;
    }
    line(copy);
  }

  // The scratch operands of a launch with collectives, in kernel-parameter order.
  void comm_scratch(const PallasLaunch& pl, LaunchInfo* info) {
    if (!pl.comm.any) return;
    const LaunchCollectives& c = pl.comm;
    for (size_t k = 0; k < c.hbm.size(); ++k) {
      const Op& op = *c.hbm[k].op;
      ir::Type region;
      ir::load_type(fn_, op.tensor, op.index, &region);
      info->comm.push_back({"hb" + std::to_string(k) + "_ref", "pltpu.VMEM(" + static_shape(region.shape) + ", " +
                                                                   jnp_dtype(fn_.tensors[op.tensor].dtype) + ")"});
    }
    for (size_t k = 0; k < c.copies.size(); ++k) {
      if (c.copies[k].load) continue;
      const Op& op = *c.copies[k].op;
      info->comm.push_back({"cs" + std::to_string(k) + "_ref", "pltpu.VMEM(" +
                                                                   static_shape(type(op.operands[0]).shape) + ", " +
                                                                   jnp_dtype(fn_.tensors[op.tensor].dtype) + ")"});
    }
    const std::string channels = std::to_string(std::max<int64_t>(fn_.num_copies, 1));
    info->comm.push_back({"csend_ref", "pltpu.SemaphoreType.DMA((" + channels + ",))"});
    info->comm.push_back({"crecv_ref", "pltpu.SemaphoreType.DMA((" + channels + ",))"});
    if (fn_.num_semaphores > 0)
      info->comm.push_back({"psem_ref", "pltpu.SemaphoreType.REGULAR((" + std::to_string(fn_.num_semaphores) + ",))"});
    if (!c.barrier_groups.empty())
      info->comm.push_back(
          {"bsem_ref", "pltpu.SemaphoreType.REGULAR((" + std::to_string(c.barrier_groups.size()) + ",))"});
    info->comm.push_back({"hsem_ref", "pltpu.SemaphoreType.DMA"});
  }

  // Loads whose block only direct copies read (plan.h, CopySource): the copy moves it from where
  // it is, so the load itself is not emitted.
  std::set<const Op*> copy_only_loads_;
  void find_copy_only_loads(const PallasLaunch& pl) {
    copy_only_loads_.clear();
    std::map<int, const Op*> direct;  // load result -> load
    for (const CopySource& c : pl.comm.copies)
      if (c.load) direct[c.load->result] = c.load;
    std::set<int> other;  // read by anything else
    ir::walk(pl.plan->op->body, [&](const Op& o) {
      for (size_t k = 0; k < o.operands.size(); ++k)
        if (!(o.kind == OpKind::CopyStart && k == 0 && pl.comm.copies[pl.comm.copy_of.at(&o)].load))
          other.insert(o.operands[k]);
      for (const ir::IndexItem& ix : o.index)
        if (ix.value >= 0) other.insert(ix.value);
      for (const ir::ScanCombine& c : o.combine)
        ir::walk(c.ops, [&](const Op& i) { other.insert(i.operands.begin(), i.operands.end()); });
    });
    for (const auto& [v, load] : direct)
      if (!other.count(v)) copy_only_loads_.insert(load);
  }

  // The first grid step's handshake: every device has entered the kernel (its semaphores exist)
  // before any copy or signal reaches it.
  void handshake(const PallasLaunch& pl) {
    std::vector<std::string> first;
    for (const lower::GridDim& g : pl.grid) first.push_back("(g_" + tname(g.tile) + " == 0)");
    std::vector<int64_t> all;
    for (size_t a = 0; a < fn_.mesh.size(); ++a) all.push_back(static_cast<int64_t>(a));
    line("");
    line("@pl.when(" + (first.empty() ? std::string("True") : join(first, " & ")) +
         ")  # every device has entered the kernel before any copy or signal reaches it");
    line("def _handshake():");
    ++depth_;
    for (const std::string& l : group_barrier(fn_, all, "pltpu.get_barrier_semaphore()")) line(l);
    --depth_;
    line("");
  }

  std::string peer_id(const Op& op, size_t first) {
    std::vector<std::string> c;
    for (size_t k = first; k < op.operands.size(); ++k) c.push_back(operand(op.operands[k]));
    return "(" + join(c) + ",)";
  }
  const Op& first_copy_of(int channel) const {
    const Op* start = nullptr;
    ir::walk(cur_->plan->op->body, [&](const Op& o) {
      if (!start && o.kind == OpKind::CopyStart && o.channel == channel) start = &o;
    });
    PH_CHECK(start, "a wait for a copy the launch does not start (the plan refuses it)");
    return *start;
  }
  std::string remote_copy(const std::string& src, const Op& start, bool at_origin, const std::string& device) {
    const std::string c = std::to_string(start.channel);
    return "pltpu.make_async_remote_copy(" + src + ", " + hbm_region(start, at_origin) + ", csend_ref.at[" + c +
           "], crecv_ref.at[" + c + "], device_id=" + device + ", device_id_type=pl.DeviceIdType.MESH)";
  }

  // DeviceIndex, CopyStart, CopyWait, Barrier, Signal, SemWait.
  void collective(const Op& op) {
    const std::string at = "  # at " + op.loc.str();
    switch (op.kind) {
      case OpKind::DeviceIndex:
        line(v(op.result) + " = jax.lax.axis_index(\"" + fn_.mesh[op.axis].name + "\")");
        return;
      case OpKind::CopyStart: {
        const CopySource& c = cur_->comm.copies[cur_->comm.copy_of.at(&op)];
        std::string src;
        if (!c.load) {  // staged in VMEM, in the destination's dtype
          src = "cs" + std::to_string(cur_->comm.copy_of.at(&op)) + "_ref";
          line(src + "[...] = " +
               to_storage("jnp.broadcast_to(" + operand(op.operands[0]) + ", " +
                              static_shape(type(op.operands[0]).shape) + ")",
                          fn_.tensors[op.tensor].dtype));
        } else if (cur_->slots[cur_->slot_of.at(c.load)].mode == PallasSlot::Hbm) {
          src = hbm_region(*c.load);  // HBM to the peer's HBM
        } else {
          src = access(*c.load);  // the VMEM block, as a ref
          src = src.size() > 5 && src.substr(src.size() - 5) == "[...]" ? src.substr(0, src.size() - 5)
                                                                        : src.replace(src.find('['), 1, ".at[");
        }
        line(remote_copy(src, op, false, peer_id(op, 1)) + ".start()" + at);
        return;
      }
      case OpKind::CopyWait: {
        const Op& start = first_copy_of(op.channel);
        const bool send = static_cast<ir::CopyEnd>(op.fn) == ir::CopyEnd::send;
        line(remote_copy(hbm_region(start, true), start, true, own_device_id(fn_)) +
             (send ? ".wait_send()" : ".wait_recv()") + at);
        return;
      }
      case OpKind::Barrier: {
        const auto& groups = cur_->comm.barrier_groups;
        const size_t g = std::find(groups.begin(), groups.end(), op.dims) - groups.begin();
        line("# barrier" + at);
        for (const std::string& l : group_barrier(fn_, op.dims, "bsem_ref.at[" + std::to_string(g) + "]")) line(l);
        return;
      }
      case OpKind::Signal:
        line("pl.semaphore_signal(psem_ref.at[" + std::to_string(op.channel) + "], " + operand(op.operands[0]) +
             ", device_id=" + peer_id(op, 1) + ", device_id_type=pl.DeviceIdType.MESH)" + at);
        return;
      case OpKind::SemWait:
        line("pl.semaphore_wait(psem_ref.at[" + std::to_string(op.channel) + "], " + operand(op.operands[0]) + ")" +
             at);
        return;
      default:
        PH_CHECK(false, "not a collective op");
    }
  }

  // Values that only dots read, which take them as they are stored: a transpose (a dot folds
  // it into its dimension numbers: dot_arg) and a 16-bit or fp8 load's conversion to f32 (a dot
  // reads the stored dtype: the load's `_raw`). Their code would compute what nobody reads
  // (attention's K block, converted and transposed at every trip), so it is not emitted.
  void find_folded(const Op& launch, const PallasLaunch& pl) {
    folded_.clear();
    std::map<int, std::vector<std::pair<const Op*, size_t>>> readers;  // value -> (op, operand position)
    std::set<int> pinned;  // read other than as an operand: an index, a range bound
    std::function<void(const std::vector<Op>&)> visit = [&](const std::vector<Op>& ops) {
      for (const Op& o : ops) {
        for (size_t k = 0; k < o.operands.size(); ++k) readers[o.operands[k]].push_back({&o, k});
        for (const ir::IndexItem& ix : o.index)
          if (ix.value >= 0) pinned.insert(ix.value);
        for (const ir::ScanCombine& c : o.combine) visit(c.ops);
        visit(o.body);
      }
    };
    visit(launch.body);
    for (const ir::TileInfo& t : fn_.tiles) {
      if (t.begin_value >= 0) pinned.insert(t.begin_value);
      if (t.end_value >= 0) pinned.insert(t.end_value);
    }
    auto dot_operand = [](const std::pair<const Op*, size_t>& r) {
      return r.first->kind == OpKind::Dot && r.second < 2;
    };
    auto only = [&](int v, const std::function<bool(const std::pair<const Op*, size_t>&)>& ok) {
      auto it = readers.find(v);
      return !pinned.count(v) && it != readers.end() && std::all_of(it->second.begin(), it->second.end(), ok);
    };
    std::vector<const Op*> loads;
    ir::walk(launch.body, [&](const Op& o) {
      if (o.kind == OpKind::Transpose && only(o.result, dot_operand)) folded_.insert(o.result);
      if (o.kind == OpKind::Load) loads.push_back(&o);
    });
    for (const Op* o : loads) {
      const DType d = fn_.tensors[o->tensor].dtype;
      const bool stored_dtype_feeds_dots = d == DType::bf16 || d == DType::f16 || is_fp8(d);
      if (!stored_dtype_feeds_dots || ir::has_gather(*o) || ir::is_masked(*o) || pl.dma_rows_of.count(o)) continue;
      if (only(o->result, [&](const std::pair<const Op*, size_t>& r) {
            return dot_operand(r) || (r.first->kind == OpKind::Transpose && folded_.count(r.first->result));
          }))
        folded_.insert(o->result);
    }
  }

  // A grid dim's offset off_<tile> and valid length n_<tile>, from its index g_<tile>.
  void grid_offsets(const lower::GridDim& g) {
    const std::string t = tname(g.tile);
    // (a tile over ph::range(b, e) starts at b)
    const std::string begin = g.begin ? std::to_string(g.begin) + " + " : "";
    line("off_" + t + " = " + begin + "g_" + t + (unit(g.tile) ? "" : " * " + std::to_string(g.block)));
    if (!unit(g.tile))
      line("n_" + t + " = jnp.minimum(" + std::to_string(g.block) + ", " + std::to_string(g.begin + g.extent) +
           " - off_" + t + ")");
  }

  // A launch whose sole loop runs on the grid (plan.h, PallasLaunch::grid_loop): each step is
  // one trip. The ops before the loop that the trips read run at every step; the state's set-up
  // (and what only it reads) at the first trip; the loop's body at every step; the ops after
  // the loop, which read the state out, at the last trip. The Vars' scratch persists across
  // steps, and an output block indexed by the launch tiles only stays in VMEM across the trips
  // of one outer block: it is written back when the next outer block begins.
  void grid_loop_body(const PallasLaunch& pl) {
    const Op& loop = *pl.grid_loop;
    const lower::GridDim& g = pl.grid.back();
    const std::string k = "g_" + tname(g.tile);
    std::vector<const Op*> first, last;
    bool after = false;
    for (const Op& op : pl.plan->op->body) {
      if (&op == &loop) {
        after = true;
      } else if (after) {
        last.push_back(&op);
      } else if (pl.first_trip_ops.count(&op)) {
        first.push_back(&op);
      } else {
        statement(op, nullptr);
      }
    }
    auto region = [&](const std::vector<const Op*>& ops, const std::string& cond, const std::string& name,
                      const std::string& what) {
      if (ops.empty()) return;
      line("");
      line("@pl.when(" + cond + ")  # " + what);
      line("def " + name + "():");
      ++depth_;
      for (const Op* op : ops) statement(*op, nullptr);
      --depth_;
      line("");
    };
    region(first, k + " == 0", "_first_trip", "the state's set-up, at the first trip");
    line("# loop at " + loop.loc.str() + ": " + std::to_string(g.steps) + " trips of " + std::to_string(g.block) +
         ", on the grid (its last dim: one trip per step)");
    body(loop.body, pl.plan->inner_loop(g.tile));
    region(last, k + " == " + std::to_string(g.steps - 1), "_last_trip", "after the loop, at the last trip");
  }

  // Host views (views.h): a view the launch uses gets its value from its root's first (when the
  // root has one), and a view it writes is mapped back into its root after it.
  std::vector<int> views_of(const PallasLaunch& pl, bool written_only) const {
    std::vector<int> v;
    for (const PallasSlot& s : pl.slots)
      if (fn_.tensors[s.tensor].origin == ir::TensorInfo::View && (s.written || !written_only) &&
          std::find(v.begin(), v.end(), s.tensor) == v.end())
        v.push_back(s.tensor);
    return v;
  }
  void views_before(const PallasLaunch& pl, bool emit) {
    for (int t : views_of(pl, false)) {
      has_value_.erase(t);
      if (!has_value_.count(fn_.tensors[t].root)) continue;
      if (emit) line("t" + std::to_string(t) + " = " + view_value(fn_, t));
      has_value_.insert(t);
    }
  }
  void views_after(const PallasLaunch& pl, bool emit) {
    for (int t : views_of(pl, true)) {
      const int root = fn_.tensors[t].root;
      const ir::TensorInfo& r = fn_.tensors[root];
      if (emit && !has_value_.count(root))  // elements the kernel leaves unwritten are undefined
        line("t" + std::to_string(root) + " = jnp.zeros(" + shape_tuple(r.shape) + ", " + jnp_dtype(r.dtype) + ")");
      if (emit)
        for (const std::string& l : write_back_view(fn_, t)) line(l);
      has_value_.insert(root);
    }
  }

  static std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
  }

  void body(const std::vector<Op>& ops, const lower::InnerLoop* loop) {
    for (const Op& op : ops) statement(op, loop);
  }

  std::string v(int id) const { return "v" + std::to_string(id); }

  // The reference expression of a load/store's block: the slot's ref, sliced for a resident
  // trip, or the pipeline body's block ref.
  std::string access(const Op& op) {
    int s = cur_->slot_of.at(&op);
    const PallasSlot& slot = cur_->slots[s];
    if (slot.mode == PallasSlot::Hbm) return hbm_buffer(op) + "[...]";  // (its DMA: hbm_transfer)
    if (slot.mode == PallasSlot::Stream)                                // the trip's buffer (its DMA: jagged_loop)
      return "sb" + std::to_string(s) + "_ref[j_" + tname(slot.loop_tile) + " % 2]";
    bool out = op.kind == OpKind::Store;
    std::string ref =
        slot.mode == PallasSlot::Pipeline ? "b" + std::to_string(s) + (out ? "o" : "i") : slot_ref(s, out);
    std::vector<std::string> idx;
    if (slot.mode == PallasSlot::Smem) {        // the whole tensor in SMEM: a scalar at the indices
      for (const ir::IndexItem& ix : op.index)  // (a launch's unit tile: its grid offset)
        idx.push_back(ix.kind == ir::IndexItem::Tile ? "off_" + tname(ix.tile) : operand(ix.value));
      return ref + "[" + join(idx) + "]";
    }
    bool sliced = false;
    for (size_t d = 0; d < op.index.size(); ++d) {
      if (slot.block[d] < 0) continue;
      const ir::IndexItem& ix = op.index[d];
      // (the slot's loop's tile, or an enclosing loop's whose whole extent the block holds)
      const bool own = ix.kind == ir::IndexItem::Tile && ix.tile == slot.loop_tile;
      const bool enclosing =
          ix.kind == ir::IndexItem::Tile && std::count(slot.trip_tiles.begin(), slot.trip_tiles.end(), ix.tile) > 0;
      if ((own || enclosing) && jagged_tiles_.count(ix.tile)) {
        // A jagged trip: the block of the loop's size at the clamped start s_t (see jagged_loop).
        idx.push_back("pl.ds(s_" + tname(ix.tile) + ", " + std::to_string(block(ix.tile)) + ")");
        sliced = true;
      } else if (slot.whole_tensor && ix.kind == ir::IndexItem::Tile && !own && !enclosing &&
                 (unit(ix.tile) || block(ix.tile) < slot.block[d])) {
        // A launch tile's block of the whole tensor in VMEM (beside a jagged store's rows): at
        // the step's offset, aligned as the plan checked (check_whole_tensor_block).
        const std::string t = tname(ix.tile), b = std::to_string(block(ix.tile));
        const size_t rank = op.index.size();
        const int64_t sub = tpu_sublane_tile(dtype_size(fn_.tensors[op.tensor].dtype));
        if (unit(ix.tile))
          idx.push_back("off_" + t);
        else if (d + 1 == rank)
          idx.push_back("pl.ds(pl.multiple_of(off_" + t + ", 128), " + b + ")");
        else if (d + 2 == rank)
          idx.push_back("pl.ds(pl.multiple_of(off_" + t + ", " + std::to_string(sub) + "), " + b + ")");
        else
          idx.push_back("pl.ds(off_" + t + ", " + b + ")");
        sliced = true;
      } else if ((own && slot.mode == PallasSlot::Resident) || (enclosing && resident_tiles_.count(ix.tile))) {
        std::string t = tname(ix.tile);
        // (a unit tile indexes one element: its dim is squeezed out of the value)
        if (unit(ix.tile))
          idx.push_back("off_" + t);
        else if (dynamic_tiles_.count(ix.tile))  // (a fori_loop's trip: an offset known at run time)
          idx.push_back("pl.ds(off_" + t + ", n_" + t + ")");
        else
          idx.push_back("off_" + t + ":off_" + t + " + n_" + t);
        sliced = true;
      } else if (ix.kind == ir::IndexItem::Tile && fn_.tiles[ix.tile].parent >= 0 && block(ix.tile) < slot.block[d]) {
        // A tile over the launch tile's block: the trip's rows of that block (a static offset).
        std::string t = tname(ix.tile);
        idx.push_back("lo_" + t + ":lo_" + t + " + " + std::to_string(block(ix.tile)));
        sliced = true;
      } else if (ix.kind == ir::IndexItem::Tile && fn_.tiles[ix.tile].parent < 0 && block(ix.tile) < slot.block[d]) {
        // A tile over a range shorter than its block (and than the dim): one block, its first
        // elements (a store keeps the rest: the slot keeps its prior contents).
        idx.push_back("0:" + std::to_string(block(ix.tile)));
        sliced = true;
      } else if (ix.kind == ir::IndexItem::Slice) {
        // Cut from the whole dim: statically at a constant start (or a computed one the plan
        // found constant), else at pl.ds(start) (the plan checked every value in range, and
        // along the lane dim a multiple of 128, which Mosaic is told).
        const Op* c = def_op(ix.value);
        auto st = cur_->static_starts.find(ix.value);
        if ((c && c->kind == OpKind::Constant) || st != cur_->static_starts.end()) {
          const int64_t a = st != cur_->static_starts.end() ? st->second : static_cast<int64_t>(c->number);
          idx.push_back(std::to_string(a) + ":" + std::to_string(a + ix.length));
        } else {
          // (A trace-time loop's start is a Python int: static, and multiple_of takes arrays only.)
          std::string e = operand(ix.value);
          if (d + 1 == op.index.size())
            e = "(" + e + " if isinstance(" + e + ", int) else pl.multiple_of(" + e + ", 128))";
          idx.push_back("pl.ds(" + e + ", " + std::to_string(ix.length) + ")");
        }
        sliced = true;
      } else {
        idx.push_back(":");
      }
    }
    return ref + "[" + (sliced ? join(idx) : "...") + "]";
  }

  std::string compute_cast(DType storage, const std::string& e) {
    if (storage == DType::f32) return e;
    if (is_floating(storage)) return e + ".astype(jnp.float32)";  // bf16, f16, fp8: exact
    if (storage == DType::boolean) return "(" + e + " != 0)";
    return e + ".astype(jnp.int32)";
  }

  void statement(const Op& op, const lower::InnerLoop* loop) {
    if (op.result >= 0) defs_[op.result] = &op;
    const ir::Type* rt = op.result >= 0 ? &type(op.result) : nullptr;
    auto def = [&](const std::string& e) { line(v(op.result) + " = " + e); };
    switch (op.kind) {
      case OpKind::Loop:
        return inner_loop(op);
      case OpKind::If: {  // pl.when: the region as a function traced under the condition
        const std::string name = "_when_" + std::to_string(when_counter_++);
        line("");
        line("@pl.when(" + operand(op.operands[0]) + ")  # when at " + op.loc.str());
        line("def " + name + "():");
        ++depth_;
        line("pass");
        body(op.body, loop);
        --depth_;
        line("");
        return;
      }
      case OpKind::Load: {
        const ir::TensorInfo& t = fn_.tensors[op.tensor];
        if (cur_->dma_rows_of.count(&op)) return dma_gather(op);
        if (copy_only_loads_.count(&op)) return;  // (a copy moves its block: find_copy_only_loads)
        if (cur_->comm.hbm_of.count(&op)) hbm_transfer(op, true);
        line(v(op.result) + "_raw = " + access(op));
        if (!ir::has_gather(op) && !ir::is_masked(op)) {
          raw_[op.result] = t.dtype;             // a dot may read the stored dtype directly
          if (folded_.count(op.result)) return;  // (only dots read it: the stored dtype)
          return def(compute_cast(t.dtype, v(op.result) + "_raw"));
        }
        std::string e = compute_cast(t.dtype, v(op.result) + "_raw");
        // A gather: the block holds the whole gathered dim; pick the indexed rows or columns.
        int axis = 0;
        for (size_t d = 0; d < op.index.size(); ++d) {
          const ir::IndexItem& ix = op.index[d];
          if (ix.kind == ir::IndexItem::Gather) {
            e = "_gather(" + e + ", " + std::to_string(axis) + ", " + operand(ix.value) + ", " +
                std::to_string(t.shape[d]) + ")";
            break;
          }
          axis += ix.kind != ir::IndexItem::Tile || !unit(ix.tile);
        }
        // A masked load: masked-off elements take the fill (a gather's NaN for an out-of-range
        // index included: those indices need not be in range).
        if (ir::is_masked(op)) {
          const std::string shape = shape_str(rt->shape);
          e = "jnp.where(jnp.broadcast_to(" + operand(op.operands[0]) + ", " + shape + "), " + e +
              ", jnp.broadcast_to(" + operand(op.operands[1]) + ", " + shape + "))";
        }
        return def(e);
      }
      case OpKind::Store: {
        if (cur_->dma_rows_of.count(&op)) return dma_scatter(op);
        const PallasSlot& slot = cur_->slots[cur_->slot_of.at(&op)];
        if (ir::is_atomic(op) && slot.whole_tensor && !ir::indexes_jagged_tile(fn_, op)) return atomic_whole(op);
        const ir::TensorInfo& t = fn_.tensors[op.tensor];
        ir::Type region;
        ir::load_type(fn_, op.tensor, op.index, &region);
        std::string val = operand(op.operands[0]);
        const std::string ref = access(op), shape = shape_str(region.shape);
        std::string e = to_storage("jnp.broadcast_to(" + val + ", " + shape + ")", t.dtype);
        // An atomic update: a read-modify-write of the block in VMEM (plan.cpp: the steps that
        // meet on it run in order and its prior contents came in).
        if (ir::is_atomic(op))
          e = to_storage(
              combine(ir::atomic_fn(op), compute_cast(t.dtype, ref), "jnp.broadcast_to(" + val + ", " + shape + ")"),
              t.dtype);
        // A masked store: masked-off elements keep what the block holds (its prior contents
        // or earlier stores: see kernel()), selected in the storage dtype so they stay bit-exact.
        if (ir::is_masked(op))
          e = "jnp.where(jnp.broadcast_to(" + operand(op.operands[1]) + ", " + shape + "), " + e + ", " + ref + ")";
        // A tensor in HBM, under a scalar mask (the plan refuses others): the region moves when the
        // mask is on, whole, and not at all when it is off (a copy may be landing there).
        const bool hbm = cur_->comm.hbm_of.count(&op) > 0;
        if (hbm && ir::is_masked(op)) {
          line("@pl.when(" + operand(op.operands[1]) + ")");
          line("def _when_" + std::to_string(when_counter_++) + "():");
          ++depth_;
          line(ref + " = " + to_storage("jnp.broadcast_to(" + val + ", " + shape + ")", t.dtype));
          hbm_transfer(op, false);
          --depth_;
          return;
        }
        // A ragged last block of a tile whose range ends inside the tensor: the elements past
        // the range's end are the tensor's, kept (the plan reads the prior contents in).
        for (size_t d = 0, axis = 0; d < op.index.size(); ++d) {
          if (slot.block[d] < 0) continue;
          const ir::IndexItem& ix = op.index[d];
          if (ix.kind == ir::IndexItem::Tile && jagged_tiles_.count(ix.tile)) {  // the trip's window of rows
            const std::string iota = "jax.lax.broadcasted_iota(jnp.int32, " + shape + ", " + std::to_string(axis) + ")",
                              w = "w_" + tname(ix.tile), n = "n_" + tname(ix.tile);
            e = "jnp.where((" + iota + " >= " + w + ") & (" + iota + " < " + w + " + " + n + "), " + e + ", " + ref +
                ")";
          } else if (ix.kind == ir::IndexItem::Tile && !resident_tiles_.count(ix.tile) &&
                     fn_.tiles[ix.tile].parent < 0 && fn_.tiles[ix.tile].end < t.shape[d] &&
                     masked(Dim::of_tile(ix.tile)))
            e = "jnp.where(jax.lax.broadcasted_iota(jnp.int32, " + shape + ", " + std::to_string(axis) + ") < n_" +
                tname(ix.tile) + ", " + e + ", " + ref + ")";
          axis += !(ix.kind == ir::IndexItem::Tile && unit(ix.tile));  // (a unit tile's dim is not in the value)
        }
        line(ref + " = " + e);
        if (hbm) hbm_transfer(op, false);
        return;
      }
      case OpKind::DeviceIndex:
      case OpKind::CopyStart:
      case OpKind::CopyWait:
      case OpKind::Barrier:
      case OpKind::Signal:
      case OpKind::SemWait:
        return collective(op);
      case OpKind::Constant:
        return def(py_number(op.number, rt->dtype));
      case OpKind::Full:
        return def("jnp.full(" + shape_str(rt->shape) + ", " + py_number(op.number, rt->dtype) + ", " +
                   jnp_dtype(rt->dtype) + ")");
      case OpKind::ScalarParam:  // an integer argument (ph::Int): exact in f32 (the host checks it)
        if (rt->dtype == DType::i64) return def("scalars_ref[" + std::to_string(op.param) + "].astype(jnp.int32)");
        return def("scalars_ref[" + std::to_string(op.param) + "]");
      case OpKind::TileBegin:
        return def("off_" + tname(op.tile));
      case OpKind::TileEnd:
        if (unit(op.tile)) return def("off_" + tname(op.tile) + " + 1");
        return def("off_" + tname(op.tile) + " + n_" + tname(op.tile));
      case OpKind::TileId: {
        // A launch tile's grid index; a loop's trip, counted from its range's start (the
        // enclosing block's offset for a tile within another).
        const ir::TileInfo& t = fn_.tiles[op.tile];
        for (const lower::GridDim& g : cur_->grid)
          if (g.tile == op.tile) return def("g_" + tname(op.tile));
        if (jagged_tiles_.count(op.tile)) return def("j_" + tname(op.tile));
        const std::string base = t.parent >= 0 ? "off_" + tname(t.parent) : std::to_string(t.begin);
        return def("(off_" + tname(op.tile) + " - " + base + ") // " + std::to_string(block(op.tile)));
      }
      case OpKind::TileIndex: {
        std::string n = unit(op.tile) ? "1" : dim_size(Dim::of_tile(op.tile));
        if (jagged_tiles_.count(op.tile))  // the rows of the block the trip reads, from s_t
          return def("s_" + tname(op.tile) + " + jax.lax.broadcasted_iota(jnp.int32, (" + n + ",), 0)");
        return def("off_" + tname(op.tile) + " + jax.lax.broadcasted_iota(jnp.int32, (" + n + ",), 0)");
      }
      case OpKind::Arange:
        return def("jax.lax.broadcasted_iota(jnp.int32, (" + std::to_string(rt->shape[0].size) + ",), 0)");
      case OpKind::Unary:
      case OpKind::Binary:
      case OpKind::Where:
      case OpKind::Cast:
        return elementwise(op);
      case OpKind::Reduce:
        return def(reduce(op));
      case OpKind::Scan:
        return scan(op, loop);
      case OpKind::Unsqueeze:
        // A column gains its trailing dim for free: [..., rows, 1] is already that shape, and a
        // lane-dense [..., rows, 128] broadcasts over the row (operand(): _lanes).
        if (column(op.operands[0]) &&
            static_cast<size_t>(kept_axis(rt->shape, op.axis)) + 1 == kept(rt->shape).size()) {
          if (width_.at(op.operands[0]) > 1) lane_rows_[op.result] = width_.at(op.operands[0]);
          return def(v(op.operands[0]));
        }
        return def("jnp.expand_dims(" + operand(op.operands[0]) + ", " + std::to_string(kept_axis(rt->shape, op.axis)) +
                   ")");
      case OpKind::Transpose:
        if (folded_.count(op.result)) return;  // (its dots take it as dimension numbers)
        return def("jnp.swapaxes(" + operand(op.operands[0]) + ", -1, -2)");
      case OpKind::Dot:
        return def(dot(op));
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Expand:
      case OpKind::Squeeze:
      case OpKind::Split:
      case OpKind::Join:
      case OpKind::Stack:
      case OpKind::Cat:
        return def(block_view(op));
      case OpKind::VarDecl:
      case OpKind::VarSet: {
        const ir::Type& vt = fn_.vars[op.var].type;
        std::string ref = "var" + std::to_string(op.var) + "_ref";
        if (vt.rank() == 0) return line(ref + "[0] = " + operand(op.operands[0]));
        if (rows_->vars.count(op.var)) {  // lane-dense: every lane of a row the row's value
          const int x = op.operands[0];
          const std::string col = column(x) ? v(x) : "jnp.expand_dims(" + v(x) + ", -1)";
          return line(ref + "[...] = jnp.broadcast_to(" + col + ", " + lane_dense_shape(vt) + ")");
        }
        return line(ref + "[...] = jnp.broadcast_to(" + operand(op.operands[0]) + ", " + shape_str(vt.shape) + ")");
      }
      case OpKind::VarGet: {
        std::string ref = "var" + std::to_string(op.var) + "_ref";
        if (rows_->vars.count(op.var)) width_[op.result] = 128;
        return def(rt->rank() == 0 ? ref + "[0]" : ref + "[...]");
      }
      default:
        throw InternalError(op.loc.str() + ": no pallas form for " + std::string(ir::op_name(op)) + " in a launch");
    }
    (void)loop;
  }

  // A value as the op being emitted reads it. A column (row_stats.h) is read back in its Tile IR
  // shape, except by an elementwise op that makes a column (col_mode_), whose operands are all
  // columns or scalars, read as they are. A lane-dense column given a trailing dim (lane_rows_)
  // is cut to the row width of the op that broadcasts it (lanes_to_).
  std::string operand(int id) {
    if (col_mode_) return v(id);
    if (column(id)) return v(id) + "[..., 0]";
    if (lane_rows_.count(id))
      return lanes_to_.empty() ? v(id) + "[..., :1]" : "_lanes(" + v(id) + ", " + lanes_to_ + ")";
    return v(id);
  }
  bool column(int id) const { return rows_ && rows_->columns.count(id); }

  // Unary, binary, where and cast: as a column (the widest of its column operands: 1, or 128
  // for a lane-dense one), or in the Tile IR shape.
  void elementwise(const Op& op) {
    const ir::Type& rt = type(op.result);
    const bool col = column(op.result);
    const std::vector<Dim> k = kept(rt.shape);
    col_mode_ = col;
    if (!col && !k.empty()) lanes_to_ = dim_size(k.back());
    std::string e;
    if (op.kind == OpKind::Unary)
      e = unary(op);
    else if (op.kind == OpKind::Binary)
      e = binary(op);
    else if (op.kind == OpKind::Cast)
      e = cast(op);
    else
      e = "jnp.where(" + operand(op.operands[0]) + ", " + operand(op.operands[1]) + ", " + operand(op.operands[2]) +
          ")" + (rt.dtype == DType::f32 ? ".astype(jnp.float32)" : "");
    col_mode_ = false;
    lanes_to_.clear();
    if (col) {
      int w = 1;
      for (int x : op.operands)
        if (column(x)) w = std::max(w, width_.at(x));
      width_[op.result] = w;
    }
    line(v(op.result) + " = " + e);
  }

  // A lane-dense Var's scratch shape: its value's, then 128 lanes.
  std::string lane_dense_shape(const ir::Type& vt) const {
    std::vector<std::string> s;
    for (const Dim& d : kept(vt.shape)) s.push_back(dim_size(d));
    s.push_back("128");
    return tuple_str(s);
  }

  // An atomic update's combine of the block's contents `a` with the value `b` (compute dtype).
  static std::string combine(ir::AtomicFn f, const std::string& a, const std::string& b) {
    switch (f) {
      case ir::AtomicFn::max:
        return "jnp.maximum(" + a + ", " + b + ")";
      case ir::AtomicFn::min:
        return "jnp.minimum(" + a + ", " + b + ")";
      default:
        return "(" + a + " + " + b + ")";
    }
  }
  static const char* combine_name(ir::AtomicFn f) {
    return f == ir::AtomicFn::max ? "max" : f == ir::AtomicFn::min ? "min" : "add";
  }

  // An atomic update at indices computed from data, on the whole tensor in VMEM (plan.cpp,
  // add_whole_atomic): through an index block, the rows it names one after another
  // (_atomic_rows); at integer indices, the one element block they select.
  void atomic_whole(const Op& op) {
    const int s = cur_->slot_of.at(&op);
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    ir::Type region;
    ir::load_type(fn_, op.tensor, op.index, &region);
    const std::string shape = shape_str(region.shape), ref = slot_ref(s, true);
    const std::string val = "jnp.broadcast_to(" + operand(op.operands[0]) + ", " + shape + ")";
    const std::string what = std::string(ir::atomic_name(ir::atomic_fn(op))) + " at " + op.loc.str();
    if (ir::has_gather(op)) {
      const ir::IndexItem& g = op.index[0];
      const Dim& rows = type(g.value).shape[0];
      // The valid rows, unmasked: not a ragged index block's padding, and in a jagged loop's trip
      // only its window [w_t, w_t + n_t) of the block it reads (the rows around it are other
      // trips' or past the range's end, and must not be combined twice or at all).
      std::vector<std::string> ok;
      const std::string iota = "jax.lax.broadcasted_iota(jnp.int32, " + shape + ", 0)";
      if (rows.kind == Dim::Tile && jagged_tiles_.count(rows.tile)) {
        const std::string w = "w_" + tname(rows.tile), n = "n_" + tname(rows.tile);
        ok.push_back("(" + iota + " >= " + w + ") & (" + iota + " < " + w + " + " + n + ")");
      } else if (rows.kind == Dim::Tile && masked(rows)) {
        ok.push_back("(" + iota + " < n_" + tname(rows.tile) + ")");
      }
      if (ir::is_masked(op)) ok.push_back("jnp.broadcast_to(" + operand(op.operands[1]) + ", " + shape + ")");
      // A launch tile's block of columns beside the rows (plan.cpp: a multiple of 128 dividing
      // them): the step updates that block of the VMEM copy, at a 128-aligned lane offset.
      std::string at = ref + "[...]";
      if (op.index.size() == 2 && op.index[1].kind == ir::IndexItem::Tile && block(op.index[1].tile) < t.shape[1]) {
        const std::string b = std::to_string(block(op.index[1].tile));
        at = ref + "[:, pl.ds(pl.multiple_of(off_" + tname(op.index[1].tile) + ", 128), " + b + ")]";
      }
      line("# " + what + ": the rows " + v(g.value) + " names, of the whole tensor in VMEM, one after another");
      line(at + " = " +
           to_storage("_atomic_rows(" + compute_cast(t.dtype, at) + ", " + operand(g.value) + ", " + val + ", " +
                          (ok.empty() ? "jnp.full(" + shape + ", True)" : join(ok, " & ")) + ", \"" +
                          combine_name(ir::atomic_fn(op)) + "\")",
                      t.dtype));
      return;
    }
    std::vector<std::string> idx, in_range;
    for (size_t d = 0; d < op.index.size(); ++d) {
      const ir::IndexItem& ix = op.index[d];
      if (ix.kind != ir::IndexItem::Scalar) {
        idx.push_back(":");
        continue;
      }
      const std::string x = operand(ix.value);
      idx.push_back(x);
      in_range.push_back("(" + x + " >= 0) & (" + x + " < " + std::to_string(t.shape[d]) + ")");
    }
    const std::string at = ref + "[" + join(idx) + "]";
    std::string e = to_storage(combine(ir::atomic_fn(op), compute_cast(t.dtype, at), val), t.dtype);
    if (ir::is_masked(op))
      e = "jnp.where(jnp.broadcast_to(" + operand(op.operands[1]) + ", " + shape + "), " + e + ", " + at + ")";
    line("");
    line("@pl.when(" + join(in_range, " & ") + ")  # " + what + ": an index out of range updates nothing");
    line("def _atomic_" + std::to_string(when_counter_++) + "():");
    line("    " + at + " = " + e);
    line("");
  }

  // The _dma_rows call of a dma gather or scatter: rows up to the index block's valid length,
  // columns from the width block's offset (a ragged last block moves its static tail).
  std::string dma_rows_call(const DmaRows& g, const std::string& hbm, int k) {
    const Op& op = *g.op;
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string n = std::to_string(k);
    const Dim& rows = type(op.index[0].value).shape[0];
    const std::string valid = masked(rows) ? "n_" + tname(rows.tile) : std::to_string(g.rows);
    std::string col = "0", width = "None", tail = "None";
    if (g.buffer.size() == 2) {
      width = std::to_string(g.buffer[1]);
      const ir::IndexItem& ix = op.index[1];
      if (ix.kind == ir::IndexItem::Tile) col = "off_" + tname(ix.tile);
      if (t.shape[1] % g.buffer[1] != 0) tail = std::to_string(t.shape[1] % g.buffer[1]);
    }
    return "_dma_rows(" + hbm + ", gi" + n + "_ref, gb" + n + "_ref, gs" + n + "_ref, " + valid + ", " +
           std::to_string(t.shape[0]) + ", " + col + ", " + width + ", " + tail + ", " +
           (g.scatter ? "True" : "False") + ")";
  }

  // A dma gather's or scatter's buffer as the block's value: in a resident loop's trip, whose
  // values are exactly the trip's width, its first n_<tile> columns.
  std::string dma_buffer(const DmaRows& g, int k) const {
    const std::string ref = "gb" + std::to_string(k) + "_ref";
    const ir::IndexItem* w = g.buffer.size() == 2 ? &g.op->index[1] : nullptr;
    if (w && w->kind == ir::IndexItem::Tile && resident_tiles_.count(w->tile))
      return ref + "[:, :n_" + tname(w->tile) + "]";
    return ref + "[...]";
  }

  // A scatter (gather.h): the value block stored into the buffer, each valid row copied to the
  // row its index names in the output in HBM; a row whose index is out of range writes nothing.
  void dma_scatter(const Op& op) {
    const int k = cur_->dma_rows_of.at(&op);
    const DmaRows& g = cur_->dma_rows[k];
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    ir::Type region;
    ir::load_type(fn_, op.tensor, op.index, &region);
    line("# scatter into " + t.name + ": one row copy per index");
    line(dma_buffer(g, k) + " = " +
         to_storage("jnp.broadcast_to(" + operand(op.operands[0]) + ", " + shape_str(region.shape) + ")", t.dtype));
    line(dma_rows_call(g, slot_ref(g.table_slot, true), k));
  }

  // A gather by DMA (gather.h): the index block's rows of the table, copied into the buffer;
  // a row whose index is out of range becomes the fill (NaN, or 0 for integer and bool tables).
  void dma_gather(const Op& op) {
    const int k = cur_->dma_rows_of.at(&op);
    const DmaRows& g = cur_->dma_rows[k];
    const ir::TensorInfo& t = fn_.tensors[op.tensor];
    const std::string n = std::to_string(k), idx = operand(op.index[0].value);
    line("# gather from " + t.name + " by DMA (config gathers[" + std::to_string(p_.knobs.gather_knob(op)) +
         "]): one row copy per index");
    line(dma_rows_call(g, slot_ref(g.table_slot, false), k));
    line(v(op.result) + "_raw = " + dma_buffer(g, k));
    const std::string fill = is_floating(t.dtype) ? "jnp.nan" : t.dtype == DType::boolean ? "False" : "0";
    std::string ok = "(" + idx + " >= 0) & (" + idx + " < " + std::to_string(t.shape[0]) + ")";
    if (g.buffer.size() == 2) ok = "(" + ok + ")[:, None]";
    std::string e = "jnp.where(" + ok + ", " + compute_cast(t.dtype, v(op.result) + "_raw") + ", " + fill + ")";
    if (ir::is_masked(op)) {
      const std::string shape = shape_str(type(op.result).shape);
      e = "jnp.where(jnp.broadcast_to(" + operand(op.operands[0]) + ", " + shape + "), " + e + ", jnp.broadcast_to(" +
          operand(op.operands[1]) + ", " + shape + "))";
    }
    line(v(op.result) + " = " + e);
  }

  // Block views on values: jnp ops on the kept dims (unit tiles are squeezed out of values;
  // padding of a ragged block sits in tile dims, which keep their places).
  std::string block_view(const Op& op) {
    const ir::Type& rt = type(op.result);
    const ir::Type& in = type(op.operands[0]);
    const std::string a = operand(op.operands[0]);
    auto squeezed = [&](const Dim& d) { return d.kind == Dim::Tile && unit(d.tile); };
    // Operands broadcast to `shape` (join, stack).
    auto broadcast_all = [&](const std::vector<Dim>& shape) {
      std::vector<std::string> xs;
      for (int o : op.operands) xs.push_back("jnp.broadcast_to(" + operand(o) + ", " + shape_str(shape) + ")");
      return "[" + join(xs) + "]";
    };
    switch (op.kind) {
      case OpKind::Reshape:
        return "jnp.reshape(" + a + ", " + shape_str(rt.shape) + ")";
      case OpKind::Permute: {
        std::vector<int> kept_pos(in.shape.size(), -1);
        int k = 0;
        for (size_t d = 0; d < in.shape.size(); ++d)
          if (!squeezed(in.shape[d])) kept_pos[d] = k++;
        std::vector<std::string> perm;
        for (size_t i = 0; i < op.dims.size(); ++i)
          if (!squeezed(rt.shape[i])) perm.push_back(std::to_string(kept_pos[static_cast<size_t>(op.dims[i])]));
        return "jnp.transpose(" + a + ", " + tuple_str(perm) + ")";
      }
      case OpKind::Expand: {
        // First drop the operand's dims whose target dim is squeezed (they are size 1), so the
        // ranks align, then broadcast.
        std::vector<std::string> aligned;
        const size_t lead = rt.shape.size() - in.shape.size();
        for (size_t d = 0; d < in.shape.size(); ++d)
          if (!squeezed(rt.shape[lead + d])) aligned.push_back(squeezed(in.shape[d]) ? "1" : dim_size(in.shape[d]));
        return "jnp.broadcast_to(jnp.reshape(" + a + ", " + tuple_str(aligned) + "), " + shape_str(rt.shape) + ")";
      }
      case OpKind::Squeeze:
        return "jnp.squeeze(" + a + ", " + std::to_string(kept_axis(in.shape, op.axis)) + ")";
      case OpKind::Split:
        return a + "[..., " + std::to_string(op.axis) + "]";
      case OpKind::Join: {
        std::vector<Dim> s(rt.shape.begin(), rt.shape.end() - 1);
        return "jnp.stack(" + broadcast_all(s) + ", axis=-1)";
      }
      case OpKind::Stack: {
        std::vector<Dim> s = rt.shape;
        s.erase(s.begin() + op.axis);
        return "jnp.stack(" + broadcast_all(s) + ", axis=" + std::to_string(kept_axis(rt.shape, op.axis)) + ")";
      }
      case OpKind::Cat: {
        std::vector<std::string> xs;
        for (int o : op.operands) xs.push_back(operand(o));
        return "jnp.concatenate([" + join(xs) + "], axis=" + std::to_string(kept_axis(rt.shape, op.axis)) + ")";
      }
      default:
        throw InternalError("not a block view");
    }
  }

  std::string unary(const Op& op) {
    std::string a = operand(op.operands[0]);
    const bool integral = type(op.operands[0]).dtype == DType::i64;
    switch (static_cast<UnaryFn>(op.fn)) {
      case UnaryFn::neg:
        return "-" + a;
      case UnaryFn::exp:
        return "jnp.exp(" + a + ")";
      case UnaryFn::exp2:
        return "jnp.exp2(" + a + ")";
      case UnaryFn::log:
        return "jnp.log(" + a + ")";
      case UnaryFn::sqrt:
        return "jnp.sqrt(" + a + ")";
      case UnaryFn::rsqrt:
        return "jax.lax.rsqrt(" + a + ")";
      case UnaryFn::tanh:
        return "jnp.tanh(" + a + ")";
      case UnaryFn::sigmoid:
        return "jax.nn.sigmoid(" + a + ")";
      case UnaryFn::silu:
        return "(" + a + " * jax.nn.sigmoid(" + a + "))";
      case UnaryFn::gelu:
        return "jax.nn.gelu(" + a + ", approximate=True)";
      case UnaryFn::abs:
        return "jnp.abs(" + a + ")";
      case UnaryFn::logical_not:
        return "jnp.logical_not(" + a + ")";
      case UnaryFn::bit_not:
        return "jnp.bitwise_not(" + a + ")";
      case UnaryFn::round:  // jnp.round rounds half to even
        return integral ? a : "jnp.round(" + a + ")";
      case UnaryFn::floor:
        return integral ? a : "jnp.floor(" + a + ")";
      case UnaryFn::ceil:
        return integral ? a : "jnp.ceil(" + a + ")";
      case UnaryFn::trunc:
        return integral ? a : "jnp.trunc(" + a + ")";
      case UnaryFn::erf:
        return "jax.lax.erf(" + a + ")";
      case UnaryFn::gelu_exact:
        // Through erf: Mosaic lowers erf but not the erfc that jax.nn.gelu(approximate=False) uses.
        return "(0.5 * " + a + " * (1.0 + jax.lax.erf(" + a + " * 0.7071067811865476)))";
    }
    return "?";
  }

  std::string binary(const Op& op) {
    std::string a = operand(op.operands[0]), b = operand(op.operands[1]);
    DType r = type(op.result).dtype;
    if (ir::binary_operands_in_f32(static_cast<BinaryFn>(op.fn), r)) {
      if (type(op.operands[0]).dtype != DType::f32) a = "jnp.asarray(" + a + ", jnp.float32)";
      if (type(op.operands[1]).dtype != DType::f32) b = "jnp.asarray(" + b + ", jnp.float32)";
    }
    auto infix = [&](const char* o) { return "(" + a + " " + o + " " + b + ")"; };
    switch (static_cast<BinaryFn>(op.fn)) {
      case BinaryFn::add:
        return infix("+");
      case BinaryFn::sub:
        return infix("-");
      case BinaryFn::mul:
        return infix("*");
      case BinaryFn::div:
        return infix("/");
      case BinaryFn::maximum:
        return "jnp.maximum(" + a + ", " + b + ")";
      case BinaryFn::minimum:
        return "jnp.minimum(" + a + ", " + b + ")";
      case BinaryFn::pow:
        return "jnp.power(" + a + ", " + b + ")";
      case BinaryFn::lt:
        return infix("<");
      case BinaryFn::le:
        return infix("<=");
      case BinaryFn::gt:
        return infix(">");
      case BinaryFn::ge:
        return infix(">=");
      case BinaryFn::eq:
        return infix("==");
      case BinaryFn::ne:
        return infix("!=");
      case BinaryFn::logical_and:
        return "jnp.logical_and(" + a + ", " + b + ")";
      case BinaryFn::logical_or:
        return "jnp.logical_or(" + a + ", " + b + ")";
      case BinaryFn::floordiv:
        return r == DType::f32 ? "jnp.floor(" + a + " / " + b + ")" : "_floordiv(" + a + ", " + b + ")";
      case BinaryFn::mod:  // jnp.remainder on floats is torch's (fmod moved to the divisor's sign)
        return r == DType::f32 ? "jnp.remainder(" + a + ", " + b + ")" : "_mod(" + a + ", " + b + ")";
      case BinaryFn::bit_and:
        return "jnp.bitwise_and(" + a + ", " + b + ")";
      case BinaryFn::bit_or:
        return "jnp.bitwise_or(" + a + ", " + b + ")";
      case BinaryFn::bit_xor:
        return "jnp.bitwise_xor(" + a + ", " + b + ")";
      case BinaryFn::shl:
        return "_shl(" + a + ", " + b + ")";
      case BinaryFn::shr:
        return "_shr(" + a + ", " + b + ")";
      case BinaryFn::rand:
        return "_philox_uniform(" + a + ", " + b + ")";
      case BinaryFn::randn:
        return "_philox_normal(" + a + ", " + b + ")";
    }
    return "?";
  }

  std::string cast(const Op& op) {
    std::string a = operand(op.operands[0]);
    switch (op.dtype) {
      case DType::f32:
        return "jnp.asarray(" + a + ", jnp.float32)";
      case DType::bf16:
        return "jnp.asarray(" + a + ", jnp.float32).astype(jnp.bfloat16).astype(jnp.float32)";
      case DType::f16:
        return "jnp.asarray(" + a + ", jnp.float32).astype(jnp.float16).astype(jnp.float32)";
      case DType::boolean:
        return "(" + a + " != 0)";
      case DType::f8e4m3:
      case DType::f8e5m2:
        return to_storage(a, op.dtype) + ".astype(jnp.float32)";
      case DType::i8:
      case DType::u8:  // an integer wraps through the narrow type; a float truncates
        return "jnp.asarray(" + a + ").astype(" + jnp_dtype(op.dtype) + ").astype(jnp.int32)";
      default:
        return "jnp.asarray(" + a + ").astype(jnp.int32)";
    }
  }

  // The valid length of a masked dim.
  std::string valid(const Dim& d) const { return "n_" + tname(d.tile); }
  // `x` with the elements outside the valid ones of dim `d` (at `axis`) replaced by `fill`: a
  // ragged block's padding past n_t, or, in a jagged loop's trip, the rows outside the window
  // [w_t, w_t + n_t) of the block that the trip reads.
  std::string mask_invalid(const std::string& x, int axis, const Dim& d, const std::string& fill) const {
    if (jagged_tiles_.count(d.tile))
      return "_mask_window(" + x + ", " + std::to_string(axis) + ", w_" + tname(d.tile) + ", " + valid(d) + ", " +
             fill + ")";
    return "_mask(" + x + ", " + std::to_string(axis) + ", " + valid(d) + ", " + fill + ")";
  }

  // A scan (scan.h): its combine as a local function of whole blocks (its ops are elementwise),
  // then the log-step scan of the operands; the op's value is its component of the tuple.
  void scan(const Op& op, const lower::InnerLoop* loop) {
    const ir::ScanCombine& c = op.combine.at(0);
    const ir::Type& in = type(op.operands[0]);
    const Dim& d = in.shape[op.axis];
    line("# scan (component " + std::to_string(op.fn) + ") over axis " + std::to_string(op.axis) +
         (op.reverse ? ", reversed," : "") + " at " + op.loc.str());
    if (d.kind == Dim::Tile && unit(d.tile)) {  // one element (squeezed out of the value): itself
      line(v(op.result) + " = " + operand(op.operands[op.fn]));
      return;
    }
    const std::string fn = "_combine" + std::to_string(op.result);
    std::vector<std::string> params, xs, results;
    for (int p : c.params) params.push_back(v(p));
    for (int x : op.operands) xs.push_back(operand(x));
    for (int r : c.results) results.push_back(v(r));
    line("def " + fn + "(" + join(params) + "):");
    ++depth_;
    for (const Op& f : c.ops) statement(f, loop);
    line("return (" + join(results) + ",)");
    --depth_;
    // The valid elements: a jagged trip's window [w_t, w_t + n_t) of its block, else the first n.
    const bool window = d.kind == Dim::Tile && jagged_tiles_.count(d.tile);
    const std::string start = window ? "w_" + tname(d.tile) : "0";
    const std::string n_valid = masked(d) ? valid(d) : dim_size(d);
    line(v(op.result) + " = _scan((" + join(xs) + ",), " + std::to_string(kept_axis(in.shape, op.axis)) + ", " + start +
         ", " + n_valid + ", " + (op.reverse ? "True" : "False") + ", " + fn + ")[" + std::to_string(op.fn) + "]");
  }

  std::string reduce(const Op& op) {
    const ir::Type& in = type(op.operands[0]);
    int ax = kept_axis(in.shape, op.axis);
    auto f = static_cast<ReduceFn>(op.fn);
    std::string x = operand(op.operands[0]);
    const Dim& d = in.shape[op.axis];
    // Over a unit tile (squeezed out of the value: one element) every reduction is the value
    // itself; keepdim's size-1 dim is a real one in the result.
    if (d.kind == Dim::Tile && unit(d.tile))
      return op.keepdim ? "jnp.expand_dims(" + x + ", " + std::to_string(ax) + ")" : x;
    bool m = masked(d);
    // (a row statistic stays a column: row_stats.h)
    if (column(op.result)) width_[op.result] = 1;
    std::string kd = op.keepdim || column(op.result) ? ", keepdims=True" : "";
    if (m) {
      std::string fill = f == ReduceFn::max ? "-jnp.inf" : f == ReduceFn::min ? "jnp.inf" : "0";
      if (in.dtype != DType::f32 && f != ReduceFn::sum && f != ReduceFn::mean)
        fill = f == ReduceFn::max ? "jnp.iinfo(jnp.int32).min" : "jnp.iinfo(jnp.int32).max";
      x = mask_invalid(x, ax, d, fill);
    }
    std::string args = x + ", axis=" + std::to_string(ax) + kd;
    switch (f) {
      case ReduceFn::sum:
        return "jnp.sum(" + args + ")";
      case ReduceFn::max:
        return "jnp.max(" + args + ")";
      case ReduceFn::min:
        return "jnp.min(" + args + ")";
      case ReduceFn::mean:
        if (m) return "(jnp.sum(" + args + ") / " + valid(d) + ".astype(jnp.float32))";
        return "jnp.mean(" + args + ")";
    }
    return "?";
  }

  // An operand of a dot as (expression, rank, transposed): bf16 loads stay bf16 for the MXU.
  struct DotArg {
    std::string e;
    int rank = 0;
    bool transposed = false;
    DType raw = DType::f32;
  };
  DotArg dot_arg(int id) {
    DotArg a;
    int src = id;
    if (def_kind(id) == OpKind::Transpose) {
      src = def_op(id)->operands[0];
      a.transposed = true;
    }
    a.e = operand(src);
    a.rank = static_cast<int>(kept(type(src).shape).size());
    if (auto r = raw_.find(src); r != raw_.end()) a.raw = r->second;
    return a;
  }
  OpKind def_kind(int id) const { return def_op(id) ? def_op(id)->kind : OpKind::Constant; }
  const Op* def_op(int id) const {
    auto it = defs_.find(id);
    return it == defs_.end() ? nullptr : it->second;
  }

  std::string dot(const Op& op) {
    DotArg a = dot_arg(op.operands[0]), b = dot_arg(op.operands[1]);
    // The pallas plan refused dots whose operands lose a matrix dim to a squeezed unit tile
    // (plan.cpp, check_dot): both are matrices here.
    PH_CHECK(a.rank >= 2 && b.rank >= 2, "a dot over a squeezed matrix dim reached the pallas emitter");
    // A batched a with a shared 2-D b (broadcast_matmul): no batch dims, a's free dims lead.
    const bool shared_b = a.rank > 2 && b.rank == 2 && !a.transposed;
    PH_CHECK(a.rank == b.rank || shared_b, "a dot with unequal batch dims reached the pallas emitter");
    // Contracted dims (kept positions) and their masking along a ragged tile.
    const ir::Type& at = type(op.operands[0]);
    const Dim& kdim = at.shape[at.rank() - 1];
    int ka = a.transposed ? a.rank - 2 : a.rank - 1;
    int kb = b.transposed ? b.rank - 1 : b.rank - 2;
    // 16-bit loads feed the MXU as they are; a computed f32 operand meeting a 16-bit one is
    // rounded to that dtype (as flash kernels do with p before p.v): f32 x f32 would take the
    // MXU's multi-pass f32 path.
    auto low = [](DType d) { return d == DType::bf16 || d == DType::f16; };
    // An fp8 load feeds the MXU as bf16, in which every fp8 value is exact.
    auto as_low = [&](DotArg& x) {
      if (!is_fp8(x.raw)) return low(x.raw) ? x.e + "_raw" : x.e;
      x.raw = DType::bf16;
      return x.e + "_raw.astype(jnp.bfloat16)";
    };
    std::string ea = as_low(a), eb = as_low(b);
    if (low(a.raw) && !low(b.raw)) eb += ".astype(" + jnp_dtype(a.raw) + ")";
    if (low(b.raw) && !low(a.raw)) ea += ".astype(" + jnp_dtype(b.raw) + ")";
    if (low(a.raw) && low(b.raw) && a.raw != b.raw) eb += ".astype(" + jnp_dtype(a.raw) + ")";
    if (masked(kdim)) {
      ea = mask_invalid(ea, ka, kdim, "0");
      eb = mask_invalid(eb, kb, kdim, "0");
    }
    std::vector<std::string> batch;
    if (!shared_b)
      for (int i = 0; i < a.rank - 2; ++i) batch.push_back(std::to_string(i));
    std::string dims = "(((" + std::to_string(ka) + ",), (" + std::to_string(kb) + ",)), (" + tuple_str(batch) + ", " +
                       tuple_str(batch) + "))";
    std::string e = "_dot(" + ea + ", " + eb + ", " + dims + ")";
    // dot_general orders the result (batch, a's free dim, b's free dim): with a transposed its free
    // dim is M, so the result is already [..., M, N] and takes no transpose.
    if (op.operands.size() > 2) e = "(" + operand(op.operands[2]) + " + " + e + ")";
    return e;
  }

  // A slot's BlockSpec: its block shape (None for squeezed dims) and an index map from the grid
  // indices `g_<tile>` (and, for the slot's own inner loop, `loop_index`); `buffered` adds its
  // pipeline depth (emit_pipeline specs only: pallas_call specs take 1 or 2 buffers).
  std::string block_spec(const PallasSlot& s, const std::string& lambda, const std::string& loop_index,
                         bool buffered) const {
    std::vector<std::string> shape, index;
    for (size_t d = 0; d < s.first->index.size(); ++d) {
      const ir::IndexItem& ix = s.first->index[d];
      shape.push_back(s.block[d] < 0 ? "None" : std::to_string(s.block[d]));
      if (s.whole_tensor)  // (the whole tensor at every step)
        index.push_back("0");
      else if (ix.kind == ir::IndexItem::All || ix.kind == ir::IndexItem::Slice || ix.kind == ir::IndexItem::Gather)
        index.push_back("0");
      else if (ix.kind == ir::IndexItem::Scalar)
        index.push_back(scalar_index_map(ix.value));
      else if (std::count(s.trip_tiles.begin(), s.trip_tiles.end(), ix.tile))  // (an enclosing loop's extent)
        index.push_back("0");
      else if (ix.tile == s.loop_tile)
        index.push_back(loop_index + (s.mode != PallasSlot::Resident ? range_blocks(s, d, ix.tile) : ""));
      else if (fn_.tiles[ix.tile].parent >= 0)  // the enclosing block
        index.push_back("g_" + tname(fn_.tiles[ix.tile].parent) + range_blocks(s, d, fn_.tiles[ix.tile].parent));
      else
        index.push_back("g_" + tname(ix.tile) + range_blocks(s, d, ix.tile));
    }
    return "pl.BlockSpec(" + tuple_str(shape) + ", " + lambda + tuple_str(index) +
           (buffered ? ", pipeline_mode=pl.Buffered(" + std::to_string(s.buffers) + "))" : ")");
  }

  // A tile over ph::range(b, e): its blocks start at b, b / block blocks in (the plan refuses
  // a b that is not a multiple of the slot's block).
  std::string range_blocks(const PallasSlot& s, size_t d, int tile) const {
    const int64_t b = fn_.tiles[tile].begin;
    if (b == 0 || s.block[d] <= 0) return b == 0 ? "" : " + " + std::to_string(b);  // (a squeezed dim: elements)
    return " + " + std::to_string(b / s.block[d]);
  }

  // The index map of a scalar index: a constant or a launch tile's block number (the plan
  // refuses others).
  std::string scalar_index_map(int v) const {
    // (A pipeline's specs are printed before its body, which may define the index: search.)
    const Op* d = def_op(v);
    if (!d)
      ir::walk(cur_->plan->op->body, [&](const Op& o) {
        if (o.result == v) d = &o;
      });
    PH_CHECK(d, "a scalar index without its definition");
    const std::string e = pallas::scalar_index_map(p_, *cur_->plan->op, d);
    PH_CHECK(!e.empty(), "a computed scalar index reached the pallas emitter");
    return e;
  }

  // A tile over the launch tile's block: a trace-time loop over the block in VMEM, each trip a
  // static slice of it; a trip past the block's valid rows (its ragged end) does not run.
  void nested_loop(const Op& op) {
    const int tile = op.loop_tiles[0];
    const int parent = fn_.tiles[tile].parent;
    const std::string n = tname(tile), pn = tname(parent);
    const int64_t b = block(tile), trips = (block(parent) + b - 1) / b;
    line("# loop at " + op.loc.str() + ": over the block of " + pn + ", " + std::to_string(trips) + " trips of " +
         std::to_string(b));
    line("for lo_" + n + " in range(0, " + std::to_string(trips * b) + ", " + std::to_string(b) + "):");
    ++depth_;
    line("off_" + n + " = off_" + pn + " + lo_" + n);
    line("n_" + n + " = jnp.clip(n_" + pn + " - lo_" + n + ", 0, " + std::to_string(b) + ")");
    line("");
    line("@pl.when(n_" + n + " > 0)");
    line("def _trip_" + n + "():");
    ++depth_;
    line("pass");
    body(op.body, nullptr);
    depth_ -= 2;
  }

  // e of a loop whose trips past e do nothing (ir/trip_guard.h), as Python over the kernel's
  // off_/n_ variables of the launch tiles; "" when it has no such guard.
  std::string trip_guard_bound(const Op& loop) {
    ir::ScalarSyntax py;
    py.begin = [&](int t) { return "off_" + tname(t); };
    py.end = [&](int t) {
      return unit(t) ? "(off_" + tname(t) + " + 1)" : "(off_" + tname(t) + " + n_" + tname(t) + ")";
    };
    py.min = "jnp.minimum";
    py.max = "jnp.maximum";
    return ir::trip_guard_bound(fn_, loop, cur_->plan->op->loop_tiles, py);
  }

  // How many trips of blocks of b from `begin` start before the bound e (unclamped: e may sit
  // before the range or past it), as a Python floor division (binds tighter than + and -).
  static std::string trips_that_run(const std::string& e, int64_t begin, int64_t b) {
    return "(" + e + " - " + std::to_string(begin) + " + " + std::to_string(b - 1) + ") // " + std::to_string(b);
  }

  bool has_jagged_loop() const {
    bool any = false;
    ir::walk(fn_.body, [&](const Op& op) {
      for (int t : op.loop_tiles) any |= op.kind == OpKind::Loop && fn_.tiles[t].is_jagged();
    });
    return any;
  }

  // A jagged loop: this entry's range [lo, hi), clamped into the bound (a TPU kernel cannot
  // raise: the cpu and the interpreter fail where this clamps), cut into trips of the block size
  // b by a fori_loop of a trip count known at run time. Each trip reads the block of b rows at
  // s = min(off, bound - b), inside every dim the tile indexes, whose rows w = off - s .. w + n
  // are the trip's (all of them but at the bound's end): values keep the static shape b, and
  // reductions, dots and stores mask the rows outside that window.
  void jagged_loop(const Op& op) {
    const int tile = op.loop_tiles[0];
    const ir::TileInfo& t = fn_.tiles[tile];
    const std::string n = tname(tile);
    const int64_t b = block(tile);
    const bool bounded = t.end < ir::kUnboundedRange;
    const std::string bound = std::to_string(t.end);
    line("# loop at " + op.loc.str() + ": jagged over " + v(t.begin_value) + ".." + v(t.end_value) +
         (bounded ? " within 0.." + bound : "") + ", trips of " + std::to_string(b));
    if (bounded) {
      line("lo_" + n + " = jnp.clip(" + v(t.begin_value) + ", 0, " + bound + ")");
      line("hi_" + n + " = jnp.clip(" + v(t.end_value) + ", lo_" + n + ", " + bound + ")");
    } else {
      line("lo_" + n + " = " + v(t.begin_value));
      line("hi_" + n + " = jnp.maximum(" + v(t.end_value) + ", lo_" + n + ")");
    }
    // A trip's start, clamped inside the bound (`off` an expression of the trip's offset).
    auto start_of = [&](const std::string& off) {
      return bounded ? "jnp.minimum(" + off + ", " + std::to_string(t.end - b) + ")" : off;
    };
    const std::string trips = "trips_" + n;
    line(trips + " = (hi_" + n + " - lo_" + n + " + " + std::to_string(b - 1) + ") // " + std::to_string(b));
    // Rows read only, streamed (plan.cpp, streams_jagged_rows): each trip's block is DMAed from
    // HBM into one of two buffers, the next trip's while this one computes.
    std::vector<int> streamed;
    for (int k : streamed_slots(*cur_))
      if (cur_->slots[k].loop_tile == tile) streamed.push_back(k);
    if (!streamed.empty()) {
      line("");
      line("def _fetch_" + n + "(j, buf):");
      line("    \"\"\"The DMAs of trip j's streamed blocks into buffer `buf`.\"\"\"");
      line("    s = " + start_of("lo_" + n + " + j * " + std::to_string(b)));
      std::vector<std::string> copies;
      for (int k : streamed) copies.push_back(stream_copy(k, tile, "s", "buf"));
      line("    return [" + join(copies, ", ") + "]");
      line("");
      line("@pl.when(" + trips + " > 0)");
      line("def _first_" + n + "():");
      line("    for c in _fetch_" + n + "(0, 0):");
      line("        c.start()");
    }
    line("");
    line("def _trip_" + n + "(j_" + n + ", carry_" + n + "):");
    ++depth_;
    line("off_" + n + " = lo_" + n + " + j_" + n + " * " + std::to_string(b));
    line("s_" + n + " = " + start_of("off_" + n));
    line("w_" + n + " = off_" + n + " - s_" + n);
    line("n_" + n + " = jnp.minimum(" + std::to_string(b) + ", hi_" + n + " - off_" + n + ")");
    if (!streamed.empty()) {
      line("for c in _fetch_" + n + "(j_" + n + ", j_" + n + " % 2):");
      line("    c.wait()");
      line("");
      line("@pl.when(j_" + n + " + 1 < " + trips + ")");
      line("def _next_" + n + "():");
      line("    for c in _fetch_" + n + "(j_" + n + " + 1, (j_" + n + " + 1) % 2):");
      line("        c.start()");
      line("");
    }
    jagged_tiles_.insert(tile);
    body(op.body, nullptr);
    jagged_tiles_.erase(tile);
    line("return carry_" + n);
    --depth_;
    line("");
    line("jax.lax.fori_loop(0, " + trips + ", _trip_" + n + ", 0)");
  }

  // The integer value `v` of the current launch is: a Constant's.
  int64_t constant_of(int v) const {
    const Op* c = nullptr;
    ir::walk(cur_->plan->op->body, [&](const Op& o) {
      if (o.result == v) c = &o;
    });
    PH_CHECK(c && c->kind == OpKind::Constant, "a streamed block's scalar index is a constant (plan.cpp)");
    return static_cast<int64_t>(c->number);
  }

  // The slots of launch `pl` whose jagged loop streams them (PallasSlot::Stream).
  static std::vector<int> streamed_slots(const PallasLaunch& pl) {
    std::vector<int> out;
    for (size_t k = 0; k < pl.slots.size(); ++k)
      if (pl.slots[k].mode == PallasSlot::Stream) out.push_back(static_cast<int>(k));
    return out;
  }

  // The DMA of streamed slot k's block for the trip whose rows of jagged tile `tile` start at
  // `start`, into buffer `buf` of its two: the launch tiles' blocks at the step's offsets,
  // constants and whole dims as they are.
  std::string stream_copy(int k, int tile, const std::string& start, const std::string& buf) {
    const PallasSlot& slot = cur_->slots[k];
    const ir::TensorInfo& t = fn_.tensors[slot.tensor];
    std::vector<std::string> idx;
    for (size_t d = 0; d < slot.first->index.size(); ++d) {
      const ir::IndexItem& ix = slot.first->index[d];
      if (ix.kind == ir::IndexItem::All)
        idx.push_back("pl.ds(0, " + std::to_string(t.shape[d]) + ")");
      else if (ix.kind == ir::IndexItem::Scalar)  // (a constant: plan.cpp; emitted later, in the trip)
        idx.push_back(std::to_string(constant_of(ix.value)));
      else if (ix.tile == tile)
        idx.push_back("pl.ds(" + start + ", " + std::to_string(slot.block[d]) + ")");
      else if (slot.block[d] < 0)  // (a unit launch tile: its step's element)
        idx.push_back("off_" + tname(ix.tile));
      else
        idx.push_back("pl.ds(off_" + tname(ix.tile) + ", " + std::to_string(slot.block[d]) + ")");
    }
    const std::string id = std::to_string(k);
    return "pltpu.make_async_copy(s" + id + "_ref.at[" + join(idx) + "], sb" + id + "_ref.at[" + buf + "], ss" + id +
           "_ref.at[" + buf + "])";
  }

  void inner_loop(const Op& op) {
    int tile = op.loop_tiles[0];
    const ir::TileInfo& t = fn_.tiles[tile];
    if (t.is_jagged()) return jagged_loop(op);
    if (t.parent >= 0) return nested_loop(op);
    const lower::InnerLoop* il = cur_->plan->inner_loop(tile);
    std::string n = tname(tile);
    int64_t b = block(tile), trips = (t.extent() + b - 1) / b;
    std::vector<int> slots;  // the loop's own slots
    for (size_t i = 0; i < cur_->slots.size(); ++i)
      if (cur_->slots[i].loop_tile == tile) slots.push_back(static_cast<int>(i));
    line("# loop at " + op.loc.str() + ": " + std::to_string(trips) + " trips of " + std::to_string(b) + ", " +
         (slots.empty() ? "no blocks" : lower::strategy_name(il->strategy)) +
         (cur_->rolled_loops.count(tile) ? ", a fori_loop" : ""));
    if (cur_->rolled_loops.count(tile)) return rolled_loop(op, il);
    if (slots.empty() || il->strategy == lower::Strategy::Resident) {
      // A trace-time loop: each trip slices the resident blocks at static offsets.
      resident_tiles_.insert(tile);
      line("for off_" + n + " in range(" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ", " +
           std::to_string(b) + "):");
      ++depth_;
      line("n_" + n + " = min(" + std::to_string(b) + ", " + std::to_string(t.end) + " - off_" + n + ")");
      body(op.body, il);
      --depth_;
      resident_tiles_.erase(tile);
      return;
    }
    // emit_pipeline over the HBM refs: its own grid of trips; the outer grid's indices select
    // the blocks of the squeezed and grid-tiled dims.
    std::vector<std::string> in_specs, out_specs, in_refs, out_refs, params;
    // A loop whose trips past a bound do nothing (its body one ph::when on `t.begin() < e`,
    // e the same at every trip: causal attention's key blocks above the diagonal) reads the
    // last working trip's blocks for those trips: emit_pipeline copies a block only when its
    // index changes, so the skipped trips issue no DMA. (Not with outputs, whose skipped trips
    // would write back blocks nobody wrote.)
    std::string trip_index = "i";
    bool writes = false;
    for (int s : slots) writes |= cur_->slots[s].written;
    if (const std::string e = trip_guard_bound(op); !e.empty() && !writes) {
      line("last_" + n + " = jnp.maximum(" + trips_that_run(e, t.begin, b) +
           " - 1, 0)  # the last trip whose body runs (when at " + op.body.back().loc.str() + ")");
      trip_index = "jnp.minimum(i, last_" + n + ")";
    }
    for (int s : slots) {
      const PallasSlot& slot = cur_->slots[s];
      if (!reads(s)) continue;
      in_specs.push_back(block_spec(slot, "lambda i: ", trip_index, true));
      in_refs.push_back(slot_ref(s, false));
      params.push_back("b" + std::to_string(s) + "i");
    }
    for (int s : slots) {
      const PallasSlot& slot = cur_->slots[s];
      if (!slot.written) continue;
      // Mosaic buffers a pipeline's outputs at most twice ("Buffer count >2 not supported for
      // output buffered refs"): a deeper pipeline deepens its inputs only.
      PallasSlot out = slot;
      out.buffers = std::min(out.buffers, 2);
      out_specs.push_back(block_spec(out, "lambda i: ", "i", true));
      out_refs.push_back(slot_ref(s, true));
      params.push_back("b" + std::to_string(s) + "o");
    }
    line("");
    line("def _trip_" + n + "(" + join(params) + "):");
    ++depth_;
    line("off_" + n + " = " + std::to_string(t.begin) + " + pl.program_id(0) * " + std::to_string(b) +
         "  # the pipeline's own trip index");
    line("n_" + n + " = jnp.minimum(" + std::to_string(b) + ", " + std::to_string(t.end) + " - off_" + n + ")");
    for (int s : slots)  // (see kernel(): the trip's output blocks start as their prior contents)
      if (prior_in_.count(s))
        line("b" + std::to_string(s) + "o[...] = b" + std::to_string(s) + "i[...]  # prior contents");
    body(op.body, il);
    --depth_;
    line("");
    std::vector<std::string> refs = in_refs;  // the pipeline's operands: its inputs, then its outputs
    refs.insert(refs.end(), out_refs.begin(), out_refs.end());
    line("pltpu.emit_pipeline(_trip_" + n + ", grid=(" + std::to_string(trips) + ",), in_specs=[" + join(in_specs) +
         "], out_specs=[" + join(out_specs) + "])(" + join(refs) + ")");
  }

  // A long trace-time loop as a fori_loop (plan.h, rolled_loops): its whole trips slice the
  // resident blocks with pl.ds at an offset aligned as the plan checked; the ragged last trip,
  // if any, follows at its static offset (its length is static: values keep static shapes). A
  // loop whose trips past a bound do nothing (causal attention) stops at that bound.
  void rolled_loop(const Op& op, const lower::InnerLoop* il) {
    const int tile = op.loop_tiles[0];
    const ir::TileInfo& t = fn_.tiles[tile];
    const std::string n = tname(tile);
    const int64_t b = block(tile), whole = t.extent() / b, rest = t.extent() % b;
    const int64_t align = std::gcd(b, t.begin);  // (gcd(b, 0) = b)
    resident_tiles_.insert(tile);
    dynamic_tiles_.insert(tile);
    line("def _trip_" + n + "(j_" + n + ", carry):");
    ++depth_;
    line("off_" + n + " = pl.multiple_of(" + (t.begin ? std::to_string(t.begin) + " + " : "") + "j_" + n + " * " +
         std::to_string(b) + ", " + std::to_string(align) + ")");
    line("n_" + n + " = " + std::to_string(b));
    body(op.body, il);
    line("return carry");
    --depth_;
    dynamic_tiles_.erase(tile);
    line("");
    std::string trips = std::to_string(whole);
    if (const std::string e = trip_guard_bound(op); !e.empty()) {
      line("last_" + n + " = jnp.clip(" + trips_that_run(e, t.begin, b) + ", 0, " + trips +
           ")  # the trips whose body runs (when at " + op.body.back().loc.str() + ")");
      trips = "last_" + n;
    }
    line("jax.lax.fori_loop(0, " + trips + ", _trip_" + n + ", 0)");
    if (rest > 0) {
      line("# the last trip, " + std::to_string(rest) + " of " + std::to_string(b));
      line("off_" + n + " = " + std::to_string(t.begin + whole * b));
      line("n_" + n + " = " + std::to_string(rest));
      body(op.body, il);
    }
    resident_tiles_.erase(tile);
  }

  // --- the host function ---
  void host() {
    line("");
    line("");
    std::vector<std::string> args;
    for (int i = 0; i < fn_.num_tensor_params; ++i) args.push_back(fn_.tensors[i].name);
    for (const std::string& s : fn_.scalar_params) args.push_back(s);
    // (on a mesh, the function of one device, which the kernel function runs on each: collectives.h)
    const std::string name = fn_.mesh.empty() ? fn_.name : "_" + fn_.name + "_on_device";
    line("def " + name + "(" + join(args) + (args.empty() ? "" : ", ") + "*, interpret=False):");
    ++depth_;
    line("\"\"\"" + fn_.name + (fn_.mesh.empty() ? "" : " on one device of the mesh,") +
         " for the shapes and dtypes in SIGNATURE; returns its output(s).\"\"\"");
    for (int i = 0; i < fn_.num_tensor_params; ++i) {
      const ir::TensorInfo& t = fn_.tensors[i];
      line("if tuple(" + t.name + ".shape) != SIGNATURE[" + std::to_string(i) + "][0] or " + t.name +
           ".dtype != " + jnp_dtype(t.dtype) + ":");
      line("    raise ValueError(f\"" + fn_.name + ": " + t.name + " must be {SIGNATURE[" + std::to_string(i) +
           "]}, got {tuple(" + t.name + ".shape)} {" + t.name + ".dtype}\")");
      line("t" + std::to_string(i) + " = " + t.name);
    }
    if (!fn_.scalar_params.empty()) {
      std::vector<std::string> s;
      for (const std::string& n : fn_.scalar_params) s.push_back(n);
      // Integer arguments (ph::Int) travel in the f32 scalar array: exact below 2^24.
      std::set<int> integral;
      ir::walk(fn_.body, [&](const Op& op) {
        if (op.kind == OpKind::ScalarParam && type(op.result).dtype == DType::i64) integral.insert(op.param);
      });
      for (int i : integral) {
        const std::string& n = fn_.scalar_params[i];
        line("if isinstance(" + n + ", (int, float)) and (int(" + n + ") != " + n + " or abs(" + n + ") >= 2**24):");
        line("    raise ValueError(f\"" + fn_.name + ": integer argument " + n + " must be an integer below 2**24 in " +
             "magnitude on a TPU, got {" + n + "}\")");
      }
      line("scalars = jnp.asarray([" + join(s) + "], jnp.float32)");
    }
    size_t launch = 0;
    has_value_.clear();
    for (int i = 0; i < fn_.num_tensor_params; ++i) has_value_.insert(i);
    for (const Op& op : fn_.body) {
      if (op.kind == OpKind::Alloc) {
        const ir::TensorInfo& t = fn_.tensors[op.tensor];
        if (op.has_fill) {
          line("t" + std::to_string(op.tensor) + " = jnp.full(" + shape_tuple(t.shape) + ", " +
               py_number(op.number, DType::f32) + ", " + jnp_dtype(t.dtype) + ")");
          has_value_.insert(op.tensor);
        }
      } else if (op.kind == OpKind::Launch) {
        views_before(launches_[launch], true);
        call(launches_[launch], infos_[launch]);
        for (int s : infos_[launch].outputs) has_value_.insert(launches_[launch].slots[s].tensor);
        views_after(launches_[launch], true);
        ++launch;
      }
    }
    std::vector<std::string> outs;
    for (int t : fn_.outputs)
      outs.push_back(fn_.tensors[t].origin == ir::TensorInfo::View ? view_value(fn_, t) : "t" + std::to_string(t));
    line("return " + (outs.size() == 1 ? outs[0] : tuple_str(outs)));
    --depth_;
    if (fn_.mesh.empty()) return;
    line("");
    line("");
    for (const std::string& l : mesh_host_function(fn_, name)) line(l);
  }

  void call(const PallasLaunch& pl, const LaunchInfo& info) {
    cur_ = &pl;  // (its BlockSpecs' index maps name its grid)
    const lower::LaunchPlan& L = *pl.plan;
    std::vector<std::string> grid, gargs;
    for (const lower::GridDim& g : pl.grid) {
      grid.push_back(std::to_string(g.steps));
      gargs.push_back("g_" + tname(g.tile));
    }
    std::string lam = "lambda " + join(gargs) + ": ";
    // A loop on the grid: its blocks' index along it is the step's trip, clamped to the last
    // trip whose body runs when the body is one ph::when(t.begin() < e) (see inner_loop: the
    // launch's pipeline copies a block only when its index changes, so the skipped trips move
    // nothing). Not with outputs along the loop, whose skipped trips would write back garbage.
    std::string trip = pl.grid_loop ? "g_" + tname(pl.grid.back().tile) : "0";
    if (pl.grid_loop) {
      bool writes = false;
      for (const PallasSlot& s : pl.slots) writes |= s.written && s.loop_tile == pl.grid.back().tile;
      if (const std::string e = trip_guard_bound(*pl.grid_loop); !e.empty() && !writes) {
        const lower::GridDim& g = pl.grid.back();
        const std::string fn = "_last_" + tname(g.tile);
        line("");
        line("def " + fn + "(" + join(gargs) + "):");
        ++depth_;
        line("\"\"\"The last trip of the loop at " + pl.grid_loop->loc.str() + " whose body runs (when at " +
             pl.grid_loop->body.back().loc.str() + ").\"\"\"");
        for (size_t i = 0; i + 1 < pl.grid.size(); ++i) grid_offsets(pl.grid[i]);
        line("return jnp.maximum(" + trips_that_run(e, g.begin, g.block) + " - 1, 0)");
        --depth_;
        line("");
        trip = "jnp.minimum(" + trip + ", " + fn + "(" + join(gargs) + "))";
      }
    }
    auto spec = [&](const PallasSlot& s) {
      // A pipelined operand stays in HBM; a resident one spans its loop (block index 0 there).
      // (A dma gather's table too: its rows are copied by the kernel.)
      if (s.mode == PallasSlot::Pipeline || s.mode == PallasSlot::Dma || s.mode == PallasSlot::Hbm ||
          s.mode == PallasSlot::Stream)
        return std::string("pl.BlockSpec(memory_space=pl.ANY)");
      if (s.mode == PallasSlot::Smem) return std::string("pl.BlockSpec(memory_space=pltpu.SMEM)");
      // (a resident input whose block changes only at outer grid dims keeps one buffer: plan.cpp,
      // single_buffer_resident)
      if (s.mode == PallasSlot::Grid && s.loop_tile >= 0)  // (a loop on the grid)
        return block_spec(s, lam, s.written ? "g_" + tname(s.loop_tile) : trip, false);
      return block_spec(s, lam, "0", s.mode == PallasSlot::Resident && s.buffers == 1);
    };
    std::vector<std::string> in_specs, operands, out_specs, out_shapes, scratch, aliases;
    if (!fn_.scalar_params.empty()) {
      in_specs.push_back("pl.BlockSpec(memory_space=pltpu.SMEM)");
      operands.push_back("scalars");
    }
    for (int s : info.inputs) {
      in_specs.push_back(spec(pl.slots[s]));
      operands.push_back("t" + std::to_string(pl.slots[s].tensor));
    }
    for (size_t k = 0; k < info.outputs.size(); ++k) {
      const PallasSlot& s = pl.slots[info.outputs[k]];
      const ir::TensorInfo& t = fn_.tensors[s.tensor];
      out_specs.push_back(spec(s));
      out_shapes.push_back("jax.ShapeDtypeStruct(" + shape_tuple(t.shape) + ", " + jnp_dtype(t.dtype) + ")");
    }
    // A dma gather's index tensor again, in SMEM (the blocks of its VMEM slot): its row numbers
    // are read as scalars.
    for (const DmaRows& g : pl.dma_rows) {
      const PallasSlot& ix = pl.slots[g.index_slot];
      const std::string vmem = block_spec(ix, lam, "0", false);
      in_specs.push_back(vmem.substr(0, vmem.size() - 1) + ", memory_space=pltpu.SMEM)");
      operands.push_back("t" + std::to_string(ix.tensor));
    }
    for (int t : info.aliased) {
      in_specs.push_back("pl.BlockSpec(memory_space=pl.ANY)");
      operands.push_back("t" + std::to_string(t));
      for (size_t k = 0; k < info.outputs.size(); ++k)
        if (pl.slots[info.outputs[k]].tensor == t)
          aliases.push_back(std::to_string(operands.size() - 1) + ": " + std::to_string(k));
    }
    for (int var : info.vars) {
      const ir::Type& vt = fn_.vars[var].type;
      // Scalar state lives in SMEM (Mosaic cannot store scalars to VMEM), blocks in VMEM.
      if (vt.rank() == 0)
        scratch.push_back("pltpu.SMEM((1,), " + jnp_dtype(vt.dtype) + ")");
      else if (pl.row_stats.vars.count(var))  // (lane-dense: row_stats.h)
        scratch.push_back("pltpu.VMEM(" + lane_dense_shape(vt) + ", " + jnp_dtype(vt.dtype) + ")");
      else
        scratch.push_back("pltpu.VMEM(" + shape_str(vt.shape) + ", " + jnp_dtype(vt.dtype) + ")");
    }
    for (const DmaRows& g : pl.dma_rows) {  // the rows' buffer and one DMA semaphore per row
      std::vector<std::string> b;
      for (int64_t x : g.buffer) b.push_back(std::to_string(x));
      scratch.push_back("pltpu.VMEM(" + tuple_str(b) + ", " + jnp_dtype(fn_.tensors[g.op->tensor].dtype) + ")");
      scratch.push_back("pltpu.SemaphoreType.DMA((" + std::to_string(g.rows) + ",))");
    }
    for (int k : streamed_slots(pl)) {
      const PallasSlot& st = pl.slots[k];
      std::vector<int64_t> b{2};
      for (int64_t x : st.block)
        if (x >= 0) b.push_back(x);
      scratch.push_back("pltpu.VMEM(" + shape_tuple(b) + ", " + jnp_dtype(fn_.tensors[st.tensor].dtype) + ")");
      scratch.push_back("pltpu.SemaphoreType.DMA((2,))");
    }
    for (const auto& [name, shape] : info.comm) scratch.push_back(shape);
    // Headroom over the planned footprint for Mosaic's own scratch, within the core's VMEM.
    int64_t limit = std::min<int64_t>(tpu_.vmem_bytes, std::max<int64_t>(pl.vmem_bytes * 3 / 2, 32 << 20));
    // Steps that share a block in VMEM (a jagged store's whole dim, atomic updates meeting on a
    // block) run in order on one core ("arbitrary"), so no core writes back a stale copy
    // (plan.cpp, plan_order).
    std::vector<std::string> sem;
    for (bool a : pl.arbitrary) sem.push_back(a ? "\"arbitrary\"" : "\"parallel\"");
    std::string n = std::to_string(L.index);
    line("# launch " + n + ": VMEM " + format_bytes(pl.vmem_bytes) + " (" + pl.vmem_detail + ")");
    line("with _tpu_context(interpret):");
    ++depth_;
    line("out" + n + " = pl.pallas_call(");
    ++depth_;
    line("_kernel_" + n + ",");
    line("out_shape=[" + join(out_shapes) + "],");
    line("grid=" + tuple_str(grid) + ",");
    line("in_specs=[" + join(in_specs, ",\n" + std::string(depth_ * 4 + 10, ' ')) + "],");
    line("out_specs=[" + join(out_specs, ",\n" + std::string(depth_ * 4 + 11, ' ')) + "],");
    line("scratch_shapes=[" + join(scratch) + "],");
    if (!aliases.empty()) line("input_output_aliases={" + join(aliases) + "},");
    // (a launch with collectives: the barrier semaphore of its handshake)
    line("compiler_params=pltpu.CompilerParams(dimension_semantics=" + tuple_str(sem) + ", vmem_limit_bytes=" +
         std::to_string(limit) + (pl.comm.any ? ", collective_id=" + std::to_string(L.index) : "") + "),");
    line("interpret=interpret,");
    line("name=\"" + fn_.name + "_" + n + "\",");
    --depth_;
    line(")(" + join(operands) + ")");
    --depth_;
    for (size_t k = 0; k < info.outputs.size(); ++k)
      line("t" + std::to_string(pl.slots[info.outputs[k]].tensor) + " = out" + n + "[" + std::to_string(k) + "]");
  }

  const lower::BlockProgram& p_;
  const ir::Function& fn_;
  const TpuGeneration& tpu_;
  std::vector<PallasLaunch> launches_;
  const PallasLaunch* cur_ = nullptr;
  std::set<int> has_value_;  // tensors with a value before the current launch
  std::set<int> prior_in_;   // slots of the current launch whose prior contents come in
  const std::vector<PallasSlot>* cur_slots_ = nullptr;
  std::set<int> resident_tiles_;    // tiles of the trace-time loops being emitted
  std::set<int> dynamic_tiles_;     // of those, the fori_loops' (offsets known at run time)
  std::set<int> folded_;            // values only dots read, as stored (find_folded): not emitted
  std::set<int> jagged_tiles_;      // tiles of the jagged loops being emitted
  int when_counter_ = 0;            // names the pl.when regions apart
  std::map<int, DType> raw_;        // load result -> its storage dtype (`vN_raw` holds it)
  const RowStats* rows_ = nullptr;  // the current launch's row statistics (row_stats.h)
  std::map<int, int> width_;        // a column's trailing lane dim: 1 or 128
  std::map<int, int> lane_rows_;    // a lane-dense column given its trailing dim: its width (128)
  bool col_mode_ = false;           // emitting an elementwise op that makes a column
  std::string lanes_to_;            // emitting an op whose rows are this wide (a dim_size)
  std::map<int, const Op*> defs_;   // value -> its op, as statements are emitted
  std::ostringstream os_;
  int depth_ = 0;
};

}  // namespace

std::string generate_module(const lower::BlockProgram& p, const TpuGeneration& tpu) { return Emitter(p, tpu).run(); }

}  // namespace parhelion::backend::pallas
