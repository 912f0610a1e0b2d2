// LayerNorm, RMSNorm, Dropout, Embedding and ActivationLayer: parameter names
// and initialization as torch, forward and backward against the engine ops
// they compose and against PyTorch, gradcheck in double; train() / eval()
// and named_modules() of the Module base.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <xtensor/xview.hpp>
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

template <class M>
std::vector<std::string> parameter_names(M&& module) {
  std::vector<std::string> names;
  for (const auto& entry : module.named_parameters()) names.push_back(entry.first);
  return names;
}

template <class M>
std::vector<std::string> module_names(M&& module) {
  std::vector<std::string> names;
  for (const auto& entry : module.named_modules()) names.push_back(entry.first);
  return names;
}

std::vector<std::size_t> dims(const Shape& shape) {
  return {shape.begin(), shape.end()};
}

template <class T>
double fixture_tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

}  // namespace

// ---------------------------------------------------------------- norms

TEST_CASE_TEMPLATE("modules: LayerNorm has torch's names, init and values", T, float, double) {
  LayerNorm<T> norm(5);
  CHECK(parameter_names(norm) == std::vector<std::string>{"weight", "bias"});
  CHECK(norm.weight.value == xt::ones<T>({5}));
  CHECK(norm.bias.value == xt::zeros<T>({5}));
  CHECK(norm.eps() == 1e-5);
  CHECK(parameter_names(LayerNorm<T>(5, 1e-5, true, false)) == std::vector<std::string>{"weight"});
  CHECK(parameter_names(LayerNorm<T>(5, 1e-5, false)).empty());

  load_fixture(norm, fx::layer_norm_params);
  const xt::xarray<T> x = fixture_array<T>(fx::layer_norm_x_shape, fx::layer_norm_x);
  check_close(norm.infer(x), from_fixture<T>(fx::layer_norm_y, dims(x.shape())), fixture_tol<T>(),
              fixture_tol<T>());
}

TEST_CASE_TEMPLATE("modules: RMSNorm has LLaMA's formula, torch's names and init", T, float,
                   double) {
  RMSNorm<T> norm(5);
  CHECK(parameter_names(norm) == std::vector<std::string>{"weight"});
  CHECK(norm.weight.value == xt::ones<T>({5}));
  CHECK(norm.eps() == 1e-6);
  CHECK(parameter_names(RMSNorm<T>(5, 1e-6, false)).empty());
  load_fixture(norm, fx::rms_norm_params);
  const xt::xarray<T> x = fixture_array<T>(fx::rms_norm_x_shape, fx::rms_norm_x);
  check_close(norm.infer(x), from_fixture<T>(fx::rms_norm_y, dims(x.shape())), fixture_tol<T>(),
              fixture_tol<T>());
}

TEST_CASE("modules: the norms are the engine ops they stand for, and gradcheck") {
  const xt::xarray<double> xv = random_array({2, 3, 4}, 1), dy = random_array({2, 3, 4}, 2);
  LayerNorm<double> ln(4, 1e-3);
  ln.weight.value = random_array({4}, 3);
  ln.bias.value = random_array({4}, 4);
  RMSNorm<double> rms(4, 1e-3);
  rms.weight.value = random_array({4}, 5);
  {
    Tape<double> tape, ref;
    Var<double> x = tape.leaf(xv), xr = ref.leaf(xv);
    Var<double> y = ln(x);
    Var<double> w = ref.leaf(ln.weight.value), b = ref.leaf(ln.bias.value);
    Var<double> yr = layer_norm(xr, w, b, 1e-3);
    CHECK(y.value() == yr.value());
    tape.backward(y, dy);
    ref.backward(yr, dy);
    CHECK(x.grad() == xr.grad());
    CHECK(ln.weight.grad == w.grad());
    CHECK(ln.bias.grad == b.grad());
  }
  {
    Tape<double> tape, ref;
    Var<double> x = tape.leaf(xv), xr = ref.leaf(xv);
    Var<double> y = rms(x);
    Var<double> w = ref.leaf(rms.weight.value);
    Var<double> yr = rms_norm(xr, w, 1e-3);
    CHECK(y.value() == yr.value());
    tape.backward(y, dy);
    ref.backward(yr, dy);
    CHECK(x.grad() == xr.grad());
    CHECK(rms.weight.grad == w.grad());
  }
  check_module_gradients(ln, xv);
  check_module_gradients(rms, xv);
  LayerNorm<double> plain(4, 1e-3, false);
  check_module_gradients(plain, xv);
}

