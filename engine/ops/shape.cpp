#include "shape.hpp"

#include <algorithm>
#include <string>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../indices.hpp"
#include "sum_to.hpp"
#include "support/broadcast.hpp"
#include "support/copy.hpp"
#include "support/permute.hpp"

namespace xtgrad {

namespace {

// ---- Reshape: one copy each way ----

template <class T>
Var<T> reshaped(const char* op, Tape<T>& tape, const Var<T>& x, const Shape& shape) {
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(shape);
  // y[shape] = x[x.shape], the same elements in the same order
  std::copy(xv.data(), xv.data() + xv.size(), y.data());

  tape.set_backward(yi, [xi](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    // dx[x.shape] (+)= dy[shape], element by element in row-major order
    detail::copy_or_add(dx.buffer.data(), dy.data(), dy.size(), dx.accumulate);
  });
  tape.set_grad_rule(yi, [](GradSink<T>& g) {  // dx = reshape(dy, x.shape)
    const Shape& shape = g.input(0).shape();
    g.add(0, reshape(g.grad_output(), std::vector<std::int64_t>(shape.begin(), shape.end())));
  });
  return tape.var(yi);
}

template <class T>
Var<T> permuted(const char* op, Tape<T>& tape, const Var<T>& x, const Shape& dims) {
  const std::size_t xi = x.index();
  const Shape& x_shape = x.shape();
  Shape y_shape(dims.size()), inverse(dims.size());
  for (std::size_t k = 0; k < dims.size(); ++k) {
    y_shape[k] = x_shape[dims[k]];
    inverse[dims[k]] = k;
  }
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  // y[..., i_k, ...] = x[..., j_(dims[k]) = i_k, ...]
  detail::permute_into<false>(xv.data(), xv.shape(), dims, y.data(), y.size());

  tape.set_backward(yi, [xi, inverse](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    // dx[x.shape] (+)= permute(dy[y.shape], inverse)
    if (dx.accumulate)
      detail::permute_into<true>(dy.data(), dy.shape(), inverse, dx.buffer.data(), dy.size());
    else
      detail::permute_into<false>(dy.data(), dy.shape(), inverse, dx.buffer.data(), dy.size());
  });
  tape.set_grad_rule(yi, [inverse](GradSink<T>& g) {  // dx = permute(dy, inverse)
    g.add(0, permute(g.grad_output(), std::vector<std::int64_t>(inverse.begin(), inverse.end())));
  });
  return tape.var(yi);
}

// ---- Expand: a broadcast view's sizes, then a copy ----

// expand's result shape: `shape` checked against x's shape, -1 keeping x's
// size and new leading axes any size >= 0.
Shape expanded_shape(const char* op, const Shape& x_shape, const std::vector<std::int64_t>& shape) {
  const std::size_t rank = x_shape.size();
  const auto given = [&] {  // built only for a message: no allocation on success
    return detail::shape_str(shape) + " for x of shape " + detail::shape_str(x_shape);
  };
  if (shape.size() < rank)
    detail::fail_argument(
        op, "shape",
        "is " + given() + ", expected at least " + std::to_string(rank) + " sizes (x's rank)");
  const std::size_t lead = shape.size() - rank;
  Shape y_shape(shape.size());
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::int64_t s = shape[k];
    const auto entry = [&] {
      return "is " + given() + ", whose entry " + std::to_string(k) + " is " + std::to_string(s);
    };
    if (k < lead) {
      if (s < 0)
        detail::fail_argument(op, "shape", entry() + ", expected a size >= 0 for a new axis");
      y_shape[k] = static_cast<std::size_t>(s);
      continue;
    }
    const std::size_t n = x_shape[k - lead];
    if (s == -1) {
      y_shape[k] = n;
    } else if (s < 0) {
      detail::fail_argument(op, "shape", entry() + ", expected a size >= 0 or -1");
    } else if (static_cast<std::size_t>(s) != n && n != 1) {
      detail::fail_argument(op, "shape",
                            entry() + ", expected " + std::to_string(n) +
                                " (only an axis of size 1 can be expanded)");
    } else {
      y_shape[k] = static_cast<std::size_t>(s);
    }
  }
  return y_shape;
}

// y[y.shape] = x broadcast to y's shape: runs copied from x, or one element repeated.
template <class T>
void broadcast_into(const xt::xarray<T>& x, xt::xarray<T>& y) {
  const detail::BroadcastPlan plan = detail::make_plan(y.shape(), {&x.shape(), &x.shape()});
  const T* xd = x.data();
  T* yd = y.data();
  detail::for_each_run(
      plan, y.size(),
      [&](std::size_t o, std::size_t ox, std::size_t, std::size_t n, bool step, bool) {
        if (step)
          std::copy(xd + ox, xd + ox + n, yd + o);
        else
          std::fill(yd + o, yd + o + n, xd[ox]);
      });
}

}  // namespace

