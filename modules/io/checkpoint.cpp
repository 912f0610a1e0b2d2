#include "checkpoint.hpp"

// renameat2 and RENAME_EXCHANGE come from glibc's <stdio.h> (glibc >= 2.28)
// under _GNU_SOURCE, which g++ defines for C++.
#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <system_error>

#include "../../engine/errors.hpp"
#include "files.hpp"
#include "manifest.hpp"
#include "npy_detail.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::fail_errno;
using detail::fail_value;
using detail::quoted;

// How much of a name read from a manifest a message quotes.
constexpr std::size_t k_max_quoted_name = 200;

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i ? ", " : "") + quoted(detail::escaped(names[i], k_max_quoted_name));
  return out;
}

template <class A, class B>
bool equal_shape(const A& a, const B& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Absolute, without "." / ".." / trailing separators, so that "ckpt/" and
// "./ckpt" name the same sibling temporary directory.
fs::path normalized_directory(const std::string& fn, const fs::path& dir) {
  if (dir.empty()) fail_value(fn, "the checkpoint directory path is empty");
  fs::path out = fs::absolute(dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  if (out == out.root_path())
    fail_value(fn,
               "the checkpoint directory cannot be the root directory " + detail::path_str(out));
  return out;
}

// save may replace `dir` only if it is absent, empty, or a checkpoint.
void check_replaceable(const std::string& fn, const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (status.type() == fs::file_type::not_found) return;
  if (error)
    detail::fail_io(fn, "cannot inspect " + detail::path_str(dir) + ": " + error.message());
  if (fs::is_symlink(status))
    fail_value(fn, detail::path_str(dir) +
                       " is a symbolic link; pass the directory it points to (the atomic swap "
                       "would replace the link itself)");
  if (!fs::is_directory(status))
    fail_value(fn, detail::path_str(dir) +
                       " exists and is not a directory; refusing to replace it with a "
                       "checkpoint");
  const bool empty = fs::is_empty(dir, error);
  if (error) detail::fail_io(fn, "cannot list " + detail::path_str(dir) + ": " + error.message());
  if (empty || detail::has_manifest_magic(dir)) return;
  fail_value(fn, detail::path_str(dir) +
                     " exists, is not empty and is not an xtgrad checkpoint (no " +
                     detail::k_manifest_name + " starting with '" + detail::k_manifest_magic +
                     "'); refusing to overwrite it");
}

// Puts the complete checkpoint `fresh` at `dir`. Afterwards `fresh` holds the
// previous contents of `dir` (if any), for the caller to delete.
void swap_into_place(const std::string& fn, const fs::path& fresh, const fs::path& dir) {
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return;
  const int error = errno;
  if (error == ENOENT) {  // no previous checkpoint: a plain rename
    if (::rename(fresh.c_str(), dir.c_str()) != 0) fail_errno(fn, "", "rename into", dir, errno);
    return;
  }
  if (error != EINVAL && error != ENOSYS && error != EOPNOTSUPP)
    fail_errno(fn, "", "swap the new checkpoint into", dir, error);
  // A file system without RENAME_EXCHANGE: two renames. Between them `dir`
  // is briefly absent, but the previous checkpoint stays whole at `aside`
  // and is put back if the second rename fails.
  const fs::path aside =
      dir.parent_path() / (dir.filename().string() + ".old-" + detail::random_suffix());
  if (::rename(dir.c_str(), aside.c_str()) != 0)
    fail_errno(fn, "", "move the previous checkpoint aside from", dir, errno);
  if (::rename(fresh.c_str(), dir.c_str()) != 0) {
    const int rename_error = errno;
    ::rename(aside.c_str(), dir.c_str());
    fail_errno(fn, "", "rename into", dir, rename_error);
  }
  ::rename(aside.c_str(), fresh.c_str());
}

// Opens the checkpoint directory for reading its entries relative to it.
detail::FileDescriptor open_checkpoint_directory(const std::string& fn, const fs::path& dir) {
  detail::FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() >= 0) return fd;
  if (errno == ENOTDIR)
    fail_value(fn, detail::path_str(dir) +
                       " is not a directory, expected a checkpoint directory written by "
                       "save_checkpoint or Module::save");
  fail_errno(fn, "", "open checkpoint directory", dir, errno);
}

// The manifest's entries, checked against `params`: the same names, and for
// each the dtype T and the parameter's shape. In the order of `params`.
template <class T>
std::vector<detail::ManifestEntry> matching_entries(
    const std::string& fn, const fs::path& dir,
    const std::vector<std::pair<std::string, Parameter<T>*>>& params,
    std::vector<detail::ManifestEntry> entries) {
  std::map<std::string, const detail::ManifestEntry*> by_name;
  for (const detail::ManifestEntry& entry : entries) by_name[entry.name] = &entry;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> param_names;
  for (const auto& [name, p] : params) {
    param_names.insert(name);
    if (by_name.count(name) == 0) missing.push_back(name);
  }
  for (const detail::ManifestEntry& entry : entries)
    if (param_names.count(entry.name) == 0) unexpected.push_back(entry.name);
  if (!missing.empty() || !unexpected.empty()) {
    std::string what = "checkpoint " + detail::path_str(dir) + " does not match the module:";
    if (!missing.empty()) what += " missing parameter(s) " + name_list(missing) + ";";
    if (!unexpected.empty())
      what += " unexpected parameter(s) " + name_list(unexpected) + " (not in the module);";
    what.pop_back();
    fail_value(fn, what);
  }
  std::vector<detail::ManifestEntry> out;
  for (const auto& [name, p] : params) {
    const detail::ManifestEntry& entry = *by_name.at(name);
    const std::string at = "parameter " + quoted(name) + ": checkpoint " + detail::path_str(dir);
    if (entry.dtype != npy_dtype_name<T>())
      fail_value(fn, at + " stores " + entry.dtype + ", the module's parameter is " +
                         npy_dtype_name<T>() +
                         "; xtgrad does not convert between float32 and float64 silently");
    if (!equal_shape(entry.shape, p->value.shape()))
      fail_value(fn, at + " has shape " + detail::shape_str(entry.shape) + ", the module expects " +
                         detail::shape_str(p->value.shape()));
    out.push_back(entry);
  }
  return out;
}

}  // namespace

