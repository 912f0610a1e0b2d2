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
// nothing spills. A threaded BLAS is not called here: these run inside the
// thread pool's workers, where OpenBLAS's own threads would serialise.
// attention_tiles_bf16.hpp is the bfloat16 variant of the same products
// (MatmulPrecision::bf16), on the same register blocks
// (for_each_register_block).

#include <algorithm>
#include <cstddef>
#include <type_traits>

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

// f(MR, NV, i, j) over the register blocks that tile C[m, n] (n a multiple of
// W lanes): MR rows from row i by NV vectors of W columns from column j, MR
// and NV as std::integral_constant. Strips of MaxNV vectors, then one of the
// remaining vectors; in each strip blocks of k_rows rows (2 k_rows in a strip
// of at most 2 vectors when MaxNV is 4, see k_rows), then the last 1-3 rows.
// Shared by the float and the bfloat16 (attention_tiles_bf16.hpp) kernels.
template <std::size_t N>
using Count = std::integral_constant<std::size_t, N>;

template <std::size_t NV, std::size_t MaxNV, class F>
void for_each_strip_block(std::size_t m, std::size_t j, F& f) {
  std::size_t i = 0;
  if constexpr (NV <= 2 && MaxNV == 4)  // a narrow strip: twice the rows (see k_rows)
    for (; i + 2 * k_rows <= m; i += 2 * k_rows) f(Count<2 * k_rows>{}, Count<NV>{}, i, j);
  for (; i + k_rows <= m; i += k_rows) f(Count<k_rows>{}, Count<NV>{}, i, j);
  switch (m - i) {
    case 3:
      f(Count<3>{}, Count<NV>{}, i, j);
      break;
    case 2:
      f(Count<2>{}, Count<NV>{}, i, j);
      break;
    case 1:
      f(Count<1>{}, Count<NV>{}, i, j);
      break;
    default:
      break;
  }
}

template <std::size_t W, std::size_t MaxNV, class F>
void for_each_register_block(std::size_t m, std::size_t n, F&& f) {
  std::size_t j = 0;
  for (; j + MaxNV * W <= n; j += MaxNV * W) for_each_strip_block<MaxNV, MaxNV>(m, j, f);
  switch ((n - j) / W) {
    case 3:
      for_each_strip_block<3, MaxNV>(m, j, f);
      break;
    case 2:
      for_each_strip_block<2, MaxNV>(m, j, f);
      break;
    case 1:
      for_each_strip_block<1, MaxNV>(m, j, f);
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
  for_each_register_block<k_lanes<T>, k_vectors<T>>(
      m, n, [&](auto rows, auto vectors, std::size_t i, std::size_t j) {
        block<T, decltype(rows)::value, decltype(vectors)::value, Accumulate>(
            k, a + static_cast<std::ptrdiff_t>(i) * row_stride, row_stride, col_stride, b + j, ldb,
            c + i * ldc + j, ldc);
      });
}

// to[0, n) = from[0, n), a vector at a time, inline: the kernels copy rows
// of a head's few tens of elements (Dh = 32 in the char GPT) by the thousand,
// where std::copy's call to memmove costs a good part of the copy (in perf of
// the char GPT's step at one thread, these copies took 4.2 % of the samples
// inline against 4.9 % through memmove).
template <class T>
void copy_row(const T* from, std::size_t n, T* to) {
  std::size_t j = 0;
  for (; j + k_lanes<T> <= n; j += k_lanes<T>)
    Batch<T>::load_unaligned(from + j).store_unaligned(to + j);
  for (; j < n; ++j) to[j] = from[j];
}

// out[r, c] = x(r, c) for r < rows, c < cols, and 0 for cols <= c < width:
// rows of a strided tensor copied into a padded row-major tile.
template <class T>
void pack_rows(const T* x, std::ptrdiff_t row_stride, std::size_t rows, std::size_t cols, T* out,
               std::size_t width) {
  for (std::size_t r = 0; r < rows; ++r) {
    copy_row(x + static_cast<std::ptrdiff_t>(r) * row_stride, cols, out + r * width);
    std::fill(out + r * width + cols, out + (r + 1) * width, T(0));
  }
}

#if defined(__AVX__)
// Rows (and columns) of a square block that transpose_block turns over at
// once: one AVX vector of each row. Measured on a 2-core AMD EPYC (Zen 5),
// 47 keys of Dh = 64 floats packed into K^T [64, 64]: 0.64-0.74 us against
// 1.7-1.9 element by element (a decoding step packs every cached key so).
template <class T>
constexpr std::size_t k_transpose_block = 32 / sizeof(T);

// out[c * width + r] = x[r * row_stride + c] for r, c < 8: the classic
// unpack / shuffle / lane-permute transpose of eight rows of eight floats.
inline void transpose_block(const float* x, std::ptrdiff_t row_stride, float* out,
                            std::size_t width) {
  __m256 r[8], t[8];
  for (std::size_t i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + std::ptrdiff_t(i) * row_stride);
  for (std::size_t i = 0; i < 8; i += 2) {  // t: rows i, i + 1 interleaved pairwise
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (std::size_t i = 0; i < 8; i += 4) {  // r: columns of four rows per 128-bit lane
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (std::size_t c = 0; c < 4; ++c) {  // the lanes of rows 0-3 and 4-7 joined
    _mm256_storeu_ps(out + c * width, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps(out + (c + 4) * width, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}

// The same for four rows of four doubles.
inline void transpose_block(const double* x, std::ptrdiff_t row_stride, double* out,
                            std::size_t width) {
  __m256d r[4];
  for (std::size_t i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(x + std::ptrdiff_t(i) * row_stride);
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  _mm256_storeu_pd(out, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(out + width, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(out + 2 * width, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(out + 3 * width, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif

// out[c, r] = x(r, c) for c < cols, r < rows, and 0 for rows <= r < width:
// the transpose of rows of a strided tensor, padded the same way; square
// blocks at once where the target has AVX, element by element at the edges.
template <class T>
void pack_transposed(const T* x, std::ptrdiff_t row_stride, std::size_t rows, std::size_t cols,
                     T* out, std::size_t width) {
  for (std::size_t c = 0; c < cols; ++c)
    std::fill(out + c * width + rows, out + (c + 1) * width, T(0));
  std::size_t r0 = 0;
#if defined(__AVX__)
  constexpr std::size_t n = k_transpose_block<T>;
  for (; r0 + n <= rows; r0 += n) {
    const T* src = x + static_cast<std::ptrdiff_t>(r0) * row_stride;
    std::size_t c = 0;
    for (; c + n <= cols; c += n) transpose_block(src + c, row_stride, out + c * width + r0, width);
    for (; c < cols; ++c)
      for (std::size_t r = 0; r < n; ++r)
        out[c * width + r0 + r] = src[static_cast<std::ptrdiff_t>(r) * row_stride + c];
  }
#endif
  for (; r0 < rows; ++r0) {
    const T* src = x + static_cast<std::ptrdiff_t>(r0) * row_stride;
    for (std::size_t c = 0; c < cols; ++c) out[c * width + r0] = src[c];
  }
}

}  // namespace xtgrad::detail::attention
