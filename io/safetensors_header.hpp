#pragma once
// Internal: the JSON header of a safetensors file (safetensors_header.cpp),
// parsed into its entries and metadata.

#include <cstddef>
#include <string>
#include <vector>

#include "files.hpp"
#include "safetensors.hpp"

namespace xtgrad::detail {

// More tensors in one file are refused while the header is parsed: each
// costs a few hundred bytes of entries and arrays, so a header of tiny
// entries would otherwise cost many times the file's size.
inline constexpr std::size_t k_safetensors_max_tensors = 100'000;
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

// Parses the JSON header `text` of `file` into entries and metadata,
// checking its structure (one object; each tensor entry exactly dtype,
// shape, data_offsets of the right kinds; metadata an object of strings; no
// duplicate names or keys), but not offsets or sizes.
SafetensorsHeader parse_safetensors_json(const InputFile& file, const std::string& text);

}  // namespace xtgrad::detail
