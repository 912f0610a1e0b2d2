#pragma once
// Checkpoint directories: named parameters saved as one .npy file each, with
// a manifest that records the module's config. Module::save and Module::load
// use these with the module's named_parameters() and config().
//
//   manifest.tsv   "xtgrad-checkpoint 2" (the format version), then
//                  "module" \t the module's config as JSON (module_config.hpp),
//                  then one line per parameter:
//                  name \t dtype (float32|float64) \t shape (2x16, 0, or scalar) \t file
//   <name>.npy     the parameter's value (numpy.load reads it)
//
// Version 1 has no "module" line (the first line is "xtgrad-checkpoint 1"):
// what save_checkpoint writes without a config, and what xtgrad wrote before
// checkpoints recorded configs. It loads with names, shapes and dtypes
// checked, as before; a version 2 checkpoint's config is checked first.
//
// Lines end in '\n'. A reader also accepts "\r\n" and empty lines at the end
// (a manifest edited on another system); anything else malformed is refused,
// and messages show its control characters escaped (\r, \x01).
//
// save_checkpoint writes a fresh sibling directory "<dir>.tmp-<random>"
// (every file fsynced, the manifest last) and swaps it into place atomically
// (renameat2 RENAME_EXCHANGE; two renames on a file system without it), so
// a save that fails part-way leaves the previous checkpoint as it was and no
// temporary directory behind. `dir` must not exist, be an empty directory,
// or be a checkpoint (which is replaced); anything else is refused with
// std::invalid_argument. Its parent must exist.
//
// load_checkpoint is written for hostile directories and is all or nothing:
// it checks the manifest against the parameters (names, dtypes, shapes),
// then, file by file, the .npy header against its parameter and the
// manifest before reading the data, and assigns the values only when every
// file has been read. Memory stays bounded by the parameters' own size (plus
// a manifest of at most 64 MiB): a file declaring another shape is refused
// before anything of its size is allocated. The manifest and the parameter
// files must be regular files inside the directory: a directory, FIFO,
// socket or device is refused without being opened for reading (nothing
// blocks), and a symbolic link is followed only when its target is a plain
// file name, that is another regular file of the same directory; a link
// that points anywhere else ("/etc/passwd", "../x", "sub/x") or to another
// link is refused (`dir` itself may be a link: the caller named it). Entries
// are opened relative to the directory and with O_NOFOLLOW, so that a save
// swapping in another checkpoint meanwhile cannot mix two checkpoints'
// files, and a link swapped in after the check is not followed either.
//
// Errors: messages start "xtgrad::<caller>:" and name the parameter or file.
// std::invalid_argument for bad content (a checkpoint that does not match
// the parameters, a corrupt manifest or .npy, `dir` not a directory);
// std::runtime_error for I/O failures, a missing `dir`, and an entry that is
// not a regular file inside the checkpoint.

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../engine/parameter.hpp"
#include "module_config.hpp"

namespace xtgrad {

// Writes `params` (names as from Module::named_parameters; each must be a
// plain file name: no '/', no control characters, no leading '.') to `dir`;
// format version 2 with `config`, version 1 without.
template <class T>
void save_checkpoint(const std::filesystem::path& dir,
                     const std::vector<std::pair<std::string, const Parameter<T>*>>& params,
                     const std::string& caller = "save_checkpoint",
                     const std::optional<ModuleConfig>& config = std::nullopt);

// Reads a checkpoint written by save_checkpoint into `params`: the names must
// be exactly theirs, with equal shapes and dtype T (no float32 <-> float64
// conversion). Assigns each Parameter's value only; gradients are untouched.
// With `expected`, a version 2 checkpoint must hold that config, else
// std::invalid_argument "xtgrad::<caller>: checkpoint '<dir>': 'd_ff' was
// saved as '16', this module has '8'; it holds <its config>, this module is
// <expected>": the first difference (a dotted path into children, both
// values), then both configs (describe(), each cut at 120 characters); a
// version 1 checkpoint has none to check.
template <class T>
void load_checkpoint(const std::filesystem::path& dir,
                     const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                     const std::string& caller = "load_checkpoint",
                     const std::optional<ModuleConfig>& expected = std::nullopt);

// The refusal of a config that is not the module's, as above; used by every
// checkpoint format.
[[noreturn]] void fail_config_mismatch(const std::string& caller, const std::string& what,
                                       const ModuleConfig& stored, const ModuleConfig& module);

}  // namespace xtgrad
