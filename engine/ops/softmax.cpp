#include "../kernels/softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include "softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../check.hpp"
#include "../indices.hpp"
#include "../kernels/parallel.hpp"
#include "elementwise.hpp"
#include "math.hpp"
#include "reduce.hpp"
#include "support/axes.hpp"

namespace xtgrad {

namespace {

using detail::AxisSplit;
template <class T>
using Batch = detail::simd_math::Batch<T>;

// Neighbouring rows of a strided axis handled together (stack buffers).
constexpr std::size_t k_block = 64;

// ---- forward: y = softmax(x) or log_softmax(x) ----

// One contiguous row of n elements.
template <class T, bool log>
void forward_row(const T* x, T* y, std::size_t n) {
  const T m = detail::row_max(x, n);
  if constexpr (!log) {
    // y[n] = exp(x[n] - m) / s,  s = sum_n exp(x[n] - m)
    const double s = detail::exp_minus_scalar<T, true, true>(x, m, T(0), y, n);
    const T inverse = static_cast<T>(1.0 / s);
    for (std::size_t j = 0; j < n; ++j) y[j] *= inverse;
  } else {
    // y[n] = (x[n] - m) - log s
    const double s = detail::exp_minus_scalar<T, false, true>(x, m, T(0), nullptr, n);
    const T log_s = static_cast<T>(std::log(s));
    for (std::size_t j = 0; j < n; ++j) y[j] = (x[j] - m) - log_s;
  }
}

// `width` <= k_block neighbouring rows of a strided axis: element j of row c
// is at x[j * stride + c].
template <class T, bool log>
void forward_block(const T* x, T* y, std::size_t extent, std::size_t stride, std::size_t width) {
  T m[k_block], scratch[k_block], factor[k_block];
  double s[k_block];
  std::fill(m, m + width, -std::numeric_limits<T>::infinity());
  std::fill(s, s + width, 0.0);
  for (std::size_t j = 0; j < extent; ++j)  // m[c] = max_j x[j, c]
    for (std::size_t c = 0; c < width; ++c) m[c] = std::max(m[c], x[j * stride + c]);
  for (std::size_t j = 0; j < extent; ++j) {  // s[c] = sum_j exp(x[j, c] - m[c])
    T* e = log ? scratch : y + j * stride;
    detail::exp_minus_array(x + j * stride, m, e, width);
    for (std::size_t c = 0; c < width; ++c) s[c] += e[c];
  }
  if constexpr (!log) {
    for (std::size_t c = 0; c < width; ++c) factor[c] = static_cast<T>(1.0 / s[c]);
    for (std::size_t j = 0; j < extent; ++j)  // y[j, c] = exp(x[j, c] - m[c]) / s[c]
      for (std::size_t c = 0; c < width; ++c) y[j * stride + c] *= factor[c];
  } else {
    for (std::size_t c = 0; c < width; ++c) factor[c] = static_cast<T>(std::log(s[c]));
    for (std::size_t j = 0; j < extent; ++j)  // y[j, c] = (x[j, c] - m[c]) - log s[c]
      for (std::size_t c = 0; c < width; ++c)
        y[j * stride + c] = (x[j * stride + c] - m[c]) - factor[c];
  }
}

// Elements a thread must have before a second one pays (an exp each).
constexpr std::size_t k_softmax_min_elements = std::size_t(1) << 14;

// The outer blocks are independent: split over the threads in use.
template <class Body>
void for_outer(const AxisSplit& s, Body&& body) {
  const std::size_t block = std::max<std::size_t>(s.extent * s.inner, 1);
  detail::parallel_for_rows(s.outer, std::max<std::size_t>(k_softmax_min_elements / block, 1),
                            [&](std::size_t o0, std::size_t o1) {
                              for (std::size_t o = o0; o < o1; ++o) body(o);
                            });
}

template <class T, bool log>
void forward(const T* x, T* y, const AxisSplit& s) {
  const std::size_t block = s.extent * s.inner;
  for_outer(s, [&](std::size_t o) {
    if (s.inner == 1) {
      forward_row<T, log>(x + o * block, y + o * block, s.extent);
      return;
    }
    for (std::size_t i = 0; i < s.inner; i += k_block)
      forward_block<T, log>(x + o * block + i, y + o * block + i, s.extent, s.inner,
                            std::min(k_block, s.inner - i));
  });
}

// ---- backward, from the saved output y ----

// Writes or adds v into dx: a compile-time choice (see STYLE: no runtime ?:
// over batches).
template <bool add, class B, class T>
void put(T* dx, const B& v) {
  if constexpr (add)
    (B::load_unaligned(dx) + v).store_unaligned(dx);
  else
    v.store_unaligned(dx);
}

// One contiguous row of n elements.
template <class T, bool log, bool add>
void backward_row(const T* y, const T* dy, T* dx, std::size_t n) {
  using B = Batch<T>;
  constexpr std::size_t lanes = B::size;
  detail::RowSum<T> total;
  std::size_t j = 0;
  if constexpr (!log) {
    // s = sum_n dy[n] * y[n];  dx[n] (+)= y[n] * (dy[n] - s)
    for (; j + lanes <= n; j += lanes)
      total.add(B::load_unaligned(dy + j) * B::load_unaligned(y + j));
    for (; j < n; ++j) total.add(dy[j] * y[j]);
    const T s = static_cast<T>(total.total());
    for (j = 0; j < n; ++j) {
      const T v = y[j] * (dy[j] - s);
      if constexpr (add)
        dx[j] += v;
      else
        dx[j] = v;
    }
  } else {
    // s = sum_n dy[n];  dx[n] (+)= dy[n] - exp(y[n]) * s
    for (; j + lanes <= n; j += lanes) total.add(B::load_unaligned(dy + j));
    for (; j < n; ++j) total.add(dy[j]);
    const T s = static_cast<T>(total.total());
    const B sb(s);
    for (j = 0; j + lanes <= n; j += lanes)
      put<add>(dx + j, B::load_unaligned(dy + j) -
                           detail::simd_math::exp_no_ub(B::load_unaligned(y + j)) * sb);
    if (j < n) {  // the tail through the same batch arithmetic
      T py[lanes] = {}, pdy[lanes] = {}, pdx[lanes] = {};
      std::copy(y + j, y + n, py);
      std::copy(dy + j, dy + n, pdy);
      std::copy(dx + j, dx + n, pdx);
      put<add>(pdx,
               B::load_unaligned(pdy) - detail::simd_math::exp_no_ub(B::load_unaligned(py)) * sb);
      std::copy(pdx, pdx + (n - j), dx + j);
    }
  }
}

// `width` <= k_block neighbouring rows of a strided axis (as forward_block).
template <class T, bool log, bool add>
void backward_block(const T* y, const T* dy, T* dx, std::size_t extent, std::size_t stride,
                    std::size_t width) {
  T s[k_block], e[k_block];
  double total[k_block];
  std::fill(total, total + width, 0.0);
  for (std::size_t j = 0; j < extent; ++j)  // s[c] = sum_j dy[j, c] * y[j, c], or sum_j dy[j, c]
    for (std::size_t c = 0; c < width; ++c)
      total[c] += log ? dy[j * stride + c] : dy[j * stride + c] * y[j * stride + c];
  for (std::size_t c = 0; c < width; ++c) s[c] = static_cast<T>(total[c]);
  const T zero[k_block] = {};
  for (std::size_t j = 0; j < extent; ++j) {
    const T* yr = y + j * stride;
    const T* dyr = dy + j * stride;
    T* dxr = dx + j * stride;
    if constexpr (log) detail::exp_minus_array(yr, zero, e, width);
    for (std::size_t c = 0; c < width; ++c) {
      // softmax: dx[j, c] (+)= y[j, c] * (dy[j, c] - s[c]);  log: dy[j, c] - exp(y[j, c]) * s[c]
      const T v = log ? dyr[c] - e[c] * s[c] : yr[c] * (dyr[c] - s[c]);
      if constexpr (add)
        dxr[c] += v;
      else
        dxr[c] = v;
    }
  }
}

template <class T, bool log, bool add>
void backward(const T* y, const T* dy, T* dx, const AxisSplit& s) {
  const std::size_t block = s.extent * s.inner;
  for_outer(s, [&](std::size_t o) {
    const std::size_t at = o * block;
    if (s.inner == 1) {
      backward_row<T, log, add>(y + at, dy + at, dx + at, s.extent);
      return;
    }
    for (std::size_t i = 0; i < s.inner; i += k_block)
      backward_block<T, log, add>(y + at + i, dy + at + i, dx + at + i, s.extent, s.inner,
                                  std::min(k_block, s.inner - i));
  });
}

// softmax and log_softmax share their checks, recording and layout.
template <class T, bool log>
Var<T> softmax_op(const char* op, const Var<T>& x, std::int64_t dim) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  const AxisSplit split = detail::split_at(x.shape(), axis);

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  forward<T, log>(xv.data(), y.data(), split);

