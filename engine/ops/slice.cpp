#include "slice.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../indices.hpp"
#include "shape.hpp"
#include "support/axes.hpp"
#include "support/copy.hpp"

namespace xtgrad {

namespace {

// The elements start, start + step, ... (`length` of them) along `axis` of x,
// recorded as one node of op `op`. The arguments are already checked.
template <class T>
Var<T> take(const char* op, Tape<T>& tape, const Var<T>& x, std::size_t axis, std::size_t start,
            std::size_t length, std::size_t step) {
  const std::size_t xi = x.index();
  const detail::AxisSplit s = detail::split_at(x.shape(), axis);
  Shape y_shape = x.shape();
  y_shape[axis] = length;
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  const std::size_t inner = s.inner;
  // Rows of x's outer axes, none when y holds no element (however many rows a
  // [2^62, 0] x has).
  const std::size_t outer = y.size() == 0 ? 0 : s.outer;
  // y[o, j, i] = x[o, start + j * step, i]   (x [outer, extent, inner], y [outer, length, inner])
  for (std::size_t o = 0; o < outer; ++o)
    detail::copy_rows(y.data() + o * length * inner, inner,
                      xv.data() + (o * s.extent + start) * inner, step * inner, length, inner,
                      false);

  tape.set_backward(yi, [xi, s, outer, start, length, step](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> slot = t.grad_slot(xi);
    T* dx = detail::zeroed_unless_accumulating(slot);
    // dx[o, start + j * step, i] (+)= dy[o, j, i]; every other position of dx keeps 0
    for (std::size_t o = 0; o < outer; ++o)
      detail::copy_rows(dx + (o * s.extent + start) * s.inner, step * s.inner,
                        dy.data() + o * length * s.inner, s.inner, length, s.inner,
                        slot.accumulate);
  });
  // Step 1: dx = dy between zeros along the axis (x seen as [outer, extent,
  // inner]); a strided slice has no rule and refuses create_graph.
  if (step == 1)
    tape.set_grad_rule(yi, [s, start, length](GradSink<T>& g) {
      Tape<T>& t = g.tape();
      const auto o = static_cast<std::int64_t>(s.outer), in = static_cast<std::int64_t>(s.inner);
      const Var<T> before = t.leaf(xt::xarray<T>(xt::zeros<T>({s.outer, start, s.inner})), false);
      const Var<T> after =
          t.leaf(xt::xarray<T>(xt::zeros<T>({s.outer, s.extent - start - length, s.inner})), false);
      const Var<T> dy = reshape(g.grad_output(), {o, static_cast<std::int64_t>(length), in});
      const Shape& shape = g.input(0).shape();
      g.add(0, reshape(concat({before, dy, after}, 1),
                       std::vector<std::int64_t>(shape.begin(), shape.end())));
    });
  return tape.var(yi);
}

// Python's rule for one slice bound with step >= 1: negative from the end,
// then clamped to [0, n].
std::size_t clamp_bound(std::int64_t bound, std::size_t n) {
  const auto size = static_cast<std::int64_t>(n);
  if (bound < 0) bound += size;
  return static_cast<std::size_t>(bound < 0 ? 0 : bound > size ? size : bound);
}

// Each tensor of xs joined along one axis: x_k seen as [outer, chunk_k]
// fills columns [offset_k, offset_k + chunk_k) of y seen as [outer, sum chunk_k].
struct Piece {
  std::size_t index, chunk;
};

template <class T>
Var<T> join(const char* op, Tape<T>& tape, const std::vector<Piece>& pieces, std::size_t outer,
            const Shape& y_shape) {
  std::vector<std::size_t> parents;
  parents.reserve(pieces.size());
  bool requires_grad = false;
  std::size_t row = 0;
  for (const Piece& p : pieces) {
    parents.push_back(p.index);
    requires_grad = requires_grad || tape.requires_grad(p.index);
    row += p.chunk;
  }
  const std::size_t yi = tape.record(op, parents, requires_grad);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  // y[o, offset_k + c] = x_k[o, c]   (y [outer, row], x_k [outer, chunk_k])
  std::size_t offset = 0;
  for (const Piece& p : pieces) {
    // one row of chunk_k per outer index
    detail::copy_rows(y.data() + offset, row, tape.value(p.index).data(), p.chunk, outer, p.chunk,
                      false);
    offset += p.chunk;
  }

  tape.set_backward(yi, [pieces, outer, row](Tape<T>& t, const xt::xarray<T>& dy) {
    std::size_t offset = 0;
    for (const Piece& p : pieces) {
      if (t.requires_grad(p.index)) {  // the same Var twice: its second claim accumulates
        GradSlot<T> dx = t.grad_slot(p.index);
        // dx_k[o, c] (+)= dy[o, offset_k + c]   (dx_k [outer, chunk_k], dy [outer, row])
        detail::copy_rows(dx.buffer.data(), p.chunk, dy.data() + offset, row, outer, p.chunk,
                          dx.accumulate);
      }
      offset += p.chunk;
    }
  });
  // dx_k = columns [offset_k, offset_k + chunk_k) of dy seen as [outer, row]
  tape.set_grad_rule(yi, [outer, row](GradSink<T>& g) {
    const Var<T> dy = reshape(g.grad_output(),
                              {static_cast<std::int64_t>(outer), static_cast<std::int64_t>(row)});
    std::int64_t offset = 0;
    for (std::size_t k = 0; k < g.input_count(); ++k) {
      const Var<T> x = g.input(k);
      const auto chunk = static_cast<std::int64_t>(outer == 0 ? 0 : x.size() / outer);
      if (g.needs_grad(k))
        g.add(k, reshape(slice(dy, 1, offset, offset + chunk),
                         std::vector<std::int64_t>(x.shape().begin(), x.shape().end())));
      offset += chunk;
    }
  });
  return tape.var(yi);
}

// The one tape of every entry of a non-empty xs, as detail::common_tape for a
// list: std::logic_error naming "xs[k]" for an empty or stale handle, or two
// entries on different tapes.
template <class T>
Tape<T>& tape_of_all(const char* op, const std::vector<Var<T>>& xs) {
  Tape<T>* tape = nullptr;
  char name[32], first[32];
  for (std::size_t k = 0; k < xs.size(); ++k) {
    std::snprintf(name, sizeof name, "xs[%zu]", k);
    Tape<T>& t = xs[k].tape_for(op, name);
    if (tape == nullptr) {
      tape = &t;
      std::snprintf(first, sizeof first, "%s", name);
    } else if (tape != &t) {
      detail::fail_logic(op, "arguments " + detail::quoted(first) + " and " + detail::quoted(name) +
                                 " live on different tapes; record all inputs of one "
                                 "computation on the same Tape");
    }
  }
  return *tape;
}

// The pieces of x of the given sizes along `axis`, each one node.
template <class T>
std::vector<Var<T>> pieces_of(const char* op, Tape<T>& tape, const Var<T>& x, std::size_t axis,
                              const std::vector<std::size_t>& sizes) {
  if (tape.detect_anomaly()) {
    // Anomaly mode throws for the first piece with a NaN (an infinity in a
    // piece was in x already: no anomaly, tape.hpp); record that piece alone
    // first, so that the throw leaves no earlier piece behind.
    const detail::AxisSplit s = detail::split_at(x.shape(), axis);
    const T* xd = tape.value(x.index()).data();
    std::size_t start = 0;
    for (std::size_t n : sizes) {
      bool no_nan = true;
      for (std::size_t o = 0; o < s.outer && no_nan && n * s.inner != 0; ++o)
        for (std::size_t i = (o * s.extent + start) * s.inner;
             i < (o * s.extent + start + n) * s.inner; ++i)
          no_nan = no_nan && !std::isnan(xd[i]);
      if (!no_nan) take(op, tape, x, axis, start, n, 1);  // throws AnomalyError, unrecorded
      start += n;
    }
  }
  std::vector<Var<T>> out;
  out.reserve(sizes.size());
  std::size_t start = 0;
  for (std::size_t n : sizes) {
    out.push_back(take(op, tape, x, axis, start, n, 1));
    start += n;
  }
  return out;
}

// torch.split's pieces of `size` (the last one smaller) for an axis of n.
std::vector<std::size_t> equal_pieces(std::size_t n, std::size_t size) {
  if (n == 0) return {0};
  std::vector<std::size_t> sizes;
  for (std::size_t start = 0; start < n; start += size) sizes.push_back(std::min(size, n - start));
  return sizes;
}

}  // namespace

template <class T>
Var<T> slice(const Var<T>& x, std::int64_t dim, std::int64_t start, std::int64_t stop,
             std::int64_t step) {
  static constexpr const char* op = "slice";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  if (step <= 0)
    detail::fail_argument(op, "step", "is " + std::to_string(step) + ", expected a step >= 1");
  const std::size_t n = x.shape()[axis];
  const std::size_t first = clamp_bound(start, n), last = clamp_bound(stop, n);
  const auto stride = static_cast<std::size_t>(step);
  const std::size_t length = last > first ? (last - first + stride - 1) / stride : 0;
  return take(op, tape, x, axis, first, length, stride);
}

template <class T>
Var<T> concat(const std::vector<Var<T>>& xs, std::int64_t dim) {
  static constexpr const char* op = "concat";
  if (xs.empty()) detail::fail_argument(op, "xs", "is empty, expected at least one tensor");
  Tape<T>& tape = tape_of_all(op, xs);
  // The legacy empty tensor: a 1-d [0] is skipped wherever it appears (torch 1.13).
  const auto skipped = [](const Var<T>& v) { return v.dimension() == 1 && v.size() == 0; };
  std::size_t ref = 0;
  while (ref < xs.size() && skipped(xs[ref])) ++ref;
  if (ref == xs.size()) {  // nothing but legacy empties: a [0] result
    detail::normalize_dim(op, "dim", dim, 1);
    return join<T>(op, tape, {}, 1, Shape{0});
  }
  const Shape& r_shape = xs[ref].shape();
  const std::size_t rank = r_shape.size();
  char name[32], ref_name[32];
  std::snprintf(ref_name, sizeof ref_name, "xs[%zu]", ref);
  if (rank == 0)
    detail::fail_shape(op, ref_name, r_shape,
                       "a tensor of rank >= 1 (a 0-d tensor has no axis to concatenate along)");
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, rank);
  Shape expected_shape = r_shape;  // for messages: r_shape with "*" along dim
  const auto expected = [&] {      // built only for a message: no allocation on success
    std::string e = "[";
    for (std::size_t d = 0; d < rank; ++d)
      e += (d ? ", " : "") + (d == axis ? std::string("*") : std::to_string(r_shape[d]));
    return e + "] (the shape of " + ref_name + ", any size along dim " + std::to_string(axis) + ")";
  };
  const detail::AxisSplit s = detail::split_at(r_shape, axis);
  std::vector<Piece> pieces;
  pieces.reserve(xs.size());
  std::size_t total = 0;
  for (std::size_t k = ref; k < xs.size(); ++k) {
    if (skipped(xs[k])) continue;
    const Shape& shape = xs[k].shape();
    bool same = shape.size() == rank;
    for (std::size_t d = 0; same && d < rank; ++d) same = d == axis || shape[d] == r_shape[d];
    std::snprintf(name, sizeof name, "xs[%zu]", k);
    if (!same) detail::fail_shape(op, name, shape, expected());
    pieces.push_back({xs[k].index(), shape[axis] * s.inner});
    total = detail::checked_add(op, "argument 'xs'", total, shape[axis]);
  }
  expected_shape[axis] = total;
  detail::checked_allocation<T>(op, "argument 'xs'", expected_shape);
  return join(op, tape, pieces, s.outer, expected_shape);
}

