#include "mask.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../errors.hpp"
#include "../kernels/parallel.hpp"
#include "sum_to.hpp"
#include "support/broadcast.hpp"
#include "support/select.hpp"

namespace xtgrad {

namespace {

// "(NumPy rules: ...; axis -k has m in 'mask' and n in 'x')": the reason a shape
// does not broadcast, for the messages below.
constexpr const char* k_numpy_rule =
    " (NumPy rules: aligned from the right, each axis equal or 1; ";

// masked_fill: the broadcast shape of x and mask (y's shape).
Shape broadcast_with_mask(const char* op, const Shape& mask, const Shape& x) {
  const std::size_t rank = std::max(mask.size(), x.size());
  Shape out(rank, 1);
  for (std::size_t k = 1; k <= rank; ++k) {
    const std::size_t m = k <= mask.size() ? mask[mask.size() - k] : 1;
    const std::size_t n = k <= x.size() ? x[x.size() - k] : 1;
    detail::Check(op).shape(m == n || m == 1 || n == 1, "mask", mask,
                            "a shape that broadcasts with the shape ", x, " of argument 'x'",
                            k_numpy_rule, "axis -", k, " has ", m, " in 'mask' and ", n,
                            " in 'x')");
    out[rank - k] = m == 1 ? n : m;
  }
  return out;
}

// where: the broadcast shape of cond and of a-and-b's broadcast shape `ab`.
Shape broadcast_with_cond(const char* op, const Shape& cond, const Shape& ab) {
  const std::size_t rank = std::max(cond.size(), ab.size());
  Shape out(rank, 1);
  for (std::size_t k = 1; k <= rank; ++k) {
    const std::size_t nc = k <= cond.size() ? cond[cond.size() - k] : 1;
    const std::size_t nab = k <= ab.size() ? ab[ab.size() - k] : 1;
    detail::Check(op).shape(nc == nab || nc == 1 || nab == 1, "cond", cond,
                            "a shape that broadcasts with the shape ", ab,
                            " of arguments 'a' and 'b' broadcast together", k_numpy_rule, "axis -",
                            k, " has ", nc, " in 'cond' and ", nab, " in 'a' and 'b')");
    out[rank - k] = nc == 1 ? nab : nc;
  }
  return out;
}

// run(o, m, n, step) once per run of a result of shape `out` (`size`
// elements): result elements o + j, j < n, pair with mask element m + j * step.
template <class Run>
void for_each_mask_run(const Shape& out, std::size_t size, const Shape& mask, Run&& run) {
  if (mask == out) {
    if (size != 0) run(std::size_t(0), std::size_t(0), size, true);
    return;
  }
  const detail::BroadcastPlan plan = detail::make_plan(out, {&mask, &mask});
  detail::for_each_run(
      plan, size, [&](std::size_t o, std::size_t m, std::size_t, std::size_t n, bool step, bool) {
        run(o, m, n, step);
      });
}

// dst[out] = mask broadcast to `out`.
void expand_mask(const xt::xarray<bool>& mask, const Shape& out, std::size_t size, bool* dst) {
  const bool* md = mask.data();
  for_each_mask_run(out, size, mask.shape(),
                    [&](std::size_t o, std::size_t m, std::size_t n, bool step) {
                      if (step)
                        std::copy(md + m, md + m + n, dst + o);
                      else
                        std::fill(dst + o, dst + o + n, md[m]);
                    });
}

// where's backward for one operand: d[operand] (+)= sum over the operand's
// repeated axes of (c == keep ? dy : 0), c being cond expanded to dy's shape.
template <class T>
void where_operand_backward(const xt::xarray<T>& dy, const bool* c, bool keep, GradSlot<T> d) {
  const std::size_t n = dy.size();
  if (d.buffer.shape() == dy.shape()) {  // d[y] (+)= c[y] == keep ? dy[y] : 0, in place
    if (d.accumulate)
      detail::select_grad<true>(d.buffer.data(), dy.data(), c, true, keep, n);
    else
      detail::select_grad<false>(d.buffer.data(), dy.data(), c, true, keep, n);
    return;
  }
  xt::xarray<T> selected = xt::empty<T>(dy.shape());  // [y]
  detail::select_grad<false>(selected.data(), dy.data(), c, true, keep, n);
  detail::sum_to_shape(selected, d);  // d[operand] (+)= sum over repeated axes of selected[y]
}

// masked_fill's `value` in x's element type: a finite value must fit in T
// (+-inf and NaN pass as they are).
template <class T>
T checked_fill_value(const char* op, double value) {
  const double max = static_cast<double>(std::numeric_limits<T>::max());
  detail::Check(op).argument(!std::isfinite(value) || std::abs(value) <= max, "value", "is ", value,
                             ", which overflows the element type (expected a value in [-", max,
                             ", ", max, "], +-inf or NaN)");
  return static_cast<T>(value);
}

// masked_fill's forward into y, already of the broadcast shape.
template <class T>
void masked_fill_forward(const xt::xarray<T>& x, const xt::xarray<bool>& mask, T fill,
                         xt::xarray<T>& y) {
  const T* xd = x.data();
  T* yd = y.data();
  const bool* md = mask.data();
  if (x.shape() == y.shape()) {
    // y[x] = mask[x] ? value : x[x], mask broadcast to x's shape
    for_each_mask_run(y.shape(), y.size(), mask.shape(),
                      [&](std::size_t o, std::size_t m, std::size_t n, bool step) {
                        if (step)
                          detail::select_run(yd + o, md + m, &fill, false, xd + o, true, n);
                        else if (md[m])
                          std::fill(yd + o, yd + o + n, fill);
                        else
                          std::copy(xd + o, xd + o + n, yd + o);
                      });
  } else if (y.size() != 0) {
    // y[y] = mask[y] ? value : x[y], both broadcast to y's shape
    const detail::BroadcastPlan plan = detail::make_plan(y.shape(), {&x.shape(), &mask.shape()});
    detail::for_each_run(
        plan, y.size(),
        [&](std::size_t o, std::size_t ox, std::size_t om, std::size_t n, bool sx, bool sm) {
          for (std::size_t j = 0; j < n; ++j)
            yd[o + j] = md[sm ? om + j : om] ? fill : xd[sx ? ox + j : ox];
        });
  }
}

// Saves masked_fill's mask in node yi for backward: as given (as_given, when
// y has x's shape), else expanded to y's shape.
template <class T>
void save_fill_mask(Tape<T>& tape, std::size_t yi, const xt::xarray<bool>& mask, bool as_given) {
  const xt::xarray<T>& y = tape.value(yi);
  bool* saved = tape.template save<bool>(yi, as_given ? mask.size() : y.size());
  if (as_given)
    std::copy(mask.data(), mask.data() + mask.size(), saved);
  else
    expand_mask(mask, y.shape(), y.size(), saved);
}

// dx[x] (+)= mask[x] ? 0 : dy[x], the mask (of shape mask_shape) broadcast to x's shape.
template <class T>
void masked_fill_grad(const xt::xarray<T>& dy, const bool* mask, const Shape& mask_shape,
                      GradPointer<T> dx) {
  const T* g = dy.data();
  for_each_mask_run(dy.shape(), dy.size(), mask_shape,
                    [&](std::size_t o, std::size_t m, std::size_t n, bool step) {
                      if (dx.accumulate)
                        detail::select_grad<true>(dx.data + o, g + o, mask + m, step, false, n);
                      else
                        detail::select_grad<false>(dx.data + o, g + o, mask + m, step, false, n);
                    });
}

// The columns [begin, end) of row i of an [R, C] matrix that tril (upper ==
// false) or triu (upper == true) keeps; `diagonal` already clamped to [-R, C],
// so that no sum below overflows (beyond that range the result no longer
// changes: all or nothing is kept).
template <bool upper>
std::pair<std::size_t, std::size_t> kept_columns(std::int64_t i, std::int64_t cols,
                                                 std::int64_t diagonal) {
  if constexpr (upper) {  // j - i >= diagonal
    return {static_cast<std::size_t>(std::clamp<std::int64_t>(i + diagonal, 0, cols)),
            static_cast<std::size_t>(cols)};
  } else {  // j - i <= diagonal
    return {0, static_cast<std::size_t>(std::clamp<std::int64_t>(i + diagonal + 1, 0, cols))};
  }
}

std::int64_t clamp_diagonal(std::int64_t diagonal, std::size_t rows, std::size_t cols) {
  return std::clamp(diagonal, -static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols));
}

// d[r, :] (+)= the kept columns of s[r, :], 0 elsewhere, for every row r of a
// stack of [R, C] matrices stored row after row (`rows` rows in all).
template <bool upper, bool add, class T>
void triangle_pass(const T* s, T* d, std::size_t rows, std::size_t r_count, std::size_t cols,
                   std::int64_t diagonal) {
  const auto c = static_cast<std::int64_t>(cols);
  detail::parallel_for_rows(
      rows, std::max<std::size_t>(detail::k_parallel_light / std::max<std::size_t>(cols, 1), 1),
      [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
          const auto [begin, end] =
              kept_columns<upper>(static_cast<std::int64_t>(r % r_count), c, diagonal);
          const T* sr = s + r * cols;
          T* dr = d + r * cols;
          if constexpr (add) {
            for (std::size_t j = begin; j < end; ++j) dr[j] += sr[j];
          } else {
            std::fill(dr, dr + begin, T(0));
            std::copy(sr + begin, sr + end, dr + begin);
            std::fill(dr + end, dr + cols, T(0));
          }
        }
      });
}

