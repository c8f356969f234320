// The tracer: records the Tile IR while a kernel function runs on symbolic tensors.
//
// One Tracer is active per thread while a kernel is traced. The DSL (lang.cpp) appends ops to
// the innermost open region; range-for loops open and close regions (see detail::LoopRange).
#pragma once

#include <functional>
#include <source_location>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "parhelion/lang.h"

namespace parhelion::frontend {

// What the kernel is called with: a tensor signature or a scalar.
struct ArgSpec {
  bool is_tensor = true;
  Shape shape, strides;
  DType dtype = DType::f32;
};

class Tracer {
 public:
  explicit Tracer(std::string kernel_name);
  ~Tracer();
  Tracer(const Tracer&) = delete;

  static Tracer& current(const std::source_location& loc);  // throws outside a trace
  static Tracer* active();

  ir::Function& fn() { return fn_; }
  bool in_device() const { return !regions_.empty(); }

  Tensor add_tensor_param(const ArgSpec& spec);
  Scalar add_scalar_param();
  int add_alloc(const Shape& shape, DType dtype, bool fill, double value, const std::source_location& loc);
  // A host view of tensor `base` (src/ir/views.h): a new TensorInfo and the View op that makes it.
  int add_view(int base, ir::ViewKind kind, const std::vector<int64_t>& dims, int axis, const char* what,
               const std::source_location& loc);

  int new_value(ir::Type t);
  // Appends a device op; returns its result value id (or -1).
  int emit(ir::Op op, const std::source_location& loc);
  int emit_at(ir::Op op, const ir::SourceLoc& loc);
  [[noreturn]] void fail(const std::string& msg, const std::source_location& loc);
  [[noreturn]] void fail_at(const std::string& msg, const ir::SourceLoc& loc);
  // Where the op that computed `value` was written. An assignment `var = expression` has no
  // source_location of its own (operator= takes one argument), so it is blamed on the line of
  // the expression it assigns, which is the user's.
  ir::SourceLoc value_loc(int value) const;
  // The user's line of the most recently traced op.
  const ir::SourceLoc& last_loc() const { return last_loc_; }
  void require_device(const char* what, const std::source_location& loc);

  std::vector<Tile> open_loop(const std::vector<Extent>& dims, bool grid, const std::source_location& loc);
  void close_loop();
  // A conditional region (ph::when): ops traced until close_if run where `cond` is true.
  void open_if(int cond, const std::source_location& loc);
  void close_if();
  int new_block_size(int64_t extent, int64_t fixed, const std::source_location& loc);

  // The combine function of a scan (ir::ScanCombine) is traced into a region of its own:
  // open_combine makes its parameters (rank-0 values of these dtypes, twice: a's then b's) and
  // directs the ops traced next into it; close_combine ends it with the combine's results (the
  // caller checks it with ir::combine_rule, to report at the user's line).
  std::vector<int> open_combine(const std::vector<DType>& dtypes, const std::source_location& loc);
  ir::ScanCombine close_combine(const std::vector<int>& params, const std::vector<int>& results);
  // A copy of `c` with fresh value ids (each Scan op defines its combine's values).
  ir::ScanCombine clone_combine(const ir::ScanCombine& c);

  // Collectives: the copies ph::remote_copy declared, each as the CopyStart op its start() emits.
  int add_copy(ir::Op start);
  const ir::Op& copy_start(int copy) const { return copies_.at(copy); }

  // Ends the trace: records the outputs and returns the finished Function.
  ir::Function finish(const std::vector<Tensor>& outputs);

  // Tiles open at this point (outermost first); a tile of a closed loop is out of scope.
  bool tile_in_scope(int tile) const;
  // The innermost open tile whose block size is `block`, or -1.
  int innermost_tile_of_block(int block) const;
  // Whether a value's defining loop is still open (values do not escape their loop).
  bool value_in_scope(int value) const;

 private:
  ir::Function fn_;
  std::vector<ir::Op*> regions_;  // open Launch/Loop/If ops, innermost last
  std::vector<int> open_tiles_;
  std::vector<int> open_region_ids_;      // ids of the open loops, innermost last
  std::vector<int> value_region_;         // the loop id that defines each value
  std::vector<ir::SourceLoc> value_loc_;  // the user's line that defines each value
  ir::SourceLoc last_loc_;
  int next_region_id_ = 0;
  ir::Op combine_region_{ir::OpKind::Scan};  // holds the ops of the combine being traced
  bool in_combine_ = false;
  std::vector<ir::Op> copies_;
  Tracer* previous_;
};

ir::SourceLoc to_loc(const std::source_location& loc);

}  // namespace parhelion::frontend
