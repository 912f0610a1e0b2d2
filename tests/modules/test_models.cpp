// Sequential, Mlp and PreNormResidual: parameter and module names equal
// torch's for the same structure, values against PyTorch, forward and
// backward against the composition of engine ops each stands for (dropout
// included), gradcheck in double, train / eval changing dropout only.
#include <doctest/doctest.h>

#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/modules_fixtures.hpp"
#include "support/load_module_fixture.hpp"
#include "support/module_gradcheck.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::modules;

namespace {

template <class T, std::size_t N>
void check_module_names(Module<T>& module, const char* const (&names)[N]) {
  std::vector<std::string> got, expected(names, names + N);
  for (const auto& entry : module.named_modules()) got.push_back(entry.first);
  CHECK(got == expected);
}

// Loads a fixture case into `module` and checks names, modules and eval values.
template <class T, std::size_t P, std::size_t R, std::size_t X, std::size_t Y, std::size_t M>
void check_against_torch(Module<T>& module, const fx::Tensor (&params)[P],
                         const std::size_t (&x_shape)[R], const double (&x)[X],
                         const double (&y)[Y], const char* const (&modules)[M]) {
  load_fixture(module, params);
  check_module_names(module, modules);
  module.eval();
  const xt::xarray<T> xv = fixture_array<T>(x_shape, x);
  const double tol = std::is_same_v<T, float> ? 5e-5 : 1e-12;
  const xt::xarray<T> inferred = module.infer(xv);
  const xt::xarray<T> expected = from_fixture<T>(
      y, std::vector<std::size_t>(inferred.shape().begin(), inferred.shape().end()));
  REQUIRE(expected.size() == Y);
  check_close(inferred, expected, tol, tol);
  Tape<T> tape;  // eval forward on a recording tape: the same values
  check_close(module(tape.leaf(xv)).value(), expected, tol, tol);
  module.train();
}

// Every Dropout step of `module` back to 0 (the same masks again).
inline void reset_steps(Module<double>& module) {
  for (const auto& entry : module.named_modules())
    if (auto* d = dynamic_cast<Dropout<double>*>(entry.second)) d->set_step(0);
}

}  // namespace

// ---------------------------------------------------------------- Sequential

TEST_CASE_TEMPLATE("models: Sequential names its children 0, 1, ... as torch", T, float, double) {
  Sequential<T> net;
  net.template emplace_back<Linear<T>>(4, 6);
  net.push_back(ActivationLayer<T>(Activation::relu));
  net.push_back(std::unique_ptr<Module<T>>(std::make_unique<Linear<T>>(6, 3)));
  CHECK(net.size() == 3);
  check_against_torch<T>(net, fx::sequential_params, fx::sequential_x_shape, fx::sequential_x,
                         fx::sequential_y, fx::sequential_modules);
  CHECK_THROWS_WITH_PARTS(net.at(3), std::out_of_range, {"Sequential::at", "3", "3 modules"});
  CHECK_THROWS_WITH_PARTS(net.push_back(std::unique_ptr<Module<T>>()), std::invalid_argument,
                          {"Sequential::push_back", "'module'", "null"});
  Sequential<T> moved = std::move(net);
  CHECK(moved.named_parameters().size() == 4);
}

