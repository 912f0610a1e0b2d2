#pragma once
// Per-thread scratch memory of the kernels (internal), in named slots.
//
// Each slot is a buffer of this thread, kept from call to call (grown, never
// shrunk), so that the fused ops and the small-product GEMM path cost no
// allocation per call once warm. Buffers of different slots may be used at
// the same time; one slot is never used by two callers at once, which is why
// every user has a slot of its own below. Contents are garbage until written.
// Each element type has buffers of its own: the attention kernels' bfloat16
// pair words (std::uint32_t) live beside their float tiles in the same slots.

#include <cstddef>

namespace xtgrad::detail {

enum class ScratchSlot : std::size_t {
  fused_activation,   // ops/fused_linear, kernels/moe_kernels: blocks of rows of f(h) or u * f(g)
                      // (and in fused_linear's backward, after them, their gradient)
  fused_gradient,     // kernels/moe_kernels: the same block of its gradient
  fused_weight_bf16,  // ops/fused_linear: the weight in bfloat16, read by every row block's product
  gemm_pack,          // kernels/gemm: an operand of a small product, repacked
  gemm_bf16_a,        // kernels/onednn_gemm: a's stored block in bfloat16 (std::uint16_t)
  gemm_bf16_b,        // kernels/onednn_gemm: b's stored block in bfloat16 (std::uint16_t)
  linear_dy_bf16,     // ops/linear: a linear layer's dy in bfloat16, read by its dx and dW products
  gemm_x_blocks,      // kernels/gemm_streaming: a few rows of x in blocks of k
  gemm_partial_sums,  // kernels/gemm_streaming: partial sums carried between blocks
  attention_packed,   // kernels/attention_*: the key / value tiles of every head or of one task
  attention_rows,     // kernels/attention_kernels: backward's packed rows, row sums and partial dq
  attention_tiles,    // kernels/attention_*: one task's score, probability and accumulator tiles
  moe_rows,           // kernels/moe_kernels: a block of dy's rows (or o's, forward), [rows, C]
  moe_x_rows,         // kernels/moe_kernels: the same block's rows of x, [rows, C]
  moe_row_weights,    // kernels/moe_kernels: the rows' routing weights, their gradient [2 rows]
  moe_row_grad,       // kernels/moe_kernels: the same block's input gradient, [rows, C]
  moe_gate_grad,      // kernels/moe_kernels: the block's gradient of g = x W1^T, [rows, H]
  moe_up_grad,        // kernels/moe_kernels: the block's gradient of u = x W3^T, [rows, H]
  moe_tile,           // kernels/moe_kernels: a last tile's rows padded with zeros (x, g, u, o)
  norm_group_sums,    // ops/norm: the backward's weight and bias sums of each row group, double
  norm_shares,        // ops/norm: the same groups' running shares in T
  norm_sums,          // ops/norm: the groups' sums added up, double
  count
};

// Bytes of a cache line: aligned_thread_scratch starts on one, and data that
// two threads write at once is kept on lines of its own.
inline constexpr std::size_t k_line_bytes = 64;

// n elements of T rounded up to whole cache lines: the stride between the
// pieces of a buffer that different threads write.
template <class T>
constexpr std::size_t whole_lines(std::size_t n) {
  constexpr std::size_t per_line = k_line_bytes / sizeof(T);
  return (n + per_line - 1) / per_line * per_line;
}

// At least `size` elements of `slot`'s buffer for this thread.
template <class T>
T* thread_scratch(ScratchSlot slot, std::size_t size);

// The same, starting on a 64-byte cache line.
template <class T>
T* aligned_thread_scratch(ScratchSlot slot, std::size_t size);

}  // namespace xtgrad::detail
