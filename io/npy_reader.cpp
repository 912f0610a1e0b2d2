// Reading .npy files: the preamble, the header checks (dtype, sizes against
// the file, the limits stated in npy.hpp) and the data. The header dict
// itself is parsed in npy_dict.cpp.
#include "npy_reader.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "../engine/errors.hpp"
#include "npy_dict.hpp"
#include "npy_writer.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::fail_npy_content;
using detail::InputFile;

// '<' is the byte order save_npy writes and the native order load_npy
// assumes for '|' and '='; a big-endian port would swap on write.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "xtgrad's .npy I/O assumes a little-endian host");

// Far above any real header (numpy itself refuses more than 10000 bytes by
// default); bounds the one allocation made before the header is validated.
constexpr std::size_t k_max_header_bytes = std::size_t(1) << 20;

// The element count of a header of `item_size`-byte elements, refusing the
// shapes npy.hpp describes: more elements or bytes than a size_t counts, and
// any shape whose non-zero dimensions times the item size exceed ptrdiff_t
// (xtensor's strides and back-strides are products of dimensions, as
// ptrdiff_t, computed even when a zero dimension leaves no element).
std::size_t checked_size(const InputFile& file, const NpyHeader& header, std::size_t item_size) {
  bool empty = false;
  for (std::size_t d : header.shape) empty = empty || d == 0;
  const std::string shape = "shape " + detail::npy_shape_tuple(header.shape);
  const std::string offset_limit = shape + " of " + header.dtype +
                                   " does not fit array strides: its non-zero dimensions times " +
                                   std::to_string(item_size) +
                                   " bytes exceed the largest signed 64-bit offset, " +
                                   std::to_string(std::numeric_limits<std::ptrdiff_t>::max()) +
                                   (empty ? " (even though it has no elements)" : "");
  std::size_t nonzero = 1;  // the product of the non-zero dimensions
  for (std::size_t d : header.shape) {
    if (d == 0) continue;
    if (nonzero > std::numeric_limits<std::size_t>::max() / d)
      fail_npy_content(
          file, empty ? offset_limit : shape + " has more elements than a 64-bit size can count");
    nonzero *= d;
  }
  if (nonzero > std::numeric_limits<std::size_t>::max() / item_size)
    fail_npy_content(file, empty ? offset_limit
                                 : shape + " of " + header.dtype +
                                       " has more bytes than a 64-bit size can count");
  if (nonzero * item_size > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()))
    fail_npy_content(file, offset_limit);
  return empty ? 0 : nonzero;
}

template <class T>
void swap_bytes(T* data, std::size_t n) {
  using Word = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  for (std::size_t i = 0; i < n; ++i) {
    Word word;
    std::memcpy(&word, data + i, sizeof word);
    if constexpr (sizeof(T) == 4)
      word = __builtin_bswap32(word);
    else
      word = __builtin_bswap64(word);
    std::memcpy(data + i, &word, sizeof word);
  }
}

template <class T, class Array>
void read_elements(InputFile& file, Array& array, bool big_endian) {
  detail::read_exact(file, array.data(), array.size() * sizeof(T));
  if (big_endian) swap_bytes(array.data(), array.size());
}

}  // namespace

