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

// The indices node yi's backward and create_graph rule read, kept in the
// node's saved memory (so that a warm tape records without allocating), and
// none when the node needs no gradient.
template <class T>
void keep_indices(Tape<T>& tape, std::size_t yi, const Indices& index) {
  if (tape.requires_grad(yi))
    std::copy_n(index.data(), index.size(), tape.template save<std::int64_t>(yi, index.size()));
}

template <class T>
Indices kept_indices(const Tape<T>& tape, std::size_t yi, const Shape& shape) {
  Indices kept = xt::empty<std::int64_t>(shape);
  std::copy_n(tape.template saved<std::int64_t>(yi), kept.size(), kept.data());
  return kept;
}

// y[o, index[j], i] (+)= src[o, j, i] for the k indices, repeated indices
// adding up (y [outer, extent, inner], src [outer, k, inner]): index_add's
// forward and index_select's backward.
template <class T>
void add_rows(const detail::AxisSplit& s, const std::int64_t* id, std::size_t k, const T* src,
              T* y) {
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t j = 0; j < k; ++j)
      detail::copy_rows(y + (o * s.extent + static_cast<std::size_t>(id[j])) * s.inner, 0,
                        src + (o * k + j) * s.inner, 0, 1, s.inner, true);
}

// y[o, j, i] (+)= x[o, index[j], i]: index_select's forward (into a fresh
// y) and index_add's backward to its source.
template <class T>
void select_rows(const detail::AxisSplit& s, const std::int64_t* id, std::size_t k, const T* x,
                 T* y, bool accumulate) {
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t j = 0; j < k; ++j)
      detail::copy_rows(y + (o * k + j) * s.inner, 0,
                        x + (o * s.extent + static_cast<std::size_t>(id[j])) * s.inner, 0, 1,
                        s.inner, accumulate);
}

// Where element i of an index of shape `ishape` points in a tensor of shape
// `xshape` along `axis`: the offsets that gather reads and scatter_add adds to.
struct GatherWalk {
  Shape xshape, ishape;
  std::size_t axis, dim_stride, inner_step;
  GatherWalk(const Shape& x, const Shape& index, std::size_t axis_)
      : xshape(x),
        ishape(index),
        axis(axis_),
        dim_stride(1),
        inner_step(axis_ + 1 == x.size() ? 0 : 1) {
    for (std::size_t d = axis + 1; d < x.size(); ++d) dim_stride *= x[d];
  }
  // f(i, offset) for every element i of the index, in order.
  template <class F>
  void each(const std::int64_t* id, F&& f) const {
    std::size_t size = 1;
    for (const std::size_t extent : ishape) size *= extent;  // the index exists: no overflow
    for_each_gather_run(
        xshape, ishape, axis, size, [&](std::size_t start, std::size_t base, std::size_t n) {
          for (std::size_t j = 0; j < n; ++j)
            f(start + j,
              base + j * inner_step + static_cast<std::size_t>(id[start + j]) * dim_stride);
        });
  }
};

// dx (+)= dy, x and dy of one shape: the identity part of index_add's and
// scatter_add's backward.
template <class T>
void pass_through(GradSlot<T> slot, const xt::xarray<T>& dy) {
  if (slot.accumulate)
    detail::copy_or_add(slot.buffer.data(), dy.data(), dy.size(), true);
  else
    slot.buffer = dy;
}

// The four nodes, their arguments checked: by the public ops below, or by the
// forward of the node whose create_graph rule records them (its kept indices
// were checked then, and are not checked again). index_select and index_add
// are each other's gradient, as are gather and scatter_add.
template <class T>
Var<T> record_index_add(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index,
                        const Var<T>& source);
template <class T>
Var<T> record_scatter_add(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index,
                          const Var<T>& source);

