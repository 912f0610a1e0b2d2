// The row passes of the mixture-of-experts kernels (kernels/moe_kernels.hpp):
// token rows to and from the permuted layout, weighted or not.
#include <algorithm>
#include <cstddef>

#include "moe_kernels.hpp"
#include "parallel.hpp"

namespace xtgrad::detail {

namespace {

// Rows per task of a pass over rows of `width` values.
std::size_t grain(std::size_t width) {
  return std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(width, 1));
}

}  // namespace

template <class T>
void moe_gather_rows(const MoeRouting& routing, std::size_t c, const T* from, const T* weights,
                     std::size_t first, std::size_t rows, T* to) {
  const std::size_t k = routing.k;
  // to[i, :] = s_i * from[source[first + i] / k, :]   (the permutation of the tokens)
  parallel_for_rows(rows, grain(c), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t ch = routing.source[first + i];
      const T* row = from + (ch / k) * c;
      T* out = to + i * c;
      if (!weights) {
        std::copy(row, row + c, out);
        continue;
      }
      const T s = weights[ch];
      for (std::size_t j = 0; j < c; ++j) out[j] = s * row[j];
    }
  });
}

template <class T>
void moe_scatter_rows(const MoeRouting& routing, std::size_t c, const T* from, const T* weights,
                      std::size_t first, std::size_t rows, T* into) {
  const std::size_t k = routing.k;
  // in the forward pass: rows[i] = x[t], so now into[t] += s_i * from[i] (an
  // expert's rows are distinct tokens: no two rows of one expert meet)
  parallel_for_rows(rows, grain(c), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t ch = routing.source[first + i];
      T* out = into + (ch / k) * c;
      const T* row = from + i * c;
      if (!weights) {
        for (std::size_t j = 0; j < c; ++j) out[j] += row[j];
        continue;
      }
      const T s = weights[ch];
      for (std::size_t j = 0; j < c; ++j) out[j] += s * row[j];
    }
  });
}

#define XTGRAD_INSTANTIATE_MOE_ROW_KERNELS(T)                                                     \
  template void moe_gather_rows(const MoeRouting&, std::size_t, const T*, const T*, std::size_t,  \
                                std::size_t, T*);                                                 \
  template void moe_scatter_rows(const MoeRouting&, std::size_t, const T*, const T*, std::size_t, \
                                 std::size_t, T*);

XTGRAD_INSTANTIATE_MOE_ROW_KERNELS(float)
XTGRAD_INSTANTIATE_MOE_ROW_KERNELS(double)
#undef XTGRAD_INSTANTIATE_MOE_ROW_KERNELS

}  // namespace xtgrad::detail
