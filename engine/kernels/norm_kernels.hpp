#pragma once
// Row kernels of layer_norm and rms_norm (internal; the formulas and their
// sources are in ops/norm.hpp): a row's statistics, its forward and its
// backward, over xsimd batches in T with the sums flushed into double
// (RowSum, softmax_kernels.hpp), so that float rows run at float SIMD speed
// with float-rounding accuracy. Centered = layer_norm, !Centered = rms_norm.
//
// Accuracy of the statistics (a row is in L1 cache: two passes cost little):
//  * the mean is x0 + sum_j (x_j - x0) / D, x0 the row's first element (the
//    shifted-data sum), so rows such as 1000 + 1e-2 * noise lose nothing to
//    their large common part;
//  * the mean (a double) is split into hi + lo in T, hi = mean rounded to T,
//    lo = the rest, and each deviation is (x - hi) - lo: x - hi is exact for
//    x near the mean (Sterbenz), so deviations keep the double mean's accuracy;
//  * the variance is the mean of the squared deviations (two-pass).

#include <cmath>
#include <cstddef>

#include "softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

namespace xtgrad::detail {

// One row's statistics: its mean (0 for rms_norm) and 1 / sqrt(var + eps)
// (rms_norm: 1 / sqrt(mean_j x_j^2 + eps)).
struct NormStats {
  double mean = 0.0;
  double rstd = 0.0;
};

// The mean as hi + lo in T (see the file comment).
template <class T>
struct SplitMean {
  SplitMean() = default;
  explicit SplitMean(double mean)
      : hi(static_cast<T>(mean)), lo(static_cast<T>(mean - static_cast<T>(mean))) {}
  T hi = T(0), lo = T(0);
};

// x - mean, as (x - hi) - lo; x itself for rms_norm.
template <bool Centered, class V, class T>
V deviation(const V& x, const SplitMean<T>& m) {
  if constexpr (Centered)
    return (x - V(m.hi)) - V(m.lo);
  else
    return x;
}

// The statistics of R rows of d > 0 elements, x[r * d, (r + 1) * d) into
// st[r]: each row's sums in the order of a row on its own, the R rows
// interleaved, so that their chains of dependent adds, divide and square
// root overlap (one row at a time, a row of 128 floats waits on them).
template <bool Centered, std::size_t R, class T>
void norm_rows_stats(const T* x, std::size_t d, double eps, NormStats* st) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  for (std::size_t r = 0; r < R; ++r) st[r] = NormStats{};
  if constexpr (Centered) {  // mean = x0 + sum_j (x_j - x0) / D
    T x0[R];
    RowSum<T> shifted[R];
    for (std::size_t r = 0; r < R; ++r) x0[r] = x[r * d];
    std::size_t j = 0;
    for (; j + lanes <= d; j += lanes)
      for (std::size_t r = 0; r < R; ++r)
        shifted[r].add(B::load_unaligned(x + r * d + j) - B(x0[r]));
    for (; j < d; ++j)
      for (std::size_t r = 0; r < R; ++r) shifted[r].add(x[r * d + j] - x0[r]);
    for (std::size_t r = 0; r < R; ++r)
      st[r].mean = static_cast<double>(x0[r]) + shifted[r].total() / static_cast<double>(d);
  }
  // var = sum_j (x_j - mean)^2 / D (rms_norm: sum_j x_j^2 / D)
  SplitMean<T> m[R];
  RowSum<T> squares[R];
  for (std::size_t r = 0; r < R; ++r) m[r] = SplitMean<T>(st[r].mean);
  std::size_t j = 0;
  for (; j + lanes <= d; j += lanes)
    for (std::size_t r = 0; r < R; ++r) {
      const B c = deviation<Centered>(B::load_unaligned(x + r * d + j), m[r]);
      squares[r].add(c * c);
    }
  for (; j < d; ++j)
    for (std::size_t r = 0; r < R; ++r) {
      const T c = deviation<Centered>(x[r * d + j], m[r]);
      squares[r].add(c * c);
    }
  for (std::size_t r = 0; r < R; ++r)
    st[r].rstd = 1.0 / std::sqrt(squares[r].total() / static_cast<double>(d) + eps);
}

// The statistics of x[0, d), d > 0.
template <bool Centered, class T>
NormStats norm_row_stats(const T* x, std::size_t d, double eps) {
  NormStats st;
  norm_rows_stats<Centered, 1>(x, d, eps, &st);
  return st;
}

