#pragma once
// NumPy broadcasting for the elementwise ops (internal): the broadcast shape,
// a plan that walks a broadcast result in contiguous runs, and sum_to_shape,
// which reduces a gradient back to the shape of an operand that was repeated.
//
// Rule (numpy.broadcast_shapes, as torch.add uses it): shapes are aligned from
// the right; along each axis the sizes are equal, or one is 1 or missing and
// is repeated to the other's size (which may be 0).
//
// The plan drops axes of extent 1 and merges neighbouring axes that are
// contiguous for every operand, so that the common cases need no generic
// index arithmetic per element:
//   equal shapes       -> one flat run (and callers skip the plan altogether),
//   [N, D] with [D]    -> N runs of D (a bias: one simple row loop),
//   [N, D] with [N, 1] -> N runs of D against one element each,
//   anything with []   -> one run against one element.
//
// Every pass here splits between the threads in use (kernels/parallel.hpp)
// from k_parallel_light elements a thread on: elementwise passes by elements
// or runs, sums onto an operand so that each of its elements is written by one
// thread in the serial order of its terms, so that the bits do not depend on
// the thread count.

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

#include <xtensor/xarray.hpp>

#include "../../errors.hpp"
#include "../../kernels/parallel.hpp"
#include "../../tape.hpp"

namespace xtgrad::detail {

// The broadcast shape of operands 'a' and 'b' of `op`; std::invalid_argument
// naming the op, both arguments, both shapes and the first axis that clashes.
inline Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (std::size_t k = 1; k <= rank; ++k) {  // k-th axis from the right
    const std::size_t na = k <= a.size() ? a[a.size() - k] : 1;
    const std::size_t nb = k <= b.size() ? b[b.size() - k] : 1;
    if (na != nb && na != 1 && nb != 1)
      fail_shape(op, "b", b,
                 "a shape that broadcasts with argument 'a' of shape " + shape_str(a) +
                     " (NumPy rules: aligned from the right, each axis equal or 1; axis -" +
                     std::to_string(k) + " has " + std::to_string(na) + " in 'a' and " +
                     std::to_string(nb) + " in 'b')");
    out[rank - k] = na == 1 ? nb : na;
  }
  return out;
}

// How to walk a contiguous row-major result of shape `out` together with two
// operands broadcast to it (see the file comment).
struct BroadcastPlan {
  Shape extent;                 // merged axes of the result, innermost last; never empty
  std::array<Shape, 2> stride;  // per operand, in elements; 0 along axes it is repeated on
};

// Operand shapes must broadcast to `out` itself (std::logic_error otherwise:
// a bug in the calling op, not a user error).
inline BroadcastPlan make_plan(const Shape& out, const std::array<const Shape*, 2>& operands) {
  const std::size_t rank = out.size();
  std::array<Shape, 2> raw;  // contiguous strides of each operand, right-aligned onto out's axes
  for (std::size_t k = 0; k < 2; ++k) {
    const Shape& s = *operands[k];
    if (s.size() > rank)
      throw std::logic_error("xtgrad::detail::make_plan: shape " + shape_str(s) +
                             " does not broadcast to " + shape_str(out));
    raw[k] = Shape(rank, 0);
    std::size_t step = 1;
    for (std::size_t i = rank; i-- > rank - s.size();) {
      const std::size_t n = s[i - (rank - s.size())];
      if (n != out[i] && n != 1)
        throw std::logic_error("xtgrad::detail::make_plan: shape " + shape_str(s) +
                               " does not broadcast to " + shape_str(out));
      raw[k][i] = n == 1 ? 0 : step;
      step *= n;
    }
  }
  BroadcastPlan plan;
  for (std::size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;  // contributes nothing to any offset
    // Merge axis i into the previous one when that one steps exactly over it
    // for both operands (0 == 0 * n for an operand repeated along both).
    const bool merge = !plan.extent.empty() && plan.stride[0].back() == raw[0][i] * out[i] &&
                       plan.stride[1].back() == raw[1][i] * out[i];
    if (merge) {
      plan.extent.back() *= out[i];
      for (std::size_t k = 0; k < 2; ++k) plan.stride[k].back() = raw[k][i];
    } else {
      plan.extent.push_back(out[i]);
      for (std::size_t k = 0; k < 2; ++k) plan.stride[k].push_back(raw[k][i]);
    }
  }
  if (plan.extent.empty()) {  // a one-element result
    plan.extent.push_back(1);
    for (std::size_t k = 0; k < 2; ++k) plan.stride[k].push_back(0);
  }
  return plan;
}