template <class T>
Var<T> stack(const std::vector<Var<T>>& xs, std::int64_t dim) {
  static constexpr const char* op = "stack";
  if (xs.empty()) detail::fail_argument(op, "xs", "is empty, expected at least one tensor");
  Tape<T>& tape = tape_of_all(op, xs);
  const Shape& shape = xs[0].shape();
  char name[32];
  for (std::size_t k = 1; k < xs.size(); ++k)
    if (xs[k].shape() != shape) {
      std::snprintf(name, sizeof name, "xs[%zu]", k);
      detail::fail_shape(op, name, xs[k].shape(),
                         detail::shape_str(shape) + " (the shape of xs[0])");
    }
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, shape.size() + 1);
  std::size_t outer = 1, chunk = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) (d < axis ? outer : chunk) *= shape[d];
  Shape y_shape(shape.size() + 1);  // shape with len(xs) inserted at axis
  for (std::size_t d = 0; d < y_shape.size(); ++d)
    y_shape[d] = d < axis ? shape[d] : d == axis ? xs.size() : shape[d - 1];
  detail::checked_allocation<T>(op, "argument 'xs'", y_shape);
  std::vector<Piece> pieces;
  pieces.reserve(xs.size());
  for (const Var<T>& x : xs) pieces.push_back({x.index(), chunk});
  return join(op, tape, pieces, outer, y_shape);
}

