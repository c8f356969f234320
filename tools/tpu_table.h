// The seed's published TPU kernel table beside the TPU timing model (bench/tpu_published.json):
// per row, the model-tuned config at the published shape and dtype, its device time, the time
// of a call timed from a host as Helion's benchmark times it (device + dispatch), and the
// error against the published figure. `parhelion bench --tpu-table` prints it; the model's test
// keeps it (tests/test_tpu_model.cpp).
#pragma once

#include <string>
#include <vector>

#include "parhelion/config.h"
#include "parhelion/tpu.h"

namespace parhelion::tools {

struct TpuTableRow {
  std::string kernel, dtype, note;
  std::vector<int64_t> shape;
  double published_ms = 0;
  bool same_kernel = true;  // false: Parhelion's library kernel does other work than Helion's
  TpuTuneReport tuned;
  double call_ms() const { return tuned.best.call_seconds() * 1e3; }
  double error() const { return call_ms() / published_ms - 1; }  // model / published - 1
};

// Reads the table (UserError naming the file and the bad entry) and tunes each row against
// the model of its TPU.
std::vector<TpuTableRow> model_published_table(const std::string& path);

// The geometric mean of |1 + error| - 1 over the rows of the same kernel: the model's typical
// error as a ratio (0.15 = within 15% on average, either way).
double geomean_error(const std::vector<TpuTableRow>& rows);

std::string table_markdown(const std::vector<TpuTableRow>& rows);
std::string table_json(const std::vector<TpuTableRow>& rows);

}  // namespace parhelion::tools
