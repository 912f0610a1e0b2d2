#pragma once
// x W^T for a few rows (internal, for gemm_streaming.cpp): c[i, j] (+)=
// a[i, :] . w[j, :], a [M, k], w [n, k], as M x J dot products at once.

#include <algorithm>
#include <cmath>

#include "scratch.hpp"
#include "streaming_support.hpp"

namespace xtgrad::detail::streaming {

// Length of w's rows (k) from which one row of a takes them four at a time
// (dots) and dots_step prefetches ahead in each row, not the next step's rows.
constexpr std::size_t k_long_dot = 1024;
// Elements ahead of the loads that a row longer than k_long_dot prefetches
// (16 cache lines of floats).
constexpr std::size_t k_prefetch_ahead = 256;
// Rows of x up to k_x_whole_bytes are read whole at every step of x W^T;
// longer ones (from six rows: see x_block) in blocks of k_x_block_bytes, a
// third of a 48 KiB L1, the rest left for w's lines and their prefetches.
constexpr std::size_t k_x_whole_bytes = 48 * 1024;
constexpr std::size_t k_x_block_bytes = 16 * 1024;

// Rows of w per step of the x W^T path: J rows share each load of a, and the
// M x J accumulators are independent chains of multiply-adds, enough of them
// to cover the latency of one (about 8 in flight), within the 32 vector
// registers of AVX-512 or the 16 of AVX2. With AVX-512 and M >= 4, 24 of
// them (J = 3 to 6) and a kept in a register (keep_in_register): measured on
// a 2-core AMD EPYC (Zen 5), [8, 512] . [2048, 512]^T ran at 179 GFLOP/s
// against 105 with 16; at M = 4 (with the prefetches of dots_step), 0.86-0.94
// of the time with w evicted from the caches and 0.87-1.0 with w in L3; with
// M <= 3 neither change was faster. One row streams its J rows of w at the
// memory's pace: 8 of them, not 16, took 0.90-0.95 of the time through
// [2048, 512] with w in L3, 0.93-1.0 evicted (same machine).
template <std::size_t M>
constexpr std::size_t dot_rows() {
#if XSIMD_WITH_AVX512F
  constexpr std::size_t accumulators = M >= 4 ? 24 : M == 1 ? 8 : 16;
#else
  constexpr std::size_t accumulators = 8;
#endif
  return M >= accumulators ? 1 : accumulators / M;
}

// Makes the compiler hold v in a register. Left to itself, GCC folds a load
// of a into each of the J multiply-adds that use it (J loads where one does),
// and the x W^T steps with M >= 4 become bound by loads, not multiply-adds.
template <class B>
inline void keep_in_register(B& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(v.data));
#else
  (void)v;
#endif
}

// Whether dots_step prefetches w for M rows of a. Measured on a 2-core AMD
// EPYC (Zen 5) against [2048, 512] and [512, 2048], as a fraction of the time
// without: M = 5 to 8, 0.58-0.90 with w evicted from the caches and 0.90-1.02
// with w in L3; M = 2 and 3, 0.73-0.94 evicted and 0.85-1.06 in L3; M = 4,
// see dot_rows; M = 1 (its rows stream at the memory's pace), 1.12-1.18
// evicted.
template <std::size_t M>
constexpr bool prefetches_w() {
  return M >= 2;
}

// How dots_step prefetches w: a template parameter, so that the loop is
// compiled once per kind without a test per iteration (with the test, GCC 12
// kept the loop's pointers in vector registers, out of general ones).
// next_segment: the next step's rows over the same block of k (the steps of
// blocked_dots, which carry their sums from block to block).
enum class WeightPrefetch { none, next_rows, ahead_in_row, next_segment };

// The part of k a dots_step sums: all of it (a = x, lda = k, p0 = 0,
// first and last), or one block of it (a = the block's packed rows of x),
// the partial sums carried in from the block before unless first and out to
// the next unless last. Row i of x from column p0 on is at a + i * lda.
template <class T>
struct DotsBlock {
  const T* a;
  std::size_t lda;
  std::size_t p0, p1;  // [p0, p1): the block's whole vectors of k
  bool first, last;    // last also adds the tail past k's last whole vector
};

