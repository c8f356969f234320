// The tokens of the Tile IR's text form (printer.h), for the parser (parser.h).
//
// The text is line-oriented: one statement per line, so a line end is a token. `//` starts a
// comment that runs to the end of the line (golden tests keep their RUN and CHECK lines there).
// Every token knows its line and column (1-based), so that an error can point at it.
#pragma once

#include <string>
#include <vector>

namespace parhelion::ir {

struct Token {
  enum Kind {
    Ident,   // kernel, load, t0, arg1, f32, inf, ... (letters, digits, '_', not first a digit)
    Number,  // 12, -3, 0.5, 1e-05 (a '-' directly before a digit belongs to the number)
    Value,   // %12: `text` is the digits
    Symbol,  // $b3: `text` is what follows the '$'
    String,  // "kernels/softmax.cpp": `text` is the contents, unescaped
    Punct,   // ( ) [ ] { } , : = .. -> and a '-' not before a digit
    EndOfLine,
    EndOfFile,
  } kind = EndOfFile;
  std::string text;
  int line = 0, col = 0;

  bool is(Kind k, const std::string& t) const { return kind == k && text == t; }
  bool is_punct(const std::string& t) const { return is(Punct, t); }
  // How an error names it: "',' ", "end of line", "identifier 'foo'".
  std::string describe() const;
};

// Splits `text` into tokens; blank and comment-only lines produce no EndOfLine. Throws
// UserError ("file:line:col: ...") on a character that starts no token.
std::vector<Token> tokenize(const std::string& text, const std::string& file_name);

}  // namespace parhelion::ir
