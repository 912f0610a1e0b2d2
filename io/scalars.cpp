#include "scalars.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <system_error>
#include <vector>

#include "../engine/errors.hpp"
#include "files.hpp"

namespace xtgrad::detail {

namespace {

namespace fs = std::filesystem;

constexpr char k_magic[] = "xtgrad-scalars 1";
// Scalars are a few short lines per parameter group; anything larger is not a scalars file.
constexpr std::size_t k_max_scalars_bytes = std::size_t(16) << 20;

bool has_control_character(const std::string& text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

std::string real_text(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// The whole of `text` as a T (std::from_chars: no sign but '-', no spaces).
template <class V>
bool parse_whole(const std::string& text, V& value) {
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  return result.ec == std::errc() && result.ptr == end && !text.empty();
}

}  // namespace

std::string format_scalars(const std::string& function, const Scalars& scalars) {
  const auto check_name = [&](const std::string& name) {
    if (!is_plain_file_name(name))
      fail_value(function, "scalar name " + quoted_escaped(name) +
                               " is not allowed: expected no '/', no control characters and no "
                               "leading '.'");
  };
  std::string out = std::string(k_magic) + "\n";
  for (const auto& [name, value] : scalars.integers) {
    check_name(name);
    out += "int64\t" + name + "\t" + std::to_string(value) + "\n";
  }
  for (const auto& [name, value] : scalars.reals) {
    check_name(name);
    out += "float64\t" + name + "\t" + real_text(value) + "\n";
  }
  for (const auto& [name, value] : scalars.strings) {
    check_name(name);
    if (has_control_character(value))
      fail_value(function, "string " + quoted_escaped(name) + " holds " + quoted_escaped(value) +
                               ", expected no control characters (tab, newline, ...)");
    out += "string\t" + name + "\t" + value + "\n";
  }
  return out;
}

Scalars read_scalars(const std::string& function, int dir_fd, const fs::path& dir) {
  struct ::stat info {};
  if (::fstatat(dir_fd, k_scalars_name, &info, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
    fail_value(function, "directory " + path_str(dir) + " has no " + k_scalars_name +
                             "; expected a training-state directory written by "
                             "save_state_directory");
  InputFile file = open_directory_entry(function, "", dir_fd, dir, k_scalars_name);
  if (file.size > k_max_scalars_bytes)
    fail_value(function, path_str(file.path) + " has " + std::to_string(file.size) +
                             " bytes, more than the " + std::to_string(k_max_scalars_bytes) +
                             " a scalars file may have");
  std::string text(file.size, '\0');
  read_exact(file, text.data(), text.size());

  const std::string where = path_str(file.path);
  const std::vector<std::string> lines = text_lines(text);
  if (lines.empty() || lines[0] != k_magic)
    fail_value(function,
               where + ": first line is " +
                   (lines.empty() ? std::string("an empty file") : quoted_escaped(lines[0])) +
                   ", expected " + quoted(k_magic));
  Scalars out;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string at = where + " line " + std::to_string(i + 1) + ": ";
    const std::string& line = lines[i];
    const std::size_t tab1 = line.find('\t');
    const std::size_t tab2 = tab1 == std::string::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string::npos)
      fail_value(function, at + "expected 3 tab-separated fields (kind, name, value) in " +
                               quoted_escaped(line));
    const std::string kind = line.substr(0, tab1);
    const std::string name = line.substr(tab1 + 1, tab2 - tab1 - 1);
    const std::string value = line.substr(tab2 + 1);
    if (!is_plain_file_name(name))
      fail_value(function, at + "name " + quoted_escaped(name) +
                               ", expected no '/', no control characters, no leading '.'");
    bool fresh = false;
    if (kind == "int64") {
      std::int64_t v = 0;
      if (!parse_whole(value, v))
        fail_value(function, at + "int64 " + quoted_escaped(name) + " has value " +
                                 quoted_escaped(value) +
                                 ", expected a decimal integer in [-2^63, 2^63)");
      fresh = out.integers.emplace(name, v).second;
    } else if (kind == "float64") {
      double v = 0.0;
      if (!parse_whole(value, v))
        fail_value(function, at + "float64 " + quoted_escaped(name) + " has value " +
                                 quoted_escaped(value) + ", expected a decimal number");
      fresh = out.reals.emplace(name, v).second;
    } else if (kind == "string") {
      if (has_control_character(value))
        fail_value(function, at + "string " + quoted_escaped(name) + " holds a control character");
      fresh = out.strings.emplace(name, value).second;
    } else {
      fail_value(function,
                 at + "kind " + quoted_escaped(kind) + ", expected int64, float64 or string");
    }
    if (!fresh) fail_value(function, at + kind + " " + quoted_escaped(name) + " is listed twice");
  }
  return out;
}

}  // namespace xtgrad::detail