// y[D] = (x[D] - mean) * rstd * w[D] + b[D], the weight and bias optional.
template <bool Centered, bool HasWeight, bool HasBias, class T>
void norm_forward_row(const T* x, const T* w, const T* b, T* y, std::size_t d, NormStats st) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  const SplitMean<T> m(st.mean);
  const T r = static_cast<T>(st.rstd);
  const B rb(r);
  std::size_t j = 0;
  for (; j + lanes <= d; j += lanes) {
    B v = deviation<Centered>(B::load_unaligned(x + j), m) * rb;
    if constexpr (HasWeight) v = v * B::load_unaligned(w + j);
    if constexpr (HasBias) v = v + B::load_unaligned(b + j);
    v.store_unaligned(y + j);
  }
  for (; j < d; ++j) {
    T v = deviation<Centered>(x[j], m) * r;
    if constexpr (HasWeight) v *= w[j];
    if constexpr (HasBias) v += b[j];
    y[j] = v;
  }
}

// One row of the backward (llm.c's layernorm_backward), dxhat = dy * w:
//   dx[D] (+)= rstd * (dxhat - mean_j dxhat - xhat * mean_j(dxhat * xhat))
// (rms_norm: without the mean_j dxhat term), and the row's shares of the
// weight and bias gradients added onto acc_w[D] += dy * xhat, acc_b[D] += dy.
// dx, acc_w and acc_b may each be null (not wanted); Add: dx += instead of =.
template <bool Centered, bool HasWeight, bool Add, class T>
void norm_backward_row(const T* x, const T* w, const T* dy, T* dx, T* acc_w, T* acc_b,
                       std::size_t d, NormStats st) {
  using B = simd_math::Batch<T>;
  constexpr std::size_t lanes = B::size;
  const SplitMean<T> m(st.mean);
  const T r = static_cast<T>(st.rstd);
  const B rb(r);
  const auto xhat_at = [&](std::size_t j) {
    return deviation<Centered>(B::load_unaligned(x + j), m) * rb;
  };
  const auto dxhat_at = [&](std::size_t j) {
    if constexpr (HasWeight)
      return B::load_unaligned(dy + j) * B::load_unaligned(w + j);
    else
      return B::load_unaligned(dy + j);
  };
  // Pass 1: sum_j dxhat, sum_j dxhat * xhat, and the weight and bias shares.
  RowSum<T> sum_dxhat, sum_dxhat_xhat;
  std::size_t j = 0;
  for (; j + lanes <= d; j += lanes) {
    const B xhat = xhat_at(j), g = B::load_unaligned(dy + j);
    const B dxhat = dxhat_at(j);
    if constexpr (Centered) sum_dxhat.add(dxhat);
    sum_dxhat_xhat.add(dxhat * xhat);
    if (acc_w)
      simd_math::fused_multiply_add(g, xhat, B::load_unaligned(acc_w + j))
          .store_unaligned(acc_w + j);
    if (acc_b) (B::load_unaligned(acc_b + j) + g).store_unaligned(acc_b + j);
  }
  for (; j < d; ++j) {
    const T xhat = deviation<Centered>(x[j], m) * r;
    const T dxhat = HasWeight ? dy[j] * w[j] : dy[j];
    if constexpr (Centered) sum_dxhat.add(dxhat);
    sum_dxhat_xhat.add(dxhat * xhat);
    if (acc_w) acc_w[j] += dy[j] * xhat;
    if (acc_b) acc_b[j] += dy[j];
  }
  if (!dx) return;
  // Pass 2: dx = rstd * dxhat - c1 - xhat * c2, c1 = rstd * mean(dxhat),
  // c2 = rstd * mean(dxhat * xhat)
  const double n = static_cast<double>(d);
  const T c1 = Centered ? static_cast<T>(st.rstd * sum_dxhat.total() / n) : T(0);
  const T c2 = static_cast<T>(st.rstd * sum_dxhat_xhat.total() / n);
  const B c1b(c1), c2b(c2);
  for (j = 0; j + lanes <= d; j += lanes) {
    B v = rb * dxhat_at(j) - c1b - xhat_at(j) * c2b;
    if constexpr (Add) v = v + B::load_unaligned(dx + j);
    v.store_unaligned(dx + j);
  }
  for (; j < d; ++j) {
    const T xhat = deviation<Centered>(x[j], m) * r;
    const T dxhat = HasWeight ? dy[j] * w[j] : dy[j];
    const T v = r * dxhat - c1 - xhat * c2;
    if constexpr (Add)
      dx[j] += v;
    else
      dx[j] = v;
  }
}

}  // namespace xtgrad::detail
