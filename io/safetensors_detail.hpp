#pragma once
// Internal (not included by any public header): the pieces of the
// safetensors reader and writer that safetensors.cpp defines and
// safetensors_header.cpp (the JSON header, safetensors_header.hpp) shares.

#include <cstddef>
#include <string>

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

}  // namespace xtgrad::detail
