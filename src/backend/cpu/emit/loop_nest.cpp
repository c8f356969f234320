// Loop nests over a block's valid elements, and loop-invariant hoisting: the innermost loop of a
// nest carries `#pragma omp simd`, and reads inside it that do not depend on its index become
// constants before it (g++ does not always hoist them itself, and then leaves the loop scalar).

#include <algorithm>
#include <cctype>
#include <sstream>
#include <utility>

#include "backend/cpu/emit/launch_emitter.h"

namespace parhelion::backend::cpu::emit {

constexpr int64_t kMaxUnrolledDim = 4;

// Emits loops over `shape` (valid elements only); `body(idx)` emits the innermost statements.
// The innermost loop carries `#pragma omp simd`, and reads that do not depend on its index
// (a row statistic broadcast along the row, a scalar) are hoisted out of it: g++ does not
// always do so itself, and then leaves the whole loop scalar.
void LaunchEmitter::nest(const std::vector<Dim>& shape, const std::function<void(const Idx&)>& body,
                         const std::string& simd_clause, size_t inner_from,
                         const std::function<void(const Idx&, size_t)>& before_inner) {
  // A nest opened inside another (a dot's accumulator copy inside its batch loop) names its
  // indices apart, so that it never reuses an enclosing loop's index.
  const std::string prefix = nest_depth_ == 0 ? "i" : "i" + std::to_string(nest_depth_) + "_";
  ++nest_depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{nest_depth_};
  Idx idx(shape.size());
  int innermost = -1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!shape[d].is_one()) innermost = static_cast<int>(d);
  // A short constant innermost dim (the pair of a rotary embedding or an int4 byte, a stack of
  // a few blocks) is unrolled into the body and the dim before it vectorized: a simd loop of 2
  // trips is scalar code, while g++ vectorizes the unrolled body as interleaved accesses.
  // (Not in reductions, whose clause names the innermost loop.)
  if (innermost > 0 && simd_clause.empty() && inner_from == 0 && shape[innermost].kind == Dim::Const &&
      shape[innermost].size <= kMaxUnrolledDim) {
    int outer = -1;
    for (int d = 0; d < innermost; ++d)
      if (!shape[d].is_one()) outer = d;
    if (outer >= 0) {
      std::vector<Dim> rows(shape.begin(), shape.begin() + innermost);
      const int64_t n = shape[innermost].size;
      --nest_depth_;  // the nest over the leading dims names its indices as this one would
      nest(rows, [&](const Idx& lead) {
        Idx full = lead;
        full.resize(shape.size(), "0");  // dims after the unrolled one are of size 1
        for (int64_t c = 0; c < n; ++c) {
          full[static_cast<size_t>(innermost)] = std::to_string(c);
          body(full);
        }
      });
      ++nest_depth_;
      return;
    }
  }
  int opened = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    const Dim& d = shape[k];
    if (d.is_one()) {
      idx[k] = "0";
      continue;
    }
    idx[k] = prefix + std::to_string(k);
  }
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k].is_one()) continue;
    if (static_cast<int>(k) == innermost && k >= inner_from) {
      std::string pragma = "#pragma omp simd" + (simd_clause.empty() ? "" : " " + simd_clause);
      if (before_inner) before_inner(idx, k);
      hoisted_loop(
          idx[k], loop_header(shape[k], idx[k]), pragma, [&] { body(idx); }, "0", "(" + extent(shape[k]) + " - 1)");
      for (int j = 0; j < opened; ++j) {
        --depth_;
        line("}");
      }
      return;
    }
    line(loop_header(shape[k], idx[k]));
    ++depth_;
    ++opened;
  }
  body(idx);
  for (int j = 0; j < opened; ++j) {
    --depth_;
    line("}");
  }
}

std::string LaunchEmitter::extent(const Dim& d) const {
  return d.kind == Dim::Tile ? "n_" + tname(d.tile) : std::to_string(d.size);
}