TEST_CASE("models: Sequential is its children applied in order - empty is the identity") {
  Sequential<double> net;
  Linear<double>& first = net.emplace_back<Linear<double>>(3, 5);
  net.emplace_back<ActivationLayer<double>>(Activation::gelu);
  net.emplace_back<Dropout<double>>(0.3, 8);
  LayerNorm<double>& norm = net.emplace_back<LayerNorm<double>>(5);
  norm.weight.value = random_array({5}, 1);
  const xt::xarray<double> xv = random_array({2, 3}, 2), dy = random_array({2, 5}, 3);
  Tape<double> tape, ref;
  Var<double> x = tape.leaf(xv), xr = ref.leaf(xv);
  Var<double> y = net(x);
  Var<double> w = ref.leaf(first.weight.value), b = ref.leaf(first.bias.value);
  Var<double> nw = ref.leaf(norm.weight.value), nb = ref.leaf(norm.bias.value);
  Var<double> yr = layer_norm(
      dropout(activation(linear(xr, w, b), Activation::gelu), 0.3, true, DropoutKey{8, 0, 0}), nw,
      nb);
  CHECK(y.value() == yr.value());
  tape.backward(y, dy);
  ref.backward(yr, dy);
  CHECK(x.grad() == xr.grad());
  CHECK(first.weight.grad == w.grad());
  CHECK(norm.weight.grad == nw.grad());
  check_module_gradients(net, xv, [&net] { reset_steps(net); });

  Sequential<double> empty;
  Var<double> same = empty(x);
  CHECK(same.index() == x.index());
  CHECK(empty.named_parameters().empty());
}

// ---------------------------------------------------------------- Mlp

TEST_CASE_TEMPLATE("models: Mlp has torchvision.ops.MLP's structure, names and values", T, float,
                   double) {
  MlpOptions options;
  options.activation = Activation::gelu;
  options.dropout = 0.25;
  Mlp<T> mlp(4, {6, 5}, 3, options);
  CHECK(mlp.num_layers() == 3);
  check_against_torch<T>(mlp, fx::mlp_params, fx::mlp_x_shape, fx::mlp_x, fx::mlp_y,
                         fx::mlp_modules);
  Mlp<T> one(7, {}, 2);  // no hidden layer: Linear(7, 2), in != out
  CHECK(one.named_parameters().size() == 2);
  CHECK(one.infer(random_array<T>({3, 7}, 1)).shape() == Shape{3, 2});
  MlpOptions no_bias;
  no_bias.bias = false;
  std::vector<std::string> names;
  for (const auto& entry : Mlp<T>(3, {4}, 2, no_bias).named_parameters())
    names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"0.weight", "3.weight"});
}

TEST_CASE("models: Mlp is linear, activation, dropout, linear, ... of the engine ops") {
  MlpOptions options;
  options.activation = Activation::silu;
  options.dropout = 0.3;
  Generator generator(21);
  Mlp<double> mlp(4, {6, 5}, 3, options, generator);
  CHECK(mlp.dropout(0).seed() != mlp.dropout(1).seed());
  const xt::xarray<double> xv = random_array({2, 3, 4}, 4), dy = random_array({2, 3, 3}, 5);
  for (const bool training : {true, false}) {
    CAPTURE(training);
    mlp.train(training);
    reset_steps(mlp);
    Tape<double> tape, ref;
    Var<double> x = tape.leaf(xv), xr = ref.leaf(xv);
    Var<double> y = mlp(x);
    mlp.zero_grad();
    tape.backward(y, dy);
    std::vector<Var<double>> w, b;
    for (std::size_t i = 0; i < 3; ++i) {
      w.push_back(ref.leaf(mlp.layer(i).weight.value));
      b.push_back(ref.leaf(mlp.layer(i).bias.value));
    }
    Var<double> h = linear(xr, w[0], b[0]);
    for (std::size_t i = 1; i < 3; ++i) {
      const DropoutKey key{mlp.dropout(i - 1).seed(), 0, 0};
      h = linear(dropout(activation(h, Activation::silu), 0.3, training, key), w[i], b[i]);
    }
    ref.backward(h, dy);
    check_close(y.value(), h.value());
    check_close(x.grad(), xr.grad());
    for (std::size_t i = 0; i < 3; ++i) {
      check_close(mlp.layer(i).weight.grad, w[i].grad());
      check_close(mlp.layer(i).bias.grad, b[i].grad());
    }
    CHECK(mlp.dropout(0).step() == (training ? 1u : 0u));
  }
  mlp.train();
  check_module_gradients(mlp, xv, [&mlp] { reset_steps(mlp); });
}

// ---------------------------------------------------------------- PreNormResidual

