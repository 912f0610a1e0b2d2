#pragma once
// The bfloat16 variant of the attention micro-kernel (internal): the six
// products of attention_tiles.hpp (S = Q K^T, O += P V, dP = dO V^T, dV +=
// P^T dO, dQ += dS K, dK += dS^T Q) with both operands rounded to bfloat16
// and the products accumulated in float, as the GEMMs compute at
// MatmulPrecision::bf16 (matmul_precision.hpp). Run when that precision is
// in force and the build targets AVX512-BF16 (k_bf16_kernel); everything
// else of the kernels (softmax, the running max and sum, scaling, dropout,
// masks, what is stored) stays float.
//
// vdpbf16ps (_mm512_dpbf16_ps) multiplies 16 pairs of bfloat16 and adds both
// products of each pair to one of 16 float accumulators, so K runs in pairs:
// a 32-bit word (Word) holds the bfloat16 of k = 2p in its low half and of
// k = 2p + 1 in its high half. B is packed [K/2, N, 2] ("pair rows": word
// (p, j) = B(2p, j), B(2p + 1, j)), N a multiple of 16. A is read as words
// A(i, p) = a[i * row_stride + p * pair_stride]: rows converted in place
// order (pair_stride 1), or the pair rows of the tile whose transpose A is
// (row_stride 1), so that P^T and dS^T need no transpose. Odd K: the missing
// half is 0 in A, and B's last pair row is masked to its low half as it is
// loaded (a NaN or infinity past K never meets the 0). The product of two
// bfloat16 is exact in float and the sums are float, so the only error beyond
// float's is the rounding of the operands (2^-9 of each at most); vdpbf16ps
// reads subnormal bfloat16 as 0 and flushes subnormal sums, as oneDNN's bf16
// kernels do. The register blocks are the float kernel's (4 x 4 vectors, 8 x 2
// for narrow strips), each step of K now two multiply-adds per lane.
//
// The operands are converted once per tile as they are packed: to_bf16's
// rounding (bf16.hpp), done on 16 floats at once with integer vector
// instructions (bit for bit to_bf16, subnormals and NaN included, which
// vcvtne2ps2bf16 is not: it flushes subnormals). Without AVX512-BF16 the
// packing is scalar and the product a plain loop, never selected by the
// kernels (k_bf16_kernel false), which keeps every build compiling.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "attention_tiles.hpp"  // first (through simd.hpp): see simd.hpp
#include "bf16.hpp"

