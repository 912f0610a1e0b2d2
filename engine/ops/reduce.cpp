#include "reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "../check.hpp"
#include "../kernels/broadcast.hpp"
#include "../kernels/reduce_plan.hpp"

namespace xtgrad {

namespace {

// sum (divisor 1) and mean (divisor n) differ only in the factor applied to
// the total and to the upstream gradient.
template <class T>
Var<T> reduce_all(const char* op, const Var<T>& x, bool is_mean) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  const xt::xarray<T>& xv = tape.value(xi);
  const std::size_t n = xv.size();
  y.resize(Shape{});
  const T* data = xv.data();
  const double total = detail::sum_of(n, [data](std::size_t i) { return data[i]; });
  // y[] = sum_i x_i, or its mean; an empty mean is NaN as in torch.mean
  if (!is_mean)
    y.data()[0] = static_cast<T>(total);
  else
    y.data()[0] = n == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(total / n);

  tape.set_backward(yi, [xi, n, is_mean](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    if (n == 0) return;  // an empty x: nothing to write (and no 0 / 0)
    // dx[x] (+)= dy[] broadcast (sum), or dy[] / n broadcast (mean)
    const T g = is_mean ? dy.data()[0] / static_cast<T>(n) : dy.data()[0];
    T* d = dx.buffer.data();
    if (dx.accumulate)
      for (std::size_t i = 0; i < n; ++i) d[i] += g;
    else
      std::fill(d, d + n, g);
  });
  return tape.var(yi);
}

// sum_r x[r] over the reduced elements of one output, in double.
template <class T>
double sum_reduced(const detail::ReducePlan& plan, const T* x, std::size_t base) {
  double total = 0.0;
  detail::for_each_run(plan, base, [&](std::size_t offset, std::size_t count, std::size_t stride) {
    const T* run = x + offset;
    if (stride == 1)
      total += detail::sum_of(count, [run](std::size_t k) { return run[k]; });
    else
      total += detail::sum_of(count, [run, stride](std::size_t k) { return run[k * stride]; });
  });
  return total;
}

// sum and mean along dims: like reduce_all, per output element.
template <class T>
Var<T> reduce_dims(const char* op, const Var<T>& x, const std::vector<std::int64_t>& dims,
                   bool keepdim, bool is_mean) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const detail::ReducePlan plan = detail::make_reduce_plan(op, x.shape(), dims, keepdim);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(plan.out_shape);
  const T* xd = xv.data();
  T* yd = y.data();
  const std::size_t n = plan.reduced_size;
  // y[o] = sum_r x[o, r], or that / n; a mean over nothing is NaN as in torch.mean
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    const double total = sum_reduced(plan, xd, base);
    if (!is_mean)
      yd[o] = static_cast<T>(total);
    else
      yd[o] = n == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(total / n);
  });

  tape.set_backward(yi, [xi, plan, is_mean](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    const T* g = dy.data();
    if (!is_mean)  // dx[o, r] (+)= dy[o], broadcast over the reduced axes
      detail::write_reduced(plan, dx, [g](std::size_t o, std::size_t) { return g[o]; });
    else if (plan.reduced_size > 0)  // dx[o, r] (+)= dy[o] / n
      detail::write_reduced(plan, dx,
                            [g, n = static_cast<T>(plan.reduced_size)](std::size_t o, std::size_t) {
                              return g[o] / n;
                            });
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> sum(const Var<T>& x) {
  return reduce_all("sum", x, false);
}

template <class T>
Var<T> mean(const Var<T>& x) {
  return reduce_all("mean", x, true);
}

template <class T>
Var<T> sum(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return reduce_dims("sum", x, dims, keepdim, false);
}

template <class T>
Var<T> mean(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return reduce_dims("mean", x, dims, keepdim, true);
}

template <class T>
Var<T> var(const Var<T>& x, const std::vector<std::int64_t>& dims, std::int64_t correction,
           bool keepdim) {
  static constexpr const char* op = "var";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const detail::ReducePlan plan = detail::make_reduce_plan(op, x.shape(), dims, keepdim);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(plan.out_shape);
  const T* xd = xv.data();
  T* yd = y.data();
  const double n = static_cast<double>(plan.reduced_size);
  const double dof = n - static_cast<double>(correction);  // torch: n - correction
  // The row means, kept in double for backward (in float they would round by
  // more than the deviations of data such as 1e4 + 1e-3 noise).
  const bool keep_means = tape.requires_grad(yi);
  xt::xarray<double> means;  // (a default xarray is 0-d: one element, not none)
  if (keep_means) means.resize({plan.out_size});
  // m[o] = sum_r x[o, r] / n; y[o] = sum_r (x[o, r] - m[o])^2 / max(0, n - c): two passes
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    const double m = plan.reduced_size == 0 ? std::numeric_limits<double>::quiet_NaN()
                                            : sum_reduced(plan, xd, base) / n;
    double squares = 0.0;
    detail::for_each_reduced(plan, base, [&](std::size_t i) {
      const double deviation = xd[i] - m;
      squares += deviation * deviation;
    });
    yd[o] = static_cast<T>(squares / std::max(0.0, dof));
    if (keep_means) means.data()[o] = m;
  });

  tape.set_backward(yi, [xi, plan, means = std::move(means), factor = 2.0 / dof](
                            Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const T* g = dy.data();
    const T* x = t.value(xi).data();
    const double* m = means.data();
    // dx[o, r] (+)= dy[o] * 2 (x[o, r] - m[o]) / (n - c)
    detail::write_reduced(plan, t.grad_slot(xi), [g, x, m, factor](std::size_t o, std::size_t i) {
      return static_cast<T>(g[o] * factor * (x[i] - m[o]));
    });
  });
  return tape.var(yi);
}

