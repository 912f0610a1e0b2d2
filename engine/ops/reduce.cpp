#include "../kernels/softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include "reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "../check.hpp"
#include "elementwise.hpp"
#include "math.hpp"
#include "sum_to.hpp"
#include "support/broadcast.hpp"
#include "support/reduce_plan.hpp"

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
  // dx = dy broadcast to x's shape (divided by n for mean)
  tape.set_grad_rule(yi, [n, is_mean](GradSink<T>& g) {
    const Shape& shape = g.input(0).shape();
    const Var<T> dx =
        detail::unreduce(g.grad_output(), shape, detail::reduced_axes({}, shape.size()));
    g.add(0, is_mean ? div_scalar(dx, static_cast<T>(n)) : dx);
  });
  return tape.var(yi);
}

// sum and mean along dims: like reduce_all, per output element.
template <class T>
Var<T> reduce_dims(const char* op, const Var<T>& x, const std::vector<std::int64_t>& dims,
                   bool keepdim, bool is_mean) {
  const detail::ReductionNode<T> node = detail::record_reduction(op, x, dims, keepdim);
  Tape<T>& tape = node.tape;
  const detail::ReducePlan& plan = node.plan;
  const std::size_t xi = node.xi, yi = node.yi;
  const T* xd = node.x;
  T* yd = node.y;
  const std::size_t n = plan.reduced_size;
  // y[o] = sum_r x[o, r], or that / n; a mean over nothing is NaN as in torch.mean
  const auto term = [xd](std::size_t, std::size_t i) { return xd[i]; };
  if (!is_mean)
    detail::sum_terms(plan, term,
                      [yd](std::size_t o, double total) { yd[o] = static_cast<T>(total); });
  else
    detail::sum_terms(plan, term, [yd, n](std::size_t o, double total) {
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
  // dx = dy broadcast back over the reduced axes (divided by n for mean)
  tape.set_grad_rule(yi, [axes = detail::reduced_axes(dims, x.dimension()), n = plan.reduced_size,
                          is_mean](GradSink<T>& g) {
    const Var<T> dx = detail::unreduce(g.grad_output(), g.input(0).shape(), axes);
    g.add(0, is_mean ? div_scalar(dx, static_cast<T>(n)) : dx);
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
  const detail::ReductionNode<T> node = detail::record_reduction(op, x, dims, keepdim);
  Tape<T>& tape = node.tape;
  const detail::ReducePlan& plan = node.plan;
  const std::size_t xi = node.xi, yi = node.yi;
  const T* xd = node.x;
  T* yd = node.y;
  const double n = static_cast<double>(plan.reduced_size);
  const double dof = n - static_cast<double>(correction);  // torch: n - correction
  // m[o] = sum_r x[o, r] / n; y[o] = sum_r (x[o, r] - m[o])^2 / max(0, n - c): two
  // passes. The means stay in double for backward (in float they would round
  // by more than the deviations of data such as 1e4 + 1e-3 noise).
  // In the node's saved memory: no allocation once the tape is warm.
  double* m = tape.template save<double>(yi, plan.out_size);
  detail::sum_terms(
      plan, [xd](std::size_t, std::size_t i) { return xd[i]; },
      [m, n](std::size_t o, double total) {
        m[o] = n == 0 ? std::numeric_limits<double>::quiet_NaN() : total / n;
      });
  detail::sum_terms(
      plan,
      [xd, m](std::size_t o, std::size_t i) {
        const double deviation = xd[i] - m[o];
        return deviation * deviation;
      },
      [yd, dof](std::size_t o, double squares) {
        yd[o] = static_cast<T>(squares / std::max(0.0, dof));
      });

  tape.set_backward(yi, [xi, yi, plan, factor = 2.0 / dof](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const T* g = dy.data();
    const T* x = t.value(xi).data();
    const double* m = t.template saved<double>(yi);
    // dx[o, r] (+)= dy[o] * 2 (x[o, r] - m[o]) / (n - c)
    detail::write_reduced(plan, t.grad_slot(xi), [g, x, m, factor](std::size_t o, std::size_t i) {
      return static_cast<T>(g[o] * factor * (x[i] - m[o]));
    });
  });
  // dx = dy broadcast back * (2 / (n - c)) (x - mean(x)), the mean recorded
  tape.set_grad_rule(yi, [axes = detail::reduced_axes(dims, x.dimension()),
                          factor = static_cast<T>(2.0 / dof)](GradSink<T>& g) {
    const Var<T> x = g.input(0);
    const std::vector<std::int64_t> list = detail::axes_list(axes, x.dimension());
    const Var<T> centered = list.empty()
                                ? scale(x, T(0))
                                : sub(x, detail::unreduce(mean(x, list, true), x.shape(), axes));
    g.add(0, mul(detail::unreduce(g.grad_output(), x.shape(), axes), scale(centered, factor)));
  });
  return tape.var(yi);
}

namespace {

// y[o] = s + log sum_r exp(x[o, r] - s), s = max_r x[o, r] (0 when that is
// +-inf, as torch.logsumexp): no overflow, and -inf for all -inf or nothing
template <class T>
void logsumexp_forward(const detail::ReducePlan& plan, const T* xd, T* yd) {
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    T top = -std::numeric_limits<T>::infinity();
    detail::for_each_run(
        plan, base, [&](std::size_t offset, std::size_t count, std::size_t stride) {
          if (stride == 1)
            top = std::max(top, detail::row_max(xd + offset, count));
          else
            detail::for_run(offset, count, stride,
                            [&](std::size_t i) { top = xd[i] > top ? xd[i] : top; });
        });
    const T shift = std::isinf(top) ? T(0) : top;
    double total = 0.0;
    detail::for_each_run(
        plan, base, [&](std::size_t offset, std::size_t count, std::size_t stride) {
          if (stride == 1)  // exp in T by batches, the sum in double
            total +=
                detail::exp_minus_scalar<T, false, true>(xd + offset, shift, T(0), nullptr, count);
          else
            for (std::size_t k = 0; k < count; ++k)
              total += std::exp(xd[offset + k * stride] - shift);
        });
    yd[o] = static_cast<T>(std::log(total) + shift);
  });
}

// dx[o, r] (+)= dy[o] * exp(x[o, r] - y[o]) (softmax); 0 where y[o] = -inf
template <class T>
void logsumexp_backward(const detail::ReducePlan& plan, const T* g, const T* x, const T* yv,
                        const GradSlot<T>& dx) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  if (detail::kept_inner(plan) != 1) {
    detail::write_reduced(plan, dx, [g, x, yv](std::size_t o, std::size_t i) {
      return yv[o] == minus_inf ? T(0) : g[o] * std::exp(x[i] - yv[o]);
    });
    return;
  }
  // runs along the reduced axes: by batches where contiguous
  T* d = dx.buffer.data();
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    detail::for_each_run(
        plan, base, [&](std::size_t offset, std::size_t count, std::size_t stride) {
          if (stride != 1 || yv[o] == minus_inf) {
            detail::for_run(offset, count, stride, [&](std::size_t i) {
              const T v = yv[o] == minus_inf ? T(0) : g[o] * std::exp(x[i] - yv[o]);
              d[i] = dx.accumulate ? d[i] + v : v;
            });
          } else if (dx.accumulate) {
            detail::scaled_exp_minus<T, true>(x + offset, yv[o], T(0), g[o], T(0), d + offset,
                                              count);
          } else {
            detail::scaled_exp_minus<T, false>(x + offset, yv[o], T(0), g[o], T(0), d + offset,
                                               count);
          }
        });
  });
}

}  // namespace

