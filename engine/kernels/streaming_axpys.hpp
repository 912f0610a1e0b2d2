#pragma once
// x W for a few rows (internal, for gemm_streaming.cpp): c[i, :] (+)=
// sum_p a[i, p] w[p, :], a [M, k], w [k, n], by rows of w into a block of c
// (up to four rows of a) or by strips of c's columns in registers.

#include <algorithm>
#include <cmath>

#include "streaming_support.hpp"

namespace xtgrad::detail::streaming {

// Columns of c per block of the x W path: M rows of them stay in L1
// (8 x 512 floats = 16 KiB) while four rows of W stream past.
constexpr std::size_t k_column_block = 512;
// One row takes columns by 16 KiB: w's rows then stream by longer pieces
// (whole rows up to 4096 floats). Measured on a 2-core AMD EPYC (Zen 5),
// [1, 512] . [512, 2048] and [1, 1024] . [1024, 4096]: 0.86-1.0 of the time
// with w evicted, 0.90-0.98 in L3 (0.98-1.08 on two threads); two rows lost
// with it (1.03-1.22).
constexpr std::size_t k_one_row_column_bytes = 16 * 1024;
// Rows ahead that a strip of the x W path prefetches, and the size of w from
// which the x W path prefetches at all (past twice a 1 MiB L2: see axpys).
constexpr std::size_t k_strip_prefetch_rows = 32;
constexpr std::size_t k_prefetch_w_bytes = std::size_t(2) << 20;

// c[i, j] (+)= sum_p a[i, p] w[p, j] for i < M, j in [j0, j1): a [M, k], w [k, n].
// Four rows of w at a time are added into a block of c (in L1); each element
// is c + a0 w0 + a1 w1 + ... as a chain of fused multiply-adds in p order.
// w streams by whole rows, the fastest way for M <= 4 (measured, 2-core AMD
// EPYC: one row through [2048, 512] in 41 us, 101 us by strips). With
// `prefetch`, the loads of each four rows of w ask for the next four's lines.
template <class T, std::size_t M, bool prefetch>
void axpys_rows(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
                std::size_t j1, bool accumulate) {
  constexpr std::size_t lanes = Batch<T>::size;
  constexpr std::size_t column_block = M == 1 ? k_one_row_column_bytes / sizeof(T) : k_column_block;
  for (std::size_t jb = j0; jb < j1; jb += column_block) {
    const std::size_t je = std::min(jb + column_block, j1);
    const std::size_t je_vector = jb + (je - jb) / lanes * lanes;
    if (!accumulate)
      for (std::size_t i = 0; i < M; ++i) std::fill(c + i * n + jb, c + i * n + je, T(0));
    std::size_t p = 0;
    for (; p + 4 <= k; p += 4) {
      const T* w0 = w + p * n;
      const T* w1 = w0 + n;
      const T* w2 = w1 + n;
      const T* w3 = w2 + n;
      Batch<T> coefficient[M][4];
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t q = 0; q < 4; ++q) coefficient[i][q] = Batch<T>(a[i * k + p + q]);
      const T* next = w + std::min(p + 4, k - 4) * n;  // the last four fetch themselves
      for (std::size_t j = jb; j < je_vector; j += lanes) {
        if constexpr (prefetch)
          for (std::size_t q = 0; q < 4; ++q) prefetch_line(next + q * n + j);
        const Batch<T> v0 = Batch<T>::load_unaligned(w0 + j), v1 = Batch<T>::load_unaligned(w1 + j),
                       v2 = Batch<T>::load_unaligned(w2 + j), v3 = Batch<T>::load_unaligned(w3 + j);
        for (std::size_t i = 0; i < M; ++i) {
          T* line = c + i * n + j;
          Batch<T> sum = Batch<T>::load_unaligned(line);
          sum = xsimd::fma(coefficient[i][0], v0, sum);
          sum = xsimd::fma(coefficient[i][1], v1, sum);
          sum = xsimd::fma(coefficient[i][2], v2, sum);
          sum = xsimd::fma(coefficient[i][3], v3, sum);
          sum.store_unaligned(line);
        }
      }
      for (std::size_t j = je_vector; j < je; ++j)
        for (std::size_t i = 0; i < M; ++i) {
          const T* ai = a + i * k + p;
          T& out = c[i * n + j];
          out =
              std::fma(ai[3], w3[j],
                       std::fma(ai[2], w2[j], std::fma(ai[1], w1[j], std::fma(ai[0], w0[j], out))));
        }
    }
    for (; p < k; ++p) {
      const T* wp = w + p * n;
      for (std::size_t i = 0; i < M; ++i) {
        const Batch<T> coefficient(a[i * k + p]);
        T* line = c + i * n;
        std::size_t j = jb;
        for (; j < je_vector; j += lanes)
          xsimd::fma(coefficient, Batch<T>::load_unaligned(wp + j),
                     Batch<T>::load_unaligned(line + j))
              .store_unaligned(line + j);
        for (; j < je; ++j) line[j] = std::fma(a[i * k + p], wp[j], line[j]);
      }
    }
  }
}

// Vectors of c's columns per strip of the x W path: the M x V accumulators
// of a strip stay in registers while the strip of w streams past, one row of
// w at a time (V loads of w and M of a for M x V multiply-adds).
template <std::size_t M>
constexpr std::size_t strip_vectors() {
#if XSIMD_WITH_AVX512F
  constexpr std::size_t accumulators = 24;
#else
  constexpr std::size_t accumulators = 12;
#endif
  return M >= accumulators ? 1 : accumulators / M;
}