namespace xtgrad::detail::attention {

#if defined(__AVX512BF16__)
inline constexpr bool k_bf16_kernel = true;
#else
inline constexpr bool k_bf16_kernel = false;
#endif

using Word = std::uint32_t;  // two bfloat16: k = 2p (low half), 2p + 1 (high half)
inline constexpr std::size_t k_word_lanes = 16;

// Words of a row of k elements, and n rounded up to whole vectors of words.
constexpr std::size_t pairs_of(std::size_t k) {
  return (k + 1) / 2;
}
constexpr std::size_t padded_words(std::size_t n) {
  return (n + k_word_lanes - 1) / k_word_lanes * k_word_lanes;
}

inline Word pair_word(float low, float high) {
  return Word(to_bf16(low)) | Word(to_bf16(high)) << 16;
}

#if defined(__AVX512BF16__)

// bits >> 16 per lane (the zero-masked form: GCC 12 warns of the
// unmasked one's undefined source, a false positive).
inline __m512i shifted_down(__m512i bits) {
  return _mm512_maskz_srli_epi32(__mmask16(0xffff), bits, 16);
}

// 16 floats rounded as to_bf16, each bfloat16 in the high half of its lane.
inline __m512i rounded_high(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(shifted_down(bits), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(bits, _mm512_set1_epi32(0x400000)));
}

inline __mmask16 first_lanes(std::size_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
}

// Words (x[2w], x[2w + 1]) for w < 16 of the first `n` <= 32 floats of x (0 past n).
inline __m512i row_words(const float* x, std::size_t n) {
  const __m512 low = _mm512_maskz_loadu_ps(first_lanes(n), x);
  const __m512 high = _mm512_maskz_loadu_ps(first_lanes(n > 16 ? n - 16 : 0), x + 16);
  // the high halves of the 32 lanes of (low, high), in order
  const __m512i odd_halves =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(rounded_high(low), odd_halves, rounded_high(high));
}

#endif

// out[r * ld + w] = pair_word(x(r, 2w), x(r, 2w + 1)) for r < rows,
// w < pairs_of(cols), x(r, cols) = 0 when cols is odd: rows converted with
// their pairs along the row (an A operand read with pair_stride 1).
inline void convert_rows(const float* x, std::ptrdiff_t row_stride, std::size_t rows,
                         std::size_t cols, Word* out, std::size_t ld) {
  const std::size_t words = pairs_of(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* src = x + static_cast<std::ptrdiff_t>(r) * row_stride;
    Word* dst = out + r * ld;
#if defined(__AVX512BF16__)
    for (std::size_t w = 0; w < words; w += k_word_lanes)
      _mm512_mask_storeu_epi32(dst + w, first_lanes(words - w),
                               row_words(src + 2 * w, cols - 2 * w));
#else
    for (std::size_t w = 0; w < words; ++w)
      dst[w] = pair_word(src[2 * w], 2 * w + 1 < cols ? src[2 * w + 1] : 0.0f);
#endif
  }
}

// out[p * ld + c] = pair_word(x(2p, c), x(2p + 1, c)) for p < pairs_of(rows),
// c < ld (a multiple of 16), x(r, c) = 0 past rows or cols: pair rows, the B
// layout (or an A operand read as the transpose of x, row_stride 1).
inline void pack_pair_rows(const float* x, std::ptrdiff_t row_stride, std::size_t rows,
                           std::size_t cols, Word* out, std::size_t ld) {
  for (std::size_t r = 0; r < rows; r += 2) {
    const float* even = x + static_cast<std::ptrdiff_t>(r) * row_stride;
    const float* odd = r + 1 < rows ? even + row_stride : nullptr;
    Word* dst = out + r / 2 * ld;
#if defined(__AVX512BF16__)
    for (std::size_t c = 0; c < ld; c += k_word_lanes) {
      const __mmask16 real = first_lanes(c < cols ? cols - c : 0);
      const __m512i low = shifted_down(rounded_high(_mm512_maskz_loadu_ps(real, even + c)));
      const __m512i high = odd == nullptr ? _mm512_setzero_si512()
                                          : rounded_high(_mm512_maskz_loadu_ps(real, odd + c));
      _mm512_storeu_si512(dst + c, _mm512_mask_blend_epi16(0xaaaaaaaau, low, high));
    }
#else
    for (std::size_t c = 0; c < ld; ++c)
      dst[c] = c < cols ? pair_word(even[c], odd == nullptr ? 0.0f : odd[c]) : 0u;
#endif
  }
}

// out[w * ld + r] = pair_word(x(r, 2w), x(r, 2w + 1)) for w < pairs_of(cols),
// r < ld, 0 for r >= rows: the pair rows of x^T (K^T, V^T as B operands).
inline void pack_pair_columns(const float* x, std::ptrdiff_t row_stride, std::size_t rows,
                              std::size_t cols, Word* out, std::size_t ld) {
  const std::size_t words = pairs_of(cols);
  for (std::size_t w = 0; w < words; ++w) std::fill(out + w * ld + rows, out + (w + 1) * ld, 0u);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* src = x + static_cast<std::ptrdiff_t>(r) * row_stride;
    for (std::size_t w0 = 0; w0 < words; w0 += k_word_lanes) {
      alignas(64) Word row[k_word_lanes];
      convert_rows(src + 2 * w0, 0, 1, std::min(cols - 2 * w0, 2 * k_word_lanes), row,
                   k_word_lanes);
      for (std::size_t w = w0; w < std::min(words, w0 + k_word_lanes); ++w)
        out[w * ld + r] = row[w - w0];
    }
  }
}

