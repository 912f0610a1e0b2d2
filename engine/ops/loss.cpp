#include "loss.hpp"

#include <limits>

#include "../check.hpp"
#include "elementwise.hpp"
#include "support/broadcast.hpp"

namespace xtgrad {

namespace {

// sum_i (p_i - t_i)^2 / n in one pass; NaN when n = 0, as in PyTorch.
template <class T>
T mean_squared_error(const T* p, const T* t, std::size_t n) {
  const double total = detail::sum_of(n, [p, t](std::size_t i) {
    const double r = static_cast<double>(p[i]) - static_cast<double>(t[i]);
    return r * r;
  });
  return n == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(total / n);
}

// Both gradients in one pass: dp[n] (+)= c * (p - t)[n],  dt[n] (+)= -c * (p - t)[n].
template <class T>
void mse_grad_both(GradSlot<T> dp, GradSlot<T> dt, const T* p, const T* t, T c, std::size_t n) {
  T* gp = dp.buffer.data();
  T* gt = dt.buffer.data();
  for (std::size_t i = 0; i < n; ++i) {
    const T r = c * (p[i] - t[i]);
    gp[i] = dp.accumulate ? gp[i] + r : r;
    gt[i] = dt.accumulate ? gt[i] - r : -r;
  }
}

// One side's gradient: d[n] (+)= sign * c * (p - t)[n], sign = 1 for p, -1 for t.
template <class T>
void mse_grad_one_side(GradSlot<T> d, const T* p, const T* t, T sign, T c, std::size_t n) {
  T* g = d.buffer.data();
  const T cs = sign * c;
  if (d.accumulate)
    for (std::size_t i = 0; i < n; ++i) g[i] += cs * (p[i] - t[i]);
  else
    for (std::size_t i = 0; i < n; ++i) g[i] = cs * (p[i] - t[i]);
}

}  // namespace

template <class T>
Var<T> mse(const Var<T>& prediction, const Var<T>& target) {
  static constexpr const char* op = "mse";
  Tape<T>& tape = detail::common_tape<T>(op, {{"prediction", &prediction}, {"target", &target}});
  detail::Check(op).shape(target.shape() == prediction.shape(), "target", target.shape(),
                          prediction.shape(),
                          ", the shape of argument 'prediction' (mse does not broadcast)");
  const std::size_t pi = prediction.index(), ti = target.index();
  const std::size_t yi =
      tape.record(op, {pi, ti}, prediction.requires_grad() || target.requires_grad());
  const std::size_t n = tape.value(pi).size();
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(Shape{});
  // y[] = sum_i (p_i - t_i)^2 / n
  y.data()[0] = mean_squared_error(tape.value(pi).data(), tape.value(ti).data(), n);

  tape.set_backward(yi, [pi, ti, n](Tape<T>& tp, const xt::xarray<T>& dy) {
    const bool want_p = tp.requires_grad(pi), want_t = tp.requires_grad(ti);
    if (n == 0) {  // the gradients are empty: claim the slots, write nothing (and no 0 / 0)
      if (want_p) tp.grad_slot(pi);
      if (want_t) tp.grad_slot(ti);
      return;
    }
    const T c = T(2) * dy.data()[0] / static_cast<T>(n);
    const T* p = tp.value(pi).data();
    const T* t = tp.value(ti).data();
    if (want_p && want_t && pi != ti) {  // dp = c * (p - t), dt = -dp
      GradSlot<T> dp = tp.grad_slot(pi), dt = tp.grad_slot(ti);
      return mse_grad_both(dp, dt, p, t, c, n);
    }
    // One side only (or mse(x, x), whose two gradients cancel exactly).
    if (want_p) mse_grad_one_side(tp.grad_slot(pi), p, t, T(1), c, n);
    if (want_t) mse_grad_one_side(tp.grad_slot(ti), p, t, T(-1), c, n);
  });
  // create_graph: dp = (p - t) * dy * 2 / n, dt = -dp (empty when n = 0: no 2 / 0)
  tape.set_grad_rule(yi, [n](GradSink<T>& g) {
    const T c = n == 0 ? T(0) : T(2) / static_cast<T>(n);
    const Var<T> dp = scale(mul(sub(g.input(0), g.input(1)), g.grad_output()), c);
    if (g.needs_grad(0)) g.add(0, dp);
    if (g.needs_grad(1)) g.add(1, scale(dp, T(-1)));
  });
  return tape.var(yi);
}

template Var<float> mse(const Var<float>&, const Var<float>&);
template Var<double> mse(const Var<double>&, const Var<double>&);

}  // namespace xtgrad
