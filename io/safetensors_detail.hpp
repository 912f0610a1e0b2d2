#pragma once
// Internal (not included by any public header): the pieces of the
// safetensors reader and writer that safetensors.cpp defines and
// safetensors_header.cpp (the JSON header, safetensors_header.hpp) shares.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "files.hpp"
#include "safetensors.hpp"

namespace xtgrad::detail {

// The reference reader's MAX_HEADER_SIZE.
inline constexpr std::size_t k_safetensors_max_header = 100'000'000;
// As for .npy (NumPy 2's NPY_MAXDIMS): more dimensions are refused.
inline constexpr std::size_t k_safetensors_max_dims = 64;
inline constexpr char k_safetensors_metadata_key[] = "__metadata__";

// Bytes per element in the file: 2, 2, 4, 8.
std::size_t safetensors_dtype_size(SafetensorsDtype dtype);

// std::invalid_argument "xtgrad::<function>: file '<path>': <what>".
[[noreturn]] void fail_safetensors(const InputFile& file, const std::string& what);

// A name from the file as messages quote it: 'name', escaped, at most 200 bytes shown.
std::string quoted_name(const std::string& name);

// read_safetensors, with messages naming `function` (the function the user
// called: "load_gpt2" rather than "read_safetensors").
Safetensors read_safetensors_for(const std::string& function, const std::filesystem::path& path,
                                 const std::function<bool(const std::string& name)>& select,
                                 const SafetensorsHeaderCheck& check_header);

// get_tensor's refusals, for callers that check a header before reading:
// no tensor `name` among `names` (sorted; a few are listed), and a tensor
// `name` of dtype `dtype` where a T (float: F32, F16 or BF16; double: F64)
// is expected.
[[noreturn]] void fail_no_tensor(const std::string& function, const std::string& name,
                                 const std::vector<const std::string*>& names);
template <class T>
[[noreturn]] void fail_tensor_dtype(const std::string& function, const std::string& name,
                                    SafetensorsDtype dtype);
// Whether a tensor of `dtype` is read as T.
template <class T>
bool dtype_reads_as(SafetensorsDtype dtype) {
  return (dtype == SafetensorsDtype::F64) == (sizeof(T) == sizeof(double));
}

extern template void fail_tensor_dtype<float>(const std::string&, const std::string&,
                                              SafetensorsDtype);
extern template void fail_tensor_dtype<double>(const std::string&, const std::string&,
                                               SafetensorsDtype);

}  // namespace xtgrad::detail