template <class T>
std::vector<Var<T>> split(const Var<T>& x, std::int64_t split_size, std::int64_t dim) {
  static constexpr const char* op = "split";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  const std::size_t n = x.shape()[axis];
  if (split_size < 0 || (split_size == 0 && n != 0))
    detail::fail_argument(op, "split_size",
                          "is " + std::to_string(split_size) +
                              ", expected a size >= 1 for x of shape " +
                              detail::shape_str(x.shape()) + " split along dim " +
                              std::to_string(axis) + " (0 only for an axis of size 0)");
  // One handle per piece: within memory (an empty x may have 2^62 rows).
  const std::size_t size = static_cast<std::size_t>(split_size);
  detail::check_bytes(op, "arguments 'x' and 'split_size'", "the pieces",
                      n == 0 ? 1 : n / size + (n % size != 0), sizeof(Var<T>));
  return pieces_of(op, tape, x, axis, equal_pieces(n, size));
}

template <class T>
std::vector<Var<T>> split(const Var<T>& x, const std::vector<std::int64_t>& split_sizes,
                          std::int64_t dim) {
  static constexpr const char* op = "split";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  const std::size_t n = x.shape()[axis];
  std::vector<std::size_t> sizes;
  sizes.reserve(split_sizes.size());
  bool valid = true;
  for (std::int64_t size : split_sizes) {
    valid = valid && size >= 0;
    sizes.push_back(static_cast<std::size_t>(size));
  }
  const std::size_t total = valid ? detail::checked_sum(op, "argument 'split_sizes'", sizes) : 0;
  if (!valid || total != n)
    detail::fail_argument(op, "split_sizes",
                          "is " + detail::shape_str(split_sizes) +
                              ", expected sizes >= 0 that sum to " + std::to_string(n) +
                              ", the size of x of shape " + detail::shape_str(x.shape()) +
                              " along dim " + std::to_string(axis));
  return pieces_of(op, tape, x, axis, sizes);
}

