#include "index.hpp"

#include <string>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "support/axes.hpp"
#include "support/copy.hpp"

namespace xtgrad {

namespace {

// Walks gather's index (shape `ishape`, the rank of x) in runs along its last
// axis: run(start, base, n) for the elements start .. start + n - 1 of the
// index, where base is the flat offset in x (shape `xshape`) of the run's
// first element without its dim-th coordinate. Element start + j then reads
// x at base + j * inner_step + index * dim_stride (inner_step 0 when dim is
// the last axis, where the index value alone moves along the run).
template <class Run>
void for_each_gather_run(const Shape& xshape, const Shape& ishape, std::size_t axis,
                         std::size_t size, Run&& run) {
  if (size == 0) return;
  const std::size_t r = xshape.size();
  Shape stride(r, 1);
  for (std::size_t d = r; d-- > 1;) stride[d - 1] = stride[d] * xshape[d];
  Shape m(r - 1, 0);
  std::size_t base = 0;
  const std::size_t n = ishape[r - 1];
  for (std::size_t start = 0; start < size; start += n) {
    run(start, base, n);
    for (std::size_t d = r - 1; d-- > 0;) {  // odometer over the index's outer axes
      if (d != axis) base += stride[d];
      if (++m[d] < ishape[d]) break;
      if (d != axis) base -= stride[d] * ishape[d];
      m[d] = 0;
    }
  }
}

// The copy of `index` that the backward rule of node yi keeps: one copy (a
// non-const init-capture, so that the rule moves rather than copies it
// again), and none when the node needs no gradient and the rule is dropped.
template <class T>
Indices kept_for_backward(const Tape<T>& tape, std::size_t yi, const Indices& index) {
  return tape.requires_grad(yi) ? index : Indices();
}

}  // namespace

template <class T>
Var<T> index_select(const Var<T>& x, std::int64_t dim, const Indices& index) {
  static constexpr const char* op = "index_select";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  check.shape(index.dimension() <= 1, "index", index.shape(), "a 1-d index [K] (or 0-d)");
  const detail::AxisSplit s = detail::split_at(x.shape(), axis);
  detail::check_indices(op, "index", index, s.extent);
  const std::size_t k = index.size();
  Shape y_shape = x.shape();
  y_shape[axis] = k;
  detail::checked_allocation<T>(op, "arguments 'x' and 'index'", y_shape);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  const std::int64_t* id = index.data();
  // y[o, j, i] = x[o, index[j], i]   (x [outer, extent, inner], y [outer, K, inner])
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t j = 0; j < k; ++j) {
      const T* in = xv.data() + (o * s.extent + static_cast<std::size_t>(id[j])) * s.inner;
      T* out = y.data() + (o * k + j) * s.inner;
      if (s.inner == 1)  // along the last axis: one element, no copy call
        *out = *in;
      else
        std::copy(in, in + s.inner, out);
    }

  tape.set_backward(
      yi, [xi, s, index = kept_for_backward(tape, yi, index)](Tape<T>& t, const xt::xarray<T>& dy) {
        if (!t.requires_grad(xi)) return;
        T* dx = detail::zeroed_unless_accumulating(t.grad_slot(xi));
        const std::size_t k = index.size();
        const std::int64_t* id = index.data();
        // dx[o, index[j], i] += dy[o, j, i], repeated indices adding up
        for (std::size_t o = 0; o < s.outer; ++o)
          for (std::size_t j = 0; j < k; ++j)
            detail::copy_rows(dx + (o * s.extent + static_cast<std::size_t>(id[j])) * s.inner, 0,
                              dy.data() + (o * k + j) * s.inner, 0, 1, s.inner, true);
      });
  // No set_grad_rule: create_graph refuses this node (its rule would be an
  // index_add of dy, which is no op here).
  return tape.var(yi);
}

template <class T>
Var<T> gather(const Var<T>& x, std::int64_t dim, const Indices& index) {
  static constexpr const char* op = "gather";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape& x_shape = x.shape();
  const std::size_t rank = x_shape.size();
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, rank);
  bool fits = index.dimension() == rank;
  for (std::size_t d = 0; d < rank && fits; ++d) fits = d == axis || index.shape()[d] <= x_shape[d];
  check.shape(fits, "index", index.shape(), "the rank of x of shape ", x_shape,
              " and sizes <= x's along every axis but dim ", axis);
  detail::check_indices(op, "index", index, x_shape[axis]);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(index.shape());
  const Shape& s = x_shape;
  std::size_t dim_stride = 1;
  for (std::size_t d = axis + 1; d < rank; ++d) dim_stride *= s[d];
  const std::size_t inner_step = axis + 1 == rank ? 0 : 1;
  const std::int64_t* id = index.data();
  const T* xd = xv.data();
  T* yd = y.data();
  // y[i] = x[i with coordinate dim = index[i]]
  for_each_gather_run(
      x_shape, index.shape(), axis, index.size(),
      [&](std::size_t start, std::size_t base, std::size_t n) {
        for (std::size_t j = 0; j < n; ++j)
          yd[start + j] =
              xd[base + j * inner_step + static_cast<std::size_t>(id[start + j]) * dim_stride];
      });

  tape.set_backward(yi, [xi, axis, index = kept_for_backward(tape, yi, index), dim_stride,
                         inner_step](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> slot = t.grad_slot(xi);
    T* dx = detail::zeroed_unless_accumulating(slot);
    const std::int64_t* id = index.data();
    const T* g = dy.data();
    // dx[i with coordinate dim = index[i]] += dy[i], repeated positions adding up
    for_each_gather_run(
        slot.buffer.shape(), index.shape(), axis, index.size(),
        [&](std::size_t start, std::size_t base, std::size_t n) {
          for (std::size_t j = 0; j < n; ++j)
            dx[base + j * inner_step + static_cast<std::size_t>(id[start + j]) * dim_stride] +=
                g[start + j];
        });
  });
  // No set_grad_rule: create_graph refuses this node (its rule would be a
  // scatter_add of dy, which is no op here).
  return tape.var(yi);
}

template Var<float> index_select(const Var<float>&, std::int64_t, const Indices&);
template Var<double> index_select(const Var<double>&, std::int64_t, const Indices&);
template Var<float> gather(const Var<float>&, std::int64_t, const Indices&);
template Var<double> gather(const Var<double>&, std::int64_t, const Indices&);

}  // namespace xtgrad
