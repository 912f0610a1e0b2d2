#pragma once
// Internal: the constants of the .npy format that the reader and the writer
// share.

#include <cstddef>

namespace xtgrad::detail {

// The magic, and numpy's ARRAY_ALIGN: the data of a file numpy writes starts
// at a multiple of 64 bytes.
inline constexpr char k_npy_magic[] = "\x93NUMPY";
inline constexpr std::size_t k_npy_magic_size = 6;
inline constexpr std::size_t k_npy_preamble_size = k_npy_magic_size + 2;  // + major, minor
inline constexpr std::size_t k_npy_alignment = 64;
// NumPy 2's NPY_MAXDIMS.
inline constexpr std::size_t k_npy_max_dims = 64;

}  // namespace xtgrad::detail
