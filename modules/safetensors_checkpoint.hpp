#pragma once
// A module checkpoint as one safetensors file (io/safetensors.hpp): the state
// dict under torch's names (Module::named_parameters, as
// torch.nn.Module.state_dict of the same structure names them), so that
// safetensors.torch.load_file / safetensors.numpy.load_file and
// torch's load_state_dict read it as they read a file PyTorch wrote, and
// in "__metadata__", all strings:
//
//   "format"          "pt" (as safetensors.torch.save_file writes it)
//   "xtgrad.version"  "2", the checkpoint format version (as a directory's)
//   "xtgrad.type"     the module's type, config().type ("FeedForward")
//   "xtgrad.config"   config() as JSON (io/module_config.hpp)
//
// Module::save(path) and Module::load(path) call these for a path ending in
// ".safetensors". save_safetensors_checkpoint writes float parameters as F32
// and double ones as F64, atomically (a temporary sibling file, fsync,
// rename: a failed save leaves any previous file as it was).
//
// load_safetensors_checkpoint reads a file written so, hostile or not: the
// header as read_safetensors checks it against the file, then, before any
// tensor is read, the metadata (a version other than "2", a missing type or
// config, a config that is not the JSON of io/module_config.hpp or whose
// type is not "xtgrad.type" are refused), the config against the module's
// ("checkpoint '<path>': <the first difference>; it holds <its config>, this
// module is <config()>"), then the names, shapes and dtypes the header
// declares as Module::load_state_dict(strict) checks them, except that the
// dtype must be T's (F32 for float, F64 for double: no conversion); only
// then are the module's tensors read (memory bounded by the module's size
// whatever the header declares). All or nothing. A
// safetensors file without xtgrad metadata (written by PyTorch) is refused
// pointing to load_state_dict(read_safetensors(path)), which loads it.
// Errors: std::invalid_argument for bad content, std::runtime_error for
// I/O; a file that is not valid safetensors is refused by read_safetensors
// (messages "xtgrad::read_safetensors: ..."), a failed write by
// write_safetensors, anything else from `caller`.

#include <filesystem>
#include <string>

#include "../io/safetensors.hpp"
#include "module.hpp"

namespace xtgrad {

inline constexpr char k_safetensors_version_key[] = "xtgrad.version";
inline constexpr char k_safetensors_type_key[] = "xtgrad.type";
inline constexpr char k_safetensors_config_key[] = "xtgrad.config";

// The module's parameters by their dotted names (named_parameters()), as a
// TensorMap to write: write_safetensors(path, to_tensor_map(module)).
template <class T>
TensorMap to_tensor_map(const Module<T>& module);

template <class T>
void save_safetensors_checkpoint(const std::filesystem::path& path, const Module<T>& module);

template <class T>
void load_safetensors_checkpoint(const std::filesystem::path& path, Module<T>& module,
                                 const std::string& caller = "load_safetensors_checkpoint");

extern template TensorMap to_tensor_map(const Module<float>&);
extern template TensorMap to_tensor_map(const Module<double>&);
extern template void save_safetensors_checkpoint(const std::filesystem::path&,
                                                 const Module<float>&);
extern template void save_safetensors_checkpoint(const std::filesystem::path&,
                                                 const Module<double>&);
extern template void load_safetensors_checkpoint(const std::filesystem::path&, Module<float>&,
                                                 const std::string&);
extern template void load_safetensors_checkpoint(const std::filesystem::path&, Module<double>&,
                                                 const std::string&);

}  // namespace xtgrad