// Calls run(out_offset, offset0, offset1, n, step0, step1) once per innermost
// run r in [first, last): result elements out_offset + j, j < n (out_offset =
// r * n), pair with operand k's element offset_k + j * step_k. The innermost
// stride of an operand is 1 or 0 (its last kept axis is contiguous or
// repeated), so step_k is a bool.
template <class Run>
void for_each_run(const BroadcastPlan& plan, std::size_t first, std::size_t last, Run&& run) {
  if (first >= last) return;
  const std::size_t outer = plan.extent.size() - 1;
  const std::size_t n = plan.extent.back();
  const bool step0 = plan.stride[0].back() != 0;
  const bool step1 = plan.stride[1].back() != 0;
  Shape index(outer, 0);
  std::size_t offset0 = 0, offset1 = 0;
  for (std::size_t axis = outer, rest = first; axis-- > 0;) {  // the odometer at run `first`
    index[axis] = rest % plan.extent[axis];
    rest /= plan.extent[axis];
    offset0 += index[axis] * plan.stride[0][axis];
    offset1 += index[axis] * plan.stride[1][axis];
  }
  for (std::size_t r = first; r < last; ++r) {
    run(r * n, offset0, offset1, n, step0, step1);
    for (std::size_t axis = outer; axis-- > 0;) {  // odometer over the outer axes
      offset0 += plan.stride[0][axis];
      offset1 += plan.stride[1][axis];
      if (++index[axis] < plan.extent[axis]) break;
      offset0 -= plan.stride[0][axis] * plan.extent[axis];
      offset1 -= plan.stride[1][axis] * plan.extent[axis];
      index[axis] = 0;
    }
  }
}

// Every run of a result of `size` elements, in order, on the calling thread.
template <class Run>
void for_each_run(const BroadcastPlan& plan, std::size_t size, Run&& run) {
  if (size != 0) for_each_run(plan, 0, size / plan.extent.back(), run);
}

// The runs split between the threads in use, for a pass in which every run
// writes elements of its own (a result of the plan's shape).
template <class Run>
void parallel_runs(const BroadcastPlan& plan, std::size_t size, Run&& run) {
  if (size == 0) return;
  const std::size_t n = plan.extent.back();
  parallel_for_rows(size / n, std::max<std::size_t>(k_parallel_light / n, 1),
                    [&](std::size_t r0, std::size_t r1) { for_each_run(plan, r0, r1, run); });
}

// The runs of a sum onto operand 0 (repeated along some axes of the result),
// split so that each element of operand 0 is written by one thread, which
// adds its terms in the serial order: by runs when operand 0 steps along
// every outer axis (each run has elements of its own), else by columns of
// the runs when it steps along them (each thread its columns of every run),
// else not at all.
template <class Run>
void parallel_sum_runs(const BroadcastPlan& plan, std::size_t size, Run&& run) {
  if (size == 0) return;
  const std::size_t outer = plan.extent.size() - 1, n = plan.extent.back(), runs = size / n;
  const Shape& stride = plan.stride[0];
  if (std::all_of(stride.begin(), stride.begin() + static_cast<std::ptrdiff_t>(outer),
                  [](std::size_t s) { return s != 0; })) {
    parallel_runs(plan, size, run);
  } else if (stride.back() != 0) {
    parallel_for(n, std::max<std::size_t>(k_parallel_light / runs, 1),
                 [&](std::size_t j0, std::size_t j1) {
                   for_each_run(plan, 0, runs,
                                [&](std::size_t o, std::size_t o0, std::size_t o1, std::size_t,
                                    bool step0, bool step1) {
                                  run(o + j0, o0 + j0, step1 ? o1 + j0 : o1, j1 - j0, step0, step1);
                                });
                 });
  } else {
    for_each_run(plan, 0, runs, run);
  }
}

