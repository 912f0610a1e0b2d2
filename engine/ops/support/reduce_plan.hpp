#pragma once
// Reductions over a set of axes (internal), shared by sum, mean, var,
// logsumexp, amax and amin.
//
// The input is a contiguous row-major array. Its axes are split into kept
// and reduced ones; axes of extent 1 are dropped and neighbouring axes of
// the same kind are merged (in a row-major array that is always exact), so
// every reduction becomes: for each output element o (an odometer over the
// merged kept groups, giving the offset `base` of its first input element),
// the reduced elements are runs of `run_count` elements `run_stride` apart
// (an odometer over the other merged reduced groups). The common cases are
// one contiguous pass: the last axis gives one run of D per row (stride 1),
// all axes give one run over the whole array. When the innermost axis is
// kept (axis 0 of [N, D]) the loops go by blocks of consecutive outputs
// instead, over contiguous rows (kept_inner, below).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xstorage.hpp>

#include "../../check.hpp"
#include "../../errors.hpp"
#include "../../indices.hpp"
#include "../../tape.hpp"
#include "broadcast.hpp"  // sum_of

namespace xtgrad::detail {

struct ReducePlan {
  using Groups = xt::svector<std::size_t, 8>;  // inline storage: no allocation up to rank 8
  Shape out_shape;                             // the result's shape
  std::size_t out_size = 1;                    // elements of the result
  std::size_t reduced_size = 1;                // input elements per output element (n)
  std::size_t zero_axis = 0;                   // a reduced axis of extent 0, when reduced_size == 0
  Groups kept_extent, kept_stride;             // merged kept groups, outermost first
  Groups red_extent, red_stride;  // merged reduced groups, outermost first; never empty
};

// The plan for reducing `shape` over `dims` (torch-style axes, negative
// counting from the end, each at most once; empty = every axis, as
// torch.sum(x, dim=[]) in torch 1.13). A 0-d input acts as shape [1] with
// axis 0 (torch accepts dim 0 and -1 there); its result is 0-d, keepdim or
// not. std::invalid_argument naming `op` and 'dims' for an axis out of range
// or repeated.
// normalize_dim (indices.hpp), except that a 0-d tensor has the one axis 0
// (dim 0 or -1), as torch treats it.
inline std::size_t normalize_reduce_dim(const char* op, const char* arg, std::int64_t dim,
                                        std::size_t rank) {
  if (rank == 0 && dim != 0 && dim != -1)
    fail_argument(op, arg,
                  "is " + std::to_string(dim) +
                      ", expected 0 or -1 for a 0-d tensor (an axis of extent 1, as in torch)");
  return rank == 0 ? 0 : normalize_dim(op, arg, dim, rank);
}

inline ReducePlan make_reduce_plan(const char* op, const Shape& shape,
                                   const std::vector<std::int64_t>& dims, bool keepdim) {
  const std::size_t rank = shape.size();
  const std::size_t axes = rank == 0 ? 1 : rank;
  ReducePlan::Groups reduced(axes, dims.empty() ? 1 : 0);  // a flag per axis
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const std::size_t axis = normalize_reduce_dim(op, "dims", dims[k], rank);
    if (reduced[axis])
      fail_argument(op, "dims",
                    "names axis " + std::to_string(axis) + " twice (entry " + std::to_string(k) +
                        " is " + std::to_string(dims[k]) + "), expected each axis at most once");
    reduced[axis] = 1;
  }
  ReducePlan p;
  std::size_t stride = 1;
  bool last_reduced = false;
  ReducePlan::Groups ke, ks, re, rs;  // innermost first while building
  for (std::size_t a = 0; a < rank; ++a)
    if (!reduced[a])
      p.out_shape.push_back(shape[a]);
    else if (keepdim)
      p.out_shape.push_back(1);
  for (std::size_t a = axes; a-- > 0;) {
    const std::size_t n = rank == 0 ? 1 : shape[a];
    if (reduced[a]) {
      p.reduced_size *= n;
      if (n == 0) p.zero_axis = a;
    } else {
      p.out_size *= n;
    }
    if (n == 1) continue;  // contributes nothing to any offset
    auto& e = reduced[a] ? re : ke;
    auto& s = reduced[a] ? rs : ks;
    const bool merge =
        !e.empty() && last_reduced == (reduced[a] != 0) && s.back() * e.back() == stride;
    if (merge)
      e.back() *= n;
    else {
      e.push_back(n);
      s.push_back(stride);
    }
    last_reduced = reduced[a] != 0;
    stride *= n;
  }
  if (re.empty()) {  // nothing to walk: one element per output
    re.push_back(1);
    rs.push_back(1);
  }
  p.kept_extent.assign(ke.rbegin(), ke.rend());
  p.kept_stride.assign(ks.rbegin(), ks.rend());
  p.red_extent.assign(re.rbegin(), re.rend());
  p.red_stride.assign(rs.rbegin(), rs.rend());
  return p;
}