// ---------------------------------------------------------------- Dropout

TEST_CASE_TEMPLATE(
    "modules: Dropout is ops/dropout keyed by (seed, step), a new step per "
    "training forward",
    T, float, double) {
  Dropout<T> drop(0.25, 99);
  CHECK(parameter_names(drop).empty());
  CHECK(drop.is_training());
  const xt::xarray<T> xv = random_away_from_zero<T>({3, 40}, 6);
  Tape<T> tape;
  Var<T> x = tape.leaf(xv);
  Var<T> y0 = drop(x), y1 = drop(x);
  CHECK(drop.step() == 2);
  Tape<T> ref;
  Var<T> xr = ref.leaf(xv);
  CHECK(y0.value() == dropout(xr, 0.25, true, DropoutKey{99, 0, 0}).value());
  CHECK(y1.value() == dropout(xr, 0.25, true, DropoutKey{99, 1, 0}).value());
  CHECK(y0.value() != y1.value());

  // A resumed run restores the step and draws the same mask.
  Dropout<T> resumed(0.25, 99);
  resumed.set_step(1);
  CHECK(resumed(x).value() == y1.value());

  // eval: the identity, x itself, and the step stays.
  drop.eval();
  CHECK_FALSE(drop.is_training());
  Var<T> same = drop(x);
  CHECK(same.index() == x.index());
  CHECK(drop.step() == 2);
  // infer is inference, also in training mode; a tape that does not record
  // is not (as torch.no_grad): only the mode decides.
  drop.train();
  CHECK(drop.infer(xv) == xv);
  CHECK(drop.step() == 2);
  Tape<T> no_grad;
  no_grad.set_grad_enabled(false);
  CHECK(drop(no_grad.leaf(xv)).value() == dropout(xr, 0.25, true, DropoutKey{99, 2, 0}).value());
  CHECK(drop.step() == 3);

  // Seeds from a generator differ between modules; p == 0 draws none.
  Generator generator(5);
  Dropout<T> a(0.5, generator), b(0.5, generator);
  CHECK(a.seed() != b.seed());
  Generator g1(5), g2(5);
  Dropout<T> none(0.0, g1);
  CHECK(none.seed() == 0);
  CHECK(g1() == g2());
}

TEST_CASE("modules: Dropout gradcheck in training (mask fixed by the step)") {
  Dropout<double> drop(0.4, 3);
  check_module_gradients(drop, random_away_from_zero({4, 5}, 7), [&drop] { drop.set_step(0); });
}

// ---------------------------------------------------------------- Embedding

