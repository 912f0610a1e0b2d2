#include "bf16.hpp"

#include "parallel.hpp"

#include <algorithm>

namespace xtgrad::detail {

namespace {

// to_bf16 over n contiguous floats, written so that the compiler vectorizes
// it: a select instead of a branch, integer arithmetic only.
void to_bf16_row(const float* __restrict src, std::size_t n, std::uint16_t* __restrict dst) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, src + i, sizeof bits);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    dst[i] = static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

}  // namespace

void to_bf16_matrix(const float* src, std::size_t ld, std::size_t rows, std::size_t cols,
                    std::uint16_t* dst) {
  if (rows == 0 || cols == 0) return;
  if (ld == cols) {  // one contiguous run: split it at aligned elements
    parallel_for(rows * cols, k_parallel_light, [&](std::size_t begin, std::size_t end) {
      to_bf16_row(src + begin, end - begin, dst + begin);
    });
    return;
  }
  parallel_for_rows(rows, std::max<std::size_t>(k_parallel_light / cols, 1),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t r = begin; r < end; ++r)
                        to_bf16_row(src + r * ld, cols, dst + r * cols);
                    });
}

}  // namespace xtgrad::detail
