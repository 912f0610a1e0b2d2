// The BpeTokenizer loaders: GPT-2's vocab.json + merges.txt and Hugging
// Face's tokenizer.json. Every file is untrusted: its size is bounded, its
// JSON nesting is bounded, duplicate keys are refused (a JSON parser would
// keep one silently), and every key read is checked for the type and the
// values this tokenizer implements.

#include <cstddef>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "../io/files.hpp"
#include "bpe_model.hpp"
#include "bpe_tokenizer.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int k_max_json_depth = 64;

// The pattern strings of tokenizer.json's Split pre-tokenizer.
constexpr char k_gpt2_pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char k_llama3_pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char k_qwen2_pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A file being read, with what its messages start with.
struct Source {
  std::string function;
  std::string file;  // the path, quoted
  [[noreturn]] void fail(const std::string& message) const {
    detail::fail_value(function, file + " " + message);
  }
  [[noreturn]] void fail_key(const std::string& key, const std::string& message) const {
    fail("key '" + key + "' " + message);
  }
};

std::string read_text(const Source& source, const fs::path& path) {
  detail::InputFile file = detail::open_regular_file(source.function, "", path);
  if (file.size > k_bpe_max_file_bytes)
    source.fail("has " + std::to_string(file.size) + " bytes, more than the limit of " +
                std::to_string(k_bpe_max_file_bytes));
  std::string text(file.size, '\0');
  detail::read_exact(file, text.data(), text.size());
  return text;
}

Json parse_json(const Source& source, const std::string& text) {
  std::vector<std::unordered_set<std::string>> keys;
  const auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > k_max_json_depth)
      source.fail("is nested more than " + std::to_string(k_max_json_depth) + " levels deep");
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second)
      source.fail("has the key '" + detail::escaped(parsed.get<std::string>(), 64) + "' twice");
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::exception& error) {
    source.fail(std::string("is not valid JSON (") + error.what() + ")");
  }
}

std::string type_name(const Json& j) {
  return j.type_name();
}

// The value of `key` in object `j` (nullptr when absent), the path `where`.
const Json* member(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const Json& object_at(const Source& source, const Json& j, const char* key,
                      const std::string& where) {
  const Json* value = member(j, key);
  if (value == nullptr) source.fail_key(where, "is missing");
  if (!value->is_object())
    source.fail_key(where, "is " + type_name(*value) + ", expected an object");
  return *value;
}

std::string string_of(const Source& source, const Json& j, const std::string& where) {
  if (!j.is_string()) source.fail_key(where, "is " + type_name(j) + ", expected a string");
  return j.get<std::string>();
}

bool bool_of(const Source& source, const Json& j, const char* key, const std::string& where,
             bool absent) {
  const Json* value = member(j, key);
  if (value == nullptr || value->is_null()) return absent;
  if (!value->is_boolean())
    source.fail_key(where + "." + key, "is " + type_name(*value) + ", expected true or false");
  return value->get<bool>();
}

std::int64_t id_of(const Source& source, const Json& j, const std::string& where) {
  if (!j.is_number_integer())
    source.fail_key(where, "is " + type_name(j) + " " + detail::escaped(j.dump(), 32) +
                               ", expected an integer token id");
  if (j.is_number_unsigned() && j.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
    source.fail_key(where, "is " + j.dump() + ", not a token id");
  return j.get<std::int64_t>();
}

// "type" of an object, for the messages that refuse it.
std::string type_of(const Json& j) {
  const Json* type = j.is_object() ? member(j, "type") : nullptr;
  return type != nullptr && type->is_string() ? type->get<std::string>() : j.dump();
}

void read_vocab(const Source& source, const Json& vocab, const std::string& where,
                detail::BpeSource& out) {
  out.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    const std::string entry = where.empty() ? "'" + detail::escaped(token, 64) + "'"
                                            : where + "['" + detail::escaped(token, 64) + "']";
    out.vocab.push_back({token, id_of(source, id, entry), source.file + " key '" + entry + "'"});
  }
}

// "left right": two non-empty tokens and one space.
bool split_merge(const std::string& line, std::string& left, std::string& right) {
  const std::size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos)
    return false;
  left = line.substr(0, space);
  right = line.substr(space + 1);
  return true;
}

