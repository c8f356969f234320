// The golden pass tests: every tests/passes/*.tir is one test case. Its first line,
// `// RUN: opt --stage S [--target ...] [--config '...']`, says which stage to run (the file is
// the input, as with `parhelion opt FILE.tir`); its `// CHECK...` lines are checked against what
// the stage prints (src/testing/filecheck.h). The stage runs in-process through the same
// function as the command line (tools/opt_command.h). See docs/testing.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "parhelion/error.h"
#include "testing/filecheck.h"
#include "tools/cli_options.h"
#include "tools/opt_command.h"

namespace fs = std::filesystem;
namespace ph = parhelion;

namespace {

const fs::path kPassDir = fs::path(PARHELION_SOURCE_DIR) / "tests" / "passes";

std::vector<std::string> pass_files() {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(kPassDir))
    if (e.path().extension() == ".tir") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The RUN line's words as a shell splits them: '...' and "..." quote (a config is JSON).
std::vector<std::string> split_words(const std::string& s, const std::string& file) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      const size_t close = s.find(c, i + 1);
      if (close == std::string::npos) throw ph::UserError(file + ":1: unterminated quote in the RUN line");
      word += s.substr(i + 1, close - i - 1);
      in_word = true;
      i = close;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

// What `// RUN: opt ARGS` asks for, parsed and checked as the command line does.
ph::tools::OptRequest run_line_request(const std::string& text, const std::string& file) {
  const std::string prefix = "// RUN:";
  const std::string first = text.substr(0, text.find('\n'));
  if (first.rfind(prefix, 0) != 0)
    throw ph::UserError(file + ":1: the first line must be `// RUN: opt --stage STAGE ...`");
  std::vector<std::string> words = split_words(first.substr(prefix.size()), file);
  if (words.empty() || words[0] != "opt") throw ph::UserError(file + ":1: the RUN line must run `opt`");
  std::vector<std::string> args = {"parhelion", "opt", file};
  args.insert(args.end(), words.begin() + 1, words.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ph::tools::Options o = ph::tools::parse_options(static_cast<int>(argv.size()), argv.data());
  ph::tools::check_flags_apply(o);
  if (!o.has("stage")) throw ph::UserError(file + ":1: the RUN line must name a --stage");
  return ph::tools::opt_request(o);
}

class Passes : public ::testing::TestWithParam<std::string> {};

TEST_P(Passes, OutputMatchesTheChecks) {
  const std::string file = "tests/passes/" + GetParam();
  std::ifstream in(kPassDir / GetParam());
  ASSERT_TRUE(in) << "cannot read " << file;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::string output;
  ph::tools::OptRequest request;
  try {
    request = run_line_request(text, file);
    output = ph::tools::run_opt_stage(text, file, request);
  } catch (const ph::UserError& e) {
    FAIL() << e.what();
  }
  const ph::testing::CheckResult r =
      ph::testing::filecheck(text, file, output, "the output of opt --stage " + request.stage);
  EXPECT_TRUE(r.ok) << r.message << "\nthe whole output:\n" << output;
}

// Test names from file names: tests/passes/fusion-two-reductions.tir -> fusion_two_reductions.
std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = fs::path(info.param).stem().string();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Golden, Passes, ::testing::ValuesIn(pass_files()), case_name);

// The folder is globbed: a wrong path would otherwise run no case at all, and pass.
TEST(Passes, TheFolderHasTheGoldenTests) { EXPECT_GE(pass_files().size(), 13u) << kPassDir; }

}  // namespace
