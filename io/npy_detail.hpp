#pragma once
// Internal (not included by any public header): the .npy reader and writer
// in the pieces the checkpoint code needs. It opens each file itself (inside
// the checkpoint directory) and compares the header with its parameter
// before any data is read or allocated.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "files.hpp"
#include "npy.hpp"

namespace xtgrad::detail {

// The magic, and numpy's ARRAY_ALIGN: the data of a file numpy writes starts
// at a multiple of 64 bytes.
inline constexpr char k_npy_magic[] = "\x93NUMPY";
inline constexpr std::size_t k_npy_magic_size = 6;
inline constexpr std::size_t k_npy_preamble_size = k_npy_magic_size + 2;  // + major, minor
inline constexpr std::size_t k_npy_alignment = 64;
// NumPy 2's NPY_MAXDIMS.
inline constexpr std::size_t k_npy_max_dims = 64;

// The shape as Python writes a tuple: "()", "(3,)", "(2, 3)".
std::string npy_shape_tuple(const std::vector<std::size_t>& shape);

// "<f4" or "<f8": the descr save_npy writes for T.
template <class T>
constexpr const char* npy_descr() {
  return sizeof(T) == 4 ? "<f4" : "<f8";
}

// std::invalid_argument "xtgrad::<function>: <context>file '<path>': <what>",
// for bad content of an open .npy file.
[[noreturn]] void fail_npy_content(const InputFile& file, const std::string& what);

// Parses the header dict `text` of `file` (descr, fortran_order and shape;
// nothing else is checked here) into `header`.
void parse_npy_dict(const InputFile& file, const std::string& text, NpyHeader& header);

// Reads and validates the preamble and header of `file` (positioned at its
// start), leaving it at the first element: everything read_npy_header checks.
NpyHeader parse_npy_header(InputFile& file);

// std::invalid_argument unless the header's dtype is T (no silent conversion).
template <class T>
void check_npy_dtype(const InputFile& file, const NpyHeader& header);

// Reads the elements after a validated header whose dtype is T, converted to
// row-major native order. Allocates header.size elements, which the header
// check bounded by the file's size.
template <class T>
xt::xarray<T> read_npy_data(InputFile& file, const NpyHeader& header);

// Writes `array` as .npy to the new file `path` (O_EXCL) and fsyncs it; on
// failure the partial file is removed. Messages start "xtgrad::<function>".
template <class T>
void write_npy_file(const std::filesystem::path& path, const xt::xarray<T>& array,
                    const std::string& function);

}  // namespace xtgrad::detail
