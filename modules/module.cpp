#include "module.hpp"

// renameat2 and RENAME_EXCHANGE come from glibc's <stdio.h> (glibc >= 2.28)
// under _GNU_SOURCE, which g++ defines for C++.
#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

#include "io/npy.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

constexpr const char* k_manifest_name = "manifest.tsv";
constexpr const char* k_manifest_magic = "xtgrad-checkpoint";
constexpr const char* k_manifest_version = "1";
// A manifest holds one short line per parameter; anything larger is not one.
constexpr std::uintmax_t k_max_manifest_bytes = std::uintmax_t(64) << 20;

std::string in_quotes(const std::string& text) {
  return "'" + text + "'";
}
std::string in_quotes(const fs::path& path) {
  return in_quotes(path.string());
}

[[noreturn]] void fail_content(const char* fn, const std::string& what) {
  throw std::invalid_argument(std::string("xtgrad::Module::") + fn + ": " + what);
}

[[noreturn]] void fail_io(const char* fn, const std::string& action, const fs::path& path,
                          const std::error_code& error) {
  throw std::runtime_error(std::string("xtgrad::Module::") + fn + ": cannot " + action + " " +
                           in_quotes(path) + ": " + error.message());
}

[[noreturn]] void fail_io(const char* fn, const std::string& action, const fs::path& path,
                          int error) {
  fail_io(fn, action, path, std::error_code(error, std::generic_category()));
}