std::string LaunchEmitter::loop_header(const Dim& d, const std::string& i) {
  const std::string bound = extent(d);
  return "for (int64_t " + i + " = 0; " + i + " < " + bound + "; ++" + i + ") {";
}

namespace {
std::string indented(const std::string& text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size() - 1;
    out += "  " + text.substr(at, eol + 1 - at);
    at = eol + 1;
  }
  return out;
}

// 0 <= value < size, as one unsigned comparison.
std::string in_bounds(const std::string& value, int64_t size) {
  return "static_cast<uint64_t>(" + value + ") < " + std::to_string(size) + "u";
}
}  // namespace

// Emits `pragma` + `header` + body + "}", with the body's reads that do not mention `var`
// hoisted into constants just before the loop. In a simd loop, the indices checked per element
// are checked ahead of it (checked_ahead_loop). (Not in a loop inside such a body: its index is
// not in scope before the outer one.)
void LaunchEmitter::hoisted_loop(const std::string& var, const std::string& header, const std::string& pragma,
                                 const std::function<void()>& body, const std::string& first, const std::string& last) {
  std::string saved_var = hoist_var_;
  std::vector<Hoisted> saved_decls;
  std::swap(saved_decls, hoisted_);
  hoist_var_ = var;
  const bool outer_checks_ahead = checks_ahead_;
  const bool ahead = !pragma.empty() && p_.config.index_checks && !outer_checks_ahead;
  std::vector<CheckSite> saved_sites;
  std::swap(saved_sites, check_sites_);
  const std::string saved_first = loop_first_, saved_last = loop_last_;
  loop_first_ = first;
  loop_last_ = last;
  auto generate = [&](bool collect) {
    std::ostringstream out;
    std::swap(os_, out);
    checks_ahead_ = collect;
    ++depth_;
    body();
    --depth_;
    std::swap(os_, out);
    return out.str();
  };
  // A simd loop over a known range draws its random numbers a row at a time (random_rows.cpp).
  const bool saved_random_on = random_rows_on_;
  std::vector<RandomRow> saved_random;
  std::swap(saved_random, random_rows_);
  random_rows_on_ = !pragma.empty() && !first.empty() && !last.empty();
  // The body with its checks collected as sites, and, where there are any, again with them inline
  // (and then with its random numbers drawn per element).
  std::string inner = generate(ahead);
  std::vector<CheckSite> sites;
  std::swap(sites, check_sites_);
  if (!sites.empty() && !random_rows_.empty()) {
    random_rows_on_ = false;
    random_rows_.clear();
    inner = generate(ahead);
    sites.clear();
    std::swap(sites, check_sites_);
  }
  random_rows_on_ = false;  // (the checked copy draws per element, as the first did then)
  const std::string checked_inner = sites.empty() ? "" : generate(false);
  std::vector<RandomRow> random;
  std::swap(random, random_rows_);
  random_rows_ = std::move(saved_random);
  random_rows_on_ = saved_random_on;
  checks_ahead_ = outer_checks_ahead;
  check_sites_ = std::move(saved_sites);
  loop_first_ = saved_first;
  loop_last_ = saved_last;
  std::vector<Hoisted> decls;
  std::swap(decls, hoisted_);
  hoisted_ = std::move(saved_decls);
  hoist_var_ = saved_var;
  for (const Hoisted& h : decls) line("const " + h.type + " " + h.name + " = " + h.access + ";");
  if (!sites.empty()) {
    checked_ahead_loop(header, pragma, first, last, sites, inner, checked_inner);
    return;
  }
  if (!random.empty()) {
    random_rows_loop(var, pragma, first, last, indented(inner), random);
    return;
  }
  if (!pragma.empty()) line(pragma);
  line(header);
  os_ << inner;
  line("}");
}