template <class T>
Var<T> logsumexp(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  const detail::ReductionNode<T> node = detail::record_reduction("logsumexp", x, dims, keepdim);
  const std::size_t xi = node.xi, yi = node.yi;
  logsumexp_forward(node.plan, node.x, node.y);

  node.tape.set_backward(yi, [xi, yi, plan = node.plan](Tape<T>& t, const xt::xarray<T>& dy) {
    if (t.requires_grad(xi))
      logsumexp_backward(plan, dy.data(), t.value(xi).data(), t.value(yi).data(), t.grad_slot(xi));
  });
  // dx = dy broadcast back * exp(x - y broadcast back). A row whose result is
  // -inf (its gradient 0 above, exp(-inf + inf) here) gets no rule: create_graph
  // refuses it rather than give NaN.
  if (std::none_of(node.y, node.y + node.plan.out_size,
                   [](T v) { return v == -std::numeric_limits<T>::infinity(); }))
    node.tape.set_grad_rule(yi, [axes = detail::reduced_axes(dims, x.dimension())](GradSink<T>& g) {
      const Shape& shape = g.input(0).shape();
      const Var<T> top = detail::unreduce(g.output(), shape, axes);
      g.add(0, mul(detail::unreduce(g.grad_output(), shape, axes), exp(sub(g.input(0), top))));
    });
  return node.tape.var(yi);
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