#if defined(__AVX512BF16__)
// One step of K (a pair) of a register block: acc[r][v] += A(r, pair) .
// B(pair, vector v), B's words anded with `keep`.
template <std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void bf16_step(__m512 (&acc)[MR][NV], const Word* ap,
                                             std::ptrdiff_t row_stride, const Word* brow,
                                             __m512i keep) {
  __m512bh bv[NV];
  for (std::size_t v = 0; v < NV; ++v)
    bv[v] = (__m512bh)_mm512_and_si512(_mm512_loadu_si512(brow + v * k_word_lanes), keep);
  for (std::size_t r = 0; r < MR; ++r) {
    const auto word = static_cast<int>(ap[static_cast<std::ptrdiff_t>(r) * row_stride]);
    const __m512bh ar = (__m512bh)_mm512_set1_epi32(word);
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
  }
}

// One register block: MR rows by NV vectors of C, over k (pairs_of(k) words).
template <std::size_t MR, std::size_t NV, bool Accumulate>
[[gnu::always_inline]] inline void bf16_block(std::size_t k, const Word* a,
                                              std::ptrdiff_t row_stride, std::ptrdiff_t pair_stride,
                                              const Word* b, std::size_t ldb, float* c,
                                              std::size_t ldc) {
  __m512 acc[MR][NV];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const auto at = [&](std::size_t p) { return a + static_cast<std::ptrdiff_t>(p) * pair_stride; };
  for (std::size_t p = 0; p < k / 2; ++p)
    bf16_step(acc, at(p), row_stride, b + p * ldb, _mm512_set1_epi32(-1));
  if (k % 2 != 0)  // the last pair's high half is past K
    bf16_step(acc, at(k / 2), row_stride, b + k / 2 * ldb, _mm512_set1_epi32(0xffff));
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t v = 0; v < NV; ++v) {
      float* out = c + r * ldc + v * k_word_lanes;
      if constexpr (Accumulate)
        _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), acc[r][v]));
      else
        _mm512_storeu_ps(out, acc[r][v]);
    }
}
#endif

// C[m, n] (+)= A[m, k] . B[k, n] in bfloat16 with float sums: A(i, p) the
// pair word a[i * row_stride + p * pair_stride], B the pair rows b [pairs_of(k),
// ldb], C(i, j) = c[i * ldc + j]; n a multiple of 16. Accumulate adds onto C.
template <bool Accumulate>
void bf16_tile_product(std::size_t m, std::size_t n, std::size_t k, const Word* a,
                       std::ptrdiff_t row_stride, std::ptrdiff_t pair_stride, const Word* b,
                       std::size_t ldb, float* c, std::size_t ldc) {
#if defined(__AVX512BF16__)
  for_each_register_block<k_word_lanes, 4>(
      m, n, [&](auto rows, auto vectors, std::size_t i, std::size_t j) {
        bf16_block<decltype(rows)::value, decltype(vectors)::value, Accumulate>(
            k, a + static_cast<std::ptrdiff_t>(i) * row_stride, row_stride, pair_stride, b + j, ldb,
            c + i * ldc + j, ldc);
      });
#else
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (std::size_t kk = 0; kk < k; ++kk) {
        const Word wa = a[static_cast<std::ptrdiff_t>(i) * row_stride +
                          static_cast<std::ptrdiff_t>(kk / 2) * pair_stride];
        const Word wb = b[kk / 2 * ldb + j];
        const unsigned shift = kk % 2 != 0 ? 16u : 0u;
        sum += from_bf16(std::uint16_t(wa >> shift)) * from_bf16(std::uint16_t(wb >> shift));
      }
      c[i * ldc + j] = Accumulate ? c[i * ldc + j] + sum : sum;
    }
#endif
}

}  // namespace xtgrad::detail::attention
