// The JSON header of a safetensors file, parsed as a stream of SAX events
// (nlohmann::json::sax_parse) straight into entries: no JSON tree is built,
// nesting never goes deeper than the format's three levels, and every
// deviation from the schema is refused at the event that shows it.
//
//   {                                   level 1: names -> entries
//     "__metadata__": {"k": "v", ...},  level 2: strings only
//     "name": {"dtype": "F32",          level 2: exactly these three keys
//              "shape": [2, 3],         level 3: unsigned integers
//              "data_offsets": [0, 24]} level 3: two unsigned integers
//   }
//
// Only whitespace (space, tab, CR, LF: the padding) may follow the object,
// as serde_json::from_str requires in the reference reader. nlohmann's lexer
// takes a NUL byte for the end of its input, so the text is parsed only up
// to its first NUL, and a NUL there is refused as trailing content (after the
// object) or as a NUL inside it; either way the message gives the offset.
#include "safetensors_header.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "safetensors_detail.hpp"

namespace xtgrad::detail {

namespace {

using json = nlohmann::json;

// Where the parser is, and so what the next event may be.
enum class Where {
  start,         // nothing read yet: the top-level object must open
  top,           // in the top-level object: a name or its end
  metadata,      // in "__metadata__": a key or its end
  metadata_key,  // after a metadata key: its string value
  entry,         // in a tensor entry: dtype, shape, data_offsets or its end
  entry_key,     // after one of those keys: its value
  shape,         // in a shape array: unsigned integers
  offsets,       // in a data_offsets array: unsigned integers
  done,          // the top-level object has closed
};

// "byte 12 of the header (offset 20 in the file)".
std::string at(std::size_t offset) {
  return "byte " + std::to_string(offset) + " of the header (offset " + std::to_string(offset + 8) +
         " in the file)";
}

// The offset just past the '}' closing the object that opens `text`, which
// has been parsed as valid JSON up to there: strings are skipped (with their
// escapes) and brackets counted.
std::size_t object_end(const std::string& text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return text.size();
}

// The header's object has closed and something but whitespace follows it.
[[noreturn]] void fail_trailing(const InputFile& file, const std::string* text) {
  const std::size_t end = object_end(*text);
  const std::size_t bad = text->find_first_not_of(" \t\r\n", end);
  fail_safetensors(file, "header: " + at(bad) + ", after the JSON object that ends at byte " +
                             std::to_string(end) + ", is " +
                             ((*text)[bad] == '\0' ? std::string("a NUL byte")
                                                   : quoted(escaped(text->substr(bad, 1)))) +
                             ", expected only whitespace (space, tab, CR, LF: the padding) to "
                             "the end of the header (" +
                             std::to_string(text->size()) + " bytes)");
}

class SafetensorsHeaderParser {
 public:
  SafetensorsHeaderParser(const InputFile& file, SafetensorsHeader& out) : file_(file), out_(out) {}

  // The SAX interface of nlohmann::json.
  bool null() { return value("null"); }
  bool boolean(bool) { return value("a boolean"); }
  bool number_integer(std::int64_t) { return value("a negative integer"); }
  bool number_unsigned(std::uint64_t n) {
    if (where_ != Where::shape && where_ != Where::offsets) return value("a number");
    std::vector<std::size_t>& list = where_ == Where::shape ? entry().shape : offsets_;
    const std::size_t limit = where_ == Where::shape ? k_safetensors_max_dims : 2;
    if (list.size() == limit)
      fail(where_ == Where::shape
               ? "shape has more than " + std::to_string(k_safetensors_max_dims) + " dimensions"
               : "data_offsets has more than 2 numbers, expected [begin, end]");
    list.push_back(static_cast<std::size_t>(n));
    return true;
  }
  bool number_float(double, const std::string&) {
    return value("a number that is not an unsigned 64-bit integer");
  }
  bool string(std::string& s) {
    if (where_ == Where::metadata_key) {
      out_.metadata[key_] = s;
      where_ = Where::metadata;
      return true;
    }
    if (where_ != Where::entry_key || key_ != "dtype") return value("a string");
    if (s == "F32")
      entry().dtype = SafetensorsDtype::F32;
    else if (s == "F64")
      entry().dtype = SafetensorsDtype::F64;
    else if (s == "F16")
      entry().dtype = SafetensorsDtype::F16;
    else if (s == "BF16")
      entry().dtype = SafetensorsDtype::BF16;
    else
      fail("unsupported dtype " + quoted_name(s) + ", expected F32, F64, F16 or BF16");
    where_ = Where::entry;
    return true;
  }
  bool binary(json::binary_t&) { return value("binary data"); }
  bool start_object(std::size_t) {
    if (where_ == Where::top && name_ != k_safetensors_metadata_key &&
        out_.entries.size() == k_safetensors_max_tensors)
      fail_safetensors(file_, "header declares more than " +
                                  std::to_string(k_safetensors_max_tensors) +
                                  " tensors, the limit per file (real checkpoints have a few "
                                  "thousand at most per file)");
    if (where_ == Where::start) {
      where_ = Where::top;
    } else if (where_ == Where::top && name_ == k_safetensors_metadata_key) {
      where_ = Where::metadata;
    } else if (where_ == Where::top) {
      out_.entries.push_back({name_, SafetensorsDtype::F32, {}, 0, 0});
      entry_keys_.clear();
      offsets_.clear();
      where_ = Where::entry;
    } else {
      return value("an object");
    }
    return true;
  }
  bool key(std::string& k) {
    if (where_ == Where::top) {
      // Tensor names are checked for duplicates once the whole header is read
      // (a set of them would cost as much again as the entries).
      if (k == k_safetensors_metadata_key && metadata_seen_)
        fail("duplicate name " + quoted_name(k));
      metadata_seen_ = metadata_seen_ || k == k_safetensors_metadata_key;
      name_ = k;
      in_top_value_ = true;
      return true;
    }
    if (where_ == Where::metadata) {
      if (out_.metadata.count(k)) fail("has the key " + quoted_name(k) + " twice");
      key_ = k;
      where_ = Where::metadata_key;
      return true;
    }
    // where_ == Where::entry: the only other place keys occur.
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail("unknown key " + quoted_name(k) + ", expected only dtype, shape and data_offsets");
    if (!entry_keys_.insert(k).second) fail("has the key " + quoted_name(k) + " twice");
    key_ = k;
    where_ = Where::entry_key;
    return true;
  }
  bool end_object() {
    if (where_ == Where::entry) {
      for (const char* k : {"dtype", "shape", "data_offsets"})
        if (!entry_keys_.count(k)) fail("has no " + std::string(k));
      entry().begin = offsets_[0];
      entry().end = offsets_[1];
    }
    where_ = where_ == Where::top ? Where::done : Where::top;
    in_top_value_ = false;
    return true;
  }
  bool start_array(std::size_t) {
    if (where_ != Where::entry_key || key_ == "dtype") return value("an array");
    where_ = key_ == "shape" ? Where::shape : Where::offsets;
    return true;
  }
  bool end_array() {
    if (where_ == Where::offsets && offsets_.size() != 2)
      fail("data_offsets has " + std::to_string(offsets_.size()) +
           (offsets_.size() == 1 ? " number" : " numbers") + ", expected 2: [begin, end]");
    where_ = Where::entry;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const json::exception& error) {
    if (where_ == Where::done) fail_trailing(file_, text_);
    // The lexer's end of input at the first NUL, inside the object.
    if (nul_ != std::string::npos && position > nul_)
      fail_safetensors(file_, "header: " + at(nul_) +
                                  " is a NUL byte inside the JSON object, expected JSON (which "
                                  "has no NUL bytes)");
    fail_safetensors(file_, "header is not valid JSON: " + escaped(error.what(), 300));
  }

