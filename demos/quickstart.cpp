// xtgrad in one screen: record a small computation, run backward, read the
// gradients, and let gradcheck confirm them by finite differences.
#include <iostream>

#include <xtensor/xio.hpp>
#include <xtgrad/engine/engine.hpp>

int main() {
  using namespace xtgrad;
  Tape<double> tape;
  Var<double> x = tape.leaf(xt::xarray<double>{{1.0, -2.0, 0.5}});  // [1, 3]
  Var<double> w = tape.leaf(xt::xarray<double>{{0.2, 0.4, -0.6}, {1.0, 0.0, 0.5}});
  Var<double> b = tape.leaf(xt::xarray<double>{0.1, -0.1});
  Var<double> target = tape.leaf(xt::xarray<double>{{0.0, 1.0}}, /*requires_grad=*/false);

  Var<double> loss = mse(gelu(linear(x, w, b)), target);  // mean((gelu(x W^T + b) - t)^2)
  tape.backward(loss);
  std::cout << "loss = " << loss.value() << "\ndloss/dw =\n" << w.grad() << "\n";

  GradcheckResult check = gradcheck(
      [](const std::vector<Var<double>>& v) { return mse(gelu(linear(v[0], v[1], v[2])), v[3]); },
      {x.value(), w.value(), b.value(), target.value()});
  std::cout << check.report() << "\n";
  return check.passed ? 0 : 1;
}
