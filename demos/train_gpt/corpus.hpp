#pragma once
// The text train_gpt learns: the fortunes of Debian's `fortunes` package,
// /usr/share/games/fortunes. Every plain file there (not the *.dat index
// files, not the *.u8 links, not subdirectories such as off/) is read in
// the order of its name; a file is a list of records separated by lines
// holding only "%". Records are decoded from UTF-8 to code points (the
// "characters"); empty records (blank lines only) are skipped.
//
// Held-out split, by records: the i-th non-empty record of the whole corpus
// (counting from 0 across the files in name order) goes to validation when
// i % 10 == 9, to training otherwise, so 1 in 10 records is held out and
// no record is split between the two. Each split is one stream of text in
// the files' own format: every record followed by "\n%\n" (its last line
// break and the separator line), so the model learns where a fortune ends.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xtgrad/data/char_tokenizer.hpp>

#include "../common/program.hpp"

namespace gpt_demo {

inline constexpr const char* k_default_data_dir = "/usr/share/games/fortunes";
inline constexpr const char* k_data_package = "fortunes";
inline constexpr std::size_t k_validation_every = 10;  // record i % 10 == 9 is held out

// The data could not be used: a missing directory, no records, text that
// is not UTF-8. The message names the file and what is wrong.
using demos::DataError;

struct Corpus {
  std::vector<std::filesystem::path> files;  // the files read, in order
  std::u32string train, validation;          // code points, records joined as above
  std::size_t train_records = 0, validation_records = 0;
};

// Reads and splits every fortune file of `dir` (DataError when it holds none).
Corpus load_corpus(const std::filesystem::path& dir);

// The records of one file's text, in order, without their separator lines and
// without the line break that ends each record; empty records dropped.
std::vector<std::string> split_records(const std::string& text);

// UTF-8 to code points (invalid UTF-8: std::invalid_argument naming `where`
// and the byte offset) and back.
using xtgrad::decode_utf8;
using xtgrad::encode_utf8;

// The character vocabulary of train_gpt: every distinct code point of the
// corpus (both splits, so that every validation character has an id). It is
// saved with the checkpoint (run_state.cpp) so that --generate encodes and
// decodes as the training run did.
using Vocabulary = xtgrad::CharTokenizer;

}  // namespace gpt_demo