// std::invalid_argument for ops with no identity (amax, amin) when a reduced
// axis has extent 0, as torch raises ("Expected reduction dim 1 to have
// non-zero size").
inline void check_nonempty_reduction(const char* op, const ReducePlan& p, const Shape& shape) {
  if (p.reduced_size == 0)
    fail_argument(op, "dims",
                  "reduces axis " + std::to_string(p.zero_axis) + " of extent 0 of 'x' of shape " +
                      shape_str(shape) + ": cannot perform reduction over a zero-size axis");
}

// The first steps every reduction op takes: check the tape and the dims
// (and, for ops without an identity, that nothing reduced is empty), then
// record the node and size its value by the plan. Throws before recording.
template <class T>
struct ReductionNode {
  Tape<T>& tape;
  ReducePlan plan;
  std::size_t xi, yi;
  const T* x;  // x's values
  T* y;        // the result's values, plan.out_shape
};

template <class T>
ReductionNode<T> record_reduction(const char* op, const Var<T>& x,
                                  const std::vector<std::int64_t>& dims, bool keepdim,
                                  bool needs_nonempty = false) {
  Tape<T>& tape = common_tape<T>(op, {{"x", &x}});
  ReducePlan plan = make_reduce_plan(op, x.shape(), dims, keepdim);
  if (needs_nonempty) check_nonempty_reduction(op, plan, x.shape());
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(plan.out_shape);
  return {tape, std::move(plan), xi, yi, tape.value(xi).data(), y.data()};
}

// Calls f(o, base) for every output element o in row-major order; base is
// the offset of its first input element.
template <class F>
void for_each_output(const ReducePlan& p, F&& f) {
  if (p.out_size == 0 || p.reduced_size == 0) {
    if (p.reduced_size == 0)  // no input elements: still one call per output
      for (std::size_t o = 0; o < p.out_size; ++o) f(o, std::size_t(0));
    return;
  }
  const std::size_t groups = p.kept_extent.size();
  ReducePlan::Groups index(groups, 0);
  std::size_t base = 0;
  for (std::size_t o = 0; o < p.out_size; ++o) {
    f(o, base);
    for (std::size_t g = groups; g-- > 0;) {  // odometer over the kept groups
      base += p.kept_stride[g];
      if (++index[g] < p.kept_extent[g]) break;
      base -= p.kept_stride[g] * p.kept_extent[g];
      index[g] = 0;
    }
  }
}

// Calls f(offset, count, stride) for every run of the reduced elements of
// the output element whose first input element is at `base`. Nothing when
// reduced_size == 0.
template <class F>
void for_each_run(const ReducePlan& p, std::size_t base, F&& f) {
  if (p.reduced_size == 0) return;
  const std::size_t outer = p.red_extent.size() - 1;
  const std::size_t count = p.red_extent.back(), stride = p.red_stride.back();
  if (outer == 0) {
    f(base, count, stride);
    return;
  }
  ReducePlan::Groups index(outer, 0);
  for (std::size_t done = 0; done < p.reduced_size; done += count) {
    f(base, count, stride);
    for (std::size_t g = outer; g-- > 0;) {  // odometer over the outer reduced groups
      base += p.red_stride[g];
      if (++index[g] < p.red_extent[g]) break;
      base -= p.red_stride[g] * p.red_extent[g];
      index[g] = 0;
    }
  }
}

// f(flat offset) for the count elements of one run; the stride-1 loop is a
// separate loop so that the compiler vectorizes it.
template <class F>
inline void for_run(std::size_t offset, std::size_t count, std::size_t stride, F&& f) {
  if (stride == 1)
    for (std::size_t k = 0; k < count; ++k) f(offset + k);
  else
    for (std::size_t k = 0; k < count; ++k) f(offset + k * stride);
}

