#include "reduce.hpp"

#include <algorithm>
#include <limits>

#include "../check.hpp"
#include "../kernels/broadcast.hpp"

namespace xtgrad {

namespace {

// sum (divisor 1) and mean (divisor n) differ only in the factor applied to
// the total and to the upstream gradient.
template <class T>
Var<T> reduce_all(const char* op, const Var<T>& x, bool is_mean) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  const xt::xarray<T>& xv = tape.value(xi);
  const std::size_t n = xv.size();
  y.resize(Shape{});
  const T* data = xv.data();
  const double total = detail::sum_of(n, [data](std::size_t i) { return data[i]; });
  // y[] = sum_i x_i, or its mean; an empty mean is NaN as in torch.mean
  if (!is_mean)
    y.data()[0] = static_cast<T>(total);
  else
    y.data()[0] = n == 0 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(total / n);

  tape.set_backward(yi, [xi, n, is_mean](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    GradSlot<T> dx = t.grad_slot(xi);
    if (n == 0) return;  // an empty x: nothing to write (and no 0 / 0)
    // dx[x] (+)= dy[] broadcast (sum), or dy[] / n broadcast (mean)
    const T g = is_mean ? dy.data()[0] / static_cast<T>(n) : dy.data()[0];
    T* d = dx.buffer.data();
    if (dx.accumulate)
      for (std::size_t i = 0; i < n; ++i) d[i] += g;
    else
      std::fill(d, d + n, g);
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> sum(const Var<T>& x) {
  return reduce_all("sum", x, false);
}

template <class T>
Var<T> mean(const Var<T>& x) {
  return reduce_all("mean", x, true);
}

template Var<float> sum(const Var<float>&);
template Var<double> sum(const Var<double>&);
template Var<float> mean(const Var<float>&);
template Var<double> mean(const Var<double>&);

}  // namespace xtgrad