// A simd loop whose per-element index checks (`sites`) are made in a loop of their own before it
// (context.h: a check inside would keep it scalar). Where every index is in range, the loop runs
// without checks (`inner`); otherwise a copy with the checks inline (`checked_inner`) reports the
// first one out of range, as the loop would have.
//
// An index linear along the loop is in range at every trip where it is at the loop's two ends
// (its values lie between them; its masks are not needed), and one that does not vary along it
// (a gathered row under a mask) where it is in range once, where its masks hold: both are checked
// before the loop, once it has a trip. The others, and these where the ends are not in range (a
// mask keeps the elements past a seam from being read), are checked at each trip of the check
// loop, in order (a later index may read through an earlier one: && stops at the first out of
// range), each where its access is made.
void LaunchEmitter::checked_ahead_loop(const std::string& header, const std::string& pragma, const std::string& first,
                                       const std::string& last, const std::vector<CheckSite>& sites,
                                       const std::string& inner, const std::string& checked_inner) {
  const std::string n = std::to_string(checked_loops_++), bad = "ph_bad" + n, span = "ph_span" + n;
  std::string ends;
  bool all_linear = true;
  for (const CheckSite& c : sites) {
    if (c.first.empty()) {
      all_linear = false;
    } else if (c.first == c.value && !c.mask.empty()) {  // the same at every trip: where its masks hold
      ends += " && (!(" + c.mask + ") || " + in_bounds(c.value, c.size) + ")";
    } else {  // linear: arithmetic of tile indices and scalars, which reads nothing, at both ends
      ends += " && " + in_bounds(c.first, c.size) + " && " + in_bounds(c.last, c.size);
    }
  }
  if (!ends.empty()) line("const bool " + span + " = (" + first + ") <= (" + last + ")" + ends + ";");
  std::string in_range;
  for (const CheckSite& c : sites)
    in_range += (in_range.empty() ? "(" : " && (") + (c.first.empty() ? "" : span + " || ") +
                (c.mask.empty() ? "" : "!(" + c.mask + ") || ") + in_bounds(c.value, c.size) + ")";
  line("int64_t " + bad + " = 0;  // an index out of its dimension in the loop below");
  if (all_linear) {
    line("if (!" + span + ") {");
    ++depth_;
  }
  line("#pragma omp simd reduction(|:" + bad + ")");
  line(header);
  line("  " + bad + " |= static_cast<int64_t>(!(" + in_range + "));");
  line("}");
  if (all_linear) {
    --depth_;
    line("}");
  }
  auto loop = [&](const std::string& body) {
    ++depth_;
    line(pragma);
    line(header);
    os_ << indented(body);
    line("}");
    --depth_;
  };
  line("if (" + bad + " == 0) {");
  loop(inner);
  line("} else {  // the loop with its checks, which records the first index out of range");
  loop(checked_inner);
  line("}");
}

bool LaunchEmitter::reads_unchecked(const std::string& text) const {
  if (!checks_ahead_) return false;
  return std::any_of(check_sites_.begin(), check_sites_.end(),
                     [&](const CheckSite& c) { return text.find(c.value) != std::string::npos; });
}

bool LaunchEmitter::mentions(const std::string& text, const std::string& var) {
  for (size_t p = text.find(var); p != std::string::npos; p = text.find(var, p + 1)) {
    bool left = p == 0 || !(std::isalnum(static_cast<unsigned char>(text[p - 1])) || text[p - 1] == '_');
    size_t e = p + var.size();
    bool right = e >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_');
    if (left && right) return true;
  }
  return false;
}

bool LaunchEmitter::is_hoisted(const std::string& e) const {
  for (const Hoisted& h : hoisted_)
    if (h.name == e) return true;
  return false;
}

// A memory read, hoisted out of the current innermost loop when it does not depend on it.
std::string LaunchEmitter::read(const std::string& access, DType compute) {
  if (hoist_var_.empty() || no_hoist_ > 0 || mentions(access, hoist_var_)) return access;
  // (A read through an index checked ahead is made after the checks, in the loop: hoisted, it
  // would come before them.)
  if (reads_unchecked(access)) return access;
  for (const Hoisted& h : hoisted_)
    if (h.access == access) return h.name;
  hoisted_.push_back({"h" + std::to_string(hoist_counter_++), c_type(compute), access});
  return hoisted_.back().name;
}

}  // namespace parhelion::backend::cpu::emit
