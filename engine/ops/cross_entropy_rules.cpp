#include "cross_entropy_rules.hpp"

#include <cstdint>
#include <vector>

#include "elementwise.hpp"
#include "reduce.hpp"
#include "shape.hpp"
#include "softmax.hpp"

namespace xtgrad::detail {

namespace {

// The logits (or log-probabilities) [N, C] or one row [C] (a 0-d target).
struct RowShape {
  std::size_t n, c;
  bool single;
};

RowShape row_shape(const Shape& shape) {
  return shape.size() == 2 ? RowShape{shape[0], shape[1], false} : RowShape{1, shape.back(), true};
}

// g_n as a Var that broadcasts against the logits: dy [N] reshaped to
// [N, 1] (Reduction::none over rows), otherwise the 0-d dy, divided by
// `count` for the mean (by nothing when no row counts: the gradient is 0 then).
template <class T>
Var<T> row_gradient(const Var<T>& dy, const RowShape& rows, Reduction reduction, double count) {
  if (reduction == Reduction::none && !rows.single)
    return reshape(dy, {static_cast<std::int64_t>(rows.n), 1});
  if (reduction == Reduction::mean) return scale(dy, count == 0.0 ? T(0) : T(1.0 / count));
  return dy;
}

// The constants of a class-target rule: `weight` per row of the target (1,
// or 0 for ignore_index; [N, 1] or 0-d, broadcasting as row_gradient), and
// `table` of the logits' shape from value(row, class, is_target) for the rows
// that count (0 in ignored rows).
template <class T>
struct ClassConstants {
  xt::xarray<T> weight, table;
  double count = 0.0;
};

template <class T, class Value>
ClassConstants<T> class_constants(const Shape& logits, const RowShape& rows, const Indices& target,
                                  std::int64_t ignore_index, Value value) {
  ClassConstants<T> k{xt::zeros<T>(rows.single ? Shape{} : Shape{rows.n, 1}), xt::zeros<T>(logits),
                      0.0};
  const std::int64_t* t = target.data();
  for (std::size_t r = 0; r < rows.n; ++r) {
    if (t[r] == ignore_index) continue;
    k.weight.data()[r] = T(1);
    k.count += 1.0;
    T* row = k.table.data() + r * rows.c;
    for (std::size_t j = 0; j < rows.c; ++j) row[j] = value(static_cast<std::int64_t>(j) == t[r]);
  }
  return k;
}

}  // namespace

template <class T>
void cross_entropy_class_rule(GradSink<T>& s, const Indices& target,
                              const CrossEntropyOptions& options) {
  if (!s.needs_grad(0)) return;
  Tape<T>& tape = s.tape();
  const Var<T> x = s.input(0);
  const RowShape rows = row_shape(x.shape());
  const double eps = options.label_smoothing;
  const T spread = rows.c == 0 ? T(0) : static_cast<T>(eps / rows.c);
  // q[n, c] = (1 - eps) [c == t_n] + eps / C, rows that count only
  const auto k = class_constants<T>(x.shape(), rows, target, options.ignore_index,
                                    [spread, keep = static_cast<T>(1.0 - eps)](bool is_target) {
                                      return is_target ? keep + spread : spread;
                                    });
  // g[N, 1] = row_gradient * weight (0 for an ignored row)
  const Var<T> g = mul(row_gradient(s.grad_output(), rows, options.reduction, k.count),
                       tape.leaf(k.weight, false));
  // dx[N, C] = g * (softmax(x) - q)
  s.add(0, mul(g, sub(softmax(x, -1), tape.leaf(k.table, false))));
}

template <class T>
void cross_entropy_probs_rule(GradSink<T>& s, const CrossEntropyOptions& options) {
  const Var<T> x = s.input(0), q = s.input(1);
  const RowShape rows = row_shape(x.shape());
  const double eps = options.label_smoothing;
  const T keep = static_cast<T>(1.0 - eps);
  const T spread = rows.c == 0 ? T(0) : static_cast<T>(eps / rows.c);
  // mean divides by N, as torch
  const Var<T> g = row_gradient(s.grad_output(), rows, options.reduction,
                                static_cast<double>(rows.n));  // [N, 1] or []
  if (s.needs_grad(0)) {
    const Var<T> smoothed = add_scalar(scale(q, keep), spread);  // q'[N, C]
    // dx[N, C] = g * (softmax(x) * sum_c q' - q')
    s.add(0, mul(g, sub(mul(softmax(x, -1), sum(smoothed, {-1}, true)), smoothed)));
  }
  // dq[N, C] = -g * (1 - eps) * log_softmax(x)
  if (s.needs_grad(1)) s.add(1, mul(g, scale(log_softmax(x, -1), -keep)));
}

template <class T>
void nll_loss_rule(GradSink<T>& s, const Indices& target, const NllLossOptions& options) {
  if (!s.needs_grad(0)) return;
  Tape<T>& tape = s.tape();
  const Var<T> z = s.input(0);
  const RowShape rows = row_shape(z.shape());
  // -[c == t_n] in the rows that count
  const auto k = class_constants<T>(z.shape(), rows, target, options.ignore_index,
                                    [](bool is_target) { return is_target ? T(-1) : T(0); });
  // dz[N, C] = g * (-[c == t_n]), g the row gradient (ignored rows hold 0 in the table)
  s.add(0, mul(row_gradient(s.grad_output(), rows, options.reduction, k.count),
               tape.leaf(k.table, false)));
}

#define XTGRAD_INSTANTIATE_CROSS_ENTROPY_RULES(T)                                   \
  template void cross_entropy_class_rule(GradSink<T>&, const Indices&,              \
                                         const CrossEntropyOptions&);               \
  template void cross_entropy_probs_rule(GradSink<T>&, const CrossEntropyOptions&); \
  template void nll_loss_rule(GradSink<T>&, const Indices&, const NllLossOptions&);
XTGRAD_INSTANTIATE_CROSS_ENTROPY_RULES(float)
XTGRAD_INSTANTIATE_CROSS_ENTROPY_RULES(double)
#undef XTGRAD_INSTANTIATE_CROSS_ENTROPY_RULES

}  // namespace xtgrad::detail