TEST_CASE_TEMPLATE("modules: Embedding is ops/embedding, N(0, 1) init, padding row zero", T, float,
                   double) {
  Generator generator(11);
  Embedding<T> emb(50, 8, -2, generator);
  CHECK(parameter_names(emb) == std::vector<std::string>{"weight"});
  CHECK(emb.weight.value.shape() == Shape{50, 8});
  CHECK(emb.padding_idx() == 48);
  CHECK(xt::view(emb.weight.value, 48, xt::all()) == xt::zeros<T>({8}));
  const xt::xarray<double> w = xt::cast<double>(emb.weight.value);
  const double mean = xt::mean(w)(), var = xt::variance(w)();
  CHECK(std::abs(mean) < 0.15);  // 400 draws of N(0, 1): about 0.05 standard error
  CHECK(std::abs(var - 1.0) < 0.2);

  const Indices idx = {{1, 48, 1}, {7, 0, 49}};
  Tape<T> tape;
  Var<T> y = emb(tape, idx);
  CHECK(y.shape() == Shape{2, 3, 8});
  const xt::xarray<T> dy = random_array<T>({2, 3, 8}, 12);
  tape.backward(y, dy);
  Tape<T> ref;
  Var<T> wr = ref.leaf(emb.weight.value);
  Var<T> yr = embedding(idx, wr, std::int64_t{48});
  ref.backward(yr, dy);
  CHECK(y.value() == yr.value());
  CHECK(emb.weight.grad == wr.grad());
  CHECK(xt::view(emb.weight.grad, 48, xt::all()) == xt::zeros<T>({8}));
  CHECK(emb.infer(idx) == yr.value());
}

TEST_CASE("modules: Embedding's weight gradient against central differences") {
  Embedding<double> emb(5, 3, 1);
  const Indices idx = {{4, 1, 4}, {0, 2, 1}};
  const xt::xarray<double> dy = random_array({2, 3, 3}, 14);
  Tape<double> tape;
  tape.backward(emb(tape, idx), dy);
  const auto loss = [&] { return double(xt::sum(dy * emb.infer(idx))()); };
  const double eps = 1e-6;
  for (std::size_t i = 0; i < emb.weight.value.size(); ++i) {
    double& w = emb.weight.value.data()[i];
    const double saved = w;
    w = saved + eps;
    const double plus = loss();
    w = saved - eps;
    const double minus = loss();
    w = saved;
    // The padding row (1) gets no gradient although it is used.
    const double numeric = i / 3 == 1 ? 0.0 : (plus - minus) / (2 * eps);
    CHECK(emb.weight.grad.data()[i] == doctest::Approx(numeric).epsilon(1e-6));
  }
}

// ---------------------------------------------------------------- the Module base

TEST_CASE("modules: train() / eval() reach every descendant - named_modules() is torch's") {
  PreNormResidualOptions options;
  options.dropout = 0.1;
  options.ffn_dropout = 0.2;
  PreNormResidual<double> block(4, 8, options);
  CHECK(module_names(block) ==
        std::vector<std::string>{"", "norm", "ffn", "ffn.w1", "ffn.w2", "ffn.dropout", "dropout"});
  for (const auto& [name, m] : block.named_modules()) CHECK(m->is_training());
  block.eval();
  for (const auto& entry : block.named_modules()) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& m = std::get<1>(entry);
    CAPTURE(name);
    CHECK_FALSE(m->is_training());
  }
  std::get<FeedForward<double>>(block.ffn).train();  // only the subtree
  CHECK_FALSE(block.is_training());
  CHECK(std::get<FeedForward<double>>(block.ffn).dropout.is_training());
  CHECK_FALSE(block.dropout.is_training());
  block.train();
  for (const auto& [name, m] : block.named_modules()) CHECK(m->is_training());
  // Parameter names are unchanged by the listing's module hook.
  CHECK(parameter_names(block) == std::vector<std::string>{"norm.weight", "norm.bias",
                                                           "ffn.w1.weight", "ffn.w1.bias",
                                                           "ffn.w2.weight", "ffn.w2.bias"});
}

TEST_CASE("modules: ActivationLayer is ops/activations") {
  const xt::xarray<double> xv = random_away_from_zero({3, 4}, 13);
  for (const Activation f : {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                             Activation::gelu_sigmoid, Activation::silu}) {
    CAPTURE(to_string(f));
    ActivationLayer<double> layer(f);
    CHECK(parameter_names(layer).empty());
    Tape<double> tape;
    CHECK(layer(tape.leaf(xv)).value() == activation(tape.leaf(xv), f).value());
    check_module_gradients(layer, xv);
  }
}
