#include "bf16.hpp"

#include "parallel.hpp"

#include <algorithm>

namespace xtgrad::detail {

namespace {

// to_bf16 over n contiguous floats: its select and integer arithmetic
// vectorize (GCC 12 at -O3: 64-byte vectors with AVX-512, 16-byte with SSE2).
void to_bf16_row(const float* __restrict src, std::size_t n, std::uint16_t* __restrict dst) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
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
