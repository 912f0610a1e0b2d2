// Linear and the FFN modules: parameter names, initialization, forward and
// backward against the independent references, checkpoints.
#include <doctest/doctest.h>

#include <filesystem>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/ffn_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

template <class M>
std::vector<std::string> names_of(M& module) {
  std::vector<std::string> names;
  for (const auto& [name, p] : module.named_parameters()) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE_TEMPLATE("modules: Linear has PyTorch's layout and default init, seeded", T, float,
                   double) {
  Generator generator(7);
  Linear<T> layer(64, 3, true, generator);
  CHECK(names_of(layer) == std::vector<std::string>{"weight", "bias"});
  CHECK(layer.weight.value.shape() == Shape{3, 64});
  CHECK(layer.bias.value.shape() == Shape{3});
  const double bound = 1.0 / std::sqrt(64.0);  // 0.125
  CHECK(xt::amax(xt::abs(layer.weight.value))() <= bound);
  CHECK(xt::amax(xt::abs(layer.bias.value))() <= bound);
  CHECK(xt::amax(xt::abs(layer.weight.value))() > 0.9 * bound);  // spread over the range
  Generator same(7), other(8);
  CHECK(Linear<T>(64, 3, true, same).weight.value == layer.weight.value);
  CHECK(Linear<T>(64, 3, true, other).weight.value != layer.weight.value);
  CHECK(Linear<T>(64, 3).weight.value == Linear<T>(64, 3).weight.value);  // default seed

  Linear<T> no_bias(4, 2, false);
  CHECK(names_of(no_bias) == std::vector<std::string>{"weight"});
  CHECK_THROWS_WITH_PARTS(Linear<T>(0, 2), std::invalid_argument,
                          {"Linear", "'in_features'", "positive"});
  CHECK_THROWS_WITH_PARTS(Linear<T>(2, 0), std::invalid_argument, {"Linear", "'out_features'"});
}

TEST_CASE("modules: Linear's forward and backward are x W^T + b and its closed form") {
  Linear<double> layer(3, 2);
  const xt::xarray<double> xv = random_array({4, 3}, 60), dy = random_array({4, 2}, 61);
  Tape<double> tape;
  auto x = tape.leaf(xv);
  auto y = layer(x);
  check_close(y.value(), add_row(matmul(xv, layer.weight.value, true), layer.bias.value));
  tape.backward(y, dy);
  check_close(layer.weight.grad, matmul(dy, xv, false, true));
  check_close(layer.bias.grad, column_sums(dy));
  check_close(x.grad(), matmul(dy, layer.weight.value));
}

TEST_CASE("modules: PositionwiseFFN and FeedForward match the two-layer reference") {
  const xt::xarray<double> xv = random_away_from_zero({5, 4}, 62), dy = random_array({5, 4}, 63);
  for (const std::string f : {"relu", "gelu", "gelu_tanh", "gelu_sigmoid", "silu"}) {
    CAPTURE(f);
    FeedForward<double> ffn(4, 6, parse_activation(f));
    CHECK(names_of(ffn) ==
          std::vector<std::string>{"w1.weight", "w1.bias", "w2.weight", "w2.bias"});
    Tape<double> tape;
    auto x = tape.leaf(xv);
    auto y = ffn(x);
    tape.backward(y, dy);
    const auto r = two_layer_reference(f, xv, ffn.w1.weight.value, ffn.w1.bias.value,
                                       ffn.w2.weight.value, ffn.w2.bias.value, dy);
    check_close(y.value(), r.y);
    check_close(x.grad(), r.dx);
    check_close(ffn.w1.weight.grad, r.dw1);
    check_close(ffn.w1.bias.grad, r.db1);
    check_close(ffn.w2.weight.grad, r.dw2);
    check_close(ffn.w2.bias.grad, r.db2);
  }
  CHECK(FeedForward<float>(4, 8).activation() == Activation::gelu);
  PositionwiseFFN<float> base(512, 2048);
  CHECK(base.activation() == Activation::relu);
  CHECK(base.w1.weight.value.shape() == Shape{2048, 512});
  CHECK(base.w2.weight.value.shape() == Shape{512, 2048});
}

TEST_CASE("modules: GatedFFN matches the gated reference, with and without biases") {
  const xt::xarray<double> xv = random_array({2, 3, 4}, 64), dy = random_array({6, 5}, 65);
  const xt::xarray<double> x2 = xt::reshape_view(xv, std::vector<std::size_t>{6, 4});
  for (const GatedBias bias : {GatedBias::none(), GatedBias::all(), GatedBias{true, false, true}}) {
    GatedFFN<double> ffn(4, 7, 5, Activation::silu, bias);
    std::vector<std::string> expected{"w_up", "w_gate", "w_down"};
    if (bias.up) expected.push_back("b_up");
    if (bias.gate) expected.push_back("b_gate");
    if (bias.down) expected.push_back("b_down");
    CHECK(names_of(ffn) == expected);
    CHECK(ffn.w_up.value.shape() == Shape{4, 7});
    CHECK(ffn.w_down.value.shape() == Shape{7, 5});

    Tape<double> tape;
    auto x = tape.leaf(xv);
    auto y = ffn(x);
    CHECK(y.shape() == Shape{2, 3, 5});
    tape.backward(y, xt::xarray<double>(xt::reshape_view(dy, std::vector<std::size_t>{2, 3, 5})));
    const auto zeros = [](std::size_t n) { return xt::xarray<double>(xt::zeros<double>({n})); };
    const auto r = gated_reference("silu", x2, ffn.w_up.value, ffn.w_gate.value, ffn.w_down.value,
                                   bias.up ? ffn.b_up.value : zeros(7),
                                   bias.gate ? ffn.b_gate.value : zeros(7),
                                   bias.down ? ffn.b_down.value : zeros(5), dy);
    check_close(xt::xarray<double>(xt::reshape_view(y.value(), std::vector<std::size_t>{6, 5})),
                r.y);
    check_close(ffn.w_up.grad, r.dw_up);
    check_close(ffn.w_gate.grad, r.dw_gate);
    check_close(ffn.w_down.grad, r.dw_down);
    if (bias.up) check_close(ffn.b_up.grad, r.db_up);
    if (bias.gate) check_close(ffn.b_gate.grad, r.db_gate);
    if (bias.down) check_close(ffn.b_down.grad, r.db_down);
  }
  CHECK(GatedFFN<float>::swiglu(4, 8, 4).activation() == Activation::silu);
  CHECK(GatedFFN<float>::geglu(4, 8, 4).activation() == Activation::gelu);
  CHECK(GatedFFN<float>::geglu_tanh(4, 8, 4).activation() == Activation::gelu_tanh);
  CHECK(GatedFFN<float>::reglu(4, 8, 4).activation() == Activation::relu);
  CHECK_THROWS_WITH_PARTS(GatedFFN<float>(4, 0, 4), std::invalid_argument,
                          {"GatedFFN", "'d_hidden'"});
}

TEST_CASE("modules: copies own their parameters - zero_grad clears every gradient") {
  PositionwiseFFN<double> a(3, 4);
  PositionwiseFFN<double> b = a;
  b.w1.weight.value(0, 0) += 1.0;
  CHECK(a.w1.weight.value(0, 0) != b.w1.weight.value(0, 0));
  Tape<double> tape;
  tape.backward(sum(b(tape.leaf(random_array({2, 3}, 66)))));
  for (auto* p : b.parameters()) CHECK(p->has_grad);
  for (auto* p : a.parameters()) CHECK_FALSE(p->has_grad);
  b.zero_grad();
  for (auto* p : b.parameters()) {
    CHECK_FALSE(p->has_grad);
    CHECK(xt::all(xt::equal(p->grad, 0.0)));
  }
}

TEST_CASE_TEMPLATE("modules: save, then load into a fresh module, gives identical outputs", T,
                   float, double) {
  TempDir scratch("ffn");
  const xt::xarray<T> xv = random_array<T>({3, 4}, 67);
  auto output = [&xv](auto& module) {
    Tape<T> tape;
    return xt::xarray<T>(module(tape.leaf(xv)).value());
  };
  Generator g1(1), g2(2);
  PositionwiseFFN<T> trained(4, 6, g1), fresh(4, 6, g2);
  REQUIRE(output(trained) != output(fresh));
  trained.save(scratch / "ffn");
  fresh.load(scratch / "ffn");
  CHECK(output(fresh) == output(trained));

  GatedFFN<T> gated(4, 5, 3, Activation::gelu, GatedBias::all(), g1);
  GatedFFN<T> gated_fresh(4, 5, 3, Activation::gelu, GatedBias::all(), g2);
  gated.save(scratch / "gated");
  gated_fresh.load(scratch / "gated");
  CHECK(output(gated_fresh) == output(gated));
  // A checkpoint of another architecture is refused, naming what differs.
  CHECK_THROWS_AS(fresh.load(scratch / "gated"), std::invalid_argument);
}

TEST_CASE("modules: a forward with a bad x throws before recording anything") {
  // The shapes are checked before any Parameter is recorded: the tape keeps
  // its size, and the message names the function the module calls.
  Linear<double> linear_module(4, 3);
  FeedForward<double> feed_forward(4, 6);
  PositionwiseFFN<double> positionwise(4, 6);
  GatedFFN<double> gated(4, 6, 5, Activation::silu, GatedBias::all());
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 5})));
  const std::size_t nodes = tape.size();
  CHECK_THROWS_WITH_PARTS(linear_module(x), std::invalid_argument,
                          {"xtgrad::linear", "'x'", "[2, 5]", "[..., 4]"});
  CHECK(tape.size() == nodes);
  CHECK_THROWS_WITH_PARTS(feed_forward(x), std::invalid_argument,
                          {"xtgrad::feedforward", "'x'", "[2, 5]", "[..., 4]"});
  CHECK(tape.size() == nodes);
  CHECK_THROWS_WITH_PARTS(positionwise(x), std::invalid_argument,
                          {"xtgrad::feedforward", "'x'", "[2, 5]", "[..., 4]"});
  CHECK(tape.size() == nodes);
  CHECK_THROWS_WITH_PARTS(gated(x), std::invalid_argument,
                          {"xtgrad::gated_feedforward", "'x'", "[2, 5]", "[..., 4]"});
  CHECK(tape.size() == nodes);
  // A Parameter resized by hand is caught the same way, before recording.
  feed_forward.w2.bias.value = xt::zeros<double>({7});
  const Var<double> good_x = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 4})));
  const std::size_t nodes_now = tape.size();
  CHECK_THROWS_WITH_PARTS(feed_forward(good_x), std::invalid_argument,
                          {"xtgrad::feedforward", "'w2.bias'", "[7]", "[4]"});
  CHECK(tape.size() == nodes_now);
}

TEST_CASE("modules: GatedFFN's [in, out] weight gradients accumulate over two backwards") {
  GatedFFN<double> gated(3, 5, 2, Activation::silu, GatedBias::all());
  Tape<double> tape;
  const Var<double> y = gated(tape.leaf(random_array({4, 3}, 931), false));
  const xt::xarray<double> dy = random_array({4, 2}, 932);
  tape.backward(y, dy);
  std::vector<xt::xarray<double>> once;
  for (const auto& [name, p] : gated.named_parameters()) once.push_back(p->grad);
  tape.backward(y, dy);
  std::size_t i = 0;
  for (const auto& entry : gated.named_parameters()) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& p = std::get<1>(entry);
    CAPTURE(name);
    CHECK(xt::amax(xt::abs(once[i]))() > 0.0);
    check_close(p->grad, xt::xarray<double>(2.0 * once[i]), 1e-13, 1e-15);
    ++i;
  }
}
