#pragma once
// Internal (not included by any public header): the directory half of
// checkpoints and training-state directories (checkpoint.hpp and
// state_directory.hpp describe the formats and the guarantees).
//
// write_directory is the atomic save: the files go into a fresh sibling
// directory "<dir>.tmp-<random>" (each fsynced, the manifest last), which is
// then swapped into place (renameat2 RENAME_EXCHANGE; two renames on a file
// system without it), so a save that fails part-way leaves the previous
// directory as it was and no temporary directory behind. `dir` must not
// exist, be an empty directory, or be an xtgrad checkpoint (its manifest.tsv
// starts with the magic); anything else is refused with std::invalid_argument.

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "files.hpp"
#include "module_config.hpp"

namespace xtgrad::detail {

// Absolute, without "." / ".." / trailing separators, so that "ckpt/" and
// "./ckpt" name the same sibling temporary directory. Refuses "" and "/".
std::filesystem::path normalized_directory(const std::string& function,
                                           const std::filesystem::path& dir);

// Opens the directory `dir` for reading its entries relative to it:
// std::invalid_argument when it is not a directory, std::runtime_error when
// it cannot be opened (missing, no permission).
FileDescriptor open_checkpoint_directory(const std::string& function,
                                         const std::filesystem::path& dir);

// A file besides the arrays: its name (a plain file name) and its bytes.
struct ExtraFile {
  std::string name;
  std::string bytes;
};

// Writes `arrays` (each as "<name>.npy"; names must be plain file names, as
// is_plain_file_name says), then `extra` files, then manifest.tsv listing the
// arrays (version 2 with `config` when given), and swaps the directory into
// place at `dir`, atomically as above.
template <class T>
void write_directory(const std::string& function, const std::filesystem::path& dir,
                     const std::vector<std::pair<std::string, const xt::xarray<T>*>>& arrays,
                     const std::vector<ExtraFile>& extra,
                     const std::optional<ModuleConfig>& config = std::nullopt);

extern template void write_directory(
    const std::string&, const std::filesystem::path&,
    const std::vector<std::pair<std::string, const xt::xarray<float>*>>&,
    const std::vector<ExtraFile>&, const std::optional<ModuleConfig>&);
extern template void write_directory(
    const std::string&, const std::filesystem::path&,
    const std::vector<std::pair<std::string, const xt::xarray<double>*>>&,
    const std::vector<ExtraFile>&, const std::optional<ModuleConfig>&);

}  // namespace xtgrad::detail
