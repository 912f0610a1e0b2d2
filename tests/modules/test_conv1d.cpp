// Conv1D, Hugging Face GPT-2's linear layer with its weight stored [in, out]:
// values against the product written out, gradients, initialization, checkpoints
// and errors.

#include <doctest/doctest.h>

#include <filesystem>

#include <xtgrad/modules/conv1d.hpp>

#include "support/module_gradcheck.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE("Conv1D: y = x W + b with W [nx, nf], as HF's Conv1D") {
  Conv1D<double> conv(3, 2);  // nf = 3 outputs, nx = 2 inputs
  conv.weight.value = {{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.0}};
  conv.bias.value = {0.1, 0.2, 0.3};
  const xt::xarray<double> x = {{{2.0, 4.0}}};
  // [2 - 4 + 0.1, 4 + 2 + 0.2, 6 + 0 + 0.3]
  check_close(conv.infer(x), xt::xarray<double>{{{-1.9, 6.2, 6.3}}}, 1e-15, 1e-15);
  const auto named = conv.named_parameters();
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(conv.config().describe() == "Conv1D(nf=3, nx=2)");
}

TEST_CASE("Conv1D: HF's initialization, normal(0, std) weights and zero biases") {
  Generator g(4);
  Conv1D<double> conv(64, 32, g);
  CHECK(std::sqrt(xt::mean(xt::square(conv.weight.value))()) ==
        doctest::Approx(0.02).epsilon(0.05));
  CHECK(xt::all(xt::equal(conv.bias.value, 0.0)));
  Conv1D<double> wide(4, 4, g, 0.5);
  CHECK(std::sqrt(xt::mean(xt::square(wide.weight.value))()) > 0.2);
}

TEST_CASE("Conv1D: gradcheck in double and a checkpoint round trip") {
  Generator g(2);
  Conv1D<double> conv(3, 4, g, 0.5);
  conv.bias.value = random_array({3}, 9);
  check_module_gradients(conv, random_array({2, 5, 4}, 10));
  const auto path = std::filesystem::path(XTGRAD_BINARY_DIR) / "test_conv1d.safetensors";
  conv.save(path);
  Conv1D<double> other(3, 4);
  other.load(path);
  CHECK(other.weight.value == conv.weight.value);
  Conv1D<double> transposed(4, 3);
  CHECK_THROWS_WITH_PARTS(transposed.load(path), std::invalid_argument,
                          {"Module::load", "Conv1D(nf=3, nx=4)", "Conv1D(nf=4, nx=3)"});
}

TEST_CASE("Conv1D: bad arguments") {
  CHECK_THROWS_WITH_PARTS(Conv1D<double>(0, 2), std::invalid_argument,
                          {"Conv1D", "'nf'", "positive"});
  CHECK_THROWS_WITH_PARTS(Conv1D<double>(2, 0), std::invalid_argument,
                          {"Conv1D", "'nx'", "positive"});
  Generator g(1);
  CHECK_THROWS_WITH_PARTS(Conv1D<double>(2, 2, g, -1.0), std::invalid_argument,
                          {"Conv1D", "'std'", "-1"});
  Conv1D<double> conv(3, 2);
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({2, 3}, 1));
  CHECK_THROWS_WITH_PARTS(conv.forward(x), std::invalid_argument, {"linear", "'x'", "[2, 3]"});
  CHECK(tape.size() == 1);
}
