#pragma once
// IDX files built byte by byte from the format description (LeCun's MNIST
// page, "FILE FORMATS"), never with the reader under test, and gzip
// compression through zlib's deflate with a gzip wrapper.

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace xtgrad::testing {

// The magic (0, 0, type, ndim) and the dimensions as big-endian uint32.
inline std::string idx_header(std::uint8_t type, const std::vector<std::uint32_t>& dims) {
  std::string out;
  out += '\0';
  out += '\0';
  out += static_cast<char>(type);
  out += static_cast<char>(dims.size());
  for (const std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((d >> shift) & 0xff);
  return out;
}

// An unsigned-byte IDX file of `dims` holding `data`.
inline std::string idx_u8(const std::vector<std::uint32_t>& dims, const std::string& data) {
  return idx_header(0x08, dims) + data;
}

// `bytes` as one gzip member (RFC 1952), compressed by zlib.
inline std::string gzip(const std::string& bytes) {
  z_stream s{};
  // 15 + 16: a gzip wrapper; 8: zlib's default memory level.
  if (deflateInit2(&s, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out(deflateBound(&s, bytes.size()) + 32, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  s.avail_in = static_cast<uInt>(bytes.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  if (status != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

}  // namespace xtgrad::testing