TEST_CASE_TEMPLATE("models: PreNormResidual has the names and values of its torch module", T, float,
                   double) {
  PreNormResidual<T> ln_ff(5, 7);
  check_against_torch<T>(ln_ff, fx::block_ln_ff_params, fx::block_ln_ff_x_shape, fx::block_ln_ff_x,
                         fx::block_ln_ff_y, fx::block_ln_ff_modules);
  PreNormResidualOptions gated;
  gated.norm = NormKind::rms_norm;
  gated.ffn = FFNKind::gated;
  gated.gated_bias = GatedBias{true, false, true};
  PreNormResidual<T> rms_gated(5, 6, gated);
  CHECK(rms_gated.options().activation == Activation::silu);
  CHECK(rms_gated.options().eps == 1e-6);
  check_against_torch<T>(rms_gated, fx::block_rms_gated_params, fx::block_rms_gated_x_shape,
                         fx::block_rms_gated_x, fx::block_rms_gated_y, fx::block_rms_gated_modules);
  PreNormResidualOptions relu;
  relu.ffn = FFNKind::positionwise;
  PreNormResidual<T> ln_relu(5, 6, relu);
  check_against_torch<T>(ln_relu, fx::block_ln_relu_params, fx::block_ln_relu_x_shape,
                         fx::block_ln_relu_x, fx::block_ln_relu_y, fx::block_ln_relu_modules);
}

TEST_CASE("models: PreNormResidual is x + dropout(FFN(norm(x))) of the engine ops") {
  const xt::xarray<double> xv = random_array({2, 3, 4}, 30), dy = random_array({2, 3, 4}, 31);
  for (const FFNKind kind : {FFNKind::feed_forward, FFNKind::positionwise, FFNKind::gated}) {
    for (const NormKind norm_kind : {NormKind::layer_norm, NormKind::rms_norm}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(static_cast<int>(norm_kind));
      PreNormResidualOptions o;
      o.norm = norm_kind;
      o.ffn = kind;
      o.dropout = 0.2;
      o.ffn_dropout = 0.3;
      o.gated_bias = GatedBias::all();
      Generator generator(40);
      PreNormResidual<double> block(4, 6, o, generator);
      // Norm weights away from one, so that a wrong weight shows.
      for (const auto& [name, p] : block.named_parameters())
        if (name.rfind("norm.", 0) == 0)
          p->value =
              random_array(
                  std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()), 41) +
              1.0;
      Tape<double> tape, ref;
      Var<double> x = tape.leaf(xv), xr = ref.leaf(xv);
      Var<double> y = block(x);
      tape.backward(y, dy);
      // The reference: the same parameters as leaves of ref, in name order.
      std::vector<Var<double>> p;
      for (const auto& entry : block.named_parameters()) p.push_back(ref.leaf(entry.second->value));
      Var<double> n = norm_kind == NormKind::layer_norm ? layer_norm(xr, p[0], p[1], 1e-5)
                                                        : rms_norm(xr, p[0], 1e-6);
      const std::size_t k = norm_kind == NormKind::layer_norm ? 2 : 1;
      Var<double> f;
      if (kind == FFNKind::gated) {
        const DropoutKey hidden{std::get<GatedFFN<double>>(block.ffn).dropout.seed(), 0, 0};
        const WeightLayout in_out = WeightLayout::in_out;
        Var<double> u = linear(n, p[k], p[k + 3], in_out);
        Var<double> g = linear(n, p[k + 1], p[k + 4], in_out);
        f = linear(dropout(gated(u, g, Activation::silu), 0.3, true, hidden), p[k + 2], p[k + 5],
                   in_out);
      } else {
        const Activation act = kind == FFNKind::positionwise ? Activation::relu : Activation::gelu;
        const FeedForward<double>& ffn = kind == FFNKind::positionwise
                                             ? std::get<PositionwiseFFN<double>>(block.ffn)
                                             : std::get<FeedForward<double>>(block.ffn);
        const DropoutKey hidden{ffn.dropout.seed(), 0, 0};
        Var<double> h = activation(linear(n, p[k], p[k + 1]), act);
        f = linear(dropout(h, 0.3, true, hidden), p[k + 2], p[k + 3]);
      }
      Var<double> yr = add(xr, dropout(f, 0.2, true, DropoutKey{block.dropout.seed(), 0, 0}));
      ref.backward(yr, dy);
      check_close(y.value(), yr.value());
      check_close(x.grad(), xr.grad());
      std::size_t i = 0;
      for (const auto& entry : block.named_parameters()) {
        // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
        const auto& name = std::get<0>(entry);
        const auto& param = std::get<1>(entry);
        CAPTURE(name);
        check_close(param->grad, p[i++].grad());
      }
      check_module_gradients(block, xv, [&block] { reset_steps(block); });
    }
  }
}