// sum_{j<n} value(j) in double with four independent partial sums: a strict
// left-to-right sum is bound by the add latency, and double keeps long float
// sums accurate (PyTorch uses a cascade sum for the same reason).
template <class F>
double sum_of(std::size_t n, F value) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += value(j);
    s1 += value(j + 1);
    s2 += value(j + 2);
    s3 += value(j + 3);
  }
  for (; j < n; ++j) s0 += value(j);
  return (s0 + s1) + (s2 + s3);
}

// out[j] = f(a[j * step_a], b[j * step_b]) for j < n; one loop per step
// pattern, so that each one vectorizes.
template <class T, class F>
void binary_run(T* out, const T* a, bool step_a, const T* b, bool step_b, std::size_t n, F f) {
  if (step_a && step_b) {
    for (std::size_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]);
  } else if (step_a) {
    const T b0 = *b;
    for (std::size_t j = 0; j < n; ++j) out[j] = f(a[j], b0);
  } else if (step_b) {
    const T a0 = *a;
    for (std::size_t j = 0; j < n; ++j) out[j] = f(a0, b[j]);
  } else {
    std::fill(out, out + n, f(*a, *b));
  }
}

// binary_run over n elements split between the threads in use.
template <class T, class F>
void parallel_binary_run(T* out, const T* a, bool step_a, const T* b, bool step_b, std::size_t n,
                         F f) {
  parallel_for(n, k_parallel_light, [&](std::size_t i0, std::size_t i1) {
    binary_run(out + i0, step_a ? a + i0 : a, step_a, step_b ? b + i0 : b, step_b, i1 - i0, f);
  });
}

// y = f(a, b) with broadcasting; y is already shaped as the broadcast result.
template <class T, class F>
void broadcast_apply(xt::xarray<T>& y, const xt::xarray<T>& a, const xt::xarray<T>& b, F f) {
  if (a.shape() == b.shape()) {  // one pass over the data pointers
    parallel_binary_run(y.data(), a.data(), true, b.data(), true, y.size(), f);
    return;
  }
  const BroadcastPlan plan = make_plan(y.shape(), {&a.shape(), &b.shape()});
  parallel_runs(
      plan, y.size(),
      [&](std::size_t o, std::size_t oa, std::size_t ob, std::size_t n, bool sa, bool sb) {
        binary_run(y.data() + o, a.data() + oa, sa, b.data() + ob, sb, n, f);
      });
}

// d[i] (+)= term(i) for i < n, as `accumulate` says (grad_slot's
// write-or-accumulate rule: a branch outside the loop), split between the
// threads in use.
template <class T, class Term>
void write_or_add(T* d, bool accumulate, std::size_t n, Term term) {
  parallel_for(n, k_parallel_light, [&](std::size_t i0, std::size_t i1) {
    if (accumulate)
      for (std::size_t i = i0; i < i1; ++i) d[i] += term(i);
    else
      for (std::size_t i = i0; i < i1; ++i) d[i] = term(i);
  });
}

// dst (+)= scale * g summed over the axes along which dst's shape was
// broadcast to g's shape; dst.buffer has the operand's shape.
template <class T>
void sum_to_shape(const xt::xarray<T>& g, GradSlot<T> dst, T scale = T(1)) {
  T* d = dst.buffer.data();
  const T* gd = g.data();
  if (dst.buffer.shape() == g.shape()) {  // nothing repeated: one pass, no temporary
    write_or_add(d, dst.accumulate, g.size(), [=](std::size_t i) { return scale * gd[i]; });
    return;
  }
  if (!dst.accumulate) std::fill(d, d + dst.buffer.size(), T(0));  // [0, D] -> [D] gives zeros
  const Shape& shape = dst.buffer.shape();
  const BroadcastPlan plan = make_plan(g.shape(), {&shape, &shape});
  parallel_sum_runs(
      plan, g.size(),
      [&](std::size_t o, std::size_t od, std::size_t, std::size_t n, bool step, bool) {
        if (step)  // d[n] += scale * g[n]: one row of a bias reduction
          for (std::size_t j = 0; j < n; ++j) d[od + j] += scale * gd[o + j];
        else  // d[] += scale * sum(g[n]): the run collapses onto one element
          d[od] += static_cast<T>(scale * sum_of(n, [&](std::size_t j) { return gd[o + j]; }));
      });
}

