#include "manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "../engine/errors.hpp"
#include "files.hpp"

namespace xtgrad::detail {

namespace {

namespace fs = std::filesystem;

// A manifest holds one short line per parameter; anything larger is not one.
constexpr std::size_t k_max_manifest_bytes = std::size_t(64) << 20;
// More digits than any dimension a size_t holds.
constexpr std::size_t k_max_dimension_digits = 19;

std::string first_line(const char* version = k_manifest_version) {
  return std::string(k_manifest_magic) + " " + version;
}

// The manifest's shape notation: "2x16", "0", or "scalar" for 0-d.
std::string shape_text(const std::vector<std::size_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "x" : "") + std::to_string(shape[i]);
  return out;
}

bool parse_shape_text(const std::string& text, std::vector<std::size_t>& shape) {
  shape.clear();
  if (text == "scalar") return true;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = std::min(text.find('x', pos), text.size());
    if (end == pos || end - pos > k_max_dimension_digits) return false;
    std::size_t value = 0;
    for (std::size_t i = pos; i < end; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      value = value * 10 + static_cast<std::size_t>(text[i] - '0');
    }
    shape.push_back(value);
    if (end == text.size()) return true;
    pos = end + 1;
  }
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

}  // namespace

std::string format_manifest(const std::vector<ManifestEntry>& entries,
                            const std::optional<ModuleConfig>& config) {
  std::string out = first_line(config ? k_manifest_version_config : k_manifest_version) + "\n";
  if (config) out += std::string(k_manifest_config_key) + "\t" + to_json(*config) + "\n";
  for (const ManifestEntry& e : entries)
    out += e.name + "\t" + e.dtype + "\t" + shape_text(e.shape) + "\t" + e.file + "\n";
  return out;
}

std::string read_manifest(const std::string& function, int dir_fd, const fs::path& dir) {
  struct ::stat info {};
  if (::fstatat(dir_fd, k_manifest_name, &info, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
    fail_value(function, "checkpoint " + path_str(dir) + " has no " + k_manifest_name +
                             "; expected a directory written by save_checkpoint or Module::save");
  InputFile file = open_directory_entry(function, "", dir_fd, dir, k_manifest_name);
  if (file.size > k_max_manifest_bytes)
    fail_value(function, path_str(file.path) + " has " + std::to_string(file.size) +
                             " bytes, more than the " + std::to_string(k_max_manifest_bytes) +
                             " a manifest may have");
  std::string text(file.size, '\0');
  read_exact(file, text.data(), text.size());
  return text;
}

Manifest parse_manifest(const std::string& function, const fs::path& dir, const std::string& text) {
  const std::string where = path_str(dir / k_manifest_name);
  const std::vector<std::string> lines = text_lines(text);
  const bool with_config = !lines.empty() && lines[0] == first_line(k_manifest_version_config);
  if (lines.empty() || (lines[0] != first_line() && !with_config)) {
    const std::string found = lines.empty() ? "an empty file" : quoted_escaped(lines[0]);
    fail_value(function, where + ": first line is " + found + ", expected " + quoted(first_line()) +
                             " or " + quoted(first_line(k_manifest_version_config)));
  }
  Manifest manifest;
  std::vector<ManifestEntry>& entries = manifest.entries;
  std::size_t first_entry = 1;
  if (with_config) {
    const std::string key = std::string(k_manifest_config_key) + "\t";
    if (lines.size() < 2 || lines[1].rfind(key, 0) != 0)
      fail_value(function,
                 where + " line 2: " +
                     (lines.size() < 2 ? std::string("missing") : quoted_escaped(lines[1])) +
                     ", expected " + quoted(key.substr(0, key.size() - 1)) +
                     ", a tab and the module's config (version 2)");
    manifest.config = parse_module_config(lines[1].substr(key.size()), function, where + " line 2");
    first_entry = 2;
  }
  std::set<std::string> names;
  for (std::size_t i = first_entry; i < lines.size(); ++i) {
    const std::string at = where + " line " + std::to_string(i + 1) + ": ";
    const std::vector<std::string> fields = split_tabs(lines[i]);
    if (fields.size() != 4)
      fail_value(function,
                 at + "expected 4 tab-separated fields (name, dtype, shape, file), found " +
                     std::to_string(fields.size()) + " in " + quoted_escaped(lines[i]));
    ManifestEntry entry{fields[0], fields[1], {}, fields[3]};
    if (entry.name.empty()) fail_value(function, at + "empty parameter name");
    if (!names.insert(entry.name).second)
      fail_value(function, at + "parameter " + quoted_escaped(entry.name) + " is listed twice");
    if (entry.dtype != "float32" && entry.dtype != "float64")
      fail_value(function,
                 at + "dtype " + quoted_escaped(entry.dtype) + ", expected float32 or float64");
    if (!parse_shape_text(fields[2], entry.shape))
      fail_value(function, at + "shape " + quoted_escaped(fields[2]) +
                               ", expected dimensions joined by 'x' (2x16, 0) or 'scalar'");
    if (!is_plain_file_name(entry.file))
      fail_value(function, at + "file " + quoted_escaped(entry.file) +
                               ", expected a plain file name inside the checkpoint directory");
    entries.push_back(std::move(entry));
  }
  return manifest;
}

bool has_manifest_magic(const fs::path& dir) {
  const fs::path path = dir / k_manifest_name;
  struct ::stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  FileDescriptor fd(
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW));
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  char buffer[64];
  const ::ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
  const std::string prefix = std::string(k_manifest_magic) + " ";
  return got >= 0 && std::string(buffer, static_cast<std::size_t>(got)).rfind(prefix, 0) == 0;
}

}  // namespace xtgrad::detail
