#pragma once
// The small products of the fused attention kernels (internal): one
// register-blocked micro-kernel for C[M, N] (+)= A[M, K] . B[K, N] on tiles
// that sit in L1, and the packing of key / value / query tiles into the
// layout its B operand needs.
//
// A is read element by element (a broadcast per row and step of K) through a
// row stride and a column stride, so it may be a tile read in place from a
// strided tensor or the transpose of a tile in scratch. B and C are row-major
// with contiguous rows whose width N is a multiple of the vector width (the
// packing pads it with zeros), so the kernel has no column tail. The five
// products of attention map onto it as:
//   S  = Q . K^T   A = q rows in place,   B = K^T tile packed [Dh, Bc]
//   O += P . V     A = P (scratch),        B = V tile packed [Bc, Dv]
//   dP = dO . V^T  A = dO rows in place,  B = V^T tile packed [Dv, Bc]
//   dV += P^T . dO A = P transposed,       B = dO tile packed [Br, Dv]
//   dQ += dS . K   A = dS (scratch),       B = K tile packed [Bc, Dh]
//   dK += dS^T . Q A = dS transposed,      B = Q tile packed [Br, Dh]
// Each step of K loads NV vectors of one B row and broadcasts MR elements of
// A into MR x NV accumulators: 4 x 4 with AVX-512's 32 vector registers (16
// accumulators, 4 B vectors, 1 broadcast; 8 x 2 for a strip of 2 vectors),
// 4 x 2 with the 16 of AVX2 and narrower targets (8 + 2 + 1), so that
// nothing spills. A threaded BLAS is
// not called here: these run inside the thread pool's workers, where
// OpenBLAS's own threads would serialise.

#include <algorithm>
#include <cstddef>

#include "vector_math.hpp"  // first (through simd.hpp): see simd.hpp

namespace xtgrad::detail::attention {

using simd_math::Batch;

template <class T>
constexpr std::size_t k_lanes = Batch<T>::size;

// MR: rows of C per register block. With AVX-512, a strip of at most 2
// vectors (Dh or Dv <= 32 in float, the products whose N is a head
// dimension) takes 8 rows instead: 16 accumulators rather than 8, so that
// each B load and each broadcast feeds more FMAs (Dh = 32, B H = 128, T =
// 128, float, one thread: 11 % less CPU time for forward + backward).
inline constexpr std::size_t k_rows = 4;
// NV: vectors of C per register block (64-byte vectors: AVX-512, 32 registers)
template <class T>
constexpr std::size_t k_vectors = sizeof(Batch<T>) >= 64 ? 4 : 2;

// n rounded up to a multiple of the vector width.
template <class T>
constexpr std::size_t padded(std::size_t n) {
  return (n + k_lanes<T> - 1) / k_lanes<T> * k_lanes<T>;
}

// One register block: MR rows by NV vectors of C.
template <class T, std::size_t MR, std::size_t NV, bool Accumulate>
[[gnu::always_inline]] inline void block(std::size_t k, const T* a, std::ptrdiff_t row_stride,
                                         std::ptrdiff_t col_stride, const T* b, std::size_t ldb,
                                         T* c, std::size_t ldc) {
  using B = Batch<T>;
  constexpr std::size_t W = k_lanes<T>;
  B acc[MR][NV];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = B(T(0));
  for (std::size_t p = 0; p < k; ++p) {
    const T* brow = b + p * ldb;
    B bv[NV];
    for (std::size_t v = 0; v < NV; ++v) bv[v] = B::load_unaligned(brow + v * W);
    const T* ap = a + static_cast<std::ptrdiff_t>(p) * col_stride;
    for (std::size_t r = 0; r < MR; ++r) {
      const B ar(ap[static_cast<std::ptrdiff_t>(r) * row_stride]);
      for (std::size_t v = 0; v < NV; ++v)
        acc[r][v] = simd_math::fused_multiply_add(ar, bv[v], acc[r][v]);
    }
  }
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) {
      T* at = c + r * ldc + v * W;
      if constexpr (Accumulate)
        (B::load_unaligned(at) + acc[r][v]).store_unaligned(at);
      else
        acc[r][v].store_unaligned(at);
    }
}