// triu and tril share their checks, recording and layout.
template <class T, bool upper>
Var<T> triangle(const char* op, const Var<T>& x, std::int64_t diagonal) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape& shape = x.shape();
  detail::Check(op).shape(shape.size() >= 2, "x", shape,
                          "a tensor of rank >= 2 (the last two axes are the matrices)");
  const std::size_t r_count = shape[shape.size() - 2], cols = shape[shape.size() - 1];
  const std::int64_t d = clamp_diagonal(diagonal, r_count, cols);

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(shape);
  const std::size_t rows = cols == 0 ? 0 : xv.size() / cols;
  // y[.., i, j] = x[.., i, j] where kept, 0 elsewhere
  triangle_pass<upper, false>(xv.data(), y.data(), rows, r_count, cols, d);

  tape.set_backward(yi, [xi, rows, r_count, cols, d](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const GradPointer<T> dx = t.grad_pointer(xi);
    if (dx.accumulate)  // dx[.., i, j] += dy[.., i, j] where kept
      triangle_pass<upper, true>(dy.data(), dx.data, rows, r_count, cols, d);
    else  // dx[.., i, j] = dy[.., i, j] where kept, 0 elsewhere
      triangle_pass<upper, false>(dy.data(), dx.data, rows, r_count, cols, d);
  });
  // create_graph: dx = the same triangle of dy
  tape.set_grad_rule(yi, [d](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    if constexpr (upper)
      g.add(0, triu(g.grad_output(), d));
    else
      g.add(0, tril(g.grad_output(), d));
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> masked_fill(const Var<T>& x, const xt::xarray<bool>& mask, double value) {
  static constexpr const char* op = "masked_fill";
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const Shape y_shape = broadcast_with_mask(op, mask.shape(), x.shape());
  const T fill = checked_fill_value<T>(op, value);
  const Shape x_shape = x.shape();
  const bool x_is_y = x_shape == y_shape;  // otherwise x broadcasts up to a larger mask
  if (!x_is_y) detail::checked_allocation<T>(op, "arguments 'x' and 'mask'", y_shape);

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  masked_fill_forward(tape.value(xi), mask, fill, y);  // y = mask ? value : x

  // Backward reads the mask from this node's saved buffer (no copy when no
  // gradient is needed): as given when y has x's shape, else expanded to y's.
  const Shape saved_shape = x_is_y ? mask.shape() : y_shape;
  if (tape.requires_grad(yi)) save_fill_mask(tape, yi, mask, x_is_y);
  if (std::isinf(fill)) tape.allow_infinity(yi);  // the -inf of attention scores is no anomaly
  tape.set_backward(yi, [xi, yi, saved_shape, x_is_y](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const bool* saved = t.template saved<bool>(yi);
    if (x_is_y)  // dx[x] (+)= mask[x] ? 0 : dy[x]
      masked_fill_grad(dy, saved, saved_shape, t.grad_pointer(xi));
    else  // dx[x] (+)= sum over x's repeated axes of mask[y] ? 0 : dy[y]
      where_operand_backward(dy, saved, false, t.grad_slot(xi));
  });
  // create_graph: dx = sum_to(masked_fill(dy, mask, 0), x), the mask rebuilt from this node
  tape.set_grad_rule(yi, [saved_shape, x_shape](GradSink<T>& g) {
    if (!g.needs_grad(0)) return;
    xt::xarray<bool> kept = xt::empty<bool>(saved_shape);
    const bool* saved = g.tape().template saved<bool>(g.output().index());
    std::copy(saved, saved + kept.size(), kept.data());
    g.add(0, detail::sum_to(masked_fill(g.grad_output(), kept, 0.0), x_shape));
  });
  return tape.var(yi);
}

template <class T>
Var<T> where(const xt::xarray<bool>& cond, const Var<T>& a, const Var<T>& b) {
  static constexpr const char* op = "where";
  Tape<T>& tape = detail::common_tape<T>(op, {{"a", &a}, {"b", &b}});
  const Shape ab_shape = detail::broadcast_shapes(op, a.shape(), b.shape());
  const Shape y_shape = broadcast_with_cond(op, cond.shape(), ab_shape);
  detail::checked_allocation<T>(op, "arguments 'cond', 'a' and 'b'", y_shape);

  const std::size_t ai = a.index(), bi = b.index();
  const std::size_t yi = tape.record(op, {ai, bi}, a.requires_grad() || b.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  const std::size_t n = y.size();
  const xt::xarray<T>& av = tape.value(ai);
  const xt::xarray<T>& bv = tape.value(bi);
  // c[y] = cond broadcast to y's shape, kept in this node for backward
  bool* c = tape.template save<bool>(yi, n);
  expand_mask(cond, y_shape, n, c);
  // y[y] = c[y] ? a[y] : b[y], a and b broadcast
  if (av.shape() == y_shape && bv.shape() == y_shape) {
    detail::select_run(y.data(), c, av.data(), true, bv.data(), true, n);
  } else {
    const detail::BroadcastPlan plan = detail::make_plan(y_shape, {&av.shape(), &bv.shape()});
    detail::for_each_run(
        plan, n,
        [&](std::size_t o, std::size_t oa, std::size_t ob, std::size_t len, bool sa, bool sb) {
          detail::select_run(y.data() + o, c + o, av.data() + oa, sa, bv.data() + ob, sb, len);
        });
  }

  tape.set_backward(yi, [ai, bi, yi](Tape<T>& t, const xt::xarray<T>& dy) {
    const bool* saved = t.template saved<bool>(yi);
    // da[a] (+)= sum over a's repeated axes of c[y] ? dy[y] : 0
    if (t.requires_grad(ai)) where_operand_backward(dy, saved, true, t.grad_slot(ai));
    // db[b] (+)= sum over b's repeated axes of c[y] ? 0 : dy[y]
    if (t.requires_grad(bi)) where_operand_backward(dy, saved, false, t.grad_slot(bi));
  });
  // create_graph: da = sum_to(where(c, dy, 0), a), db = sum_to(where(c, 0, dy), b),
  // c the condition expanded to y's shape, rebuilt from this node
  tape.set_grad_rule(yi, [](GradSink<T>& g) {
    const Var<T> dy = g.grad_output();
    xt::xarray<bool> c = xt::empty<bool>(dy.shape());
    const bool* saved = g.tape().template saved<bool>(g.output().index());
    std::copy(saved, saved + c.size(), c.data());
    const Var<T> zero = g.tape().leaf(xt::xarray<T>(T(0)), false);
    if (g.needs_grad(0)) g.add(0, detail::sum_to(xtgrad::where(c, dy, zero), g.input(0).shape()));
    if (g.needs_grad(1)) g.add(1, detail::sum_to(xtgrad::where(c, zero, dy), g.input(1).shape()));
  });
  return tape.var(yi);
}

template <class T>
Var<T> triu(const Var<T>& x, std::int64_t diagonal) {
  return triangle<T, true>("triu", x, diagonal);
}

template <class T>
Var<T> tril(const Var<T>& x, std::int64_t diagonal) {
  return triangle<T, false>("tril", x, diagonal);
}

xt::xarray<bool> causal_mask(std::size_t rows, std::size_t cols, std::int64_t diagonal) {
  detail::checked_allocation<bool>("causal_mask", "arguments 'rows' and 'cols'", {rows, cols});
  xt::xarray<bool> mask = xt::empty<bool>(Shape{rows, cols});
  if (mask.size() == 0) return mask;  // however many rows of no column
  const std::int64_t d = clamp_diagonal(diagonal, rows, cols);
  bool* m = mask.data();
  for (std::size_t i = 0; i < rows; ++i) {  // mask[i, j] = j - i <= diagonal
    const std::size_t end =
        kept_columns<false>(static_cast<std::int64_t>(i), static_cast<std::int64_t>(cols), d)
            .second;
    std::fill(m + i * cols, m + i * cols + end, true);
    std::fill(m + i * cols + end, m + (i + 1) * cols, false);
  }
  return mask;
}

xt::xarray<bool> length_mask(const Indices& lengths, std::size_t max_length) {
  static constexpr const char* op = "length_mask";
  const detail::Check check(op);
  check.shape(lengths.dimension() == 1, "lengths", lengths.shape(),
              "a 1-d tensor [B] of sequence lengths");
  const std::int64_t* l = lengths.data();
  for (std::size_t b = 0; b < lengths.size(); ++b)
    check.argument(l[b] >= 0 && static_cast<std::uint64_t>(l[b]) <= max_length, "lengths", "holds ",
                   l[b], " at position ", b, ", expected a length in [0, max_length] = [0, ",
                   max_length, "]");
  detail::checked_allocation<bool>(op, "arguments 'lengths' and 'max_length'",
                                   {lengths.size(), max_length});
  xt::xarray<bool> mask = xt::empty<bool>(Shape{lengths.size(), max_length});
  bool* m = mask.data();
  for (std::size_t b = 0; b < lengths.size(); ++b) {  // mask[b, t] = t < lengths[b]
    const auto end = static_cast<std::size_t>(l[b]);
    std::fill(m + b * max_length, m + b * max_length + end, true);
    std::fill(m + b * max_length + end, m + (b + 1) * max_length, false);
  }
  return mask;
}

#define XTGRAD_MASK_INSTANTIATE(T)                                              \
  template Var<T> masked_fill(const Var<T>&, const xt::xarray<bool>&, double);  \
  template Var<T> where(const xt::xarray<bool>&, const Var<T>&, const Var<T>&); \
  template Var<T> triu(const Var<T>&, std::int64_t);                            \
  template Var<T> tril(const Var<T>&, std::int64_t);
XTGRAD_MASK_INSTANTIATE(float)
XTGRAD_MASK_INSTANTIATE(double)
#undef XTGRAD_MASK_INSTANTIATE

}  // namespace xtgrad
