#include "testing/filecheck.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <vector>

#include "parhelion/error.h"

namespace parhelion::testing {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      if (start < text.size()) lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Runs of spaces and tabs become one space (FileCheck's default, without --strict-whitespace).
std::string canonical(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool blank = c == ' ' || c == '\t' || c == '\r';
    if (blank && !out.empty() && out.back() == ' ') continue;
    out += blank ? ' ' : c;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

struct Directive {
  enum Kind { Check, Next, Same, Not, Label } kind = Check;
  std::string pattern;  // canonical
  std::optional<std::regex> regex;
  int line = 0;      // in the check file
  std::string text;  // the check file's line, for messages

  std::string name() const {
    static const char* names[] = {"CHECK", "CHECK-NEXT", "CHECK-SAME", "CHECK-NOT", "CHECK-LABEL"};
    return names[kind];
  }
};

// A position in the canonical input lines.
struct Pos {
  int line = 0;
  size_t col = 0;
};

struct Match {
  int line = 0;
  size_t begin = 0, end = 0;
};

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

class Checker {
 public:
  Checker(const std::string& checks, const std::string& check_file, const std::string& input,
          const std::string& input_name)
      : check_file_(check_file), input_name_(input_name), raw_(split_lines(input)) {
    for (const std::string& l : raw_) lines_.push_back(canonical(l));
    read_directives(checks);
  }

  CheckResult run() {
    // Labels first: each must match, in order; they bound the blocks the other checks see.
    std::vector<std::pair<size_t, Match>> labels;  // directive index, its match
    Pos from;
    for (size_t i = 0; i < dirs_.size(); ++i) {
      if (dirs_[i].kind != Directive::Label) continue;
      auto m = find(dirs_[i], from, end_of_input());
      if (!m) return not_found(dirs_[i], from, end_of_input());
      labels.push_back({i, *m});
      from = {m->line, m->end};
    }
    // Block k runs from label k's match to label k+1's; the checks before the first label
    // see the input up to it.
    size_t d = 0;
    for (size_t k = 0; k <= labels.size(); ++k) {
      const size_t group_end = k < labels.size() ? labels[k].first : dirs_.size();
      const Pos block_end = k < labels.size() ? Pos{labels[k].second.line, labels[k].second.begin} : end_of_input();
      std::optional<Match> previous = k > 0 ? std::optional<Match>(labels[k - 1].second) : std::nullopt;
      const Pos block_start = previous ? Pos{previous->line, previous->end} : Pos{};
      if (auto r = check_group(d, group_end, block_start, block_end, previous); !r.ok) return r;
      d = group_end + 1;
    }
    return {};
  }

 private:
  Pos end_of_input() const {
    return lines_.empty() ? Pos{} : Pos{static_cast<int>(lines_.size()) - 1, lines_.back().size()};
  }

  void read_directives(const std::string& checks) {
    const std::vector<std::string> lines = split_lines(checks);
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& l = lines[i];
      for (size_t at = l.find("CHECK"); at != std::string::npos; at = l.find("CHECK", at + 1)) {
        if (at > 0 && (std::isalnum(static_cast<unsigned char>(l[at - 1])) || l[at - 1] == '_' || l[at - 1] == '-'))
          continue;
        size_t colon = l.find(':', at);
        std::string word = colon == std::string::npos ? "" : l.substr(at, colon - at);
        Directive dir;
        dir.line = static_cast<int>(i) + 1;
        dir.text = trim(l);
        if (word == "CHECK")
          dir.kind = Directive::Check;
        else if (word == "CHECK-NEXT")
          dir.kind = Directive::Next;
        else if (word == "CHECK-SAME")
          dir.kind = Directive::Same;
        else if (word == "CHECK-NOT")
          dir.kind = Directive::Not;
        else if (word == "CHECK-LABEL")
          dir.kind = Directive::Label;
        else if (word.size() > 5 && word[5] == '-' && word.find(' ') == std::string::npos)
          throw UserError(where(dir.line) + "unsupported or misspelled directive " + word +
                          ": (supported: CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT, CHECK-LABEL)");
        else
          continue;  // "CHECKS", "CHECK this" in prose: not a directive
        set_pattern(dir, l.substr(colon + 1));
        const bool follows_a_match =
            std::any_of(dirs_.begin(), dirs_.end(), [](const Directive& d) { return d.kind != Directive::Not; });
        if ((dir.kind == Directive::Next || dir.kind == Directive::Same) && !follows_a_match)
          throw UserError(where(dir.line) + "found " + dir.name() +
                          " without a previous CHECK or CHECK-LABEL to follow");
        dirs_.push_back(std::move(dir));
        break;  // one directive per line
      }
    }
    if (dirs_.empty()) throw UserError(check_file_ + ": no CHECK directive found (a check file that checks nothing)");
  }

  void set_pattern(Directive& dir, const std::string& text) {
    dir.pattern = canonical(trim(text));
    if (dir.pattern.empty()) throw UserError(where(dir.line) + "found an empty check string with " + dir.name());
    if (dir.pattern.find("[[") != std::string::npos)
      throw UserError(where(dir.line) + "FileCheck variables ([[...]]) are not supported");
    if (dir.pattern.find("{{") == std::string::npos) return;
    std::string re;
    size_t at = 0;
    while (at < dir.pattern.size()) {
      size_t open = dir.pattern.find("{{", at);
      if (open == std::string::npos) {
        re += regex_escape(dir.pattern.substr(at));
        break;
      }
      size_t close = dir.pattern.find("}}", open + 2);
      if (close == std::string::npos) throw UserError(where(dir.line) + "'{{' without a closing '}}'");
      re += regex_escape(dir.pattern.substr(at, open - at)) + "(?:" + dir.pattern.substr(open + 2, close - open - 2) +
            ")";
      at = close + 2;
    }
    try {
      dir.regex = std::regex(re, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw UserError(where(dir.line) + "bad regular expression in " + dir.name() + ": " + e.what());
    }
  }

  std::string where(int line) const { return check_file_ + ":" + std::to_string(line) + ": "; }

  // The first match of `dir` in [from, to).
  std::optional<Match> find(const Directive& dir, Pos from, Pos to) const {
    for (int l = from.line; l <= to.line && l < static_cast<int>(lines_.size()); ++l) {
      const std::string& s = lines_[l];
      const size_t begin = l == from.line ? from.col : 0, limit = l == to.line ? to.col : s.size();
      if (begin > limit) continue;
      const std::string hay = s.substr(0, limit);
      if (dir.regex) {
        std::smatch m;
        if (std::regex_search(hay.begin() + static_cast<long>(begin), hay.end(), m, *dir.regex))
          return Match{l, begin + static_cast<size_t>(m.position(0)),
                       begin + static_cast<size_t>(m.position(0) + m.length(0))};
      } else if (size_t at = hay.find(dir.pattern, begin); at != std::string::npos) {
        return Match{l, at, at + dir.pattern.size()};
      }
    }
    return std::nullopt;
  }

  CheckResult check_group(size_t first, size_t last, Pos start, Pos end, std::optional<Match> previous) {
    std::vector<const Directive*> nots;
    Pos cursor = start;
    // The CHECK-NOTs seen since the last match must not occur in [cursor, until).
    auto check_nots = [&](Pos until) -> CheckResult {
      for (const Directive* n : nots)
        if (auto m = find(*n, cursor, until))
          return fail(*n, "excluded string found in " + input_name_ + " at line " + std::to_string(m->line + 1),
                      m->line, m->line);
      nots.clear();
      return {};
    };
    for (size_t i = first; i < last; ++i) {
      const Directive& dir = dirs_[i];
      if (dir.kind == Directive::Not) {
        nots.push_back(&dir);
        continue;
      }
      auto m = find(dir, cursor, end);
      if (!m) return not_found(dir, cursor, end);
      if (dir.kind == Directive::Next && m->line != previous->line + 1)
        return fail(dir,
                    "found on line " + std::to_string(m->line + 1) + " of " + input_name_ +
                        ", not on the line after the previous match (line " + std::to_string(previous->line + 1) + ")",
                    previous->line, m->line);
      if (dir.kind == Directive::Same && m->line != previous->line)
        return fail(dir,
                    "not found on the previous match's line " + std::to_string(previous->line + 1) +
                        " (found on line " + std::to_string(m->line + 1) + ")",
                    previous->line, m->line);
      if (auto r = check_nots({m->line, m->begin}); !r.ok) return r;
      previous = m;
      cursor = {m->line, m->end};
    }
    return check_nots(end);
  }

  CheckResult not_found(const Directive& dir, Pos from, Pos to) const {
    return fail(dir,
                "expected string not found in " + input_name_ + " (searched from line " +
                    std::to_string(from.line + 1) + ", column " + std::to_string(from.col + 1) + " to line " +
                    std::to_string(to.line + 1) + ")",
                from.line, std::min(to.line, from.line + 7));
  }

  // The message: what failed, and the input lines [first, last] around where it looked.
  CheckResult fail(const Directive& dir, const std::string& what, int first, int last) const {
    std::string msg = where(dir.line) + dir.name() + ": " + what + "\n  check:   " + dir.text + "\n  pattern: \"" +
                      dir.pattern + "\"\n  " + input_name_ + ":\n";
    if (raw_.empty()) msg += "    (empty)\n";
    first = std::max(0, first - 1);
    last = std::min(static_cast<int>(raw_.size()) - 1, last + 1);
    for (int l = first; l <= last; ++l) {
      std::string num = std::to_string(l + 1);
      msg += "    " + std::string(num.size() < 4 ? 4 - num.size() : 0, ' ') + num + " | " + raw_[l] + "\n";
    }
    return {false, msg};
  }

  const std::string check_file_, input_name_;
  std::vector<std::string> raw_, lines_;  // the input as given, and canonical
  std::vector<Directive> dirs_;
};

}  // namespace

CheckResult filecheck(const std::string& checks, const std::string& check_file, const std::string& input,
                      const std::string& input_name) {
  return Checker(checks, check_file, input, input_name).run();
}

}  // namespace parhelion::testing
