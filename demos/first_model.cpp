// A model and its training loop in one screen: an MLP learns sin(3x) on
// [-1, 1] with AdamW and a cosine schedule, is saved, loaded into a fresh
// copy, and evaluated without recording.
#include <cmath>
#include <iostream>

#include <xtensor/xbuilder.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

int main() {
  using namespace xtgrad;
  xt::xarray<float> x = xt::linspace<float>(-1.0f, 1.0f, 256);
  x.reshape({256, 1});      // 256 samples of one feature
  xt::xarray<float> y = x;  // the target sin(3x), [256, 1]
  for (float& v : y) v = std::sin(3.0f * v);

  Generator generator(0);                                           // seeds the initialization
  Mlp<float> model(1, {64, 64}, 1, {Activation::gelu}, generator);  // 1 -> 64 -> 64 -> 1
  optim::AdamW<float> optimizer(model.parameters(), optim::AdamWOptions(1e-2));
  optim::CosineAnnealingLR<float> schedule(optimizer, /*T_max=*/500);
  Tape<float> tape;
  float first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    tape.clear();  // keeps the buffers of the last step
    Var<float> loss = mse(model(tape.leaf(x, false)), tape.leaf(y, false));
    tape.backward(loss);  // accumulates into every Parameter::grad
    optimizer.step(), optimizer.zero_grad(), schedule.step();
    (step == 0 ? first : last) = loss.value()();
  }
  model.save("sine.safetensors");  // config + parameters, torch's names
  Mlp<float> copy(1, {64, 64}, 1, {Activation::gelu});
  copy.load("sine.safetensors");  // refuses another architecture
  xt::xarray<float> points = {0.5f, -0.25f};
  points.reshape({2, 1});
  xt::xarray<float> f = copy.infer(points);
  std::cout << "mse " << first << " -> " << last << "; f(0.5) = " << f(0, 0)
            << " (sin 1.5 = " << std::sin(1.5f) << "), f(-0.25) = " << f(1, 0)
            << " (sin -0.75 = " << std::sin(-0.75f) << ")\n";
  return last < first / 50 ? 0 : 1;
}
