#include "norm.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../check.hpp"
#include "../errors.hpp"

namespace xtgrad {

namespace {

// sum_j f(j) for j < n, in double, in eight independent partial sums (which
// the compiler keeps in vector registers).
template <class F>
double lane_sum(std::size_t n, F f) {
  constexpr std::size_t lanes = 8;
  double partial[lanes] = {};
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes)
    for (std::size_t k = 0; k < lanes; ++k) partial[k] += f(j + k);
  for (; j < n; ++j) partial[0] += f(j);
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

// The checks of both ops; returns D, the length of a row.
template <class T>
std::size_t check_norm(const char* op, const Var<T>& x, const Var<T>* weight, const Var<T>* bias,
                       double eps) {
  const Shape& xs = x.shape();
  if (xs.empty()) detail::fail_shape(op, "x", xs, "[..., D] (at least one axis)");
  const std::size_t d = xs.back();
  const std::string expected = "[" + std::to_string(d) + "] to match x " + detail::shape_str(xs);
  for (const auto& [name, v] : {std::pair{"weight", weight}, std::pair{"bias", bias}})
    if (v && (v->shape().size() != 1 || v->shape()[0] != d))
      detail::fail_shape(op, name, v->shape(), expected);
  if (!(eps >= 0.0 && std::isfinite(eps)))
    detail::fail_argument(op, "eps",
                          "is " + detail::number_str(eps) + ", expected a finite value >= 0");
  return d;
}

// Per-thread double buffers for dw and db: the sums over rows, written once
// into the gradients at the end (kept from call to call, grown, never shrunk).
double* row_sum_scratch(std::size_t size) {
  thread_local std::vector<double> buffer;
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

// dst[D] (+)= sum[D] (write-or-accumulate rule), or nothing when dst is null.
template <class T>
void write_row_sums(GradPointer<T> dst, const double* sum, std::size_t d) {
  if (!dst.data) return;
  if (dst.accumulate)
    for (std::size_t j = 0; j < d; ++j) dst.data[j] += static_cast<T>(sum[j]);
  else
    for (std::size_t j = 0; j < d; ++j) dst.data[j] = static_cast<T>(sum[j]);
}

// One backward for both ops, row by row (llm.c's layernorm_backward);
// rms_norm is the case Centered = false (mean 0, no mean(dxhat) term).
// stats: per row {mean, rstd} (Centered) or {rstd}.
template <bool Centered, bool HasWeight, class T>
void norm_backward(const T* x, const T* w, const T* dy, const double* stats, std::size_t rows,
                   std::size_t d, GradPointer<T> dx, GradPointer<T> dw, GradPointer<T> db) {
  double* const dw_sum = dw.data || db.data ? row_sum_scratch(2 * d) : nullptr;
  double* const db_sum = dw_sum ? dw_sum + d : nullptr;
  if (dw.data) std::fill(dw_sum, dw_sum + d, 0.0);
  if (db.data) std::fill(db_sum, db_sum + d, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* g = dy + r * d;
    const double mean = Centered ? stats[2 * r] : 0.0;
    const double rstd = Centered ? stats[2 * r + 1] : stats[r];
    auto xhat = [=](std::size_t j) { return (static_cast<double>(xr[j]) - mean) * rstd; };
    auto dxhat = [=](std::size_t j) { return HasWeight ? double(g[j]) * w[j] : double(g[j]); };
    if (dx.data) {
      // mean_dxhat[] = mean_j dxhat[j] (0 for rms_norm), mean_dxhat_xhat[] = mean_j dxhat * xhat
      const double mean_dxhat = Centered ? lane_sum(d, dxhat) / d : 0.0;
      const double mean_dxhat_xhat =
          lane_sum(d, [=](std::size_t j) { return dxhat(j) * xhat(j); }) / d;
      T* o = dx.data + r * d;
      // dx[D] (+)= rstd * (dxhat[D] - mean_dxhat - xhat[D] * mean_dxhat_xhat)
      if (dx.accumulate)
        for (std::size_t j = 0; j < d; ++j)
          o[j] += static_cast<T>(rstd * (dxhat(j) - mean_dxhat - xhat(j) * mean_dxhat_xhat));
      else
        for (std::size_t j = 0; j < d; ++j)
          o[j] = static_cast<T>(rstd * (dxhat(j) - mean_dxhat - xhat(j) * mean_dxhat_xhat));
    }
    // dw[D] += dy[r, D] * xhat[r, D];   db[D] += dy[r, D]   (sums over rows, in double)
    if (dw.data)
      for (std::size_t j = 0; j < d; ++j) dw_sum[j] += double(g[j]) * xhat(j);
    if (db.data)
      for (std::size_t j = 0; j < d; ++j) db_sum[j] += g[j];
  }
  write_row_sums(dw, dw_sum, d);
  write_row_sums(db, db_sum, d);
}

// Records layer_norm (Centered) or rms_norm after the checks.
template <bool Centered, class T>
Var<T> record_norm(const char* op, const Var<T>& x, const std::optional<Var<T>>& weight,
                   const std::optional<Var<T>>& bias, double eps, std::size_t d) {
  Tape<T>& tape = x.tape();
  const std::size_t xi = x.index();
  const std::optional<std::size_t> wi = weight ? std::optional(weight->index()) : std::nullopt;
  const std::optional<std::size_t> bi = bias ? std::optional(bias->index()) : std::nullopt;
  const bool needs_grad =
      tape.requires_grad(xi) || (wi && tape.requires_grad(*wi)) || (bi && tape.requires_grad(*bi));
  const std::size_t yi = tape.record(op, {xi, wi.value_or(xi), bi.value_or(xi)}, needs_grad);
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  const std::size_t rows = d == 0 ? 0 : xv.size() / d;
  const T* w = wi ? tape.value(*wi).data() : nullptr;
  const T* b = bi ? tape.value(*bi).data() : nullptr;
  // stats[rows, 2] = {mean, rstd} (layer_norm) or stats[rows] = rstd (rms_norm),
  // kept only when backward will run.
  constexpr std::size_t per_row = Centered ? 2 : 1;
  std::vector<double> stats(tape.requires_grad(yi) ? per_row * rows : 0);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = xv.data() + r * d;
    T* yr = y.data() + r * d;
    // mean[] = sum_j x[j] / D (0 for rms_norm); var[] = sum_j (x[j] - mean)^2 / D
    const double mean =
        Centered ? lane_sum(d, [xr](std::size_t j) { return double(xr[j]); }) / d : 0.0;
    const double var = lane_sum(d,
                                [=](std::size_t j) {
                                  const double c = xr[j] - mean;
                                  return c * c;
                                }) /
                       d;
    const double rstd = 1.0 / std::sqrt(var + eps);
    // y[D] = (x[D] - mean) * rstd * w[D] + b[D]
    for (std::size_t j = 0; j < d; ++j) yr[j] = static_cast<T>((xr[j] - mean) * rstd);
    if (w)
      for (std::size_t j = 0; j < d; ++j) yr[j] *= w[j];
    if (b)
      for (std::size_t j = 0; j < d; ++j) yr[j] += b[j];
    if (!stats.empty()) {
      if (Centered) stats[2 * r] = mean;
      stats[per_row * r + per_row - 1] = rstd;
    }
  }

  tape.set_backward(yi, [xi, wi, bi, d, rows, stats = std::move(stats)](Tape<T>& t,
                                                                        const xt::xarray<T>& dy) {
    // Claimed in the order x, weight, bias and written in that order, so that
    // a Var passed twice gets the sum of both shares (grad_slot's rule).
    const GradPointer<T> dx = t.grad_pointer(xi);
    const GradPointer<T> dw = wi ? t.grad_pointer(*wi) : GradPointer<T>{};
    const GradPointer<T> db = bi ? t.grad_pointer(*bi) : GradPointer<T>{};
    const T* x = t.value(xi).data();
    if (wi)
      norm_backward<Centered, true>(x, t.value(*wi).data(), dy.data(), stats.data(), rows, d, dx,
                                    dw, db);
    else
      norm_backward<Centered, false, T>(x, nullptr, dy.data(), stats.data(), rows, d, dx, dw, db);
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> layer_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight,
                  const std::optional<Var<NoDeduce<T>>>& bias, double eps) {
  static constexpr const char* op = "layer_norm";
  const Var<T>* w = weight ? &*weight : nullptr;
  const Var<T>* b = bias ? &*bias : nullptr;
  detail::common_tape<T>(op, {{"x", &x}, {"weight", w}, {"bias", b}});
  const std::size_t d = check_norm(op, x, w, b, eps);
  return record_norm<true>(op, x, weight, bias, eps, d);
}

template <class T>
Var<T> rms_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight, double eps) {
  static constexpr const char* op = "rms_norm";
  const Var<T>* w = weight ? &*weight : nullptr;
  detail::common_tape<T>(op, {{"x", &x}, {"weight", w}});
  const std::size_t d = check_norm<T>(op, x, w, nullptr, eps);
  return record_norm<false>(op, x, weight, std::optional<Var<T>>{}, eps, d);
}

#define XTGRAD_INSTANTIATE_NORM(T)                                        \
  template Var<T> layer_norm(const Var<T>&, const std::optional<Var<T>>&, \
                             const std::optional<Var<T>>&, double);       \
  template Var<T> rms_norm(const Var<T>&, const std::optional<Var<T>>&, double);
XTGRAD_INSTANTIATE_NORM(float)
XTGRAD_INSTANTIATE_NORM(double)
#undef XTGRAD_INSTANTIATE_NORM

}  // namespace xtgrad
