#pragma once
// NumPy .npy files for float32 / float64 arrays (the format of numpy.save,
// specified in numpy/lib/format.py, "NEP 1").
//
// Layout: the magic "\x93NUMPY", a version byte pair, the header length
// (uint16 little-endian for 1.0, uint32 for 2.0 / 3.0), then an ASCII header
// that is a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a final '\n', then the raw elements.
//
// save_npy writes version 1.0, '<f4' / '<f8', fortran_order False, with the
// header padded so that the data starts at a multiple of 64 bytes (as numpy
// does). The write is atomic: a temporary file in the same directory, fsync,
// then rename over the target, so a failure never destroys an existing file.
//
// load_npy reads versions 1.0, 2.0 and 3.0 and is written for hostile input:
// every field is validated, and the declared data size (shape product times
// element size, overflow-checked) must equal the bytes left in the file
// BEFORE anything of that size is allocated. Every dimension, and the
// product of the non-zero dimensions times the element size, must fit in a
// signed 64-bit offset (std::ptrdiff_t), even when the array is empty: that
// bounds every stride and back-stride xtensor computes, in either order (a
// shape such as (0, 2**62, 4) has no elements but would overflow them). It
// accepts the byte orders '<', '>' (converted), '|' and '=' (native), and
// fortran_order True (converted to row-major). It never converts between
// float32 and float64: the file's dtype must be T.
//
// Integer arrays (token ids: NumPy's default integer is int64):
// load_npy<std::int64_t> (an Indices, engine/indices.hpp) and
// load_npy<std::int32_t> read int32 ('<i4') and int64 ('<i8') files in any
// byte order, converting to T exactly; a value outside T's range (an int64
// file read as int32) is refused naming the element. Floating-point files
// are refused, as integer files are by the float readers: no silent
// conversion between integers and floating point.
//
// Errors: std::invalid_argument for bad content (naming the file, what was
// wrong and what was expected); std::runtime_error for I/O failures and for
// a path that is not a regular file (a directory, FIFO, socket or device is
// refused without being opened for reading, so nothing blocks).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

namespace xtgrad {

// NumPy's name of the dtype T: "float32", "float64", "int32" or "int64".
template <class T>
constexpr const char* npy_dtype_name();
template <>
constexpr const char* npy_dtype_name<float>() {
  return "float32";
}
template <>
constexpr const char* npy_dtype_name<double>() {
  return "float64";
}

template <>
constexpr const char* npy_dtype_name<std::int32_t>() {
  return "int32";
}
template <>
constexpr const char* npy_dtype_name<std::int64_t>() {
  return "int64";
}

// The validated header of a .npy file.
struct NpyHeader {
  std::string descr;               // as written in the file: "<f4", ">f8", "|f4", ...
  std::string dtype;               // "float32", "float64", "int32" or "int64"
  std::vector<std::size_t> shape;  // empty for a 0-d (scalar) array
  bool fortran_order = false;
  std::size_t data_offset = 0;  // bytes before the first element
  std::size_t size = 0;         // number of elements (product of shape)
};

// Reads and validates the header of a float32 or float64 file `path`
// (everything load_npy checks except that the dtype is a particular T,
// including that the data size matches the file size). Does not read the data.
NpyHeader read_npy_header(const std::filesystem::path& path);

template <class T>
void save_npy(const std::filesystem::path& path, const xt::xarray<T>& array);

template <class T>
xt::xarray<T> load_npy(const std::filesystem::path& path);

}  // namespace xtgrad
