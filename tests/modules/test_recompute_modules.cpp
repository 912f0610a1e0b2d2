// Activation recomputation of modules (modules/recompute_modules.hpp and the
// switches Sequential::set_recompute_every, PreNormResidual::set_recompute,
// Mlp::set_recompute): a deep residual MLP with dropout trains with the
// gradients of the plain one, bit for bit, and its dropout steps advance the
// same way.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;
using xtgrad::testing::random_array;

namespace {

// `depth` pre-norm residual FFN blocks with both dropouts, from one seed.
template <class T>
Sequential<T> residual_mlp(std::size_t depth, FFNKind ffn = FFNKind::feed_forward) {
  Generator g(17);
  Sequential<T> net;
  PreNormResidualOptions o;
  o.ffn = ffn, o.dropout = 0.2, o.ffn_dropout = 0.3;
  for (std::size_t k = 0; k < depth; ++k)
    net.template emplace_back<PreNormResidual<T>>(8, 24, o, g);
  return net;
}

template <class T>
std::vector<std::uint64_t> dropout_steps(Module<T>& m) {
  std::vector<std::uint64_t> steps;
  for (const auto& entry : m.named_modules())
    if (const auto* d = dynamic_cast<const Dropout<T>*>(entry.second)) steps.push_back(d->step());
  return steps;
}

// One training step's loss, input gradient and parameter gradients.
template <class T>
struct StepResult {
  xt::xarray<T> loss, dx;
  std::vector<xt::xarray<T>> grads;
};

template <class T>
StepResult<T> train_step(Module<T>& model, const xt::xarray<T>& x, int backwards = 1) {
  model.zero_grad();
  Tape<T> tape;
  const Var<T> in = tape.leaf(x);
  const Var<T> y = model(in);
  const Var<T> loss = sum(y * y);
  for (int k = 0; k < backwards; ++k) tape.backward(loss);
  StepResult<T> r{loss.value(), in.grad(), {}};
  for (const Parameter<T>* p : model.parameters()) r.grads.push_back(p->grad);
  return r;
}

template <class T>
void check_same(const StepResult<T>& a, const StepResult<T>& b) {
  CHECK(bit_equal(a.loss, b.loss));
  CHECK(bit_equal(a.dx, b.dx));
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t k = 0; k < a.grads.size(); ++k) {
    INFO("parameter " << k);
    CHECK(bit_equal(a.grads[k], b.grads[k]));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("recompute_modules: a deep residual MLP with dropout gets the plain gradients",
                   T, float, double) {
  const xt::xarray<T> x = random_array<T>({2, 5, 8}, 1);
  for (const std::size_t every : {1, 2, 3, 6, 7}) {
    INFO("recompute every " << every);
    Sequential<T> plain = residual_mlp<T>(6), net = residual_mlp<T>(6);
    net.set_recompute_every(every);
    CHECK(net.recompute_every() == every);
    for (int step = 0; step < 3; ++step) {  // new masks every step
      check_same(train_step(net, x), train_step(plain, x));
      CHECK(dropout_steps(net) == dropout_steps(plain));
    }
    CHECK(dropout_steps(net).front() == 3);
  }
}

TEST_CASE("recompute_modules: every FFN kind, backward twice, and the steps stay put") {
  const xt::xarray<double> x = random_array<double>({5, 8}, 2);
  for (const FFNKind kind : {FFNKind::feed_forward, FFNKind::positionwise, FFNKind::gated}) {
    Sequential<double> plain = residual_mlp<double>(3, kind), net = residual_mlp<double>(3, kind);
    net.set_recompute_every(1);
    // Each backward re-runs every block with the forward's masks.
    check_same(train_step(net, x, 2), train_step(plain, x, 2));
    CHECK(dropout_steps(net) == dropout_steps(plain));
  }
}

TEST_CASE_TEMPLATE("recompute_modules: PreNormResidual and Mlp switches give the plain gradients",
                   T, float, double) {
  const xt::xarray<T> x = random_array<T>({6, 8}, 3);
  PreNormResidualOptions o;
  o.dropout = 0.1, o.ffn_dropout = 0.25;
  Generator g1(4), g2(4);
  PreNormResidual<T> plain(8, 32, o, g1), block(8, 32, o, g2);
  block.set_recompute(true);
  CHECK(block.recomputing());
  CHECK_FALSE(plain.recomputing());
  for (int step = 0; step < 2; ++step) check_same(train_step(block, x), train_step(plain, x));
  CHECK(block.dropout.step() == 2);

  MlpOptions mo;
  mo.activation = Activation::gelu, mo.dropout = 0.3;
  Generator g3(5), g4(5);
  Mlp<T> mlp_plain(8, {16, 12}, 4, mo, g3), mlp(8, {16, 12}, 4, mo, g4);
  mlp.set_recompute(true);
  for (int step = 0; step < 2; ++step) check_same(train_step(mlp, x), train_step(mlp_plain, x));
  CHECK(dropout_steps(mlp) == dropout_steps(mlp_plain));
  // The recompute keeps x and the output only: no hidden layer on the tape.
  Tape<T> tape;
  const Var<T> y = mlp(tape.leaf(x));
  CHECK(std::string(tape.node_op(y.index())) == "recompute_output");
  CHECK(tape.size() == 1 + 6 + 2);  // x, the six Parameters, recompute, output
}

TEST_CASE("recompute_modules: both switches on nest, and still give the plain gradients") {
  const xt::xarray<double> x = random_array<double>({4, 8}, 6);
  Sequential<double> plain = residual_mlp<double>(4), net = residual_mlp<double>(4);
  net.set_recompute_every(2);
  for (std::size_t k = 0; k < net.size(); ++k)
    dynamic_cast<PreNormResidual<double>&>(net[k]).set_recompute(true);
  for (int step = 0; step < 2; ++step) check_same(train_step(net, x), train_step(plain, x));
  CHECK(dropout_steps(net) == dropout_steps(plain));
}

TEST_CASE("recompute_modules: inference and no-grad forwards never recompute") {
  const xt::xarray<double> x = random_array<double>({3, 8}, 7);
  Sequential<double> plain = residual_mlp<double>(2), net = residual_mlp<double>(2);
  net.set_recompute_every(1);
  CHECK(bit_equal(net.infer(x), plain.infer(x)));
  Tape<double> tape;
  NoGradGuard<double> no_grad(tape);
  const Var<double> y = net(tape.leaf(x));
  CHECK(std::string(tape.node_op(y.index())) == "add");           // the last block's residual add
  CHECK(dropout_steps(net) == std::vector<std::uint64_t>(4, 1));  // a training forward all the same
}

TEST_CASE("recompute_modules: a mode changed before backward, and bad arguments, are refused") {
  const xt::xarray<double> x = random_array<double>({3, 8}, 8);
  Sequential<double> net = residual_mlp<double>(2);
  net.set_recompute_every(1);
  Tape<double> tape;
  const Var<double> loss = sum(net(tape.leaf(x)));
  net.eval();  // the re-run would have no dropout
  CHECK_THROWS_WITH_PARTS(tape.backward(loss), std::logic_error,
                          {"recompute", "re-run", "different values"});
  // The re-run that threw put the steps back.
  CHECK(dropout_steps(net) == std::vector<std::uint64_t>(4, 1));

  const Var<double> v = tape.leaf(x);
  CHECK_THROWS_WITH_PARTS(recompute_modules<double>({}, v), std::invalid_argument,
                          {"recompute_modules", "'modules'", "empty"});
  CHECK_THROWS_WITH_PARTS(recompute_modules<double>({&net, nullptr}, v), std::invalid_argument,
                          {"recompute_modules", "'modules'", "null module at position 1"});
  CHECK_THROWS_WITH_PARTS(recompute_modules<double>({&net}, Var<double>()), std::logic_error,
                          {"recompute_modules", "empty Var"});
  CHECK_THROWS_WITH_PARTS(recompute_module<double>(net, nullptr, v), std::invalid_argument,
                          {"recompute_module", "'body'", "empty"});
  // The switch is no part of the model's configuration.
  CHECK(net.config() == residual_mlp<double>(2).config());
}
