#include "simd.hpp"  // first: see simd.hpp

#include "gemm_streaming.hpp"

#include <algorithm>
#include <utility>

#include "parallel.hpp"
#include "scratch.hpp"
#include "streaming_axpys.hpp"
#include "streaming_dots.hpp"

namespace xtgrad::detail {

namespace {

using namespace streaming;

// Multiply-adds a thread must have before a second one pays (handing chunks
// to a worker costs about 7 us; the kernels run at 20-40 multiply-adds per ns).
constexpr std::size_t k_min_macs_per_thread = std::size_t(1) << 18;

template <class T, std::size_t M>
void few_rows_fixed(const T* a, const T* w, bool transpose_w, T* c, std::size_t n, std::size_t k,
                    bool accumulate) {
  const std::size_t min_columns = std::max<std::size_t>(k_min_macs_per_thread / (M * k), 1);
  if (transpose_w) {  // x W^T: the columns of c are the rows of w, split anywhere
    constexpr std::size_t block = x_block<T, M>();
    if constexpr (block > 0)
      if (M * k * sizeof(T) > k_x_whole_bytes && k - k % Batch<T>::size > block) {
        const T* packed = pack_x_blocks<T, M>(a, k);  // read by every thread
        parallel_for_rows(n, min_columns, [&](std::size_t j0, std::size_t j1) {
          blocked_dots<T, M>(a, packed, w, c, n, k, j0, j1, accumulate);
        });
        return;
      }
    parallel_for_rows(n, min_columns, [&](std::size_t j0, std::size_t j1) {
      dots<T, M>(a, w, c, n, k, j0, j1, accumulate);
    });
    return;
  }
  // x W: columns of c and w, split at multiples of k_parallel_align elements
  // from column 0, so that every column is in a vector or in the tail
  // whatever the split (the two need not round alike: under
  // -fsanitize=undefined xsimd's AVX-512 fma is not fused). With c on a cache
  // line, as xtensor's buffers are, no two threads then write one line; off a
  // line they do, once per four rows of w in axpys_rows, which ran six times
  // slower on two threads than on one. A strip wants chunks of several strips.
  const std::size_t min_chunk =
      M >= 5 ? std::max(min_columns, 4 * strip_vectors<M>() * Batch<T>::size) : min_columns;
  parallel_for(n, min_chunk, [&](std::size_t j0, std::size_t j1) {
    axpys<T, M>(a, w, c, n, k, j0, j1, accumulate);
  });
}

// M as a template parameter: the accumulators of every row live in registers.
template <class T, std::size_t... M>
void few_rows_dispatch(std::index_sequence<M...>, std::size_t m, const T* a, const T* w,
                       bool transpose_w, T* c, std::size_t n, std::size_t k, bool accumulate) {
  ((m == M + 1 ? few_rows_fixed<T, M + 1>(a, w, transpose_w, c, n, k, accumulate) : void()), ...);
}

}  // namespace

template <class T>
void few_rows_gemm(const T* a, bool transpose_a, const T* w, bool transpose_w, T* c, std::size_t m,
                   std::size_t n, std::size_t k, bool accumulate) {
  if (transpose_a) {  // a is stored [k, m]: pack its m rows (at most 8 k elements)
    T* packed = thread_scratch<T>(ScratchSlot::gemm_pack, m * k);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t p = 0; p < k; ++p) packed[i * k + p] = a[p * m + i];
    a = packed;
  }
  few_rows_dispatch(std::make_index_sequence<k_streaming_rows>(), m, a, w, transpose_w, c, n, k,
                    accumulate);
}

#define XTGRAD_INSTANTIATE_GEMM_STREAMING(T)                                                   \
  template void few_rows_gemm<T>(const T*, bool, const T*, bool, T*, std::size_t, std::size_t, \
                                 std::size_t, bool);
XTGRAD_INSTANTIATE_GEMM_STREAMING(float)
XTGRAD_INSTANTIATE_GEMM_STREAMING(double)
#undef XTGRAD_INSTANTIATE_GEMM_STREAMING

}  // namespace xtgrad::detail
