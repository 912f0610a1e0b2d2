#pragma once
// Internal (not included by any public header): the pieces of the
// safetensors reader and writer shared by safetensors_header.cpp (the JSON
// header) and safetensors.cpp (sizes, data, writing).

#include <cstddef>
#include <string>
#include <vector>

#include "files.hpp"
#include "safetensors.hpp"

namespace xtgrad::detail {

// The reference reader's MAX_HEADER_SIZE.
inline constexpr std::size_t k_safetensors_max_header = 100'000'000;
// As for .npy (NumPy 2's NPY_MAXDIMS): more dimensions are refused.
inline constexpr std::size_t k_safetensors_max_dims = 64;
// More tensors in one file are refused while the header is parsed: each
// costs a few hundred bytes of entries and arrays, so a header of tiny
// entries would otherwise cost many times the file's size.
inline constexpr std::size_t k_safetensors_max_tensors = 100'000;
inline constexpr char k_safetensors_metadata_key[] = "__metadata__";

// One tensor entry of the header, as declared (not yet checked against the file).
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;  // data_offsets
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of the header
  SafetensorsMetadata metadata;
};

// Bytes per element in the file: 2, 2, 4, 8.
std::size_t safetensors_dtype_size(SafetensorsDtype dtype);

// std::invalid_argument "xtgrad::<function>: file '<path>': <what>".
[[noreturn]] void fail_safetensors(const InputFile& file, const std::string& what);

// A name from the file as messages quote it: 'name', escaped, at most 200 bytes shown.
std::string quoted_name(const std::string& name);

// Parses the JSON header `text` of `file` into entries and metadata,
// checking its structure (one object; each tensor entry exactly dtype,
// shape, data_offsets of the right kinds; metadata an object of strings; no
// duplicate names or keys), but not offsets or sizes.
SafetensorsHeader parse_safetensors_json(const InputFile& file, const std::string& text);

}  // namespace xtgrad::detail