TEST_CASE("models: train / eval changes dropout only") {
  PreNormResidualOptions with;
  with.dropout = 0.5;
  with.ffn_dropout = 0.5;
  Generator g1(50), g2(50);
  PreNormResidual<double> dropped(4, 8, with, g1);
  PreNormResidual<double> plain(4, 8, PreNormResidualOptions{}, g2);
  // Same weights (the generator draws the dropout seeds after them).
  auto a = dropped.named_parameters(), b = plain.named_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].second->value == b[i].second->value);
  const xt::xarray<double> xv = random_array({3, 4}, 51);
  Tape<double> tape;
  Var<double> x = tape.leaf(xv);
  const xt::xarray<double> train_y = dropped(x).value();
  dropped.eval();
  const xt::xarray<double> eval_y = dropped(x).value();
  // In eval the dropouts are the identity: exactly the block without dropout,
  // in either mode of that block.
  CHECK(eval_y == plain(x).value());
  plain.eval();
  CHECK(eval_y == plain(x).value());
  CHECK(train_y != eval_y);
  CHECK(dropped.infer(xv) == eval_y);

  MlpOptions mo;
  mo.dropout = 0.5;
  Mlp<double> mlp(4, {16}, 3, mo), mlp_plain(4, {16}, 3);
  const xt::xarray<double> mlp_train = mlp(x).value();
  mlp.eval();
  CHECK(mlp(x).value() == mlp_plain(x).value());
  CHECK(mlp_train != mlp(x).value());
}

// ---------------------------------------------------------------- anomaly mode

TEST_CASE_TEMPLATE("models: anomaly mode names the op of the model that went non-finite", T, float,
                   double) {
  const auto anomaly_op = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const AnomalyError& e) {
      CHECK(e.phase() == AnomalyError::Phase::forward);
      return e.op();
    } catch (const std::exception& e) {
      FAIL_CHECK("expected AnomalyError, got: " << e.what());
    }
    return "nothing thrown";
  };
  const T big = std::numeric_limits<T>::max() / 4;
  Tape<T> tape;
  tape.set_detect_anomaly(true);
  Var<T> x = tape.leaf(xt::xarray<T>{{1, -2, 3, -4}, {2, 1, -1, 3}}, false);

  // A NaN weight is caught where it is recorded, before any op uses it.
  PreNormResidual<T> block(4, 8);
  block.dropout = Dropout<T>(0.5, 3);
  std::get<LayerNorm<T>>(block.norm).weight.value(2) = std::numeric_limits<T>::quiet_NaN();
  CHECK(anomaly_op([&] { block(x); }) == "param");
  CHECK(block.dropout.step() == 0);  // stopped before the dropout drew a mask

  // Overflow in the first layer, then in the fused activation + dropout + linear.
  MlpOptions o;
  o.dropout = 0.25;
  Mlp<T> mlp(4, {3}, 2, o);
  mlp.layer(0).weight.value.fill(big);
  CHECK(anomaly_op([&] { mlp(x); }) == "linear");
  Mlp<T> second(4, {3}, 2, o);
  second.layer(1).weight.value.fill(big);
  second.layer(0).weight.value.fill(T(1));
  second.layer(0).bias.value.fill(T(50));
  CHECK(anomaly_op([&] { second(x); }) == "activation_linear");
}
