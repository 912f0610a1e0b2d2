// Built against the installed package: trains a PositionwiseFFN on batches
// from a Batcher (data/), saves its first weight as .npy and reads it back
// (io/), and exits non-zero unless the loss went down and the file holds
// the weight.
#include <filesystem>
#include <iostream>

#include <xtgrad/data/data.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/io.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

// argv[1]: a scratch directory for the .npy file.
int main(int argc, char** argv) {
  using namespace xtgrad;
  if (argc != 2) {
    std::cerr << "usage: consumer <scratch directory>\n";
    return 2;
  }
  PositionwiseFFN<float> ffn(4, 8);
  optim::Adam<float> adam(ffn.parameters(), optim::AdamOptions(1e-2));
  const xt::xarray<float> x{{0.5f, -1.0f, 0.25f, 2.0f}, {1.0f, 0.0f, -0.5f, 0.5f}};
  Batcher<float> batcher(x, Indices{0, 1}, BatcherOptions{2, true, false, 7});
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    batcher.start_epoch(static_cast<std::uint64_t>(step));
    Batch<float> batch;
    batcher.next(batch);
    Tape<float> tape;
    Var<float> loss = mse(ffn(tape.leaf(batch.inputs, false)), tape.leaf(batch.inputs, false));
    tape.backward(loss);
    adam.step();
    adam.zero_grad();
    (step == 0 ? first : last) = loss.value()();
  }
  const std::filesystem::path file = std::filesystem::path(argv[1]) / "w1.npy";
  const xt::xarray<float>& w1 = ffn.parameters().front()->value;
  save_npy(file, w1);
  const bool read_back = load_npy<float>(file) == w1;
  std::cout << "consumer: loss " << first << " -> " << last << ", .npy read back "
            << (read_back ? "equal" : "different") << "\n";
  return last < first && read_back ? 0 : 1;
}