// c[i, j + q] (+)= sum_p a[i, p] w[p, j + q] for i < M, q < V lanes: a [M, k],
// w [k, n]. Each element is c + a0 w0 + a1 w1 + ... as a chain of fused
// multiply-adds in p order (0 + a0 w0 + ... without accumulate). With
// `prefetch`, each row of the strip also asks for the strip's lines
// k_strip_prefetch_rows rows further down (into L2): the hardware
// prefetchers follow V lines a row n elements apart too late.
template <class T, std::size_t M, std::size_t V, bool prefetch>
void axpys_strip(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j,
                 bool accumulate) {
  constexpr std::size_t lanes = Batch<T>::size;
  Batch<T> acc[M][V];
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t v = 0; v < V; ++v)
      acc[i][v] = accumulate ? Batch<T>::load_unaligned(c + i * n + j + v * lanes) : Batch<T>(T(0));
  const auto add_row = [&](std::size_t p) {
    const T* row = w + p * n + j;
    Batch<T> wv[V];
    for (std::size_t v = 0; v < V; ++v) wv[v] = Batch<T>::load_unaligned(row + v * lanes);
    for (std::size_t i = 0; i < M; ++i) {
      const Batch<T> coefficient(a[i * k + p]);
      for (std::size_t v = 0; v < V; ++v) acc[i][v] = xsimd::fma(coefficient, wv[v], acc[i][v]);
    }
  };
  std::size_t p = 0;
  if constexpr (prefetch) {
    const T* ahead = w + k_strip_prefetch_rows * n + j;
    for (; p + k_strip_prefetch_rows < k; ++p, ahead += n) {
      for (std::size_t v = 0; v < V; ++v) prefetch_line_to_l2(ahead + v * lanes);
      add_row(p);
    }
  }
  for (; p < k; ++p) add_row(p);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t v = 0; v < V; ++v) acc[i][v].store_unaligned(c + i * n + j + v * lanes);
}

// c[i, j] (+)= sum_p a[i, p] w[p, j] for i < M, j in [j0, j1): strips of V
// vectors, then of one, then single columns, all summed as axpys_strip does.
template <class T, std::size_t M, bool prefetch>
void axpys_strips(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
                  std::size_t j1, bool accumulate) {
  constexpr std::size_t lanes = Batch<T>::size;
  constexpr std::size_t wide = strip_vectors<M>() * lanes;
  std::size_t j = j0;
  for (; j + wide <= j1; j += wide)
    axpys_strip<T, M, strip_vectors<M>(), prefetch>(a, w, c, n, k, j, accumulate);
  for (; j + lanes <= j1; j += lanes) axpys_strip<T, M, 1, prefetch>(a, w, c, n, k, j, accumulate);
  for (; j < j1; ++j)
    for (std::size_t i = 0; i < M; ++i) {
      T sum = accumulate ? c[i * n + j] : T(0);
      for (std::size_t p = 0; p < k; ++p) sum = std::fma(a[i * k + p], w[p * n + j], sum);
      c[i * n + j] = sum;
    }
}

// The x W path: by strips from five rows on, where the multiply-adds bound
// it ([8, 2048] . [2048, 512]: 70 us against 110 by rows), by rows below.
// Both sum every element in the same order.
template <class T, std::size_t M, bool prefetch>
void axpys_with(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
                std::size_t j1, bool accumulate) {
  if constexpr (M >= 5)
    axpys_strips<T, M, prefetch>(a, w, c, n, k, j0, j1, accumulate);
  else
    axpys_rows<T, M, prefetch>(a, w, c, n, k, j0, j1, accumulate);
}

// Whether x W prefetches w for M rows, when w is larger than
// k_prefetch_w_bytes: two to four rows, and seven rows on. Measured on
// a 2-core AMD EPYC (Zen 5), [M, 512] . [512, 2048] and [M, 2048] .
// [2048, 512], as a fraction of the time without:
// - strips, M = 7 and 8: 0.66-0.92 with w in L3 among other weights,
//   0.61-0.65 evicted, 0.83-0.97 on two threads, but 1.08-1.18 with one
//   4 MiB w alone in L3, called again and again; M = 5 and 6 gained little
//   (0.88-1.11 in L3) and lost more alone (1.14-1.41);
// - rows, M = 2 to 4: 0.59-0.90 evicted, 0.92-1.09 in L3 (medians of five
//   runs 0.95-1.08); one row gained nothing evicted and lost in L3
//   (1.02-1.11);
// - either with w in L2 (512 KiB): up to 1.6 (hence the size).
template <std::size_t M>
constexpr bool axpys_prefetch() {
  return M >= 7 || (M >= 2 && M <= 4);
}

// The x W path, prefetching a large w where axpys_prefetch says so.
template <class T, std::size_t M>
void axpys(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
           std::size_t j1, bool accumulate) {
  if constexpr (axpys_prefetch<M>())
    if (k * n * sizeof(T) > k_prefetch_w_bytes)
      return axpys_with<T, M, true>(a, w, c, n, k, j0, j1, accumulate);
  axpys_with<T, M, false>(a, w, c, n, k, j0, j1, accumulate);
}

}  // namespace xtgrad::detail::streaming
