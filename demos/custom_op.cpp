// A new op from outside the engine: softplus(x) = log(1 + exp(x)), written
// the way every op of xtgrad is, then verified by gradcheck.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <xtensor/xio.hpp>
#include <xtgrad/engine/check.hpp>
#include <xtgrad/engine/engine.hpp>

namespace my_ops {

using namespace xtgrad;

// y = log(1 + exp(x)) elementwise, computed as max(x, 0) + log1p(exp(-|x|)) so
// that it never overflows (torch.nn.functional.softplus with beta = 1);
// dy/dx = sigmoid(x) = 1 / (1 + exp(-x)).
template <class T>
Var<T> softplus(const Var<T>& x) {
  Tape<T>& tape = detail::common_tape<T>("softplus", {{"x", &x}});  // 1. check first
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("softplus", {xi}, x.requires_grad());  // 2. record
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  for (std::size_t i = 0; i < xv.size(); ++i)
    y.data()[i] = std::max(xv.data()[i], T(0)) + std::log1p(std::exp(-std::abs(xv.data()[i])));

  tape.set_backward(yi, [xi](Tape<T>& t, const xt::xarray<T>& dy) {  // 3. backward beside it
    if (!t.requires_grad(xi)) return;
    const xt::xarray<T>& xv = t.value(xi);
    GradSlot<T> dx = t.grad_slot(xi);  // overwrite when !accumulate, add when accumulate
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const T slope = T(1) / (T(1) + std::exp(-xv.data()[i]));  // dx[i] (+)= dy[i] * sigmoid(x[i])
      dx.buffer.data()[i] = (dx.accumulate ? dx.buffer.data()[i] : T(0)) + dy.data()[i] * slope;
    }
  });
  return tape.var(yi);  // 4. the result
}

}  // namespace my_ops

int main() {
  using namespace xtgrad;
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{{-30.0, -1.0, 0.5}, {2.0, 40.0, 800.0}});
  Var<double> y = sum(my_ops::softplus(x));
  tape.backward(y);
  std::cout << "softplus sum = " << y.value() << "\ndy/dx =\n" << x.grad() << "\n";

  GradcheckResult check =
      gradcheck([](const std::vector<Var<double>>& v) { return my_ops::softplus(mul(v[0], v[0])); },
                {xt::xarray<double>{{-2.0, -0.3, 0.1}, {0.7, 1.5, 3.0}}});
  std::cout << check.report() << "\n";
  return check.passed ? 0 : 1;
}
