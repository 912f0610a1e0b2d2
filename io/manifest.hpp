#pragma once
// Internal (not included by any public header): manifest.tsv, the table of
// contents of a checkpoint directory (the format is described in
// checkpoint.hpp).

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "module_config.hpp"

namespace xtgrad::detail {

inline constexpr char k_manifest_name[] = "manifest.tsv";
inline constexpr char k_manifest_magic[] = "xtgrad-checkpoint";
// Version 1: the magic line, then the entries. Version 2 (a checkpoint of a
// module, Module::save): a "module\t<config JSON>" line after the magic line.
inline constexpr char k_manifest_version[] = "1";
inline constexpr char k_manifest_version_config[] = "2";
inline constexpr char k_manifest_config_key[] = "module";

// One parameter line: name \t dtype \t shape \t file.
struct ManifestEntry {
  std::string name;
  std::string dtype;  // "float32" or "float64"
  std::vector<std::size_t> shape;
  std::string file;  // a plain file name inside the checkpoint directory
};

struct Manifest {
  std::vector<ManifestEntry> entries;
  std::optional<ModuleConfig> config;  // version 2 only
};

// "xtgrad-checkpoint 1\n", then one "name\tdtype\tshape\tfile\n" per entry;
// with a config, "xtgrad-checkpoint 2\n" and "module\t<to_json(config)>\n" first.
std::string format_manifest(const std::vector<ManifestEntry>& entries,
                            const std::optional<ModuleConfig>& config = std::nullopt);

// Reads manifest.tsv of the checkpoint directory open as `dir_fd` (at path
// `dir`): it must be a regular file inside the directory (see
// open_directory_entry) of at most a fixed size. A missing manifest is bad
// content (std::invalid_argument), not an I/O failure.
std::string read_manifest(const std::string& function, int dir_fd,
                          const std::filesystem::path& dir);

// Parses and validates the manifest text read from `dir`: the first line
// (version 1 or 2), for version 2 the module line (parse_module_config),
// then four fields per line, a known dtype, a shape, a plain file name, no
// name twice. Lines may end in "\r\n"; empty lines at the end are ignored.
// std::invalid_argument "xtgrad::<function>: '<manifest>' line <n>: ...",
// control characters of the file shown escaped.
Manifest parse_manifest(const std::string& function, const std::filesystem::path& dir,
                        const std::string& text);

// True when `dir/manifest.tsv` is a regular file (not a link) that starts
// with "xtgrad-checkpoint ": what save may replace. Reads at most 64 bytes
// and never blocks.
bool has_manifest_magic(const std::filesystem::path& dir);

}  // namespace xtgrad::detail
