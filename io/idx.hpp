#pragma once
// IDX files, the format of the MNIST and Fashion-MNIST data sets (Y. LeCun,
// "THE MNIST DATABASE of handwritten digits", section "FILE FORMATS"), read
// either as they are or gzip-compressed (detected by the gzip magic 1f 8b,
// decompressed through zlib).
//
// Layout: two zero bytes, a type byte, the number of dimensions (a byte),
// then one big-endian uint32 per dimension, then the elements, row-major and
// big-endian:
//   0x08 unsigned byte   0x09 signed byte   0x0B int16   0x0C int32
//   0x0D float32         0x0E float64
//
// load_idx<V> is written for hostile input, and bounds its memory by what the
// file really holds: the magic, the type (it must be V's: no conversion) and
// the number of dimensions (1 to k_idx_max_dims) are checked; the product of
// the dimensions, overflow-checked, must not exceed `max_elements`; the data
// must then be exactly as long as the header says. A raw file's size is
// compared with the header before anything is allocated. A gzip file is
// decompressed in chunks into a buffer that grows with what was really
// decompressed (never past the header's size), inflating at most one byte
// more than the header promises: a truncated stream, a corrupt one (the CRC
// of the gzip trailer is checked), a stream longer than the header says, and
// anything after the end of the gzip stream are all refused.
//
// Errors: std::invalid_argument "xtgrad::load_idx: '<path>': <what is wrong>"
// for bad content, naming what was expected; std::runtime_error for I/O
// failures (a missing file: "cannot open '<path>': No such file or
// directory") and for a path that is not a regular file (nothing blocks on a
// FIFO or a device).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

namespace xtgrad {

// The element types of the IDX format (the values of its type byte).
enum class IdxType : std::uint8_t {
  u8 = 0x08,
  i8 = 0x09,
  i16 = 0x0B,
  i32 = 0x0C,
  f32 = 0x0D,
  f64 = 0x0E,
};

// The most dimensions load_idx accepts (the format allows 255).
inline constexpr std::size_t k_idx_max_dims = 8;
// The default bound on the number of elements: 2^30 (1 GiB of bytes).
inline constexpr std::size_t k_idx_default_max_elements = std::size_t{1} << 30;

// "unsigned byte", "int32", ...; "0x<nn>" for a byte that is no IDX type.
std::string idx_type_name(std::uint8_t type);

// The validated header of an IDX file.
struct IdxHeader {
  IdxType type = IdxType::u8;
  std::vector<std::size_t> shape;
  std::size_t size = 0;  // number of elements (product of shape)
  bool gzip = false;     // the file is gzip-compressed
};

// Reads and validates the header of `path` (magic, type, dimensions, the
// bound), without reading the data.
IdxHeader read_idx_header(const std::filesystem::path& path,
                          std::size_t max_elements = k_idx_default_max_elements);

// The whole array; V is one of std::uint8_t, std::int8_t, std::int16_t,
// std::int32_t, float, double and must be the file's type.
template <class V>
xt::xarray<V> load_idx(const std::filesystem::path& path,
                       std::size_t max_elements = k_idx_default_max_elements);

extern template xt::xarray<std::uint8_t> load_idx(const std::filesystem::path&, std::size_t);
extern template xt::xarray<std::int8_t> load_idx(const std::filesystem::path&, std::size_t);
extern template xt::xarray<std::int16_t> load_idx(const std::filesystem::path&, std::size_t);
extern template xt::xarray<std::int32_t> load_idx(const std::filesystem::path&, std::size_t);
extern template xt::xarray<float> load_idx(const std::filesystem::path&, std::size_t);
extern template xt::xarray<double> load_idx(const std::filesystem::path&, std::size_t);

}  // namespace xtgrad
