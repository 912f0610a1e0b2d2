// The header dict of a .npy file: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// parsed strictly, without evaluating anything.
#include "npy_dict.hpp"

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "../engine/errors.hpp"
#include "npy_format.hpp"
#include "npy_reader.hpp"

namespace xtgrad::detail {

namespace {

// How much of a malformed header an error message quotes.
constexpr std::size_t k_max_quoted_header = 200;

// The header dict, parsed strictly: exactly the keys 'descr' (a string),
// 'fortran_order' (True / False) and 'shape' (a tuple of non-negative ints),
// in any order, each once; Python's whitespace and trailing commas; nothing
// but whitespace after the closing brace.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const InputFile& file, const std::string& text) : file_(file), text_(text) {}

  void parse(NpyHeader& header) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip_space();
    expect('{', "'{' opening the header dict");
    skip_space();
    while (!at('}')) {
      const std::string key = parse_string("a quoted key");
      skip_space();
      expect(':', "':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        mark_once(has_descr, key);
        header.descr = parse_string("a quoted dtype descr such as '<f4'");
      } else if (key == "fortran_order") {
        mark_once(has_order, key);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_once(has_shape, key);
        header.shape = parse_shape();
      } else {
        fail("unexpected key '" + key + "', expected only 'descr', 'fortran_order' and 'shape'");
      }
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        fail_expected("',' or '}' after the value of '" + key + "'");
      }
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) fail_expected("only padding after the closing '}'");
    if (!has_descr) fail("the header has no 'descr' key");
    if (!has_order) fail("the header has no 'fortran_order' key");
    if (!has_shape) fail("the header has no 'shape' key");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_npy_content(file_, "malformed .npy header: " + what + " (header: \"" +
                                escaped(text_, k_max_quoted_header) + "\")");
  }
  [[noreturn]] void fail_expected(const std::string& expected) const {
    const std::string found =
        pos_ < text_.size() ? quoted(escaped(text_.substr(pos_, 1))) : "the end of the header";
    fail("at byte " + std::to_string(pos_) + " expected " + expected + ", found " + found);
  }
  void mark_once(bool& seen, const std::string& key) const {
    if (seen) fail("duplicate key '" + key + "'");
    seen = true;
  }
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  void expect(char c, const std::string& what) {
    if (!at(c)) fail_expected(what);
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  // A Python string literal without escapes: '...' or "...".
  std::string parse_string(const std::string& what) {
    if (!at('\'') && !at('"')) fail_expected(what);
    const char quote = text_[pos_++];
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c < 0x20 || c >= 0x7f || c == '\\') fail_expected("a plain ASCII string character");
      ++pos_;
    }
    if (pos_ == text_.size()) fail_expected(std::string("the closing ") + quote + " of a string");
    return text_.substr(begin, pos_++ - begin);
  }

  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail_expected("True or False for 'fortran_order'");
  }

  std::size_t parse_dimension() {
    if (at('-')) fail("negative dimension in 'shape'");
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
      fail_expected("a non-negative integer dimension in 'shape'");
    std::size_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::size_t>(text_[pos_] - '0');
      if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10)
        fail("dimension in 'shape' overflows a 64-bit size");
      value = value * 10 + digit;
      ++pos_;
    }
    if (at('L')) ++pos_;  // Python 2 long literal, as in files written by numpy under Python 2
    return value;
  }

  std::vector<std::size_t> parse_shape() {
    std::vector<std::size_t> shape;
    expect('(', "'(' opening the 'shape' tuple");
    skip_space();
    if (at(')')) {
      ++pos_;
      return shape;
    }
    while (true) {
      if (shape.size() == k_npy_max_dims)
        fail("'shape' has more than " + std::to_string(k_npy_max_dims) + " dimensions");
      shape.push_back(parse_dimension());
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
        if (at(')')) break;
        continue;
      }
      if (!at(')')) fail_expected("',' or ')' in the 'shape' tuple");
      if (shape.size() == 1)
        fail("'shape' (n) is not a tuple; a one-dimensional shape is written (n,)");
      break;
    }
    ++pos_;  // ')'
    return shape;
  }

  const InputFile& file_;
  const std::string& text_;
  std::size_t pos_ = 0;
};

}  // namespace

void parse_npy_dict(const InputFile& file, const std::string& text, NpyHeader& header) {
  NpyHeaderParser(file, text).parse(header);
}

}  // namespace xtgrad::detail