template <class T>
Var<T> record_index_select(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index) {
  const detail::AxisSplit s = detail::split_at(x.shape(), axis);
  const std::size_t k = index.size();
  Shape y_shape = x.shape();
  y_shape[axis] = k;
  detail::checked_allocation<T>("index_select", "arguments 'x' and 'index'", y_shape);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("index_select", {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  // y[o, j, i] = x[o, index[j], i]   (x [outer, extent, inner], y [outer, K, inner])
  select_rows(s, index.data(), k, tape.value(xi).data(), y.data(), false);
  keep_indices(tape, yi, index);

  tape.set_backward(yi, [xi, yi, s, k](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    // dx[o, index[j], i] += dy[o, j, i], repeated indices adding up
    T* dx = detail::zeroed_unless_accumulating(t.grad_slot(xi));
    add_rows(s, t.template saved<std::int64_t>(yi), k, dy.data(), dx);
  });
  // create_graph: dx = index_add(zeros like x, dim, index, dy)
  tape.set_grad_rule(yi, [axis, k](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    Tape<T>& t = g.tape();
    const Var<T> zeros = t.leaf(xt::zeros<T>(g.input(0).shape()), false);
    g.add(0, record_index_add(t, zeros, axis, kept_indices(t, g.output().index(), Shape{k}),
                              g.grad_output()));
  });
  return tape.var(yi);
}

template <class T>
Var<T> record_index_add(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index,
                        const Var<T>& source) {
  const detail::AxisSplit s = detail::split_at(x.shape(), axis);
  const std::size_t k = index.size();
  const std::size_t xi = x.index(), si = source.index();
  const std::size_t yi =
      tape.record("index_add", {xi, si}, x.requires_grad() || source.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y = tape.value(xi);
  // y = x, then y[o, index[j], i] += source[o, j, i]
  add_rows(s, index.data(), k, tape.value(si).data(), y.data());
  keep_indices(tape, yi, index);

  tape.set_backward(yi, [xi, si, yi, s, k](Tape<T>& t, const xt::xarray<T>& dy) {
    if (t.requires_grad(xi)) pass_through(t.grad_slot(xi), dy);  // dx = dy
    if (!t.requires_grad(si)) return;
    // dsource[o, j, i] (+)= dy[o, index[j], i]
    const GradPointer<T> ds = t.grad_pointer(si);
    select_rows(s, t.template saved<std::int64_t>(yi), k, dy.data(), ds.data, ds.accumulate);
  });
  // create_graph: dx = dy, dsource = index_select(dy, dim, index)
  tape.set_grad_rule(yi, [axis, k](GradSink<T>& g) {
    if (g.needs_grad(0)) g.add(0, g.grad_output());
    if (!g.needs_grad(1)) return;
    Tape<T>& t = g.tape();
    g.add(1, record_index_select(t, g.grad_output(), axis,
                                 kept_indices(t, g.output().index(), Shape{k})));
  });
  return tape.var(yi);
}

template <class T>
Var<T> record_gather(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index) {
  const GatherWalk walk(x.shape(), index.shape(), axis);
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("gather", {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(index.shape());
  const T* xd = tape.value(xi).data();
  T* yd = y.data();
  // y[i] = x[i with coordinate dim = index[i]]
  walk.each(index.data(), [&](std::size_t i, std::size_t at) { yd[i] = xd[at]; });
  keep_indices(tape, yi, index);

  tape.set_backward(yi, [xi, yi, axis](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> slot = t.grad_slot(xi);
    const GatherWalk w(slot.buffer.shape(), dy.shape(), axis);
    T* dx = detail::zeroed_unless_accumulating(slot);
    const T* g = dy.data();
    // dx[i with coordinate dim = index[i]] += dy[i], repeated positions adding up
    w.each(t.template saved<std::int64_t>(yi),
           [&](std::size_t i, std::size_t at) { dx[at] += g[i]; });
  });
  // create_graph: dx = scatter_add(zeros like x, dim, index, dy)
  tape.set_grad_rule(yi, [axis](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    Tape<T>& t = g.tape();
    const Var<T> dy = g.grad_output();
    const Var<T> zeros = t.leaf(xt::zeros<T>(g.input(0).shape()), false);
    g.add(0,
          record_scatter_add(t, zeros, axis, kept_indices(t, g.output().index(), dy.shape()), dy));
  });
  return tape.var(yi);
}

template <class T>
Var<T> record_scatter_add(Tape<T>& tape, const Var<T>& x, std::size_t axis, const Indices& index,
                          const Var<T>& source) {
  const GatherWalk walk(x.shape(), index.shape(), axis);
  const std::size_t xi = x.index(), si = source.index();
  const std::size_t yi =
      tape.record("scatter_add", {xi, si}, x.requires_grad() || source.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y = tape.value(xi);
  const T* src = tape.value(si).data();
  T* yd = y.data();
  // y = x, then y[i with coordinate dim = index[i]] += source[i]
  walk.each(index.data(), [&](std::size_t i, std::size_t at) { yd[at] += src[i]; });
  keep_indices(tape, yi, index);

  tape.set_backward(yi, [xi, si, yi, axis](Tape<T>& t, const xt::xarray<T>& dy) {
    if (t.requires_grad(xi)) pass_through(t.grad_slot(xi), dy);  // dx = dy
    if (!t.requires_grad(si)) return;
    // dsource[i] (+)= dy[i with coordinate dim = index[i]]
    const GradSlot<T> slot = t.grad_slot(si);
    const GatherWalk w(dy.shape(), slot.buffer.shape(), axis);
    T* ds = slot.buffer.data();
    const T* g = dy.data();
    if (slot.accumulate)
      w.each(t.template saved<std::int64_t>(yi),
             [&](std::size_t i, std::size_t at) { ds[i] += g[at]; });
    else
      w.each(t.template saved<std::int64_t>(yi),
             [&](std::size_t i, std::size_t at) { ds[i] = g[at]; });
  });
  // create_graph: dx = dy, dsource = gather(dy, dim, index)
  tape.set_grad_rule(yi, [axis](GradSink<T>& g) {
    if (g.needs_grad(0)) g.add(0, g.grad_output());
    if (!g.needs_grad(1)) return;
    Tape<T>& t = g.tape();
    g.add(1, record_gather(t, g.grad_output(), axis,
                           kept_indices(t, g.output().index(), g.input(1).shape())));
  });
  return tape.var(yi);
}

// gather's and scatter_add's index: x's rank, and along every axis but dim
// a size <= x's (torch.gather, torch.scatter_add).
void check_gather_index(const detail::Check& check, const char* op, const Shape& x_shape,
                        std::size_t axis, const Indices& index) {
  const std::size_t rank = x_shape.size();
  bool fits = index.dimension() == rank;
  for (std::size_t d = 0; d < rank && fits; ++d) fits = d == axis || index.shape()[d] <= x_shape[d];
  check.shape(fits, "index", index.shape(), "the rank of x of shape ", x_shape,
              " and sizes <= x's along every axis but dim ", axis);
  detail::check_indices(op, "index", index, x_shape[axis]);
}

}  // namespace

template <class T>
Var<T> index_select(const Var<T>& x, std::int64_t dim, const Indices& index) {
  static constexpr const char* op = "index_select";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  check.shape(index.dimension() <= 1, "index", index.shape(), "a 1-d index [K] (or 0-d)");
  detail::check_indices(op, "index", index, x.shape()[axis]);
  return record_index_select(tape, x, axis, index);
}

template <class T>
Var<T> index_add(const Var<T>& x, std::int64_t dim, const Indices& index, const Var<T>& source) {
  static constexpr const char* op = "index_add";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}, {"source", &source}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  check.shape(index.dimension() <= 1, "index", index.shape(), "a 1-d index [K] (or 0-d)");
  Shape expected = x.shape();
  expected[axis] = index.size();
  check.shape(source.shape() == expected, "source", source.shape(), "x's shape with dim ", axis,
              " of the index's size: ", expected);
  detail::check_indices(op, "index", index, x.shape()[axis]);
  return record_index_add(tape, x, axis, index, source);
}

template <class T>
Var<T> gather(const Var<T>& x, std::int64_t dim, const Indices& index) {
  static constexpr const char* op = "gather";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  check_gather_index(check, op, x.shape(), axis, index);
  return record_gather(tape, x, axis, index);
}

template <class T>
Var<T> scatter_add(const Var<T>& x, std::int64_t dim, const Indices& index, const Var<T>& source) {
  static constexpr const char* op = "scatter_add";
  const detail::Check check(op);
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}, {"source", &source}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  check_gather_index(check, op, x.shape(), axis, index);
  const Shape index_shape(index.shape().begin(), index.shape().end());
  check.shape(source.shape() == index_shape, "source", source.shape(), "the index's shape ",
              index_shape);
  return record_scatter_add(tape, x, axis, index, source);
}

template Var<float> index_select(const Var<float>&, std::int64_t, const Indices&);
template Var<double> index_select(const Var<double>&, std::int64_t, const Indices&);
template Var<float> gather(const Var<float>&, std::int64_t, const Indices&);
template Var<double> gather(const Var<double>&, std::int64_t, const Indices&);
template Var<float> index_add(const Var<float>&, std::int64_t, const Indices&, const Var<float>&);
template Var<double> index_add(const Var<double>&, std::int64_t, const Indices&,
                               const Var<double>&);
template Var<float> scatter_add(const Var<float>&, std::int64_t, const Indices&, const Var<float>&);
template Var<double> scatter_add(const Var<double>&, std::int64_t, const Indices&,
                                 const Var<double>&);

}  // namespace xtgrad
