#pragma once
// BpeTokenizer: the byte-level BPE tokenizers of GPT-2, LLaMA-3, Qwen2 and
// SmolLM, read from a Hugging Face model directory: text to token ids and
// back, with the ids the reference tokenizers give.
//
//   BpeTokenizer tok = BpeTokenizer::from_pretrained("gpt2/");  // tokenizer.json, or
//                                                               // vocab.json + merges.txt
//   std::vector<std::int64_t> ids = tok.encode("Hello world");  // {15496, 995}
//   std::string text = tok.decode(ids);                         // "Hello world"
//
// encode(text) is, in order:
//   1. added tokens (tokenizer.json's "added_tokens"; "<|endoftext|>" for
//      vocab.json + merges.txt) are found leftmost-longest and become their
//      ids; how special ones are treated is the SpecialTokens argument;
//   2. each stretch of text between them is split by the model's
//      pre-tokenizer pattern (PreTokenizer below) into pieces;
//   3. each piece's UTF-8 bytes start as one byte-level token each, and the
//      merges apply by rank as in OpenAI's encoder.py: the adjacent pair of
//      lowest rank is merged at every one of its leftmost non-overlapping
//      places, then the next, until no pair has a rank. (With "ignore_merges",
//      as LLaMA-3 sets, a piece that is itself in the vocabulary is that one
//      token.) Pieces seen before come from a cache.
// No BOS/EOS is added (Hugging Face's encode(text, add_special_tokens=False)):
// the post-processor of tokenizer.json is not applied.
//
// decode(ids) maps each token back to its bytes (added tokens to their text)
// and decodes the bytes as UTF-8 the way Python's errors="replace" does: each
// maximal invalid subsequence becomes one U+FFFD.
//
// What is read, and what is refused (std::invalid_argument naming the file
// and the key or line): tokenizer.json with "model" of "type" "BPE" (no
// dropout, no subword prefix or suffix, no byte fallback), "normalizer" null
// or NFC (Qwen2's; see below), "decoder" ByteLevel, and "pre_tokenizer" one of
//   ByteLevel (use_regex true)                         -> PreTokenizer::gpt2
//   Sequence [Split(Regex R, Isolated), ByteLevel(use_regex false)]
//                                                      -> gpt2, llama3 or qwen2 by R
//   Sequence [Digits(individual_digits true), ByteLevel(use_regex true)]
//                                                      -> gpt2_digits
// with add_prefix_space false. Added tokens with lstrip, rstrip or
// single_word are refused. SentencePiece, Unigram, WordPiece and WordLevel
// models, other normalizers (NFKC, Lowercase, ...) and other pre-tokenizers
// are refused by name. The NFC normalizer is implemented for text that NFC
// leaves as it is, as UAX #15's quick check tells (no character with
// NFC_Quick_Check No or Maybe, combining classes in order): encode refuses
// other text (std::invalid_argument naming the code point), so pass such
// text through an NFC normalizer (ICU's, Python's unicodedata) first. Every id is unique and the ids are 0 .. N-1 (added tokens
// may repeat a vocabulary entry with the same text); every merge's two parts
// and their concatenation are tokens; the 256 byte-level tokens are present.
// Files are at most k_bpe_max_file_bytes. The pattern's classes (\p{L},
// \p{N}, \s) come from tables of Unicode 14.0 (data/unicode_classes.cpp).
//
// Thread safety: encode and decode may be called from any number of threads
// at once (the piece cache is behind a mutex).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xtgrad {

// The largest vocab.json, merges.txt or tokenizer.json read (LLaMA-3's
// tokenizer.json is 9 MB).
constexpr std::size_t k_bpe_max_file_bytes = std::size_t(128) << 20;

// The pre-tokenizer patterns, as Hugging Face's tokenizers and tiktoken write them.
enum class PreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  gpt2,
  // LLaMA-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,
  // Qwen2: as llama3 with \p{N} (one number character) for \p{N}{1,3}
  qwen2,
  // SmolLM: every \p{N} character a piece of its own, then gpt2 on the rest
  gpt2_digits,
};

// "gpt2", "llama3", "qwen2", "gpt2_digits".
const char* pre_tokenizer_name(PreTokenizer pattern);

// How encode treats special added tokens written in its input text.
enum class SpecialTokens {
  allow,    // matched and encoded to their ids (Hugging Face's behaviour)
  as_text,  // not matched: encoded as ordinary text
  refuse,   // std::invalid_argument naming the token and where it is (tiktoken's default)
};

struct AddedToken {
  std::string content;  // the text it matches
  std::int64_t id = 0;
  bool special = true;  // false: always matched, whatever SpecialTokens says
};

class BpeTokenizer {
 public:
  // tokenizer.json in `directory` when present, else vocab.json + merges.txt.
  static BpeTokenizer from_pretrained(const std::filesystem::path& directory);
  // A Hugging Face tokenizer.json of a byte-level BPE model (see above).
  static BpeTokenizer from_tokenizer_json(const std::filesystem::path& tokenizer_json);
  // GPT-2's vocab.json + merges.txt (pattern gpt2; "<|endoftext|>", when in
  // the vocabulary, is a special added token).
  static BpeTokenizer from_gpt2_files(const std::filesystem::path& vocab_json,
                                      const std::filesystem::path& merges_txt);

  std::vector<std::int64_t> encode(std::string_view text,
                                   SpecialTokens special = SpecialTokens::allow) const;
  // std::invalid_argument naming the id and vocab_size() for an id that is
  // not a token; skip_special_tokens leaves out special added tokens.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  // The pieces step 2 splits `text` into (no added tokens are matched).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::size_t vocab_size() const;  // N: the ids are 0 .. N-1
  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  // The token as the vocabulary writes it (byte-level characters, "Ġworld").
  const std::string& id_to_token(std::int64_t id) const;
  PreTokenizer pre_tokenizer() const;
  const std::vector<AddedToken>& added_tokens() const;
  std::size_t merges() const;  // the number of merge rules

  struct Model;  // the loaded vocabulary and merges (bpe_model.hpp)
  explicit BpeTokenizer(std::shared_ptr<Model> model);
  BpeTokenizer(const BpeTokenizer&) = default;
  BpeTokenizer(BpeTokenizer&&) noexcept = default;
  BpeTokenizer& operator=(const BpeTokenizer&) = default;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept = default;
  ~BpeTokenizer();

 private:
  std::shared_ptr<Model> model_;  // immutable but for the cache: copies share it
};

}  // namespace xtgrad
