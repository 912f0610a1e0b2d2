// Built against the installed package: trains one step of a PositionwiseFFN
// and exits non-zero unless the loss went down.
#include <iostream>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

int main() {
  using namespace xtgrad;
  PositionwiseFFN<float> ffn(4, 8);
  optim::Adam<float> adam(ffn.parameters(), optim::AdamOptions(1e-2));
  const xt::xarray<float> x{{0.5f, -1.0f, 0.25f, 2.0f}, {1.0f, 0.0f, -0.5f, 0.5f}};
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    Tape<float> tape;
    Var<float> loss = mse(ffn(tape.leaf(x, false)), tape.leaf(x, false));
    tape.backward(loss);
    adam.step();
    adam.zero_grad();
    (step == 0 ? first : last) = loss.value()();
  }
  std::cout << "consumer: loss " << first << " -> " << last << "\n";
  return last < first ? 0 : 1;
}
