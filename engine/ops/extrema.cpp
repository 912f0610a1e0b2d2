#include "extrema.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../check.hpp"
#include "elementwise.hpp"
#include "shape.hpp"
#include "sum_to.hpp"
#include "support/axes.hpp"
#include "support/reduce_plan.hpp"

namespace xtgrad {

namespace {

// v beats the current extreme `best`: larger (IsMax) or smaller.
template <bool IsMax, class T>
bool beats(T v, T best) {
  if constexpr (IsMax)
    return v > best;
  else
    return v < best;
}

// amax (IsMax) and amin: the extreme over the reduced elements, NaN if any
// is NaN; the gradient is spread over the elements equal to it.
template <bool IsMax, class T>
Var<T> extreme(const char* op, const Var<T>& x, const std::vector<std::int64_t>& dims,
               bool keepdim) {
  const detail::ReductionNode<T> node = detail::record_reduction(op, x, dims, keepdim, true);
  Tape<T>& tape = node.tape;
  const detail::ReducePlan& plan = node.plan;
  const std::size_t xi = node.xi, yi = node.yi;
  const T* xd = node.x;
  T* yd = node.y;
  constexpr T start =
      IsMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  // y[o] = max_r x[o, r] (or min); NaN when any x[o, r] is NaN, as torch.amax
  detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
    T best = start;
    bool nan = false;
    detail::for_each_reduced(plan, base, [&](std::size_t i) {
      const T v = xd[i];
      best = beats<IsMax>(v, best) ? v : best;
      nan = nan || std::isnan(v);
    });
    yd[o] = nan ? std::numeric_limits<T>::quiet_NaN() : best;
  });

  tape.set_backward(yi, [xi, yi, plan](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    T* d = dx.buffer.data();
    const T* x = t.value(xi).data();
    const T* yv = t.value(yi).data();
    const T* g = dy.data();
    detail::for_each_output(plan, [&](std::size_t o, std::size_t base) {
      const T top = yv[o];
      std::size_t ties = 0;
      detail::for_each_reduced(plan, base, [&](std::size_t i) { ties += x[i] == top; });
      // share[o] = dy[o] / #ties[o] (NaN for a NaN result: no element equals it)
      const T share = ties == 0 ? std::numeric_limits<T>::quiet_NaN() : g[o] / T(ties);
      // dx[o, r] (+)= share[o] where x[o, r] == y[o], else 0 (NaN everywhere for no ties)
      const T other = ties == 0 ? share : T(0);
      if (dx.accumulate)
        detail::for_each_reduced(plan, base,
                                 [&](std::size_t i) { d[i] += x[i] == top ? share : other; });
      else
        detail::for_each_reduced(plan, base,
                                 [&](std::size_t i) { d[i] = x[i] == top ? share : other; });
    });
  });
  // dx = dy broadcast back, times the constant weights [x == y] / #ties
  // (NaN over a row whose result is NaN, as above).
  tape.set_grad_rule(yi, [axes = detail::reduced_axes(dims, x.dimension())](GradSink<T>& g) {
    const Var<T> x = g.input(0);
    const Shape& shape = x.shape();
    Tape<T>& t = g.tape();
    const Var<T> top = detail::unreduce(t.leaf(g.output().value(), false), shape, axes);
    const Var<T> ties =
        t.leaf(xt::xarray<T>(xt::cast<T>(xt::equal(x.value(), top.value()))), false);
    const Var<T> count =
        detail::unreduce(sum(ties, detail::axes_list(axes, shape.size()), true), shape, axes);
    g.add(0, mul(detail::unreduce(g.grad_output(), shape, axes), div(ties, count)));
  });
  return tape.var(yi);
}

