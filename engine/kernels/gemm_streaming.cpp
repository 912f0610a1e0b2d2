#include "simd.hpp"  // first: see simd.hpp

#include "gemm_streaming.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "parallel.hpp"
#include "scratch.hpp"

namespace xtgrad::detail {

namespace {

template <class T>
using Batch = xsimd::batch<T>;

// Columns of c per block of the x W path: M rows of them stay in L1
// (8 x 512 floats = 16 KiB) while four rows of W stream past.
constexpr std::size_t k_column_block = 512;
// One row takes columns by 16 KiB: w's rows then stream by longer pieces
// (whole rows up to 4096 floats). Measured on a 2-core AMD EPYC (Zen 5),
// [1, 512] . [512, 2048] and [1, 1024] . [1024, 4096]: 0.86-1.0 of the time
// with w evicted, 0.90-0.98 in L3 (0.98-1.08 on two threads); two rows lost
// with it (1.03-1.22).
constexpr std::size_t k_one_row_column_bytes = 16 * 1024;
// Multiply-adds a thread must have before a second one pays (handing chunks
// to a worker costs about 7 us; the kernels run at 20-40 multiply-adds per ns).
constexpr std::size_t k_min_macs_per_thread = std::size_t(1) << 18;
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
constexpr std::size_t k_line_bytes = 64;
// Rows ahead that a strip of the x W path prefetches, and the size of w from
// which the x W path prefetches at all (past twice a 1 MiB L2: see axpys).
constexpr std::size_t k_strip_prefetch_rows = 32;
constexpr std::size_t k_prefetch_w_bytes = std::size_t(2) << 20;

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

// Asks for the cache line at address to be brought into L1 (a hint only).
inline void prefetch_line(const void* address) {
#if defined(__GNUC__)
  __builtin_prefetch(address, 0, 3);
#else
  (void)address;
#endif
}

// The same into L2 (prefetcht1 on x86).
inline void prefetch_line_to_l2(const void* address) {
#if defined(__GNUC__)
  __builtin_prefetch(address, 0, 2);
#else
  (void)address;
#endif
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
// Both sum every element in the same order. Two to four rows, and seven
// rows on, prefetch w when it is larger than k_prefetch_w_bytes. Measured on
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
template <class T, std::size_t M>
void axpys(const T* a, const T* w, T* c, std::size_t n, std::size_t k, std::size_t j0,
           std::size_t j1, bool accumulate) {
  const bool large = k * n * sizeof(T) > k_prefetch_w_bytes;
  if constexpr (M >= 7) {
    if (large) return axpys_strips<T, M, true>(a, w, c, n, k, j0, j1, accumulate);
    axpys_strips<T, M, false>(a, w, c, n, k, j0, j1, accumulate);
  } else if constexpr (M >= 5) {
    axpys_strips<T, M, false>(a, w, c, n, k, j0, j1, accumulate);
  } else if constexpr (M >= 2) {
    if (large) return axpys_rows<T, M, true>(a, w, c, n, k, j0, j1, accumulate);
    axpys_rows<T, M, false>(a, w, c, n, k, j0, j1, accumulate);
  } else {
    axpys_rows<T, M, false>(a, w, c, n, k, j0, j1, accumulate);
  }
}

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
