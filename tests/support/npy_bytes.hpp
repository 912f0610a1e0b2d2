#pragma once
// .npy files built byte by byte from the format description
// (numpy/lib/format.py), never with the writer under test.

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace xtgrad::testing {

// A .npy file: magic, version, header length (uint16 LE for 1.0, uint32 LE
// otherwise), the dict padded with spaces to a 64-byte boundary plus '\n',
// then `data`.
inline std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const std::size_t used = 8 + length_bytes + header.size() + 1;
  header.append((64 - used % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < length_bytes; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// The header dict as numpy writes it.
inline std::string npy_dict(const std::string& descr, const std::string& shape,
                            bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

// The raw bytes of values as T, little- or big-endian.
template <class T>
std::string element_bytes(const std::vector<double>& values, bool big_endian = false) {
  std::string out;
  for (double v : values) {
    const T x = static_cast<T>(v);
    char bytes[sizeof(T)];
    std::memcpy(bytes, &x, sizeof(T));
    for (std::size_t i = 0; i < sizeof(T); ++i)
      out += bytes[big_endian ? sizeof(T) - 1 - i : i];  // the host is little-endian
  }
  return out;
}

}  // namespace xtgrad::testing
