// CharTokenizer, decode_utf8 and encode_utf8 (char_tokenizer.hpp).

#include "char_tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "bpe_model.hpp"

namespace xtgrad {

namespace {

std::string describe(char32_t c) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(c));
  const bool printable = c >= 0x20 && c != 0x7f;
  return printable ? "'" + encode_utf8(std::u32string(1, c)) + "' (" + hex + ")" : hex;
}

}  // namespace

CharTokenizer CharTokenizer::of(const std::vector<const std::u32string*>& texts) {
  std::vector<bool> seen;
  std::vector<char32_t> extra;  // past the dense table
  constexpr char32_t k_dense = 0x10000;
  seen.assign(k_dense, false);
  for (const std::u32string* text : texts)
    for (const char32_t c : *text) {
      if (c < k_dense)
        seen[c] = true;
      else
        extra.push_back(c);
    }
  CharTokenizer v;
  for (char32_t c = 0; c < k_dense; ++c)
    if (seen[c]) v.code_points_.push_back(c);
  std::sort(extra.begin(), extra.end());
  extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
  v.code_points_.insert(v.code_points_.end(), extra.begin(), extra.end());
  return v;
}

CharTokenizer CharTokenizer::from_code_points(std::vector<char32_t> code_points) {
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    const char32_t c = code_points[i];
    if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff) || (i > 0 && c <= code_points[i - 1]))
      throw std::invalid_argument("the saved vocabulary's entry " + std::to_string(i) + " is " +
                                  std::to_string(c) +
                                  ", expected strictly increasing Unicode code points");
  }
  if (code_points.empty()) throw std::invalid_argument("the saved vocabulary is empty");
  CharTokenizer v;
  v.code_points_ = std::move(code_points);
  return v;
}

std::vector<std::int64_t> CharTokenizer::encode(const std::u32string& text,
                                                const std::string& what) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto it = std::lower_bound(code_points_.begin(), code_points_.end(), text[i]);
    if (it == code_points_.end() || *it != text[i])
      throw std::invalid_argument(what + ": character " + std::to_string(i) + ", " +
                                  describe(text[i]) + ", is not in the model's vocabulary of " +
                                  std::to_string(size()) + " characters");
    ids.push_back(it - code_points_.begin());
  }
  return ids;
}

Indices CharTokenizer::encode_indices(const std::u32string& text, const std::string& what) const {
  const std::vector<std::int64_t> ids = encode(text, what);
  Indices out = Indices::from_shape({ids.size()});
  std::copy(ids.begin(), ids.end(), out.begin());
  return out;
}

std::u32string CharTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::u32string text;
  text.reserve(ids.size());
  for (const std::int64_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= size())
      throw std::invalid_argument("token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(size()) + ")");
    text.push_back(code_points_[static_cast<std::size_t>(id)]);
  }
  return text;
}

std::u32string decode_utf8(const std::string& text, const std::string& where) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t start = i;
    const std::int32_t c = detail::next_code_point(text, i);
    if (c < 0)
      throw std::invalid_argument(where + ": invalid UTF-8 at byte " + std::to_string(start) +
                                  " (expected UTF-8 text)");
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::string encode_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) detail::append_utf8(out, c);
  return out;
}

}  // namespace xtgrad