template <class T>
Var<T> logsumexp(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  static constexpr const char* op = "logsumexp";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const detail::ReducePlan plan = detail::make_reduce_plan(op, x.shape(), dims, keepdim);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(plan.out_shape);
  const T* xd = xv.data();
  T* yd = y.data();
  // y[o] = s + log sum_r exp(x[o, r] - s), s = max_r x[o, r] (0 when that is
  // +-inf, as torch.logsumexp): no overflow, and -inf for all -inf or nothing
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    T top = -std::numeric_limits<T>::infinity();
    detail::for_each_reduced(plan, base, [&](std::size_t i) { top = xd[i] > top ? xd[i] : top; });
    const T shift = std::isinf(top) ? T(0) : top;
    double total = 0.0;
    detail::for_each_reduced(plan, base, [&](std::size_t i) { total += std::exp(xd[i] - shift); });
    yd[o] = static_cast<T>(std::log(total) + shift);
  });

  tape.set_backward(yi, [xi, yi, plan](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const T* g = dy.data();
    const T* x = t.value(xi).data();
    const T* yv = t.value(yi).data();
    constexpr T minus_inf = -std::numeric_limits<T>::infinity();
    // dx[o, r] (+)= dy[o] * exp(x[o, r] - y[o]) (softmax); 0 where y[o] = -inf
    detail::write_reduced(plan, t.grad_slot(xi),
                          [g, x, yv, minus_inf](std::size_t o, std::size_t i) {
                            return yv[o] == minus_inf ? T(0) : g[o] * std::exp(x[i] - yv[o]);
                          });
  });
  return tape.var(yi);
}

template Var<float> sum(const Var<float>&);
template Var<double> sum(const Var<double>&);
template Var<float> mean(const Var<float>&);
template Var<double> mean(const Var<double>&);

#define XTGRAD_INSTANTIATE_REDUCE(T)                                                        \
  template Var<T> sum(const Var<T>&, const std::vector<std::int64_t>&, bool);               \
  template Var<T> mean(const Var<T>&, const std::vector<std::int64_t>&, bool);              \
  template Var<T> var(const Var<T>&, const std::vector<std::int64_t>&, std::int64_t, bool); \
  template Var<T> logsumexp(const Var<T>&, const std::vector<std::int64_t>&, bool);
XTGRAD_INSTANTIATE_REDUCE(float)
XTGRAD_INSTANTIATE_REDUCE(double)
#undef XTGRAD_INSTANTIATE_REDUCE

}  // namespace xtgrad