PreTokenizer pattern_of(const Source& source, const Json& pre) {
  const std::string where = "pre_tokenizer";
  const std::string refused =
      "; byte-level BPE reads ByteLevel, Sequence [Split(Regex), ByteLevel] or Sequence "
      "[Digits(individual_digits), ByteLevel]";
  if (!pre.is_object()) source.fail_key(where, "is " + detail::escaped(pre.dump(), 64) + refused);
  const auto byte_level = [&](const Json& j, const std::string& at, bool use_regex) {
    if (type_of(j) != "ByteLevel")
      source.fail_key(at, "has type '" + detail::escaped(type_of(j), 64) + "'" + refused);
    if (bool_of(source, j, "add_prefix_space", at, true))
      source.fail_key(at + ".add_prefix_space", "is true, which is not implemented");
    if (bool_of(source, j, "use_regex", at, true) != use_regex)
      source.fail_key(at + ".use_regex", std::string("is ") + (use_regex ? "false" : "true") +
                                             ", expected " + (use_regex ? "true" : "false") +
                                             " in this sequence");
  };
  if (type_of(pre) == "ByteLevel") {
    byte_level(pre, where, true);
    return PreTokenizer::gpt2;
  }
  if (type_of(pre) != "Sequence")
    source.fail_key(where, "has type '" + detail::escaped(type_of(pre), 64) + "'" + refused);
  const Json* steps = member(pre, "pretokenizers");
  if (steps == nullptr || !steps->is_array() || steps->size() != 2)
    source.fail_key(where + ".pretokenizers", "is not a list of two pre-tokenizers" + refused);
  const Json& first = (*steps)[0];
  const std::string at0 = where + ".pretokenizers[0]", at1 = where + ".pretokenizers[1]";
  if (type_of(first) == "Digits") {
    if (!bool_of(source, first, "individual_digits", at0, false))
      source.fail_key(at0 + ".individual_digits", "is false, which is not implemented");
    byte_level((*steps)[1], at1, true);
    return PreTokenizer::gpt2_digits;
  }
  if (type_of(first) != "Split")
    source.fail_key(at0, "has type '" + detail::escaped(type_of(first), 64) + "'" + refused);
  const Json* pattern = member(first, "pattern");
  const Json* regex =
      pattern != nullptr && pattern->is_object() ? member(*pattern, "Regex") : nullptr;
  if (regex == nullptr || !regex->is_string())
    source.fail_key(at0 + ".pattern", "is not {\"Regex\": ...}" + refused);
  const std::string text = regex->get<std::string>();
  PreTokenizer out = PreTokenizer::gpt2;
  if (text == k_llama3_pattern)
    out = PreTokenizer::llama3;
  else if (text == k_qwen2_pattern)
    out = PreTokenizer::qwen2;
  else if (text != k_gpt2_pattern)
    source.fail_key(at0 + ".pattern.Regex",
                    "is '" + detail::escaped(text, 200) +
                        "', not one of the patterns implemented (GPT-2's, LLaMA-3's, Qwen2's)");
  const Json* behavior = member(first, "behavior");
  if (behavior == nullptr || *behavior != "Isolated")
    source.fail_key(at0 + ".behavior", "is not \"Isolated\"");
  if (bool_of(source, first, "invert", at0, false))
    source.fail_key(at0 + ".invert", "is true, which is not implemented");
  byte_level((*steps)[1], at1, false);
  return out;
}

// tokenizer.json's "model": a byte-level BPE model without the options
// xtgrad does not implement, and its vocabulary. Returns the model's object.
const Json& read_json_model(const Source& source, const Json& root, detail::BpeSource& out) {
  const Json& model = object_at(source, root, "model", "model");
  const Json* type = member(model, "type");
  if (type == nullptr || *type != "BPE")
    source.fail_key("model.type",
                    "is " +
                        (type == nullptr ? std::string("missing")
                                         : "'" + detail::escaped(type->dump(), 64) + "'") +
                        ", expected \"BPE\" (SentencePiece/Unigram, WordPiece and WordLevel "
                        "models are not implemented)");
  const auto unset = [&](const char* key) {
    const Json* value = member(model, key);
    if (value != nullptr && !value->is_null() && *value != "")
      source.fail_key(std::string("model.") + key,
                      "is " + detail::escaped(value->dump(), 64) + ", which is not implemented");
  };
  unset("dropout");
  unset("continuing_subword_prefix");
  unset("end_of_word_suffix");
  if (bool_of(source, model, "byte_fallback", "model", false))
    source.fail_key("model.byte_fallback", "is true, which is not implemented");
  out.ignore_merges = bool_of(source, model, "ignore_merges", "model", false);
  read_vocab(source, object_at(source, model, "vocab", "model.vocab"), "model.vocab", out);
  out.vocab_where = source.file + " key 'model.vocab'";
  return model;
}

// "model.merges": "left right" strings or ["left", "right"] pairs, in rank order.
void read_json_merges(const Source& source, const Json& model, detail::BpeSource& out) {
  const Json* merges = member(model, "merges");
  if (merges == nullptr || !merges->is_array())
    source.fail_key("model.merges", merges == nullptr ? "is missing" : "is not a list");
  out.merges.reserve(merges->size());
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    detail::BpeSource::MergeRule rule;
    rule.where = source.file + " key '" + where + "'";
    bool ok = false;
    if (m.is_string()) {
      ok = split_merge(m.get<std::string>(), rule.left, rule.right);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      rule.left = m[0].get<std::string>(), rule.right = m[1].get<std::string>();
      ok = true;
    }
    if (!ok)
      source.fail_key(where, "is " + detail::escaped(m.dump(), 64) +
                                 ", expected \"left right\" or [\"left\", \"right\"]");
    out.merges.push_back(std::move(rule));
  }
}

