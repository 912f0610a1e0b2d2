// Reading and splitting the fortunes (corpus.hpp).

#include "corpus.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

namespace gpt_demo {

namespace {

namespace fs = std::filesystem;

const std::u32string k_record_end = U"\n%\n";

bool is_fortune_file(const fs::directory_entry& entry) {
  std::error_code ignored;
  if (!entry.is_regular_file(ignored) || entry.is_symlink(ignored)) return false;
  const std::string ext = entry.path().extension().string();
  return ext != ".dat" && ext != ".u8";
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError("cannot read '" + file.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw DataError("cannot read '" + file.string() + "'");
  return text.str();
}

}  // namespace

std::vector<std::string> split_records(const std::string& text) {
  std::vector<std::string> records;
  std::string record;
  bool started = false, blank = true;  // a line seen; only blank lines so far
  const auto end_record = [&] {
    if (started && !blank) records.push_back(record);
    record.clear();
    started = false;
    blank = true;
  };
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line == "%") {
      end_record();
      continue;
    }
    if (started) record += '\n';
    record += line;
    started = true;
    blank = blank && line.find_first_not_of(" \t\r") == std::string::npos;
  }
  end_record();
  return records;
}

Corpus load_corpus(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error))
    throw DataError("cannot find the directory '" + dir.string() +
                    "': the fortunes come with Debian's " + k_data_package +
                    " package; install it with `apt-get install " + k_data_package +
                    "`, or name another directory with --data-dir");
  Corpus corpus;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (is_fortune_file(entry)) corpus.files.push_back(entry.path());
  std::sort(corpus.files.begin(), corpus.files.end());
  std::size_t index = 0;
  for (const fs::path& file : corpus.files) {
    for (const std::string& record : split_records(read_file(file))) {
      const std::u32string text = decode_utf8(record, "'" + file.string() + "'");
      const bool held_out = index % k_validation_every == k_validation_every - 1;
      std::u32string& stream = held_out ? corpus.validation : corpus.train;
      stream += text;
      stream += k_record_end;
      ++(held_out ? corpus.validation_records : corpus.train_records);
      ++index;
    }
  }
  if (corpus.validation_records == 0)
    throw DataError("'" + dir.string() + "' holds " + std::to_string(index) + " fortunes in " +
                    std::to_string(corpus.files.size()) + " files, expected at least " +
                    std::to_string(k_validation_every) +
                    " (records separated by lines holding only '%')");
  return corpus;
}

}  // namespace gpt_demo