template <class T>
void save_checkpoint(const fs::path& dir_argument,
                     const std::vector<std::pair<std::string, const Parameter<T>*>>& params,
                     const std::string& fn) {
  for (const auto& [name, p] : params)
    if (!detail::is_plain_file_name(name))
      fail_value(fn, "parameter name " + quoted(detail::escaped(name)) +
                         " cannot name a checkpoint file: expected no '/', no control "
                         "characters and no leading '.'");
  const fs::path dir = normalized_directory(fn, dir_argument);
  check_replaceable(fn, dir);

  // Everything goes into a fresh sibling directory first (same file system,
  // so the final swap is a rename); the manifest is written last.
  const fs::path fresh =
      dir.parent_path() / (dir.filename().string() + ".tmp-" + detail::random_suffix());
  std::error_code error;
  if (!fs::create_directory(fresh, error))
    fail_errno(fn, "", "create the temporary directory", fresh, error ? error.value() : EEXIST);
  try {
    std::vector<detail::ManifestEntry> entries;
    for (const auto& [name, p] : params) {
      const std::string file = name + ".npy";
      detail::write_npy_file(fresh / file, p->value, fn);
      entries.push_back(
          {name, npy_dtype_name<T>(), {p->value.shape().begin(), p->value.shape().end()}, file});
    }
    const std::string manifest = detail::format_manifest(entries);
    detail::write_new_file(fresh / detail::k_manifest_name, {{manifest.data(), manifest.size()}},
                           fn);
    detail::fsync_directory(fresh);
    swap_into_place(fn, fresh, dir);
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
void load_checkpoint(const fs::path& dir,
                     const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                     const std::string& fn) {
  const detail::FileDescriptor dir_fd = open_checkpoint_directory(fn, dir);
  const std::vector<detail::ManifestEntry> entries = matching_entries(
      fn, dir, params,
      detail::parse_manifest(fn, dir, detail::read_manifest(fn, dir_fd.get(), dir)));

  // Read and check everything before assigning anything (all or nothing).
  // Each header is compared with its parameter before its data is read, so
  // that no more than the parameters' own size is ever allocated.
  std::vector<xt::xarray<T>> values;
  values.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter<T>& p = *params[i].second;
    const detail::ManifestEntry& entry = entries[i];
    detail::InputFile file = detail::open_directory_entry(
        fn, "parameter " + quoted(params[i].first) + ": ", dir_fd.get(), dir, entry.file);
    const NpyHeader header = detail::parse_npy_header(file);
    detail::check_npy_dtype<T>(file, header);
    if (!equal_shape(header.shape, p.value.shape()))
      detail::fail_npy_content(file, "holds shape " + detail::shape_str(header.shape) +
                                         ", the manifest says " + detail::shape_str(entry.shape) +
                                         " and the module expects " +
                                         detail::shape_str(p.value.shape()));
    values.push_back(detail::read_npy_data<T>(file, header));
  }
  for (std::size_t i = 0; i < params.size(); ++i) params[i].second->value = std::move(values[i]);
}

template void save_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, const Parameter<float>*>>&,
                              const std::string&);
template void save_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, const Parameter<double>*>>&,
                              const std::string&);
template void load_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, Parameter<float>*>>&,
                              const std::string&);
template void load_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, Parameter<double>*>>&,
                              const std::string&);

}  // namespace xtgrad
