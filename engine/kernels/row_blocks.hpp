#pragma once
// The row blocks of the fused ops (ops/fused_linear, kernels/moe_kernels):
// a hidden-wide buffer ([rows, width]: an activation, its gradient) is
// computed a block of rows at a time, between the GEMM that reads the block
// and the one that writes it. A block is about k_block_bytes, so that it is
// still in cache when the GEMM after it reads it, and at least
// k_min_block_rows rows, so that the GEMMs stay as fast as one big call
// (OpenBLAS, [4096, 2048] . [2048, 512] on a 2-core AVX2 machine: blocks of
// 128 to 4096 rows within noise). The blocks depend on the shape only, never
// on the thread count: the fused ops share them out whole, a block a thread,
// and each thread holds a block of its own.

#include <algorithm>
#include <cstddef>

namespace xtgrad::detail {

inline constexpr std::size_t k_block_bytes = std::size_t(2) << 20;
inline constexpr std::size_t k_min_block_rows = 64;

// Rows per block of n rows of `width` values of T: at least 1, at most n.
template <class T>
std::size_t block_rows(std::size_t n, std::size_t width) {
  const std::size_t fit = k_block_bytes / (sizeof(T) * std::max<std::size_t>(width, 1));
  return std::max<std::size_t>(std::min(std::max(fit, k_min_block_rows), n), 1);
}

}  // namespace xtgrad::detail