namespace detail {

void fail_npy_content(const InputFile& file, const std::string& what) {
  fail_value(file.function, file.context + "file " + path_str(file.path) + ": " + what);
}

namespace {

// The magic and the version; returns the major version (1, 2 or 3).
unsigned read_preamble(InputFile& file) {
  check_npy_content(file.size >= k_npy_preamble_size, file, "has ", file.size,
                    " bytes, too short for a .npy file (at least ", k_npy_preamble_size + 2,
                    " expected)");
  unsigned char preamble[k_npy_preamble_size];
  read_exact(file, preamble, k_npy_preamble_size);
  check_npy_content(std::memcmp(preamble, k_npy_magic, k_npy_magic_size) == 0, file,
                    "is not a .npy file: it starts with \"",
                    escaped(std::string(reinterpret_cast<char*>(preamble), k_npy_magic_size)),
                    "\", expected the magic \"\\x93NUMPY\"");
  const unsigned major = preamble[6], minor = preamble[7];
  check_npy_content(major >= 1 && major <= 3 && minor == 0, file,
                    "unsupported .npy format version ", major, ".", minor,
                    ", expected 1.0, 2.0 or 3.0");
  return major;
}

// The header length is a uint16 in version 1.0, a uint32 in 2.0 and 3.0 (little-endian).
std::size_t length_field_bytes(unsigned major) {
  return major == 1 ? 2 : 4;
}

std::size_t read_header_length(InputFile& file, unsigned major) {
  const std::size_t length_bytes = length_field_bytes(major);
  check_npy_content(file.size >= k_npy_preamble_size + length_bytes, file, "has ", file.size,
                    " bytes, too short for the header length of a version ", major, ".0 file");
  unsigned char length_field[4] = {0, 0, 0, 0};
  read_exact(file, length_field, length_bytes);
  std::size_t header_length = 0;
  for (std::size_t i = length_bytes; i-- > 0;) header_length = header_length << 8 | length_field[i];
  const std::size_t data_offset = k_npy_preamble_size + length_bytes + header_length;
  check_npy_content(header_length <= k_max_header_bytes, file, "header length ", header_length,
                    " exceeds the limit of ", k_max_header_bytes, " bytes");
  check_npy_content(data_offset <= file.size, file, "header length ", header_length,
                    " runs past the end of the file (the header would end at byte ", data_offset,
                    ", the file has ", file.size, " bytes)");
  return header_length;
}

// descr: an optional byte order ('<' little, '>' big, '|' not applicable,
// '=' native) and the type code f4 or f8 (NpyKind::floating) or i4 or i8
// (NpyKind::integer). Sets header.dtype; returns the element size.
std::size_t parse_descr(const InputFile& file, NpyHeader& header, NpyKind kind) {
  const std::string& descr = header.descr;
  const std::size_t code = descr.size() == 3 ? 1 : 0;
  const bool order_ok = code == 0 || std::string("<>|=").find(descr[0]) != std::string::npos;
  const std::string type_code = descr.substr(code);
  const bool integer = kind == NpyKind::integer;
  const char* four = integer ? "i4" : "f4";
  const char* eight = integer ? "i8" : "f8";
  check_npy_content((descr.size() == 2 || descr.size() == 3) && order_ok &&
                        (type_code == four || type_code == eight),
                    file, "unsupported dtype descr ", quoted(escaped(descr)),
                    integer ? ", expected int32 ('<i4') or int64 ('<i8') in any byte order"
                            : ", expected float32 ('<f4') or float64 ('<f8') in any byte order");
  const bool is_four = type_code == four;
  header.dtype = integer ? (is_four ? "int32" : "int64") : (is_four ? "float32" : "float64");
  return is_four ? 4 : 8;
}

// The data after the header must be exactly the declared elements.
void check_data_size(const InputFile& file, const NpyHeader& header, std::size_t item_size) {
  const std::size_t expected_bytes = header.size * item_size;
  const std::size_t actual_bytes = file.size - header.data_offset;
  if (actual_bytes == expected_bytes) return;
  const std::string declared = "the header declares shape " + npy_shape_tuple(header.shape) +
                               " of " + header.dtype + " (" + std::to_string(header.size) +
                               " elements, " + std::to_string(expected_bytes) + " bytes)";
  check_npy_content(actual_bytes > expected_bytes, file, "is truncated: ", declared, " but only ",
                    actual_bytes, " data bytes follow the header");
  fail_npy_content(file, "has trailing data: " + declared + " but " + std::to_string(actual_bytes) +
                             " data bytes follow the header");
}

}  // namespace

NpyHeader parse_npy_header(InputFile& file, NpyKind kind) {
  const unsigned major = read_preamble(file);
  const std::size_t header_length = read_header_length(file, major);
  std::string text(header_length, '\0');
  read_exact(file, text.data(), header_length);
  NpyHeader header;
  parse_npy_dict(file, text, header);
  header.data_offset = k_npy_preamble_size + length_field_bytes(major) + header_length;
  const std::size_t item_size = parse_descr(file, header, kind);
  // Size checks before anything of that size is allocated.
  header.size = checked_size(file, header, item_size);
  check_data_size(file, header, item_size);
  return header;
}

template <class T>
void check_npy_dtype(const InputFile& file, const NpyHeader& header) {
  if (header.dtype != npy_dtype_name<T>())
    fail_npy_content(file, "has dtype " + header.dtype + " (" + quoted(header.descr) +
                               "), expected " + npy_dtype_name<T>() + " (" +
                               quoted(npy_descr<T>()) +
                               "); xtgrad does not convert between float32 and float64 silently");
}

namespace {

// The elements of a file whose dtype is U, row-major, native byte order.
template <class U>
xt::xarray<U> read_as_stored(InputFile& file, const NpyHeader& header) {
  const bool big_endian = header.descr.size() == 3 && header.descr[0] == '>';
  // The allocation is bounded by the file's size (checked by parse_npy_header).
  if (header.fortran_order) {
    auto column_major = xt::xarray<U, xt::layout_type::column_major>::from_shape(header.shape);
    read_elements<U>(file, column_major, big_endian);
    return xt::xarray<U>(column_major);  // a strided copy into row-major order
  }
  auto array = xt::xarray<U>::from_shape(header.shape);
  read_elements<U>(file, array, big_endian);
  return array;
}

// An int32 or int64 file as the integer type T, every value within T's range.
template <class T>
xt::xarray<T> read_integers(InputFile& file, const NpyHeader& header) {
  if (header.dtype == npy_dtype_name<T>()) return read_as_stored<T>(file, header);
  if (header.dtype == "int32") return xt::xarray<T>(read_as_stored<std::int32_t>(file, header));
  const xt::xarray<std::int64_t> wide = read_as_stored<std::int64_t>(file, header);  // into int32
  constexpr auto lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const std::int64_t* w = wide.data();
  for (std::size_t i = 0; i < wide.size(); ++i)
    check_npy_content(w[i] >= lo && w[i] <= hi, file, "holds ", w[i], " at element ", i,
                      " (row-major), outside the range of ", npy_dtype_name<T>(), " [", lo, ", ",
                      hi, "]; load it as int64");
  xt::xarray<T> out = xt::xarray<T>::from_shape(wide.shape());
  std::transform(w, w + wide.size(), out.data(), [](std::int64_t v) { return static_cast<T>(v); });
  return out;
}

}  // namespace

template <class T>
xt::xarray<T> read_npy_data(InputFile& file, const NpyHeader& header) {
  if constexpr (std::is_integral_v<T>) {
    return read_integers<T>(file, header);
  } else {
    check_npy_dtype<T>(file, header);
    return read_as_stored<T>(file, header);
  }
}

template void check_npy_dtype<float>(const InputFile&, const NpyHeader&);
template void check_npy_dtype<double>(const InputFile&, const NpyHeader&);
template xt::xarray<float> read_npy_data(InputFile&, const NpyHeader&);
template xt::xarray<double> read_npy_data(InputFile&, const NpyHeader&);
template xt::xarray<std::int32_t> read_npy_data(InputFile&, const NpyHeader&);
template xt::xarray<std::int64_t> read_npy_data(InputFile&, const NpyHeader&);

}  // namespace detail

NpyHeader read_npy_header(const fs::path& path) {
  InputFile file = detail::open_regular_file("read_npy_header", "", path);
  return detail::parse_npy_header(file);
}

template <class T>
xt::xarray<T> load_npy(const fs::path& path) {
  InputFile file = detail::open_regular_file("load_npy", "", path);
  const NpyHeader header = detail::parse_npy_header(
      file, std::is_integral_v<T> ? detail::NpyKind::integer : detail::NpyKind::floating);
  return detail::read_npy_data<T>(file, header);
}

template xt::xarray<float> load_npy(const fs::path&);
template xt::xarray<double> load_npy(const fs::path&);
template xt::xarray<std::int32_t> load_npy(const fs::path&);
template xt::xarray<std::int64_t> load_npy(const fs::path&);

}  // namespace xtgrad
