#include "dropout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/dropout_mask.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_dropout_op = "dropout";

}  // namespace

template <class T>
Var<T> dropout(const Var<T>& x, double p, bool training, const DropoutKey& key) {
  const detail::Check check(k_dropout_op);
  Tape<T>& tape = detail::common_tape<T>(k_dropout_op, {{"x", &x}});
  check.argument(p >= 0.0 && p <= 1.0, "p", "is ", p, ", expected a probability in [0, 1]");

  const detail::DropoutMask<T> mask = detail::dropout_mask<T>(p, training);
  const bool identity = mask.identity, all_dropped = mask.all_dropped;
  const std::uint32_t threshold = mask.threshold;
  const T scale = mask.scale;

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(k_dropout_op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  const std::size_t n = xv.size();
  if (identity)  // y[x] = x[x]
    std::copy(xv.data(), xv.data() + n, y.data());
  else if (all_dropped)  // y[x] = 0
    std::fill(y.data(), y.data() + n, T(0));
  else  // y[x] = m[x] * x[x] / (1 - p)
    detail::masked_scale<T, false>(key, threshold, scale, xv.data(), y.data(), n);

  tape.set_backward(
      yi, [xi, key, identity, all_dropped, threshold, scale](Tape<T>& t, const xt::xarray<T>& dy) {
        if (!t.requires_grad(xi)) return;
        GradSlot<T> dx = t.grad_slot(xi);
        T* d = dx.buffer.data();
        const T* g = dy.data();
        const std::size_t count = dy.size();
        if (identity) {  // dx[x] (+)= dy[x]
          if (dx.accumulate)
            for (std::size_t i = 0; i < count; ++i) d[i] += g[i];
          else
            std::copy(g, g + count, d);
        } else if (all_dropped) {  // dx[x] (+)= 0
          if (!dx.accumulate) std::fill(d, d + count, T(0));
        } else if (dx.accumulate) {  // dx[x] += m[x] * dy[x] / (1 - p), m recomputed from key
          detail::masked_scale<T, true>(key, threshold, scale, g, d, count);
        } else {  // dx[x] = m[x] * dy[x] / (1 - p)
          detail::masked_scale<T, false>(key, threshold, scale, g, d, count);
        }
      });
  // create_graph: dx = dy * m / (1 - p), the same mask (the same key and shape)
  tape.set_grad_rule(yi, [p, training, key](GradSink<T>& g) {
    if (g.needs_grad(0)) g.add(0, dropout(g.grad_output(), p, training, key));
  });
  return tape.var(yi);
}

template Var<float> dropout(const Var<float>&, double, bool, const DropoutKey&);
template Var<double> dropout(const Var<double>&, double, bool, const DropoutKey&);

}  // namespace xtgrad