// The normalizer (none or NFC), the pre-tokenizer's pattern and the decoder.
void read_json_text_steps(const Source& source, const Json& root, detail::BpeSource& out) {
  const Json* normalizer = member(root, "normalizer");
  if (normalizer != nullptr && !normalizer->is_null()) {
    if (type_of(*normalizer) != "NFC")
      source.fail_key("normalizer",
                      "has type '" + detail::escaped(type_of(*normalizer), 64) +
                          "'; only null and NFC (text already in NFC) are implemented");
    out.nfc = true;
  }
  const Json* pre = member(root, "pre_tokenizer");
  if (pre == nullptr) source.fail_key("pre_tokenizer", "is missing");
  out.pattern = pattern_of(source, *pre);
  const Json* decoder = member(root, "decoder");
  if (decoder == nullptr || type_of(*decoder) != "ByteLevel")
    source.fail_key("decoder",
                    "is " +
                        (decoder == nullptr ? std::string("missing")
                                            : "'" + detail::escaped(type_of(*decoder), 64) + "'") +
                        ", expected type \"ByteLevel\"");
}

void read_json_added_tokens(const Source& source, const Json& root, detail::BpeSource& out) {
  const Json* added = member(root, "added_tokens");
  if (added != nullptr && !added->is_null()) {
    if (!added->is_array()) source.fail_key("added_tokens", "is not a list");
    for (std::size_t i = 0; i < added->size(); ++i) {
      const Json& a = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) source.fail_key(where, "is not an object");
      const Json* content = member(a, "content");
      const Json* id = member(a, "id");
      if (content == nullptr) source.fail_key(where + ".content", "is missing");
      if (id == nullptr) source.fail_key(where + ".id", "is missing");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (bool_of(source, a, key, where, false))
          source.fail_key(where + "." + key, "is true, which is not implemented");
      AddedToken token{string_of(source, *content, where + ".content"),
                       id_of(source, *id, where + ".id"),
                       bool_of(source, a, "special", where, false)};
      out.added.push_back({std::move(token), source.file + " key '" + where + "'"});
    }
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::from_gpt2_files(const fs::path& vocab_json, const fs::path& merges_txt) {
  detail::BpeSource out;
  out.function = "BpeTokenizer::from_gpt2_files";
  out.pattern = PreTokenizer::gpt2;
  {
    const Source source{out.function, detail::path_str(vocab_json)};
    const Json vocab = parse_json(source, read_text(source, vocab_json));
    if (!vocab.is_object())
      source.fail("is " + type_name(vocab) + ", expected an object of token: id");
    read_vocab(source, vocab, "", out);
    out.vocab_where = source.file;
    for (const auto& e : out.vocab)
      if (e.token == "<|endoftext|>") {
        detail::BpeSource::Added added;
        added.token = AddedToken{e.token, e.id, true};
        added.where = e.where;
        out.added.push_back(std::move(added));
      }
  }
  const Source source{out.function, detail::path_str(merges_txt)};
  const std::string text = read_text(source, merges_txt);
  std::size_t line_number = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
    detail::BpeSource::MergeRule rule;
    rule.where = source.file + " line " + std::to_string(line_number);
    if (!split_merge(line, rule.left, rule.right))
      source.fail("line " + std::to_string(line_number) + " is '" + detail::escaped(line, 64) +
                  "', expected two tokens and one space between them");
    out.merges.push_back(std::move(rule));
  }
  return BpeTokenizer(detail::build_bpe_model(std::move(out)));
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const fs::path& tokenizer_json) {
  detail::BpeSource out;
  out.function = "BpeTokenizer::from_tokenizer_json";
  const Source source{out.function, detail::path_str(tokenizer_json)};
  const Json root = parse_json(source, read_text(source, tokenizer_json));
  if (!root.is_object()) source.fail("is " + type_name(root) + ", expected an object");
  const Json& model = read_json_model(source, root, out);
  read_json_merges(source, model, out);
  read_json_text_steps(source, root, out);
  read_json_added_tokens(source, root, out);
  return BpeTokenizer(detail::build_bpe_model(std::move(out)));
}

BpeTokenizer BpeTokenizer::from_pretrained(const fs::path& directory) {
  std::error_code error;
  if (fs::exists(directory / "tokenizer.json", error))
    return from_tokenizer_json(directory / "tokenizer.json");
  if (fs::exists(directory / "vocab.json", error) && fs::exists(directory / "merges.txt", error))
    return from_gpt2_files(directory / "vocab.json", directory / "merges.txt");
  detail::fail_value(
      "BpeTokenizer::from_pretrained",
      detail::path_str(directory) + " has neither tokenizer.json nor vocab.json and merges.txt");
}

}  // namespace xtgrad
