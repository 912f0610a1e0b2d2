#pragma once
// The row blocks of the fused ops (ops/fused_linear, kernels/moe_kernels):
// a hidden-wide buffer ([rows, width]: an activation, its gradient) is
// computed a block of rows at a time, between the GEMM that reads the block
// and the one that writes it. An op's buffers for a block take about
// k_block_bytes together, so that a block is still in cache when the GEMM
// after it reads it, and a block is at least k_min_block_rows rows, so that
// the GEMMs stay near the speed of one big call. A backward holds two
// buffers per block (a and its gradient), a forward one (a): in the same
// scratch a forward's blocks can be up to twice as long, which its GEMM
// wants while they are short (oneDNN, [rows, 2048] . [2048, 512] on a 2-core
// Zen 5, one thread, against one [4096, 2048] product: 256-row blocks 1.13x
// its time, 512-row 1.03x, 1024-row 1.02x; dy . W in 256-row blocks 1.06x,
// the sum dW over 256-row blocks 1.00x). The blocks depend on the shape
// only, never on the thread count: the fused ops share them out whole, a
// block a thread, and each thread holds a block of its own.

#include <algorithm>
#include <cstddef>

namespace xtgrad::detail {

inline constexpr std::size_t k_block_bytes = std::size_t(4) << 20;
inline constexpr std::size_t k_min_block_rows = 64;
inline constexpr std::size_t k_forward_buffers = 1;   // a
inline constexpr std::size_t k_backward_buffers = 2;  // a and da

// Rows per block of n rows of `width` values of T, `buffers` such rows held
// per row of the block: at least 1, at most n.
template <class T>
std::size_t block_rows(std::size_t n, std::size_t width, std::size_t buffers) {
  const std::size_t row_bytes = buffers * sizeof(T) * std::max<std::size_t>(width, 1);
  const std::size_t fit = k_block_bytes / std::max<std::size_t>(row_bytes, 1);
  return std::max<std::size_t>(std::min(std::max(fit, k_min_block_rows), n), 1);
}

// Rows per block of a fused forward: the backward's blocks, lengthened (up
// to what its scratch holds) while they are shorter than
// k_forward_gemm_rows. Longer blocks gain the GEMM nothing more and leave
// fewer blocks to share out a block a thread (ops/fused_linear): the char
// GPT's [4096, 512] hidden would be 2 blocks of 2048 rows, not 4 of 1024.
inline constexpr std::size_t k_forward_gemm_rows = 512;

template <class T>
std::size_t forward_block_rows(std::size_t n, std::size_t width) {
  const std::size_t backward = block_rows<T>(n, width, k_backward_buffers);
  return std::min(block_rows<T>(n, width, k_forward_buffers),
                  std::max(backward, k_forward_gemm_rows));
}

}  // namespace xtgrad::detail
