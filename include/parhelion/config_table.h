// Deployable configs: a table from a call's signature (shapes, dtypes, compile-time integers),
// target and hardware to the config tuned for it. Tuned once (`parhelion tune KERNEL --shapes
// ... -o configs.json`, ph::tune_table, parhelion.tune_table in Python), shipped with a model,
// and applied per call with no tuning at run time:
//
//   auto table = std::make_shared<ph::ConfigTable>(ph::ConfigTable::load("configs.json"));
//   kernel.use_config_table(table);
//   kernel(x, w);   // the entry for x's and w's shapes, else the nearest tuned one that is legal
//
// A call takes, in this order: the config passed to compile/emit, a config pinned for its
// signature (pin_config(config, args)), one pinned for every call (pin_config(config)), the
// table's entry for its signature and target (the same hardware's first; then the nearest tuned
// signature whose config is legal for this call: same arguments' dtypes and ranks, shapes
// nearest in log scale), and the default config.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "parhelion/config.h"
#include "parhelion/kernel.h"
#include "parhelion/tune.h"

namespace parhelion {

// One argument of a tuned call: a tensor's dtype and shape, a compile-time integer's value, or
// a runtime scalar (which does not select a config).
struct TableArg {
  enum Kind { TensorK, ConstantK, ScalarK } kind = TensorK;
  DType dtype = DType::f32;
  Shape shape;
  int64_t value = 0;
};

struct ConfigTableEntry {
  std::string kernel;  // the kernel's name
  std::vector<TableArg> args;
  std::string target;    // canonical: "cpu", "pallas:v7x", "triton:h100"
  std::string hardware;  // where it was tuned (the tuner's description of the machine)
  Config config;
  double ms = 0;                  // its measured (or, for a TPU, modelled) time; 0 if not timed
  double default_ms = 0;          // the default config's, in the same run
  std::string signature() const;  // readable: "f32[1024,4096] f32[4096] scalar"
};

// Which entry a call took, and why.
struct TableChoice {
  const ConfigTableEntry* entry = nullptr;
  bool exact = false;          // the same signature
  bool same_hardware = false;  // tuned on this machine
};

class ConfigTable {
 public:
  std::vector<ConfigTableEntry> entries;

  // Adds an entry, replacing one of the same kernel, signature, target and hardware.
  void add(ConfigTableEntry e);
  std::string to_json() const;
  // Throws UserError naming the problem (malformed JSON, a missing field, an unknown dtype).
  static ConfigTable from_json(const std::string& json);
  static ConfigTable load(const std::string& path);
  void save(const std::string& path) const;

  // The entry for a call of `kernel` on `args` for `target` on `hardware`, or none; `legal`
  // says whether an entry's config is a point of the call's config space.
  std::optional<TableChoice> select(const KernelBase& kernel, const std::vector<Arg>& args, const std::string& target,
                                    const std::string& hardware, const std::function<bool(const Config&)>& legal) const;
};

// Describes a call's arguments as a table does.
std::vector<TableArg> table_args(const KernelBase& kernel, const std::vector<Arg>& args);

// Tunes `kernel` on this machine for each call in `calls` (one per shape; the cached winner
// where there is one) and returns the table of winners. `target` "cpu" measures; a "pallas:TPU"
// target ranks configs with the TPU timing model (docs/tpu-model.md), as `tune --model` does.
ConfigTable tune_table(KernelBase& kernel, const std::vector<std::vector<Arg>>& calls, const TuneOptions& options = {},
                       const std::string& target = "cpu");

}  // namespace parhelion
