#include "gemm.hpp"

#include "../gemm_backend.hpp"
#include "../matmul_precision.hpp"
#include "gemm_streaming.hpp"
#include "onednn_gemm.hpp"
#include "openblas_info.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

#include "simd.hpp"  // first: see simd.hpp

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

namespace xtgrad::detail {

namespace {

template <class T>
using GemmBatch = xsimd::batch<T>;

// Rows shorter than this are broadcast by doubling (broadcast_rows).
constexpr std::size_t k_short_row_bytes = 256;

// The small-product kernels below keep their sums in vector registers, four
// independent accumulators deep (a multiply-add chain would otherwise wait on
// its own latency), and add c (when accumulating) once at the end, as BLAS
// does with beta = 1.

// sum_p coefficient(p) * rows[p * stride, +lanes) for p < k, as one batch.
template <class T, class Coefficient>
GemmBatch<T> combine_rows(const T* rows, std::size_t stride, std::size_t k,
                          Coefficient coefficient) {
  GemmBatch<T> acc[4] = {GemmBatch<T>(T(0)), GemmBatch<T>(T(0)), GemmBatch<T>(T(0)),
                         GemmBatch<T>(T(0))};
  std::size_t p = 0;
  for (; p + 4 <= k; p += 4)
    for (std::size_t q = 0; q < 4; ++q)
      acc[q] = xsimd::fma(GemmBatch<T>(coefficient(p + q)),
                          GemmBatch<T>::load_unaligned(rows + (p + q) * stride), acc[q]);
  for (; p < k; ++p)
    acc[0] = xsimd::fma(GemmBatch<T>(coefficient(p)),
                        GemmBatch<T>::load_unaligned(rows + p * stride), acc[0]);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The same for one scalar lane: sum_p coefficient(p) * rows[p * stride].
template <class T, class Coefficient>
T combine_scalars(const T* rows, std::size_t stride, std::size_t k, Coefficient coefficient) {
  T acc[4] = {T(0), T(0), T(0), T(0)};
  std::size_t p = 0;
  for (; p + 4 <= k; p += 4)
    for (std::size_t q = 0; q < 4; ++q) acc[q] += coefficient(p + q) * rows[(p + q) * stride];
  for (; p < k; ++p) acc[0] += coefficient(p) * rows[p * stride];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

template <class T>
void put(T* c, T value, bool accumulate) {
  *c = accumulate ? *c + value : value;
}

// Rows: c[i, :] = sum_p op(a)(i, p) rows[p, :], rows = op(b) as [k, n].
template <class T, class A>
void rows_form(const T* rows, std::size_t m, std::size_t n, std::size_t k, T* c, bool accumulate,
               A op_a) {
  constexpr std::size_t lanes = GemmBatch<T>::size;
  for (std::size_t i = 0; i < m; ++i) {
    const auto coefficient = [&](std::size_t p) { return op_a(i, p); };
    T* line = c + i * n;
    std::size_t j = 0;
    for (; j + lanes <= n; j += lanes) {
      GemmBatch<T> sum = combine_rows(rows + j, n, k, coefficient);
      if (accumulate) sum += GemmBatch<T>::load_unaligned(line + j);
      sum.store_unaligned(line + j);
    }
    for (; j < n; ++j) put(line + j, combine_scalars(rows + j, n, k, coefficient), accumulate);
  }
}

// Columns: c[:, j] = sum_p op(b)(p, j) a[p, :], a [k, m] (a transposed).
template <class T, class B>
void columns_form(const T* a, std::size_t m, std::size_t n, std::size_t k, T* c, bool accumulate,
                  B op_b) {
  constexpr std::size_t lanes = GemmBatch<T>::size;
  for (std::size_t j = 0; j < n; ++j) {
    const auto coefficient = [&](std::size_t p) { return op_b(p, j); };
    std::size_t i = 0;
    for (; i + lanes <= m; i += lanes) {
      alignas(64) T column[lanes];
      combine_rows(a + i, m, k, coefficient).store_aligned(column);
      for (std::size_t q = 0; q < lanes; ++q) put(c + (i + q) * n + j, column[q], accumulate);
    }
    for (; i < m; ++i) put(c + i * n + j, combine_scalars(a + i, m, k, coefficient), accumulate);
  }
}

// Where xsimd::haddp puts the sum of each row: haddp(rows)[q] is the sum of
// the lanes of rows[order[q]]. xsimd 8.1's AVX-512 float haddp returns its
// sums in a permuted order, so the order is asked of haddp itself, from rows
// of distinct powers of two; nullopt unless every output is the exact sum of
// all lanes of one row, each row in one output.
template <class T>
std::optional<std::array<std::size_t, GemmBatch<T>::size>> probe_haddp_order() {
  constexpr std::size_t lanes = GemmBatch<T>::size;
  alignas(64) T powers[lanes];
  T all = T(0);
  for (std::size_t q = 0; q < lanes; ++q) all += powers[q] = T(std::size_t(1) << q);
  std::array<std::size_t, lanes> order{};
  std::array<bool, lanes> taken{};
  for (std::size_t r = 0; r < lanes; ++r) {
    GemmBatch<T> rows[lanes];
    for (std::size_t q = 0; q < lanes; ++q)
      rows[q] = q == r ? GemmBatch<T>::load_aligned(powers) : GemmBatch<T>(T(0));
    alignas(64) T sums[lanes];
    xsimd::haddp(rows).store_aligned(sums);
    std::size_t found = lanes;
    for (std::size_t q = 0; q < lanes; ++q) {
      if (sums[q] == all && found == lanes && !taken[q])
        found = q;
      else if (sums[q] != T(0))
        return std::nullopt;
    }
    if (found == lanes) return std::nullopt;
    taken[found] = true;
    order[found] = r;
  }
  return order;
}

// probe_haddp_order, once; null if haddp is not a permutation.
template <class T>
const std::array<std::size_t, GemmBatch<T>::size>* haddp_order() {
  static const std::optional<std::array<std::size_t, GemmBatch<T>::size>> order =
      probe_haddp_order<T>();
  return order ? &*order : nullptr;
}

// x[0, k_vector) . y[0, k_vector) as a batch of partial sums.
template <class T>
GemmBatch<T> partial_dot(const T* x, const T* y, std::size_t k_vector) {
  constexpr std::size_t lanes = GemmBatch<T>::size;
  GemmBatch<T> partial(T(0));
  for (std::size_t p = 0; p < k_vector; p += lanes)
    partial = xsimd::fma(GemmBatch<T>::load_unaligned(x + p), GemmBatch<T>::load_unaligned(y + p),
                         partial);
  return partial;
}

// x[k_vector, k) . y[k_vector, k), the elements past the last whole batch.
template <class T>
T rest_dot(const T* x, const T* y, std::size_t k_vector, std::size_t k) {
  T rest = T(0);
  for (std::size_t p = k_vector; p < k; ++p) rest += x[p] * y[p];
  return rest;
}

// Dots: c(i, j) = a[i, :] . columns[j, :], a [m, k], columns = op(b)^T as [n, k],
// one batch of partial sums per element. A vector's worth of rows of a at a
// time meet each column, their batches in registers, reduced together by
// xsimd::haddp; the rows left over, or all if haddp's order is unknown, are
// reduced one element at a time by xsimd::hadd. (In the toy model's
// [128, 16] . [16, 2], a loop and an hadd per element made this the
// costliest product of the step.)
template <class T>
void dots_form(const T* a, const T* columns, std::size_t m, std::size_t n, std::size_t k, T* c,
               bool accumulate) {
  constexpr std::size_t lanes = GemmBatch<T>::size;
  const std::size_t k_vector = k - k % lanes;
  const auto* order = k_vector > 0 ? haddp_order<T>() : nullptr;
  std::size_t i0 = 0;
  if (order)
    for (; i0 + lanes <= m; i0 += lanes)
      for (std::size_t j = 0; j < n; ++j) {
        const T* y = columns + j * k;
        const T* x = a + i0 * k;
        GemmBatch<T> partial[lanes];
        for (std::size_t q = 0; q < lanes; ++q) partial[q] = GemmBatch<T>(T(0));
        for (std::size_t p = 0; p < k_vector; p += lanes) {
          const GemmBatch<T> yv = GemmBatch<T>::load_unaligned(y + p);
          for (std::size_t q = 0; q < lanes; ++q)
            partial[q] = xsimd::fma(GemmBatch<T>::load_unaligned(x + q * k + p), yv, partial[q]);
        }
        alignas(64) T sums[lanes];
        xsimd::haddp(partial).store_aligned(sums);
        for (std::size_t q = 0; q < lanes; ++q) {
          const std::size_t i = i0 + (*order)[q];
          put(c + i * n + j, sums[q] + rest_dot(a + i * k, y, k_vector, k), accumulate);
        }
      }
  for (std::size_t i = i0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const T* x = a + i * k;
      const T* y = columns + j * k;
      put(c + i * n + j, xsimd::hadd(partial_dot(x, y, k_vector)) + rest_dot(x, y, k_vector, k),
          accumulate);
    }
}

// c[m, n] (+)= op(a)[m, k] . op(b)[k, n] for small products, vectorized along
// a contiguous axis: the rows of c when n is at least a vector wide (or
// n >= m), else its columns (a transposed) or its elements as dot products
// (a not transposed). An operand the chosen form needs the other way round is
// packed into thread scratch first (at most k * n elements).
template <class T>
void small_gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, std::size_t m,
                std::size_t n, std::size_t k, bool accumulate) {
  // op(b)(p, j) on b's stored layout
  const auto op_b = [&](std::size_t p, std::size_t j) {
    return transpose_b ? b[j * k + p] : b[p * n + j];
  };
  if (n >= GemmBatch<T>::size || n >= m) {
    const T* rows = b;  // op(b) as [k, n]
    if (transpose_b) {
      T* packed = thread_scratch<T>(ScratchSlot::gemm_pack, k * n);
      for (std::size_t p = 0; p < k; ++p)
        for (std::size_t j = 0; j < n; ++j) packed[p * n + j] = op_b(p, j);
      rows = packed;
    }
    if (transpose_a)
      rows_form(rows, m, n, k, c, accumulate,
                [&](std::size_t i, std::size_t p) { return a[p * m + i]; });
    else
      rows_form(rows, m, n, k, c, accumulate,
                [&](std::size_t i, std::size_t p) { return a[i * k + p]; });
  } else if (transpose_a) {
    columns_form(a, m, n, k, c, accumulate, op_b);
  } else {
    const T* columns = b;  // op(b)^T as [n, k]
    if (!transpose_b) {
      T* packed = thread_scratch<T>(ScratchSlot::gemm_pack, n * k);
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t p = 0; p < k; ++p) packed[j * k + p] = op_b(p, j);
      columns = packed;
    }
    dots_form(a, columns, m, n, k, c, accumulate);
  }
}

// Products small enough for small_gemm's loop.
bool is_small_gemm(std::size_t m, std::size_t n, std::size_t k) {
  return m * n * k <= k_small_gemm_macs;
}

// Whether a product goes to a GEMM library (oneDNN or OpenBLAS): a sum of
// at least one term, neither small nor few rows (xtgrad's loops run those).
bool library_product(std::size_t m, std::size_t n, std::size_t k) {
  return k > 0 && !is_small_gemm(m, n, k) && m > k_streaming_rows;
}

// Whether a float product goes to oneDNN's bf16 matmul at `precision`.
bool bf16_product(std::size_t m, std::size_t n, std::size_t k, MatmulPrecision precision) {
  return precision == MatmulPrecision::bf16 && library_product(m, n, k);
}

// Whether a product of T goes to oneDNN (float, at bf16 or with oneDNN the
// float backend); else to xtgrad's loops or OpenBLAS.
template <class T>
bool onednn_product(std::size_t m, std::size_t n, std::size_t k, MatmulPrecision precision) {
  if constexpr (std::is_same_v<T, float>)
    return library_product(m, n, k) &&
           (precision == MatmulPrecision::bf16 || get_gemm_backend() == GemmBackend::onednn);
  return false;
}

// gemm, or with a bias (then !accumulate): c = op(a) . op(b) + bias on every
// row, the bias oneDNN's bias argument where the product goes to oneDNN's
// float matmul, else written into c before a product that accumulates.
template <class T>
void gemm_or_bias(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
                  bool transpose_b, MatrixRef<T> c, bool accumulate, const T* bias,
                  [[maybe_unused]] WeightTag weight) {
  const std::size_t m = transpose_a ? a.cols : a.rows;
  const std::size_t k = transpose_a ? a.rows : a.cols;
  const std::size_t k_b = transpose_b ? b.cols : b.rows;
  const std::size_t n = transpose_b ? b.rows : b.cols;
  if (k != k_b || m != c.rows || n != c.cols)
    throw std::logic_error(std::string("xtgrad::") + op + ": internal GEMM shape mismatch [" +
                           std::to_string(m) + "x" + std::to_string(k) + "] . [" +
                           std::to_string(k_b) + "x" + std::to_string(n) + "] -> [" +
                           std::to_string(c.rows) + "x" + std::to_string(c.cols) + "]");
  if (m == 0 || n == 0) return;
  const bool small = is_small_gemm(m, n, k), few_rows = m <= k_streaming_rows;
  // Read once: every part of a split product computes at this precision.
  [[maybe_unused]] const MatmulPrecision precision = get_matmul_precision();
  const bool onednn = onednn_product<T>(m, n, k, precision);
  const bool rounded = std::is_same_v<T, float> && bf16_product(m, n, k, precision);
  if (bias != nullptr && !onednn) {  // c = bias, then c += op(a) . op(b)
    broadcast_rows(bias, c.data, m, n);
    accumulate = true;
    bias = nullptr;
  }
  if (k == 0) {  // an empty sum: c = 0 (or unchanged when accumulating)
    if (!accumulate) std::fill(c.data, c.data + m * n, T(0));
    return;
  }
  if (small) {
    small_gemm(a.data, transpose_a, b.data, transpose_b, c.data, m, n, k, accumulate);
    return;
  }
  if (few_rows) {  // a few rows through a weight: read it once
    few_rows_gemm(a.data, transpose_a, b.data, transpose_b, c.data, m, n, k, accumulate);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (onednn) {
      onednn_gemm(a.data, a.cols, transpose_a, b.data, b.cols, transpose_b, c.data, c.cols, m, n, k,
                  accumulate, precision, bias, weight,
                  {rounded ? a.bf16 : nullptr, rounded ? b.bf16 : nullptr});
      return;
    }
    warn_if_stale_openblas();
  }
  blas_gemm(a, transpose_a, b, transpose_b, c, accumulate);
}

}  // namespace

template <class T>
void gemm(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
          bool transpose_b, MatrixRef<T> c, bool accumulate, WeightTag weight) {
  gemm_or_bias<T>(op, a, transpose_a, b, transpose_b, c, accumulate, nullptr, weight);
}

template <class T>
void gemm_bias(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
               bool transpose_b, MatrixRef<T> c, const T* bias, WeightTag weight) {
  gemm_or_bias<T>(op, a, transpose_a, b, transpose_b, c, false, bias, weight);
}

template <class T>
bool gemm_runs_bf16(std::size_t m, std::size_t n, std::size_t k) {
  return std::is_same_v<T, float> && bf16_product(m, n, k, get_matmul_precision());
}

template <class T>
bool gemm_on_pool_threads(std::size_t m, std::size_t n, std::size_t k) {
  return !library_product(m, n, k) || onednn_product<T>(m, n, k, get_matmul_precision());
}

template <class T>
void blas_gemm(MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b, bool transpose_b,
               MatrixRef<T> c, bool accumulate) {
  using shape2 = std::array<std::size_t, 2>;
  const auto a_view =
      xt::adapt(a.data, a.rows * a.cols, xt::no_ownership(), shape2{a.rows, a.cols});
  const auto b_view =
      xt::adapt(b.data, b.rows * b.cols, xt::no_ownership(), shape2{b.rows, b.cols});
  auto c_view = xt::adapt(c.data, c.rows * c.cols, xt::no_ownership(), shape2{c.rows, c.cols});
  xt::blas::gemm(a_view, b_view, c_view, transpose_a, transpose_b, T(1), accumulate ? T(1) : T(0));
}

template <class T>
void broadcast_rows(const T* b, T* y, std::size_t n, std::size_t cols) {
  if (n == 0) return;
  if (parallel_chunks(n * cols, k_parallel_light) > 1) {  // rows split over the threads
    parallel_for_rows(n, std::max<std::size_t>(k_parallel_light / cols, 1),
                      [&](std::size_t r0, std::size_t r1) {
                        for (std::size_t r = r0; r < r1; ++r) std::copy(b, b + cols, y + r * cols);
                      });
    return;
  }
  std::copy(b, b + cols, y);
  if (cols * sizeof(T) >= k_short_row_bytes) {
    for (std::size_t r = 1; r < n; ++r) std::copy(b, b + cols, y + r * cols);
    return;
  }
  // Short rows: one copy call per row would cost more than the row itself, so
  // double the filled block instead (log2 n copies).
  for (std::size_t filled = 1; filled < n;) {
    const std::size_t rows = std::min(filled, n - filled);
    std::copy(y, y + rows * cols, y + filled * cols);
    filled += rows;
  }
}

template <class T>
void sum_rows(const T* dy, std::size_t n, std::size_t cols, T* db, bool accumulate) {
  if (!accumulate) std::fill(db, db + cols, T(0));
  if (cols < GemmBatch<T>::size) {
    // Narrow: each column is one strided sum, four partial sums deep (a row
    // loop over so few columns would be all loop overhead).
    for (std::size_t j = 0; j < cols; ++j) {
      T s[4] = {T(0), T(0), T(0), T(0)};
      std::size_t r = 0;
      for (; r + 4 <= n; r += 4)
        for (std::size_t q = 0; q < 4; ++q) s[q] += dy[(r + q) * cols + j];
      for (; r < n; ++r) s[0] += dy[r * cols + j];
      db[j] += (s[0] + s[1]) + (s[2] + s[3]);
    }
    return;
  }
  // Four rows per pass over db: fewer loads and stores of db per element of
  // dy. The columns are split over the threads, each summed in row order
  // whatever the split, so the sum does not depend on the thread count.
  const std::size_t min_columns =
      std::max<std::size_t>(k_parallel_light / std::max<std::size_t>(n, 1), 1);
  parallel_for(cols, min_columns, [&](std::size_t j0, std::size_t j1) {
    std::size_t r = 0;
    for (; r + 4 <= n; r += 4) {
      const T* __restrict r0 = dy + r * cols;
      const T* __restrict r1 = r0 + cols;
      const T* __restrict r2 = r1 + cols;
      const T* __restrict r3 = r2 + cols;
      T* __restrict d = db;
      for (std::size_t j = j0; j < j1; ++j) d[j] += (r0[j] + r1[j]) + (r2[j] + r3[j]);
    }
    for (; r < n; ++r) {
      const T* __restrict row = dy + r * cols;
      T* __restrict d = db;
      for (std::size_t j = j0; j < j1; ++j) d[j] += row[j];
    }
  });
}

#define XTGRAD_INSTANTIATE_GEMM(T)                                                             \
  template void gemm<T>(const char*, MatrixRef<const T>, bool, MatrixRef<const T>, bool,       \
                        MatrixRef<T>, bool, WeightTag);                                        \
  template void gemm_bias<T>(const char*, MatrixRef<const T>, bool, MatrixRef<const T>, bool,  \
                             MatrixRef<T>, const T*, WeightTag);                               \
  template bool gemm_runs_bf16<T>(std::size_t, std::size_t, std::size_t);                      \
  template bool gemm_on_pool_threads<T>(std::size_t, std::size_t, std::size_t);                \
  template void blas_gemm<T>(MatrixRef<const T>, bool, MatrixRef<const T>, bool, MatrixRef<T>, \
                             bool);                                                            \
  template void broadcast_rows<T>(const T*, T*, std::size_t, std::size_t);                     \
  template void sum_rows<T>(const T*, std::size_t, std::size_t, T*, bool);
XTGRAD_INSTANTIATE_GEMM(float)
XTGRAD_INSTANTIATE_GEMM(double)
#undef XTGRAD_INSTANTIATE_GEMM

}  // namespace xtgrad::detail