template <class T>
std::vector<Var<T>> chunk(const Var<T>& x, std::int64_t chunks, std::int64_t dim) {
  static constexpr const char* op = "chunk";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t axis = detail::normalize_dim(op, "dim", dim, x.dimension());
  if (chunks <= 0)
    detail::fail_argument(op, "chunks", "is " + std::to_string(chunks) + ", expected a count >= 1");
  const std::size_t n = x.shape()[axis], count = static_cast<std::size_t>(chunks);
  // One handle per piece: within memory (an empty x may have 2^62 rows).
  detail::check_bytes(op, "arguments 'x' and 'chunks'", "the pieces",
                      n == 0 ? count : std::min(n, count), sizeof(Var<T>));
  if (n == 0) return pieces_of(op, tape, x, axis, std::vector<std::size_t>(count, 0));
  return pieces_of(op, tape, x, axis, equal_pieces(n, (n + count - 1) / count));
}

#define XTGRAD_SLICE_OPS(T)                                                                     \
  template Var<T> slice(const Var<T>&, std::int64_t, std::int64_t, std::int64_t, std::int64_t); \
  template Var<T> concat(const std::vector<Var<T>>&, std::int64_t);                             \
  template Var<T> stack(const std::vector<Var<T>>&, std::int64_t);                              \
  template std::vector<Var<T>> split(const Var<T>&, std::int64_t, std::int64_t);                \
  template std::vector<Var<T>> split(const Var<T>&, const std::vector<std::int64_t>&,           \
                                     std::int64_t);                                             \
  template std::vector<Var<T>> chunk(const Var<T>&, std::int64_t, std::int64_t);
XTGRAD_SLICE_OPS(float)
XTGRAD_SLICE_OPS(double)
#undef XTGRAD_SLICE_OPS

}  // namespace xtgrad
