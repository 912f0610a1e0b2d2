// The pre-tokenizer patterns as a scanner over code points, and UTF-8.
//
// Each pattern is an ordered alternation (the first alternative that matches
// at a position wins; each is greedy, with the regex engine's backtracking
// worked out by hand below). The scanner returns the length of the match at
// a position; a match always exists and is never empty, so the pieces tile
// the text.
//
// std::regex has no \p{L}; PCRE2 (PCRE2_UCP) or ICU's regex would run the
// patterns as written, but the scanner needs no dependency for xtgrad or for
// what links it, reads UTF-8 directly and fixes the Unicode version the ids
// depend on (docs/tokenizers.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bpe_model.hpp"
#include "unicode_classes.hpp"

namespace xtgrad::detail {

namespace {

constexpr char32_t k_replacement = 0xFFFD;

// The length of the UTF-8 sequence lead byte `b` starts and the range of its
// second byte (Unicode's Table 3-7, well-formed byte sequences); 0 when `b`
// starts none.
struct Lead {
  int length;
  unsigned char low, high;
};
Lead lead_of(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// The bytes of a well-formed sequence at `at`, or of the maximal prefix of
// one (at least 1) as a negative count: Python's and Unicode's "maximal
// subpart" that errors="replace" turns into one U+FFFD.
int sequence_at(std::string_view text, std::size_t at) {
  const auto b = static_cast<unsigned char>(text[at]);
  if (b < 0x80) return 1;
  const Lead lead = lead_of(b);
  if (lead.length == 0) return -1;
  std::size_t end = at + 1;
  if (end == text.size() || static_cast<unsigned char>(text[end]) < lead.low ||
      static_cast<unsigned char>(text[end]) > lead.high)
    return -1;
  ++end;
  while (end < at + static_cast<std::size_t>(lead.length) && end < text.size() &&
         (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    ++end;
  const int got = static_cast<int>(end - at);
  return got == lead.length ? got : -got;
}

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::int32_t next_code_point(std::string_view text, std::size_t& at) {
  const int n = sequence_at(text, at);
  if (n < 0) return -1;
  auto c = static_cast<std::int32_t>(static_cast<unsigned char>(text[at]));
  if (n > 1) {
    c &= 0x3F >> (n - 1);
    for (int i = 1; i < n; ++i) c = c << 6 | (static_cast<unsigned char>(text[at + i]) & 0x3F);
  }
  at += static_cast<std::size_t>(n);
  return c;
}

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t at = 0; at < bytes.size();) {
    const int n = sequence_at(bytes, at);
    if (n > 0) {
      out.append(bytes.substr(at, static_cast<std::size_t>(n)));
      at += static_cast<std::size_t>(n);
    } else {
      append_utf8(out, k_replacement);
      at += static_cast<std::size_t>(-n);
    }
  }
  return out;
}

const std::string& byte_to_unicode(unsigned char b) {
  // bytes_to_unicode(): the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ')
  // stand for themselves; the others, in order, for U+0100, U+0101, ...
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    char32_t next = 0x100;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
      append_utf8(t[static_cast<std::size_t>(i)], printable ? static_cast<char32_t>(i) : next++);
    }
    return t;
  }();
  return table[b];
}

int unicode_to_byte(char32_t c) {
  static const std::vector<int> table = [] {
    std::vector<int> t(0x144, -1);  // every byte-level character is below U+0144
    for (int b = 0; b < 256; ++b) {
      std::size_t at = 0;
      const std::string& s = byte_to_unicode(static_cast<unsigned char>(b));
      t[static_cast<std::size_t>(next_code_point(s, at))] = b;
    }
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

namespace {

// The scanner's view of a stretch of text: its code points, their classes
// and byte offsets (offset[n] is the end).
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<unsigned char> cls;
  std::vector<std::size_t> offset;
  std::size_t size() const { return cp.size(); }
};

bool is_other(unsigned char cls) {
  return cls == 0;  // [^\s\p{L}\p{N}]
}
bool is_newline(char32_t c) {
  return c == '\r' || c == '\n';
}

// The end of the run of class `cls` from i.
std::size_t run_of(const CodePoints& t, std::size_t i, unsigned char cls) {
  while (i < t.size() && t.cls[i] == cls) ++i;
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d at i, case-sensitive or (the (?i:...) of llama3)
// not, where 's also matches U+017F LATIN SMALL LETTER LONG S, whose case
// fold is 's' (Unicode's simple case folding, which the regex engines use).
std::size_t contraction_at(const CodePoints& t, std::size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.size()) return 0;
  const auto fold = [&](char32_t c) -> char32_t {
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
    return c == 0x17F ? 's' : c;
  };
  const char32_t a = fold(t.cp[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  const char32_t b = fold(t.cp[i + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at i (t.cls[i] is k_space): the run of white space, but
// for its last character when a non-space follows (that one goes with the
// next piece, " word").
std::size_t trailing_space_at(const CodePoints& t, std::size_t i) {
  const std::size_t end = run_of(t, i, k_space);
  if (end == t.size() || end - i == 1) return end - i;
  return end - 1 - i;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t gpt2_match(const CodePoints& t, std::size_t i) {
  if (const std::size_t n = contraction_at(t, i, false)) return n;
  std::size_t start = i;
  if (t.cp[i] == ' ' && i + 1 < t.size() && t.cls[i + 1] != k_space) start = i + 1;
  const unsigned char cls = t.cls[start];
  if (cls != k_space) return run_of(t, start, cls) - i;  // letters, numbers or others
  return trailing_space_at(t, i);
}

// LLaMA-3 (max_digits 3) and Qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::size_t llama3_match(const CodePoints& t, std::size_t i, std::size_t max_digits) {
  if (const std::size_t n = contraction_at(t, i, true)) return n;
  const unsigned char cls = t.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == k_letter) return run_of(t, i, k_letter) - i;
  if (cls != k_number && !is_newline(t.cp[i]) && i + 1 < t.size() && t.cls[i + 1] == k_letter)
    return run_of(t, i + 1, k_letter) - i;
  // \p{N}{1,3}
  if (cls == k_number) return std::min(run_of(t, i, k_number) - i, max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  std::size_t start = i;
  if (t.cp[i] == ' ' && i + 1 < t.size() && is_other(t.cls[i + 1])) start = i + 1;
  if (is_other(t.cls[start])) {
    std::size_t end = run_of(t, start, 0);
    while (end < t.size() && is_newline(t.cp[end])) ++end;
    return end - i;
  }
  // \s*[\r\n]+: white space up to and including its last \r or \n
  const std::size_t end = run_of(t, i, k_space);
  for (std::size_t j = end; j > i; --j)
    if (is_newline(t.cp[j - 1])) return j - i;
  return trailing_space_at(t, i);
}

void decode_classes(std::string_view text, CodePoints& t) {
  t.cp.clear(), t.cls.clear(), t.offset.clear();
  for (std::size_t at = 0; at < text.size();) {
    t.offset.push_back(at);
    const std::int32_t c = next_code_point(text, at);  // the caller checked the UTF-8
    t.cp.push_back(static_cast<char32_t>(c));
    t.cls.push_back(unicode_class(static_cast<char32_t>(c)) & k_pattern_classes);
  }
  t.offset.push_back(text.size());
}

// Appends the pieces of t[begin, end) as byte ranges of the text.
void scan(PreTokenizer pattern, const CodePoints& t, std::size_t begin, std::size_t end,
          std::vector<std::pair<std::size_t, std::size_t>>& pieces) {
  for (std::size_t i = begin; i < end;) {
    std::size_t n = 0;
    switch (pattern) {
      case PreTokenizer::gpt2:
      case PreTokenizer::gpt2_digits:
        n = gpt2_match(t, i);
        break;
      case PreTokenizer::llama3:
        n = llama3_match(t, i, 3);
        break;
      case PreTokenizer::qwen2:
        n = llama3_match(t, i, 1);
        break;
    }
    pieces.emplace_back(t.offset[i], t.offset[i + n]);
    i += n;
  }
}

}  // namespace

void split_pieces(PreTokenizer pattern, std::string_view text,
                  std::vector<std::pair<std::size_t, std::size_t>>& pieces) {
  thread_local CodePoints t;
  if (pattern != PreTokenizer::gpt2_digits) {
    decode_classes(text, t);
    scan(pattern, t, 0, t.size(), pieces);
    return;
  }
  // Digits(individual_digits): each \p{N} character is a piece; the stretches
  // between them are split by the GPT-2 pattern on their own.
  CodePoints all;
  decode_classes(text, all);
  for (std::size_t i = 0; i < all.size();) {
    if (all.cls[i] == k_number) {
      pieces.emplace_back(all.offset[i], all.offset[i + 1]);
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < all.size() && all.cls[j] != k_number) ++j;
    const std::size_t base = all.offset[i];
    decode_classes(text.substr(base, all.offset[j] - base), t);
    const std::size_t first = pieces.size();
    scan(pattern, t, 0, t.size(), pieces);
    for (std::size_t p = first; p < pieces.size(); ++p)
      pieces[p].first += base, pieces[p].second += base;
    i = j;
  }
}

}  // namespace xtgrad::detail

namespace xtgrad {

const char* pre_tokenizer_name(PreTokenizer pattern) {
  switch (pattern) {
    case PreTokenizer::gpt2:
      return "gpt2";
    case PreTokenizer::llama3:
      return "llama3";
    case PreTokenizer::qwen2:
      return "qwen2";
    case PreTokenizer::gpt2_digits:
      return "gpt2_digits";
  }
  return "?";
}

}  // namespace xtgrad
