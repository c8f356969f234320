#include "ir/lexer.h"

#include <cctype>

#include "parhelion/error.h"

namespace parhelion::ir {

std::string Token::describe() const {
  switch (kind) {
    case Ident:
      return "'" + text + "'";
    case Number:
      return "number " + text;
    case Value:
      return "value %" + text;
    case Symbol:
      return "$" + text;
    case String:
      return "string \"" + text + "\"";
    case Punct:
      return "'" + text + "'";
    case EndOfLine:
      return "end of line";
    case EndOfFile:
      return "end of file";
  }
  return "?";
}

namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

class Lexer {
 public:
  Lexer(const std::string& text, const std::string& file) : s_(text), file_(file) {}

  std::vector<Token> run() {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '\n') {
        // A line end ends a statement; blank lines and comment lines end none.
        if (!out_.empty() && out_.back().kind != Token::EndOfLine) push(Token::EndOfLine, "", i_);
        advance();
        ++line_;
        line_start_ = i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else if (ident_start(c)) {
        size_t b = i_;
        while (i_ < s_.size() && ident_char(s_[i_])) advance();
        push(Token::Ident, s_.substr(b, i_ - b), b);
      } else if (digit(c) || (c == '-' && digit(peek(1)))) {
        number();
      } else if (c == '%' || c == '$') {
        size_t b = i_;
        advance();
        size_t from = i_;
        while (i_ < s_.size() && ident_char(s_[i_])) advance();
        if (i_ == from)
          fail(b, std::string("expected ") + (c == '%' ? "a value number after '%'" : "a symbol name after '$'"));
        push(c == '%' ? Token::Value : Token::Symbol, s_.substr(from, i_ - from), b);
      } else if (c == '"') {
        string();
      } else if (c == '.' && peek(1) == '.') {
        push(Token::Punct, "..", i_);
        advance(2);
      } else if (c == '-' && peek(1) == '>') {
        push(Token::Punct, "->", i_);
        advance(2);
      } else if (std::string("()[]{},:=-").find(c) != std::string::npos) {
        push(Token::Punct, std::string(1, c), i_);
        advance();
      } else {
        fail(i_, std::string("unexpected character '") + c + "'");
      }
    }
    if (!out_.empty() && out_.back().kind != Token::EndOfLine) push(Token::EndOfLine, "", i_);
    push(Token::EndOfFile, "", i_);
    return std::move(out_);
  }

 private:
  char peek(size_t k) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  void advance(size_t n = 1) { i_ += n; }

  void push(Token::Kind k, std::string text, size_t at) {
    out_.push_back({k, std::move(text), line_, static_cast<int>(at - line_start_) + 1});
  }

  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    throw UserError(file_ + ":" + std::to_string(line_) + ":" + std::to_string(at - line_start_ + 1) + ": " + msg);
  }

  // [-]digits[.digits][e[+-]digits]. A '.' belongs to the number only before a digit, so that
  // `0..64` is 0, '..', 64.
  void number() {
    size_t b = i_;
    if (s_[i_] == '-') advance();
    while (digit(peek(0))) advance();
    if (peek(0) == '.' && digit(peek(1))) {
      advance();
      while (digit(peek(0))) advance();
    }
    if ((peek(0) == 'e' || peek(0) == 'E') &&
        (digit(peek(1)) || ((peek(1) == '-' || peek(1) == '+') && digit(peek(2))))) {
      advance(2);
      while (digit(peek(0))) advance();
    }
    if (ident_char(peek(0))) fail(i_, "expected the end of number " + s_.substr(b, i_ - b) + ", got '" + peek(0) + "'");
    push(Token::Number, s_.substr(b, i_ - b), b);
  }

  void string() {
    size_t b = i_;
    advance();
    std::string text;
    while (true) {
      if (i_ >= s_.size() || s_[i_] == '\n') fail(b, "unterminated string (expected a closing '\"' on this line)");
      char c = s_[i_];
      if (c == '"') break;
      if (c == '\\' && (peek(1) == '"' || peek(1) == '\\')) {
        advance();
        c = s_[i_];
      }
      text += c;
      advance();
    }
    advance();
    push(Token::String, text, b);
  }

  const std::string& s_;
  const std::string& file_;
  size_t i_ = 0, line_start_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& text, const std::string& file_name) {
  return Lexer(text, file_name).run();
}

}  // namespace parhelion::ir
