#pragma once
// Internal: the pieces of the .npy reader (npy_reader.cpp) that the
// checkpoint code calls on files it opens itself. load_npy and
// read_npy_header, which it also defines, are declared in npy.hpp.

#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/errors.hpp"
#include "files.hpp"
#include "npy.hpp"
#include "npy_format.hpp"

namespace xtgrad::detail {

// std::invalid_argument "xtgrad::<function>: <context>file '<path>': <what>",
// for bad content of an open .npy file.
[[noreturn]] void fail_npy_content(const InputFile& file, const std::string& what);
// fail_npy_content unless `ok`, the message parts joined (detail::message) only then.
template <class... Parts>
void check_npy_content(bool ok, const InputFile& file, const Parts&... parts) {
  if (!ok) fail_npy_content(file, message(parts...));
}

// The element kinds a reader accepts: float32 / float64 (load_npy<float>,
// <double>, checkpoints, read_npy_header) or int32 / int64 (load_npy<int32_t>,
// <int64_t>). Any other descr is refused naming what the reader accepts.
enum class NpyKind { floating, integer };

// Reads and validates the preamble and header of `file` (positioned at its
// start), leaving it at the first element: everything read_npy_header checks.
NpyHeader parse_npy_header(InputFile& file, NpyKind kind = NpyKind::floating);

// std::invalid_argument unless the header's dtype is T (no silent conversion).
template <class T>
void check_npy_dtype(const InputFile& file, const NpyHeader& header);

// Reads the elements after a validated header whose dtype is T (for an
// integer T: int32 or int64, each value checked against T's range), converted
// to row-major native order. Allocates header.size elements, which the header
// check bounded by the file's size.
template <class T>
xt::xarray<T> read_npy_data(InputFile& file, const NpyHeader& header);

}  // namespace xtgrad::detail