template <class S>
std::string shape_list(const S& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The manifest's shape notation: "2x16", "0", or "scalar" for 0-d.
template <class S>
std::string shape_text(const S& shape) {
  if (shape.size() == 0) return "scalar";
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
    if (end == pos || end - pos > 19) return false;  // empty, or more digits than a size_t holds
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

template <class A, class B>
bool equal_shape(const A& a, const B& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// A name usable as a file inside the checkpoint and as a TSV field: not
// empty, no directory separator, no control characters (tabs and newlines
// would break the manifest), not hidden ('.', '..', '.x').
bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

// Absolute, without "." / ".." / trailing separators, so that "ckpt/" and
// "./ckpt" name the same sibling temporary directory.
fs::path normalized_directory(const char* fn, const fs::path& dir) {
  if (dir.empty()) fail_content(fn, "the checkpoint directory path is empty");
  fs::path out = fs::absolute(dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  if (out == out.root_path())
    fail_content(fn, "the checkpoint directory cannot be the root directory " + in_quotes(out));
  return out;
}

// At most the first 64 bytes of a file, or "" when it cannot be read: enough
// to recognise a manifest without reading a large foreign file.
std::string file_start(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char buffer[64];
  in.read(buffer, sizeof buffer);
  return std::string(buffer, static_cast<std::size_t>(in.gcount()));
}

// save() may replace `dir` only if it is absent, empty, or an xtgrad checkpoint.
void check_replaceable(const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (status.type() == fs::file_type::not_found) return;
  if (error) fail_io("save", "inspect", dir, error);
  if (fs::is_symlink(status))
    fail_content("save", in_quotes(dir) +
                             " is a symbolic link; pass the directory it points to (the atomic "
                             "swap would replace the link itself)");
  if (!fs::is_directory(status))
    fail_content("save", in_quotes(dir) +
                             " exists and is not a directory; refusing to replace it with a "
                             "checkpoint");
  const bool empty = fs::is_empty(dir, error);
  if (error) fail_io("save", "list", dir, error);
  if (empty) return;
  if (file_start(dir / k_manifest_name).rfind(std::string(k_manifest_magic) + " ", 0) != 0)
    fail_content("save", in_quotes(dir) +
                             " exists, is not empty and is not an xtgrad checkpoint (no " +
                             k_manifest_name + " starting with '" + k_manifest_magic +
                             "'); refusing to overwrite it");
}

// Puts the complete checkpoint `fresh` at `dir`. Afterwards `fresh` holds the
// previous contents of `dir` (if any), for the caller to delete.
void swap_into_place(const fs::path& fresh, const fs::path& dir) {
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return;
  const int error = errno;
  if (error == ENOENT) {  // no previous checkpoint: a plain rename
    if (::rename(fresh.c_str(), dir.c_str()) != 0) fail_io("save", "rename into", dir, errno);
    return;
  }
  if (error != EINVAL && error != ENOSYS && error != EOPNOTSUPP)
    fail_io("save", "swap the new checkpoint into", dir, error);
  // A file system without RENAME_EXCHANGE: two renames. Between them `dir`
  // is briefly absent, but the previous checkpoint stays whole at `aside`
  // and is put back if the second rename fails.
  const fs::path aside =
      dir.parent_path() / (dir.filename().string() + ".old-" + detail::random_suffix());
  if (::rename(dir.c_str(), aside.c_str()) != 0)
    fail_io("save", "move the previous checkpoint aside from", dir, errno);
  if (::rename(fresh.c_str(), dir.c_str()) != 0) {
    const int rename_error = errno;
    ::rename(aside.c_str(), dir.c_str());
    fail_io("save", "rename into", dir, rename_error);
  }
  ::rename(aside.c_str(), fresh.c_str());
}

struct ManifestEntry {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::string file;
};

std::string read_manifest_text(const fs::path& dir) {
  const fs::path path = dir / k_manifest_name;
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (status.type() == fs::file_type::not_found)
    fail_io("load", "open checkpoint directory", dir,
            std::make_error_code(std::errc::no_such_file_or_directory));
  if (error) fail_io("load", "inspect", dir, error);
  if (!fs::is_directory(status))
    fail_content("load", in_quotes(dir) +
                             " is not a directory, expected a checkpoint directory "
                             "written by Module::save");
  const fs::file_status manifest_status = fs::status(path, error);
  if (manifest_status.type() == fs::file_type::not_found)
    fail_content("load", "checkpoint " + in_quotes(dir) + " has no " + k_manifest_name +
                             "; expected a directory written by Module::save");
  if (!fs::is_regular_file(manifest_status))
    fail_content("load", in_quotes(path) + " is not a regular file");
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) fail_io("load", "inspect", path, error);
  if (size > k_max_manifest_bytes)
    fail_content("load", in_quotes(path) + " has " + std::to_string(size) +
                             " bytes, more than the " + std::to_string(k_max_manifest_bytes) +
                             " a manifest may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_io("load", "open", path, errno);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) fail_io("load", "read", path, EIO);
  return text;
}

std::vector<ManifestEntry> parse_manifest(const fs::path& dir, const std::string& text) {
  const std::string where = in_quotes(dir / k_manifest_name);
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  const std::string expected_header = std::string(k_manifest_magic) + " " + k_manifest_version;
  if (lines.empty() || lines[0] != expected_header) {
    const std::string found = lines.empty() ? "an empty file" : in_quotes(lines[0]);
    fail_content("load",
                 where + ": first line is " + found + ", expected " + in_quotes(expected_header));
  }
  std::vector<ManifestEntry> entries;
  std::set<std::string> names;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string at = where + " line " + std::to_string(i + 1) + ": ";
    std::vector<std::string> fields;
    std::size_t start = 0;
    while (true) {
      const std::size_t tab = lines[i].find('\t', start);
      fields.push_back(lines[i].substr(start, tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (fields.size() != 4)
      fail_content("load",
                   at + "expected 4 tab-separated fields (name, dtype, shape, file), found " +
                       std::to_string(fields.size()));
    ManifestEntry entry{fields[0], fields[1], {}, fields[3]};
    if (entry.name.empty()) fail_content("load", at + "empty parameter name");
    if (!names.insert(entry.name).second)
      fail_content("load", at + "parameter " + in_quotes(entry.name) + " is listed twice");
    if (entry.dtype != "float32" && entry.dtype != "float64")
      fail_content("load",
                   at + "dtype " + in_quotes(entry.dtype) + ", expected float32 or float64");
    if (!parse_shape_text(fields[2], entry.shape))
      fail_content("load", at + "shape " + in_quotes(fields[2]) +
                               ", expected dimensions joined by 'x' (2x16, 0) or 'scalar'");
    if (!is_plain_file_name(entry.file))
      fail_content("load", at + "file " + in_quotes(entry.file) +
                               ", expected a plain file name inside the checkpoint directory");
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + in_quotes(names[i]);
  return out;
}

}  // namespace

template <class T>
typename Module<T>::NamedParameters Module<T>::named_parameters() {
  NamedParameters out;
  collect_parameters("", out);
  std::set<std::string> seen;
  for (const auto& entry : out)
    if (!seen.insert(entry.first).second)
      throw std::logic_error("xtgrad::Module::named_parameters: duplicate parameter name " +
                             in_quotes(entry.first) +
                             "; give every parameter and child module a distinct name");
  return out;
}

template <class T>
std::vector<std::pair<std::string, const Parameter<T>*>> Module<T>::named_parameters() const {
  // collect_parameters only takes addresses; calling it through const_cast
  // never modifies *this.
  const NamedParameters all = const_cast<Module<T>*>(this)->named_parameters();
  return {all.begin(), all.end()};
}

template <class T>
std::vector<Parameter<T>*> Module<T>::parameters() {
  std::vector<Parameter<T>*> out;
  for (const auto& entry : named_parameters()) out.push_back(entry.second);
  return out;
}

template <class T>
void Module<T>::zero_grad() {
  for (Parameter<T>* p : parameters()) p->zero_grad();
}

template <class T>
void Module<T>::add_parameter(const std::string& prefix, Parameter<T>& p, NamedParameters& out) {
  out.emplace_back(prefix + p.name, &p);
}

template <class T>
void Module<T>::add_child(const std::string& prefix, const std::string& child_name,
                          Module<T>& child, NamedParameters& out) {
  child.collect_parameters(prefix + child_name + ".", out);
}

template <class T>
void Module<T>::save(const fs::path& dir_argument) const {
  const auto params = named_parameters();
  for (const auto& [name, p] : params)
    if (!is_plain_file_name(name))
      fail_content("save", "parameter name " + in_quotes(name) +
                               " cannot name a checkpoint file: expected no '/', no control "
                               "characters and no leading '.'");
  const fs::path dir = normalized_directory("save", dir_argument);
  check_replaceable(dir);

  // Everything goes into a fresh sibling directory first (same file system,
  // so the final swap is a rename); the manifest is written last.
  const fs::path fresh =
      dir.parent_path() / (dir.filename().string() + ".tmp-" + detail::random_suffix());
  std::error_code error;
  if (!fs::create_directory(fresh, error))
    fail_io("save", "create the temporary directory", fresh,
            error ? error : std::make_error_code(std::errc::file_exists));
  try {
    std::string manifest = std::string(k_manifest_magic) + " " + k_manifest_version + "\n";
    std::size_t files_written = 0;
    for (const auto& [name, p] : params) {
      const std::string file = name + ".npy";
      detail::write_npy_file(fresh / file, p->value, "Module::save");
      manifest += name + "\t" + npy_dtype_name<T>() + "\t" + shape_text(p->value.shape()) + "\t" +
                  file + "\n";
      if (detail::checkpoint_write_hook) detail::checkpoint_write_hook(++files_written);
    }
    detail::write_new_file(fresh / k_manifest_name, manifest, "Module::save");
    if (detail::checkpoint_write_hook) detail::checkpoint_write_hook(++files_written);
    detail::fsync_directory(fresh);
    swap_into_place(fresh, dir);
  } catch (...) {
    fs::remove_all(fresh, error);
    throw;
  }
  // `fresh` now holds the previous checkpoint. The new one is in place even if
  // this clean-up fails, so that is not reported as a failed save.
  fs::remove_all(fresh, error);
  detail::fsync_directory(dir.parent_path());
}

template <class T>
void Module<T>::load(const fs::path& dir) {
  const NamedParameters params = named_parameters();
  const std::vector<ManifestEntry> entries = parse_manifest(dir, read_manifest_text(dir));

  std::map<std::string, const ManifestEntry*> by_name;
  for (const ManifestEntry& entry : entries) by_name[entry.name] = &entry;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> module_names;
  for (const auto& [name, p] : params) {
    module_names.insert(name);
    if (by_name.count(name) == 0) missing.push_back(name);
  }
  for (const ManifestEntry& entry : entries)
    if (module_names.count(entry.name) == 0) unexpected.push_back(entry.name);
  if (!missing.empty() || !unexpected.empty()) {
    std::string what = "checkpoint " + in_quotes(dir) + " does not match the module:";
    if (!missing.empty()) what += " missing parameter(s) " + name_list(missing) + ";";
    if (!unexpected.empty())
      what += " unexpected parameter(s) " + name_list(unexpected) + " (not in the module);";
    what.pop_back();
    fail_content("load", what);
  }

  // Read and check everything before assigning anything (all or nothing).
  std::vector<xt::xarray<T>> values;
  values.reserve(params.size());
  for (const auto& [name, p] : params) {
    const ManifestEntry& entry = *by_name.at(name);
    const std::string at = "parameter " + in_quotes(name) + ": ";
    if (entry.dtype != npy_dtype_name<T>())
      fail_content("load", at + "checkpoint " + in_quotes(dir) + " stores " + entry.dtype +
                               ", the module's parameter is " + npy_dtype_name<T>() +
                               "; xtgrad does not convert between float32 and float64 silently");
    if (!equal_shape(entry.shape, p->value.shape()))
      fail_content("load", at + "checkpoint " + in_quotes(dir) + " has shape " +
                               shape_list(entry.shape) + ", the module expects " +
                               shape_list(p->value.shape()));
    const fs::path file = dir / entry.file;
    xt::xarray<T> value;
    try {
      value = load_npy<T>(file);
    } catch (const std::invalid_argument& e) {
      fail_content("load", at + e.what());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("xtgrad::Module::load: " + at + e.what());
    }
    if (!equal_shape(value.shape(), entry.shape))
      fail_content("load", at + "file " + in_quotes(file) + " holds shape " +
                               shape_list(value.shape()) + ", the manifest says " +
                               shape_list(entry.shape));
    values.push_back(std::move(value));
  }
  for (std::size_t i = 0; i < params.size(); ++i) params[i].second->value = std::move(values[i]);
}

template class Module<float>;
template class Module<double>;

}  // namespace xtgrad