// a[i] (+)= g[i] and b[i] (+)= scale_b * g[i] for i in [i0, i1).
template <bool AddA, bool AddB, class T>
void copy_to_both(const T* g, T* a, T* b, T scale_b, std::size_t i0, std::size_t i1) {
  for (std::size_t i = i0; i < i1; ++i) {
    const T v = g[i];
    if constexpr (AddA)
      a[i] += v;
    else
      a[i] = v;
    if constexpr (AddB)
      b[i] += scale_b * v;
    else
      b[i] = scale_b * v;
  }
}

// da (+)= g and db (+)= scale_b * g, each summed to its operand's shape (the
// backward of add, scale_b 1, and sub, -1), da claimed first: one pass over g
// when both have g's shape and are two nodes, else sum_to_shape for each.
template <class T>
void sum_to_shapes(const xt::xarray<T>& g, GradSlot<T> da, GradSlot<T> db, T scale_b) {
  if (&da.buffer == &db.buffer || da.buffer.shape() != g.shape() ||
      db.buffer.shape() != g.shape()) {
    sum_to_shape(g, da);
    sum_to_shape(g, db, scale_b);
    return;
  }
  const T* gd = g.data();
  T* a = da.buffer.data();
  T* b = db.buffer.data();
  parallel_for(g.size(), k_parallel_light, [&](std::size_t i0, std::size_t i1) {
    if (da.accumulate && db.accumulate)
      copy_to_both<true, true>(gd, a, b, scale_b, i0, i1);
    else if (da.accumulate)
      copy_to_both<true, false>(gd, a, b, scale_b, i0, i1);
    else if (db.accumulate)
      copy_to_both<false, true>(gd, a, b, scale_b, i0, i1);
    else
      copy_to_both<false, false>(gd, a, b, scale_b, i0, i1);
  });
}

// dst (+)= combine(g, other) summed over the axes along which dst's shape was
// broadcast to g's shape; `other` broadcasts to g's shape too. combine is g *
// other by default (mul) or g / other (div); it must be linear in g, because
// a run of g against one element of other is summed before it is combined.
// The product is never materialized.
template <class T, class Combine = std::multiplies<>>
void sum_product_to_shape(const xt::xarray<T>& g, const xt::xarray<T>& other, GradSlot<T> dst,
                          Combine combine = Combine()) {
  T* d = dst.buffer.data();
  const T* gd = g.data();
  const T* od = other.data();
  if (dst.buffer.shape() == g.shape() && other.shape() == g.shape()) {  // one pass
    write_or_add(d, dst.accumulate, g.size(), [=](std::size_t i) { return combine(gd[i], od[i]); });
    return;
  }
  if (!dst.accumulate) std::fill(d, d + dst.buffer.size(), T(0));
  const BroadcastPlan plan = make_plan(g.shape(), {&dst.buffer.shape(), &other.shape()});
  parallel_sum_runs(
      plan, g.size(),
      [&](std::size_t o, std::size_t i, std::size_t k, std::size_t n, bool step_d, bool step_o) {
        T* dr = d + i;
        const T* gr = gd + o;
        const T* orun = od + k;
        if (step_d && step_o) {  // d[n] += g[n] * o[n]
          for (std::size_t j = 0; j < n; ++j) dr[j] += combine(gr[j], orun[j]);
        } else if (step_d) {  // d[n] += g[n] * o[], o repeated along the run
          const T o0 = *orun;
          for (std::size_t j = 0; j < n; ++j) dr[j] += combine(gr[j], o0);
        } else if (step_o) {  // d[] += g[n] . o[n], d repeated along the run
          *dr += static_cast<T>(sum_of(n, [&](std::size_t j) {
            return combine(static_cast<double>(gr[j]), static_cast<double>(orun[j]));
          }));
        } else {  // d[] += sum(g[n]) * o[], both repeated
          *dr += static_cast<T>(
              combine(sum_of(n, [&](std::size_t j) { return gr[j]; }), static_cast<double>(*orun)));
        }
      });
}

}  // namespace xtgrad::detail