// values[o, i] = x[o, j*, i], indices[o, i] = j*: the first j that beats
// every earlier one, a NaN beating any number and never being beaten
template <bool IsMax, class T>
void extreme_forward(const T* xd, const detail::AxisSplit& s, T* yd, std::int64_t* id) {
  const std::size_t inner = s.inner, extent = s.extent;
  for (std::size_t o = 0; o < s.outer && inner == 1; ++o) {  // the last axis: scan each row
    const T* xr = xd + o * extent;
    T best = xr[0];
    std::size_t at = 0;
    for (std::size_t j = 1; j < extent && !std::isnan(best); ++j) {
      const T v = xr[j];
      if (beats<IsMax>(v, best) || std::isnan(v)) {
        best = v;
        at = j;
      }
    }
    yd[o] = best;
    id[o] = static_cast<std::int64_t>(at);
  }
  for (std::size_t o = 0; o < s.outer && inner > 1; ++o) {  // rows of `inner` at once
    T* yr = yd + o * inner;
    std::int64_t* ir = id + o * inner;
    const T* xr = xd + o * extent * inner;
    std::copy(xr, xr + inner, yr);
    std::fill(ir, ir + inner, std::int64_t(0));
    for (std::size_t j = 1; j < extent; ++j) {
      const T* xj = xr + j * inner;
      for (std::size_t i = 0; i < inner; ++i) {
        const T v = xj[i], best = yr[i];
        if (beats<IsMax>(v, best) || (std::isnan(v) && !std::isnan(best))) {
          yr[i] = v;
          ir[i] = static_cast<std::int64_t>(j);
        }
      }
    }
  }
}

// max (IsMax) and min along one axis, with the index of the first extreme
// (of the first NaN, if any); the gradient goes to that index only.
template <bool IsMax, class T>
ValuesIndices<T> extreme_index(const char* op, const Var<T>& x, std::int64_t dim, bool keepdim) {
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape& shape = x.shape();
  const std::size_t rank = shape.size();
  const std::size_t axis = detail::normalize_reduce_dim(op, "dim", dim, rank);
  const detail::AxisSplit s = rank == 0 ? detail::AxisSplit{} : detail::split_at(shape, axis);
  check.argument(s.extent != 0, "dim", "is ", dim, ", axis ", axis, " of extent 0 of 'x' of shape ",
                 shape, ": cannot perform reduction over a zero-size axis");
  Shape out_shape = shape;
  if (rank > 0 && keepdim) out_shape[axis] = 1;
  if (rank > 0 && !keepdim) out_shape.erase(out_shape.begin() + static_cast<std::ptrdiff_t>(axis));
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(out_shape);
  Indices indices = Indices::from_shape(out_shape);
  extreme_forward<IsMax>(tape.value(xi).data(), s, y.data(), indices.data());

  Indices kept;  // backward's copy, only when there will be a backward
  if (tape.requires_grad(yi)) kept = indices;
  tape.set_backward(yi, [xi, s, kept](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    T* d = dx.buffer.data();
    const T* g = dy.data();
    const std::int64_t* k = kept.data();
    // dx[o, j, i] (+)= dy[o, i] where j == indices[o, i], else 0
    if (!dx.accumulate) std::fill(d, d + dx.buffer.size(), T(0));
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t i = 0; i < s.inner; ++i) {
        const std::size_t r = o * s.inner + i;
        d[(o * s.extent + static_cast<std::size_t>(k[r])) * s.inner + i] += g[r];
      }
  });
  // No set_grad_rule: create_graph refuses this node (a rule would scatter
  // dy by the saved indices).
  return {tape.var(yi), std::move(indices)};
}

}  // namespace

template <class T>
Var<T> amax(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extreme<true>("amax", x, dims, keepdim);
}

template <class T>
Var<T> amin(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return extreme<false>("amin", x, dims, keepdim);
}

template <class T>
ValuesIndices<T> max(const Var<T>& x, std::int64_t dim, bool keepdim) {
  return extreme_index<true>("max", x, dim, keepdim);
}

template <class T>
ValuesIndices<T> min(const Var<T>& x, std::int64_t dim, bool keepdim) {
  return extreme_index<false>("min", x, dim, keepdim);
}

#define XTGRAD_INSTANTIATE_EXTREMA(T)                                          \
  template Var<T> amax(const Var<T>&, const std::vector<std::int64_t>&, bool); \
  template Var<T> amin(const Var<T>&, const std::vector<std::int64_t>&, bool); \
  template ValuesIndices<T> max(const Var<T>&, std::int64_t, bool);            \
  template ValuesIndices<T> min(const Var<T>&, std::int64_t, bool);
XTGRAD_INSTANTIATE_EXTREMA(float)
XTGRAD_INSTANTIATE_EXTREMA(double)
#undef XTGRAD_INSTANTIATE_EXTREMA

}  // namespace xtgrad
