#pragma once
// The small-batch path of detail::gemm (gemm.hpp), for products that OpenBLAS's
// packed sgemm serves badly: it packs all of op(b) for every call, so that
// one row through a [2048, 512] weight costs about 2.5 reads of the weight.
//
// c[m, n] (+)= a[m, k] . op(w), m <= k_streaming_rows: the weight w is read
// once, straight from memory (one read is the floor); every row of a stays
// in L1. x W^T (forward of a Linear) is a dot per (row, output); x W (its
// dx, and the [in, out] layouts) adds four rows of W at a time into c, or
// from five rows of a on, where multiply-adds and not the read bound it,
// keeps a strip of c's columns in registers while that strip of W streams
// past.
//
// c's columns are split over the threads in use (parallel.hpp). Every
// element is summed in the same order whatever the split and whichever
// kernel, so the result does not depend on the thread count.
// Shapes are those of gemm (checked there); k > 0, m > 0, n > 0.

#include <cstddef>

namespace xtgrad::detail {

inline constexpr std::size_t k_streaming_rows = 8;

template <class T>
void few_rows_gemm(const T* a, bool transpose_a, const T* w, bool transpose_w, T* c, std::size_t m,
                   std::size_t n, std::size_t k, bool accumulate);

}  // namespace xtgrad::detail
