#pragma once
// CharTokenizer: text to token ids one character (Unicode code point) at a
// time, as nanoGPT's character-level models do. The vocabulary is every
// distinct code point of the texts it is built from, in increasing order;
// token id = its rank. code_points() is what to save beside a model so that
// from_code_points rebuilds the same tokenizer.
//
// decode_utf8 and encode_utf8 convert between UTF-8 and code points.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../engine/indices.hpp"

namespace xtgrad {

class CharTokenizer {
 public:
  CharTokenizer() = default;
  // The distinct code points of `texts`.
  static CharTokenizer of(const std::vector<const std::u32string*>& texts);
  // From the saved list of code points (strictly increasing, each a valid
  // code point); std::invalid_argument otherwise.
  static CharTokenizer from_code_points(std::vector<char32_t> code_points);

  std::size_t size() const { return code_points_.size(); }
  const std::vector<char32_t>& code_points() const { return code_points_; }

  // Token ids of `text`; std::invalid_argument naming `what` and the first
  // character outside the vocabulary.
  std::vector<std::int64_t> encode(const std::u32string& text, const std::string& what) const;
  // As encode, into a flat Indices.
  Indices encode_indices(const std::u32string& text, const std::string& what) const;
  // The text of ids in [0, size()); std::invalid_argument otherwise.
  std::u32string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::vector<char32_t> code_points_;  // sorted
};

// UTF-8 to code points; std::invalid_argument "<where>: invalid UTF-8 at
// byte <i> (expected UTF-8 text)" at the first invalid sequence (overlong
// forms, surrogates and values past U+10FFFF included). And back.
std::u32string decode_utf8(const std::string& text, const std::string& where);
std::string encode_utf8(const std::u32string& text);

}  // namespace xtgrad