  // The header's bytes, and the offset of its first NUL (npos: none).
  void set_text(const std::string& text, std::size_t nul) {
    text_ = &text;
    nul_ = nul;
  }

 private:
  SafetensorsEntry& entry() { return out_.entries.back(); }

  // "tensor 'w': " or "__metadata__: " while inside one, else "header: ".
  std::string where_str() const {
    if (!in_top_value_) return "header: ";
    if (name_ == k_safetensors_metadata_key) return "__metadata__: ";
    return "tensor " + quoted_name(name_) + ": ";
  }

  [[noreturn]] void fail(const std::string& what) const {
    fail_safetensors(file_, where_str() + what);
  }

  // A value of the kind `kind` where the schema has no such value.
  bool value(const std::string& kind) const {
    switch (where_) {
      case Where::start:
        fail("is " + kind + ", expected a JSON object {name: {dtype, shape, data_offsets}}");
      case Where::top:
        if (name_ == k_safetensors_metadata_key)
          fail("is " + kind + ", expected an object of string values");
        fail("is " + kind + ", expected an object {dtype, shape, data_offsets}");
      case Where::metadata_key:
        fail("the value of " + quoted_name(key_) + " is " + kind + ", expected a string");
      case Where::entry_key:
        fail(key_ + " is " + kind +
             (key_ == "dtype" ? ", expected a string such as \"F32\""
                              : ", expected an array of unsigned integers"));
      case Where::shape:
      case Where::offsets:
        fail((where_ == Where::shape ? "shape" : "data_offsets") + std::string(" contains ") +
             kind + ", expected unsigned integers");
      default:
        fail("unexpected " + kind);
    }
  }

  const InputFile& file_;
  SafetensorsHeader& out_;
  const std::string* text_ = nullptr;
  std::size_t nul_ = std::string::npos;
  Where where_ = Where::start;
  bool in_top_value_ = false;  // between a top-level name and the end of its value
  std::string name_;           // the current top-level name
  std::string key_;            // the current key inside it
  bool metadata_seen_ = false;
  std::set<std::string> entry_keys_;
  std::vector<std::size_t> offsets_;
};

}  // namespace

SafetensorsHeader parse_safetensors_json(const InputFile& file, const std::string& text) {
  if (text.empty() || text[0] != '{')
    fail_safetensors(file, "header does not start with '{' (it starts with " +
                               quoted(escaped(text, 16)) + "), expected a JSON object");
  SafetensorsHeader header;
  SafetensorsHeaderParser parser(file, header);
  const std::size_t nul = text.find('\0');
  parser.set_text(text, nul);
  // strict: nothing but whitespace may follow the object (the padding).
  const auto end = nul == std::string::npos ? text.end() : text.begin() + nul;
  json::sax_parse(text.begin(), end, &parser, json::input_format_t::json, true);
  // The object closed before the NUL, and only whitespace is between them.
  if (nul != std::string::npos) fail_trailing(file, &text);
  std::vector<const std::string*> names;
  names.reserve(header.entries.size());
  for (const SafetensorsEntry& e : header.entries) names.push_back(&e.name);
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  const auto same =
      std::adjacent_find(names.begin(), names.end(),
                         [](const std::string* a, const std::string* b) { return *a == *b; });
  if (same != names.end()) fail_safetensors(file, "header: duplicate name " + quoted_name(**same));
  return header;
}

}  // namespace xtgrad::detail