// All rows of C for NV vectors of columns starting at column n0.
template <class T, std::size_t NV, bool Accumulate>
void column_strip(std::size_t m, std::size_t k, const T* a, std::ptrdiff_t row_stride,
                  std::ptrdiff_t col_stride, const T* b, std::size_t ldb, T* c, std::size_t ldc) {
  std::size_t i = 0;
  if constexpr (NV <= 2 && k_vectors<T> == 4)  // a narrow strip: twice the rows (see k_rows)
    for (; i + 2 * k_rows <= m; i += 2 * k_rows)
      block<T, 2 * k_rows, NV, Accumulate>(k, a + static_cast<std::ptrdiff_t>(i) * row_stride,
                                           row_stride, col_stride, b, ldb, c + i * ldc, ldc);
  for (; i + k_rows <= m; i += k_rows)
    block<T, k_rows, NV, Accumulate>(k, a + static_cast<std::ptrdiff_t>(i) * row_stride, row_stride,
                                     col_stride, b, ldb, c + i * ldc, ldc);
  const T* ai = a + static_cast<std::ptrdiff_t>(i) * row_stride;
  T* ci = c + i * ldc;
  switch (m - i) {
    case 3:
      block<T, 3, NV, Accumulate>(k, ai, row_stride, col_stride, b, ldb, ci, ldc);
      break;
    case 2:
      block<T, 2, NV, Accumulate>(k, ai, row_stride, col_stride, b, ldb, ci, ldc);
      break;
    case 1:
      block<T, 1, NV, Accumulate>(k, ai, row_stride, col_stride, b, ldb, ci, ldc);
      break;
    default:
      break;
  }
}

// C[m, n] (+)= A[m, k] . B[k, n]: A(i, p) = a[i * row_stride + p * col_stride],
// B(p, j) = b[p * ldb + j], C(i, j) = c[i * ldc + j]; n a multiple of the
// vector width. Accumulate (a compile-time choice) adds onto C.
template <class T, bool Accumulate>
void tile_product(std::size_t m, std::size_t n, std::size_t k, const T* a,
                  std::ptrdiff_t row_stride, std::ptrdiff_t col_stride, const T* b, std::size_t ldb,
                  T* c, std::size_t ldc) {
  constexpr std::size_t W = k_lanes<T>;
  std::size_t j = 0;
  for (; j + k_vectors<T> * W <= n; j += k_vectors<T> * W)
    column_strip<T, k_vectors<T>, Accumulate>(m, k, a, row_stride, col_stride, b + j, ldb, c + j,
                                              ldc);
  switch ((n - j) / W) {
    case 3:
      column_strip<T, 3, Accumulate>(m, k, a, row_stride, col_stride, b + j, ldb, c + j, ldc);
      break;
    case 2:
      column_strip<T, 2, Accumulate>(m, k, a, row_stride, col_stride, b + j, ldb, c + j, ldc);
      break;
    case 1:
      column_strip<T, 1, Accumulate>(m, k, a, row_stride, col_stride, b + j, ldb, c + j, ldc);
      break;
    default:
      break;
  }
}

// out[r, c] = x(r, c) for r < rows, c < cols, and 0 for cols <= c < width:
// rows of a strided tensor copied into a padded row-major tile.
template <class T>
void pack_rows(const T* x, std::ptrdiff_t row_stride, std::size_t rows, std::size_t cols, T* out,
               std::size_t width) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* src = x + static_cast<std::ptrdiff_t>(r) * row_stride;
    std::copy(src, src + cols, out + r * width);
    std::fill(out + r * width + cols, out + (r + 1) * width, T(0));
  }
}

// out[c, r] = x(r, c) for c < cols, r < rows, and 0 for rows <= r < width:
// the transpose of rows of a strided tensor, padded the same way.
template <class T>
void pack_transposed(const T* x, std::ptrdiff_t row_stride, std::size_t rows, std::size_t cols,
                     T* out, std::size_t width) {
  for (std::size_t c = 0; c < cols; ++c)
    std::fill(out + c * width + rows, out + (c + 1) * width, T(0));
  for (std::size_t r = 0; r < rows; ++r) {
    const T* src = x + static_cast<std::ptrdiff_t>(r) * row_stride;
    for (std::size_t c = 0; c < cols; ++c) out[c * width + r] = src[c];
  }
}

}  // namespace xtgrad::detail::attention
