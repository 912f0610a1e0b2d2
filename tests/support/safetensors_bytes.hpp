#pragma once
// safetensors files built byte by byte from the format description
// (github.com/huggingface/safetensors, README "Format"), never with the
// writer under test.

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtgrad::testing {

// The 8-byte little-endian length `length`.
inline std::string le64(std::uint64_t length) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

// A file: the header's length, the header `json` as given (no padding), `data`.
inline std::string safetensors_file(const std::string& json, const std::string& data = "") {
  return le64(json.size()) + json + data;
}

// One header entry: "name":{"dtype":..,"shape":[..],"data_offsets":[b,e]}.
inline std::string entry(const std::string& name, const std::string& dtype,
                         const std::string& shape, std::size_t begin, std::size_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + shape +
         "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Little-endian 16-bit words (F16 / BF16 bit patterns).
inline std::string words(std::initializer_list<std::uint16_t> values) {
  std::string out;
  for (std::uint16_t v : values) {
    out += static_cast<char>(v & 0xff);
    out += static_cast<char>(v >> 8);
  }
  return out;
}

}  // namespace xtgrad::testing
