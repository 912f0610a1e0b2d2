#pragma once
// Internal: what a BpeTokenizer holds, the steps of its encode (the
// pre-tokenizer scanner, UTF-8) and the checks its loaders share. Not
// included by any public header.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_tokenizer.hpp"

namespace xtgrad {

struct BpeTokenizer::Model {
  struct Merge {
    std::int32_t rank;
    std::int32_t merged;  // the id of the two tokens' concatenation
  };

  PreTokenizer pattern = PreTokenizer::gpt2;
  bool ignore_merges = false;
  bool nfc = false;                      // tokenizer.json's normalizer is NFC (see check_nfc)
  std::vector<std::string> tokens;       // id -> token as the vocabulary writes it
  std::vector<std::string> token_bytes;  // id -> the bytes decode writes for it
  std::vector<unsigned char> special;    // id -> 1 for a special added token
  std::unordered_map<std::string, std::int32_t> ids;  // token -> id
  std::int32_t byte_ids[256] = {};                    // byte -> its byte-level token
  std::unordered_map<std::uint64_t, Merge> merges;    // left << 32 | right -> merge
  std::size_t merge_rules = 0;
  std::vector<AddedToken> added;
  std::vector<std::vector<std::size_t>> added_by_first_byte;  // [256] -> indices, longest first

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache;  // piece -> ids
};

namespace detail {

// What a loader read, before the checks that build a Model.
struct BpeSource {
  std::string function;  // "BpeTokenizer::from_tokenizer_json"
  struct Entry {
    std::string token;
    std::int64_t id;
    std::string where;  // "'vocab.json' key 'Ġthe'" for messages
  };
  std::vector<Entry> vocab;
  struct MergeRule {
    std::string left, right;
    std::string where;  // "'merges.txt' line 7"
  };
  std::vector<MergeRule> merges;
  struct Added {
    AddedToken token;
    std::string where;
  };
  std::vector<Added> added;
  std::string vocab_where;  // the file (and key) of the vocabulary, for messages
  PreTokenizer pattern = PreTokenizer::gpt2;
  bool ignore_merges = false;
  bool nfc = false;
};

// Checks `source` (ids dense and unique, merges of tokens, the 256 byte
// tokens present) and builds the model.
std::shared_ptr<BpeTokenizer::Model> build_bpe_model(BpeSource source);

// GPT-2's bytes_to_unicode: the printable character byte b stands for, as
// UTF-8 ("Ġ" for the space).
const std::string& byte_to_unicode(unsigned char b);

// The byte a byte-level character stands for, or -1.
int unicode_to_byte(char32_t c);

// The next code point of UTF-8 text at `at`, advancing it; -1 for invalid
// UTF-8 (overlong forms, surrogates, above U+10FFFF, truncated).
std::int32_t next_code_point(std::string_view text, std::size_t& at);

// Appends code point `c` (at most U+10FFFF) to `out` as UTF-8.
void append_utf8(std::string& out, char32_t c);

// Python's bytes.decode("utf-8", errors="replace").
std::string utf8_replace_invalid(std::string_view bytes);

// The [begin, end) byte ranges of the pieces `pattern` splits valid UTF-8
// `text` into, appended to `pieces`.
void split_pieces(PreTokenizer pattern, std::string_view text,
                  std::vector<std::pair<std::size_t, std::size_t>>& pieces);

}  // namespace detail
}  // namespace xtgrad