// f(flat offset) for every reduced element of output o (base as given by
// for_each_output).
template <class F>
void for_each_reduced(const ReducePlan& p, std::size_t base, F&& f) {
  for_each_run(p, base, [&f](std::size_t offset, std::size_t count, std::size_t stride) {
    for_run(offset, count, stride, f);
  });
}

// When the innermost input group is kept (reducing axis 0 of [N, D], or the
// middle of [B, T, D]), walking output by output would read with a stride.
// Instead the outputs come in blocks of `inner` consecutive ones, and every
// reduced position holds a contiguous row of `inner` inputs, one per output
// of the block: the loops below walk blocks, then rows, then the row itself.
// kept_inner is that extent, or 1 when the innermost group is reduced.
inline std::size_t kept_inner(const ReducePlan& p) {
  if (p.out_size == 0 || p.reduced_size == 0 || p.kept_extent.empty()) return 1;
  return p.kept_stride.back() == 1 ? p.kept_extent.back() : 1;
}

// The plan of the blocks: p without its innermost kept group.
inline ReducePlan block_plan(const ReducePlan& p, std::size_t inner) {
  ReducePlan blocks = p;
  blocks.out_size /= inner;
  blocks.kept_extent.pop_back();
  blocks.kept_stride.pop_back();
  return blocks;
}

// f(o0, row) for every block (o0 its first output) and every reduced row of
// it (row: the flat offset of the input of output o0; output o0 + i reads
// row + i, i < inner). Only for kept_inner(p) = inner > 1.
template <class F>
void for_each_block_row(const ReducePlan& p, std::size_t inner, F&& f) {
  for_each_output(block_plan(p, inner), [&](std::size_t b, std::size_t base) {
    for_each_reduced(p, base, [&](std::size_t row) { f(b * inner, row); });
  });
}

// finish(o, sum_r term(o, i)) for every output o, i running over the flat
// offsets of o's reduced elements; the sums are in double (four partial sums
// along a contiguous run, one per output across rows in the blocked layout).
template <class Term, class Finish>
void sum_terms(const ReducePlan& p, Term&& term, Finish&& finish) {
  const std::size_t inner = kept_inner(p);
  if (inner == 1) {
    for_each_output(p, [&](std::size_t o, std::size_t base) {
      double total = 0.0;
      for_each_run(p, base, [&](std::size_t offset, std::size_t count, std::size_t stride) {
        if (stride == 1)
          total += sum_of(count, [&](std::size_t k) { return term(o, offset + k); });
        else
          total += sum_of(count, [&](std::size_t k) { return term(o, offset + k * stride); });
      });
      finish(o, total);
    });
    return;
  }
  constexpr std::size_t k_chunk = 256;  // outputs summed at once, on the stack
  for_each_output(block_plan(p, inner), [&](std::size_t b, std::size_t base) {
    for (std::size_t c0 = 0; c0 < inner; c0 += k_chunk) {
      const std::size_t w = std::min(k_chunk, inner - c0), o0 = b * inner + c0;
      double acc[k_chunk];
      std::fill(acc, acc + w, 0.0);
      for_each_reduced(p, base + c0, [&](std::size_t row) {
        for (std::size_t i = 0; i < w; ++i) acc[i] += term(o0 + i, row + i);
      });
      for (std::size_t i = 0; i < w; ++i) finish(o0 + i, acc[i]);
    }
  });
}

// dx[o, r] (+)= value(o, flat offset of x[o, r]) for every element of x: a
// gradient broadcast back over the reduced axes, one pass.
template <class T, class F>
void write_reduced(const ReducePlan& plan, GradSlot<T> dx, F&& value) {
  T* d = dx.buffer.data();
  if (const std::size_t inner = kept_inner(plan); inner > 1) {
    for_each_block_row(plan, inner, [&](std::size_t o0, std::size_t row) {
      if (dx.accumulate)
        for (std::size_t i = 0; i < inner; ++i) d[row + i] += value(o0 + i, row + i);
      else
        for (std::size_t i = 0; i < inner; ++i) d[row + i] = value(o0 + i, row + i);
    });
    return;
  }
  for_each_output(plan, [&](std::size_t o, std::size_t base) {
    if (dx.accumulate)
      for_each_reduced(plan, base, [&](std::size_t i) { d[i] += value(o, i); });
    else
      for_each_reduced(plan, base, [&](std::size_t i) { d[i] = value(o, i); });
  });
}

}  // namespace xtgrad::detail