// c[i, j] (+)= a[i, :] . w[j, :] for i < M, j in [j, j + J): a [M, k], w [n, k].
// M x J dot products at once, each kept in a batch of partial sums; every
// element is summed the same way whichever J rows, and whichever blocks of
// k, it is computed with.
//
// With more than one row of a, the multiply-adds take long enough that
// weights coming from memory stall them: the hardware prefetchers follow the
// J short streams too late. So w is prefetched by hand (prefetches_w), one
// line per line loaded: rows shorter than k_long_dot elements fetch the next
// step's J rows, one block in memory order; longer rows fetch
// k_prefetch_ahead elements ahead in their own row; a block of k fetches
// `next`, the rows of the step after it over the same block.
template <class T, std::size_t M, std::size_t J, WeightPrefetch prefetch>
void dots_step(const DotsBlock<T>& block, const T* w, T* c, std::size_t n, std::size_t k,
               std::size_t j, const T* next, T* carry, bool accumulate) {
  constexpr std::size_t lanes = Batch<T>::size;
  const T* const a = block.a;
  const std::size_t lda = block.lda, p0 = block.p0, length = block.p1 - block.p0;
  const T* rows = w + j * k + p0;
  const T* next_rows = w + std::min(j + J, n - J) * k;  // this step's rows at the end of w
  // Only blocked_dots' steps (next_segment) carry sums: for the others
  // first and last are known, and carry is never read.
  constexpr bool in_blocks = prefetch == WeightPrefetch::next_segment;
  const bool first = !in_blocks || block.first;
  Batch<T> acc[J][M];
  for (std::size_t r = 0; r < J; ++r)
    for (std::size_t i = 0; i < M; ++i)
      acc[r][i] = first ? Batch<T>(T(0)) : Batch<T>::load_unaligned(carry + (r * M + i) * lanes);
  const std::size_t q_ahead_end = k > k_prefetch_ahead + p0 ? k - k_prefetch_ahead - p0 : 0;
  for (std::size_t q = 0; q < length; q += lanes) {
    if constexpr (prefetch == WeightPrefetch::next_rows)
      for (std::size_t r = 0; r < J; ++r) prefetch_line(next_rows + J * q + r * lanes);
    if constexpr (prefetch == WeightPrefetch::ahead_in_row)
      if (q < q_ahead_end)
        for (std::size_t r = 0; r < J; ++r) prefetch_line(rows + r * k + q + k_prefetch_ahead);
    if constexpr (prefetch == WeightPrefetch::next_segment)
      for (std::size_t r = 0; r < J; ++r) prefetch_line(next + r * k + q);
    Batch<T> wv[J];
    for (std::size_t r = 0; r < J; ++r) wv[r] = Batch<T>::load_unaligned(rows + r * k + q);
    for (std::size_t i = 0; i < M; ++i) {
      Batch<T> av = Batch<T>::load_unaligned(a + i * lda + q);
      if constexpr (M >= 4) keep_in_register(av);
      for (std::size_t r = 0; r < J; ++r) acc[r][i] = xsimd::fma(av, wv[r], acc[r][i]);
    }
  }
  if constexpr (in_blocks)
    if (!block.last) {
      for (std::size_t r = 0; r < J; ++r)
        for (std::size_t i = 0; i < M; ++i) acc[r][i].store_unaligned(carry + (r * M + i) * lanes);
      return;
    }
  const std::size_t tail = k - block.p1;  // elements past the last whole vector
  // Without a tail (k a multiple of the lanes), a loop of its own: with the
  // tail's loop and the test of accumulate per element beside the
  // reductions, this end of the step cost 5-10% of [8, 512] . [2048, 512]^T.
  // The + 0 is the tail path's sum + rest, so that both give +0, not -0,
  // for a sum of -0s.
  if (tail == 0) {
    if (accumulate)
      for (std::size_t r = 0; r < J; ++r)
        for (std::size_t i = 0; i < M; ++i) c[i * n + j + r] += xsimd::hadd(acc[r][i]) + T(0);
    else
      for (std::size_t r = 0; r < J; ++r)
        for (std::size_t i = 0; i < M; ++i) c[i * n + j + r] = xsimd::hadd(acc[r][i]) + T(0);
    return;
  }
  for (std::size_t r = 0; r < J; ++r) {
    const T* row = rows + r * k + length;
    for (std::size_t i = 0; i < M; ++i) {
      const T* x = a + i * lda + length;
      T rest = T(0);
      for (std::size_t q = 0; q < tail; ++q) rest = std::fma(x[q], row[q], rest);
      const T sum = xsimd::hadd(acc[r][i]) + rest;
      T& out = c[i * n + j + r];
      out = accumulate ? out + sum : sum;
    }
  }
}

// The whole of k in one pass: a block of all of it.
template <class T>
DotsBlock<T> whole_k(const T* a, std::size_t k) {
  return {a, k, 0, k - k % Batch<T>::size, true, true};
}

template <class T, std::size_t M, WeightPrefetch prefetch>
void dots_with(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
               std::size_t j1, bool accumulate) {
  constexpr std::size_t rows = dot_rows<M>();
  const DotsBlock<T> all = whole_k(a, k);
  std::size_t j = j0;
  // One row through long rows of w: 4 rows of w a step. Measured on a 2-core
  // AMD EPYC, [1, 2048] . [512, 2048]^T: 42 us against 58 with 16 (16 rows
  // of 8 KiB streamed at once outrun the prefetchers).
  if constexpr (M == 1)
    if (k >= k_long_dot)
      for (; j + 4 <= j1; j += 4)
        dots_step<T, 1, 4, prefetch>(all, w, c, n, k, j, nullptr, nullptr, accumulate);
  for (; j + rows <= j1; j += rows)
    dots_step<T, M, rows, prefetch>(all, w, c, n, k, j, nullptr, nullptr, accumulate);
  for (; j < j1; ++j)
    dots_step<T, M, 1, prefetch>(all, w, c, n, k, j, nullptr, nullptr, accumulate);
}

