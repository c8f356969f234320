#include "tools/fuzz_command.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "fuzz/differential.h"
#include "fuzz/generate.h"
#include "parhelion/error.h"

namespace parhelion::tools {

int run_fuzz(const Options& o) {
  fuzz::FuzzOptions f;
  f.seed = o.seed().value_or(1);
  // --programs alone runs that many; --seconds alone that long; both: whichever comes first.
  f.seconds = o.seconds("seconds", o.has("programs") ? 1e18 : 60);
  f.max_programs = o.integer("programs", 1, int64_t{1} << 40, -1);
  f.configs_per_program = static_cast<int>(o.integer("configs", 1, 1000, f.configs_per_program));
  f.pallas_every = static_cast<int>(o.integer("pallas-every", 0, 1 << 20, f.pallas_every));
  f.triton_every = static_cast<int>(o.integer("triton-every", 0, 1 << 20, f.triton_every));
  f.minimize = !o.has("no-minimize");
  f.family = o.get("family", "");
  if (!f.family.empty()) {
    bool known = false;
    std::string names;
    for (const std::string& n : fuzz::families()) {
      known |= n == f.family;
      names += (names.empty() ? "" : ", ") + n;
    }
    if (!known) throw UserError("--family must be one of " + names + "; got '" + f.family + "'");
  }
  f.log = [](const std::string& line) { std::cerr << "fuzz: " << line << "\n"; };
  fuzz::FuzzReport r = fuzz::fuzz(f);
  if (o.json) {
    nlohmann::json j = {{"programs", r.programs},
                        {"cpu_runs", r.cpu_runs},
                        {"cpu_runs_streamed", r.cpu_runs_streamed},
                        {"not_fitting", r.not_fitting},
                        {"by_family", r.by_family},
                        {"seconds", r.seconds},
                        {"findings", nlohmann::json::array()}};
    for (const auto& [backend, c] : r.by_backend) {
      j[backend + "_runs"] = c.runs;
      j[backend + "_unsupported"] = c.unsupported;
      j[backend + "_refusals"] = c.refusals;
    }
    for (const fuzz::Finding& x : r.findings)
      j["findings"].push_back({{"kind", x.kind},
                               {"backend", x.backend},
                               {"config", x.config},
                               {"detail", x.detail},
                               {"seed", x.seed},
                               {"cpp", x.cpp},
                               {"module", x.module}});
    std::cout << j.dump(1) << "\n";
  } else {
    for (const fuzz::Finding& x : r.findings) {
      std::cout << "// ---- " << x.kind << " on " << x.backend << " (program seed " << x.seed << ")\n"
                << "// " << x.detail.substr(0, 2000) << "\n"
                << "// config: " << (x.config.empty() ? "default" : x.config) << "\n"
                << x.cpp << "\n";
      if (!x.module.empty()) std::cout << "// the emitted " << x.backend << " module:\n/*\n" << x.module << "*/\n";
    }
    std::cout << r.programs << " programs (";
    bool first = true;
    for (const auto& [fam, n] : r.by_family) std::cout << (first ? "" : ", ") << fam << " " << n, first = false;
    std::cout << "), " << r.cpu_runs << " cpu runs (" << r.cpu_runs_streamed << " with cache hints), " << r.not_fitting
              << " configs refused for fast memory";
    for (const auto& [backend, c] : r.by_backend)
      std::cout << ", " << c.runs << " " << backend << " runs"
                << (backend == "pallas" ? " in TPU interpret mode" : " in Triton's interpreter") << " ("
                << c.unsupported << " refused)";
    std::cout << "; " << r.findings.size() << " findings in " << static_cast<int>(r.seconds) << " s\n";
    for (const auto& [backend, c] : r.by_backend) {
      if (c.refusals.empty()) continue;
      std::cout << "refused by " << backend << ", by reason:\n";
      for (const auto& [why, n] : c.refusals) std::cout << "  " << n << " x " << why << "\n";
    }
  }
  return r.findings.empty() ? 0 : 1;
}

}  // namespace parhelion::tools
