#pragma once
// Row kernels of softmax, log_softmax and cross_entropy (internal): the
// maximum of a row, a sum that keeps float-rounding accuracy at SIMD speed,
// and exp(a - b) over xsimd batches.
//
// Sums: each lane adds at most k_flush batch values in T before the lane
// total is added into a double, so a float sum of 0 < v <= 1 terms (exp of a
// shifted row) is as accurate as a double accumulation of the rounded terms,
// without converting every element.

#include <algorithm>
#include <cstddef>
#include <limits>

#include "vector_math.hpp"  // first (through simd.hpp): see simd.hpp

namespace xtgrad::detail {

// The largest element of x[0, n): -inf for n = 0. NaN elements may be
// skipped; a NaN still reaches every result through the sums of exp(x - max).
template <class T>
T row_max(const T* x, std::size_t n) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  B m(-std::numeric_limits<T>::infinity());
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) m = xsimd::max(m, B::load_unaligned(x + j));
  T r = simd_math::horizontal_max(m);
  for (; j < n; ++j) r = std::max(r, x[j]);
  return r;
}

// A sum of batches and scalars (see the file comment).
template <class T>
class RowSum {
 public:
  using B = simd_math::Batch<T>;
  void add(const B& v) {
    lanes_ += v;
    if (++pending_ == k_flush) flush();
  }
  void add(T v) { total_ += static_cast<double>(v); }
  double total() {
    flush();
    return total_;
  }

 private:
  static constexpr int k_flush = 16;
  void flush() {
    total_ += static_cast<double>(xsimd::hadd(lanes_));
    lanes_ = B(T(0));
    pending_ = 0;
  }
  B lanes_ = B(T(0));
  int pending_ = 0;
  double total_ = 0.0;
};

// out[j] = exp((a[j] - b) - c) for j < n (b, c scalars: a row maximum and a
// log of a sum), returning sum_j out[j] when `sum` is true; `out` is only
// written when `store` is true.
template <class T, bool store, bool sum>
double exp_minus_scalar(const T* a, T b, T c, T* out, std::size_t n) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  const B bb(b), cb(c);
  RowSum<T> total;
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const B e = simd_math::exp_no_ub((B::load_unaligned(a + j) - bb) - cb);
    if constexpr (store) e.store_unaligned(out + j);
    if constexpr (sum) total.add(e);
  }
  if (j < n) {  // the tail through the same batch arithmetic, zero-padded
    T buffer[lanes] = {};
    std::copy(a + j, a + n, buffer);
    simd_math::exp_no_ub((B::load_unaligned(buffer) - bb) - cb).store_unaligned(buffer);
    for (std::size_t l = 0; l < n - j; ++l) {
      if constexpr (store) out[j + l] = buffer[l];
      if constexpr (sum) total.add(buffer[l]);
    }
  }
  return sum ? total.total() : 0.0;
}

// out[j] (+)= scale * exp((a[j] - b) - c) + offset for j < n: written when
// `add` is false, added onto out when true (a compile-time choice: GCC 12
// miscompiles a runtime ?: over batches at -O3).
template <class T, bool add>
void scaled_exp_minus(const T* a, T b, T c, T scale, T offset, T* out, std::size_t n) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  const B bb(b), cb(c), sb(scale), ob(offset);
  const auto value = [&](const T* at) {
    return simd_math::fused_multiply_add(simd_math::exp_no_ub((B::load_unaligned(at) - bb) - cb),
                                         sb, ob);
  };
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    if constexpr (add)
      (B::load_unaligned(out + j) + value(a + j)).store_unaligned(out + j);
    else
      value(a + j).store_unaligned(out + j);
  }
  if (j < n) {
    T pa[lanes] = {}, po[lanes] = {};
    std::copy(a + j, a + n, pa);
    if constexpr (add) std::copy(out + j, out + n, po);
    if constexpr (add)
      (B::load_unaligned(po) + value(pa)).store_unaligned(po);
    else
      value(pa).store_unaligned(po);
    std::copy(po, po + (n - j), out + j);
  }
}

// out[j] = exp(a[j] - b[j]) for j < n.
template <class T>
void exp_minus_array(const T* a, const T* b, T* out, std::size_t n) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes)
    simd_math::exp_no_ub(B::load_unaligned(a + j) - B::load_unaligned(b + j))
        .store_unaligned(out + j);
  if (j < n) {
    T pa[lanes] = {}, pb[lanes] = {};
    std::copy(a + j, a + n, pa);
    std::copy(b + j, b + n, pb);
    simd_math::exp_no_ub(B::load_unaligned(pa) - B::load_unaligned(pb)).store_unaligned(pa);
    std::copy(pa, pa + (n - j), out + j);
  }
}

}  // namespace xtgrad::detail
