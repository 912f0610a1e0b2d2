#include "directory.hpp"

// renameat2 and RENAME_EXCHANGE come from glibc's <stdio.h> (glibc >= 2.28)
// under _GNU_SOURCE, which g++ defines for C++.
#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <system_error>

#include "../engine/errors.hpp"
#include "manifest.hpp"
#include "npy_detail.hpp"

namespace xtgrad::detail {

namespace {

namespace fs = std::filesystem;

// save may replace `dir` only if it is absent, empty, or a checkpoint.
void check_replaceable(const std::string& fn, const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (status.type() == fs::file_type::not_found) return;
  if (error) fail_io(fn, "cannot inspect " + path_str(dir) + ": " + error.message());
  if (fs::is_symlink(status))
    fail_value(fn, path_str(dir) +
                       " is a symbolic link; pass the directory it points to (the atomic swap "
                       "would replace the link itself)");
  if (!fs::is_directory(status))
    fail_value(fn, path_str(dir) +
                       " exists and is not a directory; refusing to replace it with a "
                       "checkpoint");
  const bool empty = fs::is_empty(dir, error);
  if (error) fail_io(fn, "cannot list " + path_str(dir) + ": " + error.message());
  if (empty || has_manifest_magic(dir)) return;
  fail_value(fn, path_str(dir) + " exists, is not empty and is not an xtgrad checkpoint (no " +
                     k_manifest_name + " starting with '" + k_manifest_magic +
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
  const fs::path aside = dir.parent_path() / (dir.filename().string() + ".old-" + random_suffix());
  if (::rename(dir.c_str(), aside.c_str()) != 0)
    fail_errno(fn, "", "move the previous checkpoint aside from", dir, errno);
  if (::rename(fresh.c_str(), dir.c_str()) != 0) {
    const int rename_error = errno;
    ::rename(aside.c_str(), dir.c_str());
    fail_errno(fn, "", "rename into", dir, rename_error);
  }
  ::rename(aside.c_str(), fresh.c_str());
}

}  // namespace

// Absolute, without "." / ".." / trailing separators, so that "ckpt/" and
// "./ckpt" name the same sibling temporary directory.
fs::path normalized_directory(const std::string& fn, const fs::path& dir) {
  if (dir.empty()) fail_value(fn, "the checkpoint directory path is empty");
  fs::path out = fs::absolute(dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  if (out == out.root_path())
    fail_value(fn, "the checkpoint directory cannot be the root directory " + path_str(out));
  return out;
}

// Opens the checkpoint directory for reading its entries relative to it.
FileDescriptor open_checkpoint_directory(const std::string& fn, const fs::path& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() >= 0) return fd;
  if (errno == ENOTDIR)
    fail_value(fn, path_str(dir) +
                       " is not a directory, expected a checkpoint directory written by "
                       "save_checkpoint or Module::save");
  fail_errno(fn, "", "open checkpoint directory", dir, errno);
}

template <class T>
void write_directory(const std::string& fn, const fs::path& dir_argument,
                     const std::vector<std::pair<std::string, const xt::xarray<T>*>>& arrays,
                     const std::vector<ExtraFile>& extra,
                     const std::optional<ModuleConfig>& config) {
  for (const auto& [name, array] : arrays)
    if (!is_plain_file_name(name))
      fail_value(fn, "the name " + quoted(escaped(name)) +
                         " cannot name a checkpoint file: expected no '/', no control "
                         "characters and no leading '.'");
  const fs::path dir = normalized_directory(fn, dir_argument);
  check_replaceable(fn, dir);

  // Everything goes into a fresh sibling directory first (same file system,
  // so the final swap is a rename); the manifest is written last.
  const fs::path fresh = dir.parent_path() / (dir.filename().string() + ".tmp-" + random_suffix());
  std::error_code error;
  if (!fs::create_directory(fresh, error))
    fail_errno(fn, "", "create the temporary directory", fresh, error ? error.value() : EEXIST);
  try {
    std::vector<ManifestEntry> entries;
    for (const auto& [name, array] : arrays) {
      const std::string file = name + ".npy";
      write_npy_file(fresh / file, *array, fn);
      entries.push_back(
          {name, npy_dtype_name<T>(), {array->shape().begin(), array->shape().end()}, file});
    }
    for (const ExtraFile& file : extra)
      write_new_file(fresh / file.name, {{file.bytes.data(), file.bytes.size()}}, fn);
    const std::string manifest = format_manifest(entries, config);
    write_new_file(fresh / k_manifest_name, {{manifest.data(), manifest.size()}}, fn);
    fsync_directory(fresh);
    swap_into_place(fn, fresh, dir);
  } catch (...) {
    fs::remove_all(fresh, error);
    throw;
  }
  // `fresh` now holds the previous directory. The new one is in place even if
  // this clean-up fails, so that is not reported as a failed save.
  fs::remove_all(fresh, error);
  fsync_directory(dir.parent_path());
}

template void write_directory(const std::string&, const fs::path&,
                              const std::vector<std::pair<std::string, const xt::xarray<float>*>>&,
                              const std::vector<ExtraFile>&, const std::optional<ModuleConfig>&);
template void write_directory(const std::string&, const fs::path&,
                              const std::vector<std::pair<std::string, const xt::xarray<double>*>>&,
                              const std::vector<ExtraFile>&, const std::optional<ModuleConfig>&);

}  // namespace xtgrad::detail