  // Backward needs only y, read from this node when the rule runs.
  tape.set_backward(yi, [xi, yi, split](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const GradPointer<T> dx = t.grad_pointer(xi);
    const T* yv = t.value(yi).data();
    if (dx.accumulate)  // dx[x] += J^T dy along `dim`
      backward<T, log, true>(yv, dy.data(), dx.data, split);
    else  // dx[x] = J^T dy along `dim`
      backward<T, log, false>(yv, dy.data(), dx.data, split);
  });
  // create_graph, with y = g.output() differentiable through this node:
  //   softmax:      dx = y * (dy - sum(dy * y, dim))
  //   log_softmax:  dx = dy - exp(y) * sum(dy, dim)
  tape.set_grad_rule(yi, [axis](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    const Var<T> dy = g.grad_output(), y = g.output();
    const std::vector<std::int64_t> dims{static_cast<std::int64_t>(axis)};
    if constexpr (log)
      g.add(0, sub(dy, mul(exp(y), sum(dy, dims, true))));
    else
      g.add(0, mul(y, sub(dy, sum(mul(dy, y), dims, true))));
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> softmax(const Var<T>& x, std::int64_t dim) {
  return softmax_op<T, false>("softmax", x, dim);
}

template <class T>
Var<T> log_softmax(const Var<T>& x, std::int64_t dim) {
  return softmax_op<T, true>("log_softmax", x, dim);
}

template Var<float> softmax(const Var<float>&, std::int64_t);
template Var<double> softmax(const Var<double>&, std::int64_t);
template Var<float> log_softmax(const Var<float>&, std::int64_t);
template Var<double> log_softmax(const Var<double>&, std::int64_t);

}  // namespace xtgrad