std::vector<std::int64_t> detail::signed_shape(const char* op,
                                               const std::vector<ShapeEntry>& shape) {
  const detail::Check check(op);
  std::vector<std::int64_t> sizes;
  sizes.reserve(shape.size());
  for (const ShapeEntry& entry : shape) {
    check.argument(!entry.too_large, "shape", "holds the unsigned size ",
                   static_cast<std::uint64_t>(entry.value), ", above ", INT64_MAX,
                   " (a wrapped subtraction?); expected sizes >= 0 (or one -1 to infer)");
    sizes.push_back(entry.value);
  }
  return sizes;
}

template <class T>
Var<T> reshape(const Var<T>& x, const std::vector<std::int64_t>& shape) {
  static constexpr const char* op = "reshape";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t count = x.size();
  const auto given = [&] {  // built only for a message: no allocation on success
    return detail::shape_str(shape) + " for x of shape " + detail::shape_str(x.shape()) + " (" +
           std::to_string(count) + " elements)";
  };
  // The products of the given sizes and of the nonzero ones, exact: a wrapped
  // product could match.
  detail::WideCount product(1), span(1);
  std::size_t inferred = shape.size();
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1 && inferred == shape.size())
      inferred = k;
    else if (shape[k] == -1)
      detail::fail_argument(op, "shape", "is " + given() + ", expected at most one -1");
    else if (shape[k] < 0)
      detail::fail_argument(op, "shape",
                            "is " + given() + ", expected sizes >= 0 (or one -1 to infer)");
    else
      product *= static_cast<std::size_t>(shape[k]);
    if (shape[k] > 0) span *= static_cast<std::size_t>(shape[k]);
  }
  if (!span.fits_ptrdiff())
    detail::fail_element_count(op, "argument 'shape'", detail::shape_str(shape), product, span);
  std::size_t known = product.value();
  Shape result(shape.size());
  for (std::size_t k = 0; k < shape.size(); ++k) result[k] = static_cast<std::size_t>(shape[k]);
  if (inferred < shape.size()) {
    if (known == 0)
      detail::fail_argument(op, "shape",
                            "is " + given() + ", where the -1 is ambiguous: the other sizes are 0");
    result[inferred] = count / known;
    known *= result[inferred];
  }
  if (known != count)
    detail::fail_argument(op, "shape", "is " + given() + ", expected a shape of as many elements");
  return reshaped(op, tape, x, result);
}

