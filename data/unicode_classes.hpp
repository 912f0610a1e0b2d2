#pragma once
// Internal: the classes of code points that the byte-level BPE
// pre-tokenizers' patterns name: \p{L} (letters: Lu Ll Lt Lm Lo), \p{N}
// (numbers: Nd Nl No) and \s (the White_Space property), and what the NFC
// quick check of UAX #15 needs. The tables are generated from Python's
// unicodedata by data/make_unicode_classes.py into unicode_classes.cpp.

namespace xtgrad::detail {

constexpr unsigned char k_letter = 1;
constexpr unsigned char k_number = 2;
constexpr unsigned char k_space = 4;
constexpr unsigned char k_pattern_classes = 7;  // one of the three, or 0 for any other
// Or'ed in: NFC_Quick_Check is No or Maybe (NFC may change the text here).
constexpr unsigned char k_nfc_not_yes = 8;

// The class of a code point above U+007F (a binary search of the ranges).
unsigned char unicode_class_slow(char32_t c);

// The Canonical_Combining_Class of a code point (0 for most).
unsigned char canonical_combining_class(char32_t c);

// The Unicode version the tables were generated from ("14.0.0").
const char* unicode_version();

// The class of any code point; ASCII without a search.
inline unsigned char unicode_class(char32_t c) {
  if (c >= 0x80) return unicode_class_slow(c);
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return k_letter;
  if (c >= '0' && c <= '9') return k_number;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return k_space;
  return 0;
}

}  // namespace xtgrad::detail