template <class T, std::size_t M>
void dots(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
          std::size_t j1, bool accumulate) {
  if constexpr (!prefetches_w<M>())
    dots_with<T, M, WeightPrefetch::none>(a, w, c, n, k, j0, j1, accumulate);
  else if (k < k_long_dot)
    dots_with<T, M, WeightPrefetch::next_rows>(a, w, c, n, k, j0, j1, accumulate);
  else
    dots_with<T, M, WeightPrefetch::ahead_in_row>(a, w, c, n, k, j0, j1, accumulate);
}

// Columns of a block of k for M rows of x (blocked_dots): its rows of x fill
// k_x_block_bytes, in whole vectors. 0 below six rows, which read more of w
// than of x at each step and lost with blocks (four rows through
// [256, 4096], 1.3-1.4x the time: the blocks cut w's rows short).
template <class T, std::size_t M>
constexpr std::size_t x_block() {
  constexpr std::size_t lanes = Batch<T>::size;
  return M >= 6 ? k_x_block_bytes / (M * sizeof(T)) / lanes * lanes : 0;
}

// Row stride of a packed block of x: a block, room for the tail past k's
// last whole vector, and one cache line more, so that each row starts on a
// line and the M rows of a block fall in different sets of L1 (a stride of a
// multiple of 4 KiB would put them all in one).
template <class T, std::size_t M>
constexpr std::size_t x_block_stride() {
  return x_block<T, M>() + k_line_bytes / sizeof(T);
}

// a [M, k] as blocks of x_block columns, each [M, x_block_stride], in the
// calling thread's scratch; the last block also holds the tail.
template <class T, std::size_t M>
const T* pack_x_blocks(const T* a, std::size_t k) {
  constexpr std::size_t block = x_block<T, M>(), stride = x_block_stride<T, M>();
  const std::size_t k_vector = k - k % Batch<T>::size;
  const std::size_t blocks = (k_vector + block - 1) / block;
  T* packed = aligned_thread_scratch<T>(ScratchSlot::gemm_x_blocks, blocks * M * stride);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t p0 = b * block;
    const std::size_t p1 = b + 1 == blocks ? k : p0 + block;
    for (std::size_t i = 0; i < M; ++i)
      std::copy(a + i * k + p0, a + i * k + p1, packed + (b * M + i) * stride);
  }
  return packed;
}

// dots over blocks of k (packed by pack_x_blocks), every step of J rows of w
// through one block before the next block: M rows of x whose whole k does
// not fit in L1 beside w's lines are read from L2 at every step otherwise.
// Measured on a 2-core AMD EPYC (Zen 5, 48 KiB of L1) against whole rows,
// [M, 2048] . [512, 2048]^T: M = 7 and 8, 0.82-0.85 of the time with w in
// L3 and 0.87-0.97 evicted on one thread, 0.73-0.89 on two; six rows through
// [256, 4096], 0.89-1.0.
template <class T, std::size_t M>
void blocked_dots(const T* a, const T* packed, const T* w, T* c, std::size_t n, std::size_t k,
                  std::size_t j0, std::size_t j1, bool accumulate) {
  constexpr std::size_t lanes = Batch<T>::size, rows = dot_rows<M>();
  constexpr std::size_t block = x_block<T, M>(), stride = x_block_stride<T, M>();
  const std::size_t k_vector = k - k % lanes;
  const std::size_t steps = (j1 - j0) / rows, j_end = j0 + steps * rows;
  T* carry = aligned_thread_scratch<T>(ScratchSlot::gemm_partial_sums, steps * rows * M * lanes);
  for (std::size_t p0 = 0, b = 0; p0 < k_vector; p0 += block, ++b) {
    const std::size_t p1 = std::min(p0 + block, k_vector);
    const DotsBlock<T> part{packed + b * M * stride, stride, p0, p1, p0 == 0, p1 == k_vector};
    for (std::size_t s = 0; s < steps; ++s) {
      const std::size_t j = j0 + s * rows;
      // the next step's rows over this block, or the first step's over the
      // next block, or at the very end this step's own
      const T* next = s + 1 < steps   ? w + (j + rows) * k + p0
                      : p1 < k_vector ? w + j0 * k + p1
                                      : w + j * k + p0;
      dots_step<T, M, rows, WeightPrefetch::next_segment>(part, w, c, n, k, j, next,
                                                          carry + s * rows * M * lanes, accumulate);
    }
  }
  const DotsBlock<T> all = whole_k(a, k);
  for (std::size_t j = j_end; j < j1; ++j)
    dots_step<T, M, 1, WeightPrefetch::ahead_in_row>(all, w, c, n, k, j, nullptr, nullptr,
                                                     accumulate);
}

}  // namespace xtgrad::detail::streaming
