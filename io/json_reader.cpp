#include "json_reader.hpp"

#include <set>
#include <vector>

#include "../engine/errors.hpp"
#include "files.hpp"

namespace xtgrad::detail {

namespace {

using Json = nlohmann::ordered_json;

std::string size_text(std::size_t size, std::size_t max_bytes) {
  return "has " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
         " a config may have";
}

}  // namespace

Json read_json(const std::string& text, const std::string& function, const std::string& subject,
               std::size_t max_bytes, JsonKeys keys) {
  const Check check(function.c_str());
  check.value(text.size() <= max_bytes, subject, size_text(text.size(), max_bytes));
  const std::size_t nul = text.find('\0');
  check.value(nul == std::string::npos, subject, "byte ", nul,
              " is a NUL byte, expected JSON text");
  // The callback bounds the nesting (before the parser goes deeper) and
  // refuses duplicate keys when they must be unique.
  const bool unique = keys == JsonKeys::unique;
  std::vector<std::set<std::string>> seen;
  const auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    check.value(depth <= k_max_json_depth, subject, "is nested more than ", k_max_json_depth,
                " levels deep");
    if (!unique) return true;
    if (event == Json::parse_event_t::object_start) seen.emplace_back();
    if (event == Json::parse_event_t::object_end && !seen.empty()) seen.pop_back();
    if (event == Json::parse_event_t::key && !seen.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      check.value(seen.back().insert(key).second, subject, "has the key ", quoted_escaped(key),
                  " twice");
    }
    return true;
  };
  try {
    // Strict: only whitespace may follow the value.
    return Json::parse(text, callback, true, false);
  } catch (const Json::exception& error) {
    fail_value(function,
               subject + "is not valid JSON (" + escaped(error.what(), k_max_quoted_bytes) + ")");
  }
}

Json read_json_file(const std::filesystem::path& path, const std::string& function,
                    const std::string& subject, std::size_t max_bytes, JsonKeys keys) {
  InputFile file = open_regular_file(function, "", path);
  Check(function.c_str()).value(file.size <= max_bytes, subject, size_text(file.size, max_bytes));
  std::string text(file.size, '\0');
  read_exact(file, text.data(), text.size());
  return read_json(text, function, subject, max_bytes, keys);
}

}  // namespace xtgrad::detail