template <class T>
Var<T> flatten(const Var<T>& x, std::int64_t start_dim, std::int64_t end_dim) {
  static constexpr const char* op = "flatten";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape& x_shape = x.shape();
  const std::size_t rank = x_shape.size();
  // A 0-d x flattens to [1], its dims as those of a 1-d tensor (torch).
  const std::size_t start =
      detail::normalize_dim(op, "start_dim", start_dim, std::max<std::size_t>(rank, 1));
  const std::size_t end =
      detail::normalize_dim(op, "end_dim", end_dim, std::max<std::size_t>(rank, 1));
  if (start > end)
    detail::fail_argument(op, "start_dim",
                          "is " + std::to_string(start_dim) + ", which comes after end_dim " +
                              std::to_string(end_dim) + " for x of shape " +
                              detail::shape_str(x_shape));
  if (rank == 0) return reshaped(op, tape, x, Shape{1});
  Shape result;
  for (std::size_t d = 0; d < start; ++d) result.push_back(x_shape[d]);
  std::size_t merged = 1;
  for (std::size_t d = start; d <= end; ++d) merged *= x_shape[d];
  result.push_back(merged);
  for (std::size_t d = end + 1; d < rank; ++d) result.push_back(x_shape[d]);
  return reshaped(op, tape, x, result);
}

template <class T>
Var<T> permute(const Var<T>& x, const std::vector<std::int64_t>& dims) {
  static constexpr const char* op = "permute";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t rank = x.dimension();
  if (dims.size() != rank)
    detail::fail_argument(op, "dims",
                          "is " + detail::shape_str(dims) + ", expected a permutation of all " +
                              std::to_string(rank) + " axes of x of shape " +
                              detail::shape_str(x.shape()));
  Shape axes(rank);
  std::vector<bool> seen(rank, false);
  for (std::size_t k = 0; k < rank; ++k) {
    axes[k] = detail::normalize_dim(op, "dims", dims[k], rank);
    if (seen[axes[k]])
      detail::fail_argument(op, "dims",
                            "is " + detail::shape_str(dims) + ", which names axis " +
                                std::to_string(axes[k]) + " twice (x has shape " +
                                detail::shape_str(x.shape()) + ")");
    seen[axes[k]] = true;
  }
  return permuted(op, tape, x, axes);
}

template <class T>
Var<T> transpose(const Var<T>& x, std::int64_t dim0, std::int64_t dim1) {
  static constexpr const char* op = "transpose";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t rank = x.dimension();
  const std::size_t d0 = detail::normalize_dim(op, "dim0", dim0, rank);
  const std::size_t d1 = detail::normalize_dim(op, "dim1", dim1, rank);
  Shape axes(rank);
  for (std::size_t k = 0; k < rank; ++k) axes[k] = k;
  std::swap(axes[d0], axes[d1]);
  return permuted(op, tape, x, axes);
}

template <class T>
Var<T> expand(const Var<T>& x, const std::vector<std::int64_t>& shape) {
  static constexpr const char* op = "expand";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape y_shape = expanded_shape(op, x.shape(), shape);
  detail::checked_allocation<T>(op, "argument 'shape'", y_shape);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  broadcast_into(tape.value(xi), y);  // y[y_shape] = x broadcast

  tape.set_backward(yi, [xi](Tape<T>& t, const xt::xarray<T>& dy) {
    // dx[x.shape] (+)= dy[y_shape] summed over the axes x was repeated along
    if (t.requires_grad(xi)) detail::sum_to_shape(dy, t.grad_slot(xi));
  });
  tape.set_grad_rule(yi, [](GradSink<T>& g) {  // dx = dy summed back to x's shape
    g.add(0, detail::sum_to(g.grad_output(), g.input(0).shape()));
  });
  return tape.var(yi);
}

#define XTGRAD_SHAPE_OPS(T)                                                 \
  template Var<T> reshape(const Var<T>&, const std::vector<std::int64_t>&); \
  template Var<T> flatten(const Var<T>&, std::int64_t, std::int64_t);       \
  template Var<T> permute(const Var<T>&, const std::vector<std::int64_t>&); \
  template Var<T> transpose(const Var<T>&, std::int64_t, std::int64_t);     \
  template Var<T> expand(const Var<T>&, const std::vector<std::int64_t>&);
XTGRAD_SHAPE_OPS(float)
XTGRAD_SHAPE_OPS(double)
#undef XTGRAD_SHAPE_OPS

}  // namespace xtgrad
