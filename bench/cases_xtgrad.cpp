// The xtgrad side of bench_xtgrad: the FFN modules, the toy training step and
// the activation kernels, used as a training loop would use them (one tape
// reused across steps: clear() keeps its buffers).
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/kernels/activation_kernels.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "cases.hpp"
#include "zoo/fashion/models.hpp"  // make_model

namespace xtgrad::bench {

namespace {

constexpr unsigned k_seed = 2024;
constexpr std::size_t k_toy_tokens = 128;
constexpr std::size_t k_toy_model = 2;
constexpr std::size_t k_toy_hidden = 16;
constexpr double k_toy_lr = 1e-2;
constexpr double k_fashion_lr = 1e-3;
constexpr double k_fashion_weight_decay = 1e-2;
constexpr double k_fashion_label_smoothing = 0.1;
constexpr std::size_t k_fashion_pixels = 28 * 28;

xt::xarray<float> uniform(const Shape& shape, unsigned seed, float scale = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  xt::xarray<float> a = xt::xarray<float>::from_shape(shape);
  for (float& v : a) v = dist(engine);
  return a;
}

// One FFN and what a training step feeds it.
struct FfnState {
  Pass pass;
  std::unique_ptr<FeedForward<float>> two_layer;  // relu, gelu
  std::unique_ptr<GatedFFN<float>> gated;         // swiglu
  xt::xarray<float> x;
  xt::xarray<float> dy;
  Tape<float> tape;

  Module<float>& module() {
    if (two_layer) return *two_layer;
    return *gated;
  }
  Var<float> forward(const Var<float>& in) { return two_layer ? (*two_layer)(in) : (*gated)(in); }

  void run() {
    if (pass == Pass::inference) {
      module().infer(x);
      return;
    }
    tape.clear();
    if (pass == Pass::forward_backward) module().zero_grad();
    const Var<float> y = forward(tape.leaf(x, pass == Pass::forward_backward));
    if (pass == Pass::forward_backward) tape.backward(y, dy);
  }
};

struct ToyState {
  PositionwiseFFN<float> ffn;
  optim::Adam<float> adam;
  xt::xarray<float> x;
  xt::xarray<float> target;
  Tape<float> tape;

  ToyState(Generator& generator)
      : ffn(k_toy_model, k_toy_hidden, generator),
        adam(ffn.parameters(), optim::AdamOptions(k_toy_lr)),
        x(uniform({k_toy_tokens, k_toy_model}, k_seed)),
        target(xt::xarray<float>::from_shape({k_toy_tokens, k_toy_model})) {
    // The target of demos/train_toy: y1 = |x1| + 0.3 x2, y2 = max(0, x2 - 0.2) - 0.4 x1.
    for (std::size_t i = 0; i < k_toy_tokens; ++i) {
      const float x1 = x(i, 0), x2 = x(i, 1);
      target(i, 0) = std::abs(x1) + 0.3f * x2;
      target(i, 1) = std::max(0.0f, x2 - 0.2f) - 0.4f * x1;
    }
  }

  void run() {
    const Var<float> loss = mse(ffn(tape.leaf(x, false)), tape.leaf(target, false));
    tape.backward(loss);
    adam.step();
    adam.zero_grad();
    tape.clear();
  }
};

struct ActivationState {
  Activation activation;
  Pass pass;
  Parameter<float> x;  // recorded with Tape::param, which does not copy it
  xt::xarray<float> dy;
  xt::xarray<float> dx;
  Tape<float> tape;

  void run() {
    if (pass == Pass::forward) {
      tape.clear();
      xtgrad::activation(tape.param(x), activation);
    } else {
      detail::activation_backward(activation, x.value.data(), dy.data(), dx.data(), dx.size(),
                                  false);
    }
  }
};

struct MatmulState {
  Pass pass;
  Parameter<float> a, b;
  xt::xarray<float> dy;
  Tape<float> tape;

  void run() {
    tape.clear();
    const Var<float> y = matmul(tape.param(a), tape.param(b));
    if (pass == Pass::forward_backward) tape.backward(y, dy);
  }
};

struct RowwiseState {
  RowOp op;
  Pass pass;
  Parameter<float> x, weight, bias;
  Indices target;
  xt::xarray<float> dy;
  Tape<float> tape;

  Var<float> forward() {
    const Var<float> in = tape.param(x);
    switch (op) {
      case RowOp::layer_norm:
        return layer_norm(in, std::optional(tape.param(weight)), std::optional(tape.param(bias)));
      case RowOp::rms_norm:
        return rms_norm(in, std::optional(tape.param(weight)));
      case RowOp::softmax:
        return softmax(in, -1);
      case RowOp::log_softmax:
        return log_softmax(in, -1);
      case RowOp::cross_entropy:
        return cross_entropy(in, target);
    }
    throw std::logic_error("bench: unknown row-wise op");
  }

  void run() {
    tape.clear();
    const Var<float> y = forward();
    if (pass == Pass::forward) return;
    // What zero_grad leaves, without its fill: the backward writes every gradient.
    for (Parameter<float>* p : {&x, &weight, &bias}) p->has_grad = false;
    if (op == RowOp::cross_entropy)
      tape.backward(y);
    else
      tape.backward(y, dy);
  }
};

// Dropout on: Module::train, and the classifier's own switch and per-step
// dropout key where its class has them (detected, so that any model behind
// make_model compiles here).
template <class M>
auto classifier_training(M& m, int) -> decltype(m.set_training(true), void()) {
  m.set_training(true);
}
template <class M>
void classifier_training(M&, long) {}
template <class M>
auto dropout_step(M& m, std::uint64_t step, int) -> decltype(m.set_dropout_key(0, 0), void()) {
  m.set_dropout_key(k_seed, step);
}
template <class M>
void dropout_step(M&, std::uint64_t, long) {}

using FashionPtr = decltype(fashion::make_model(std::declval<const fashion::ModelConfig&>(),
                                                std::declval<Generator&>()));

struct FashionState {
  FashionPtr model;
  std::optional<optim::AdamW<float>> optimizer;
  xt::xarray<float> x;
  Indices labels;
  CrossEntropyOptions loss_options;
  Tape<float> tape;
  std::uint64_t step = 0;
  Profiler* profiler = nullptr;  // set: the optimizer's calls are timed regions too

  void run() {
    tape.clear();
    dropout_step(*model, step++, 0);
    const Var<float> loss = cross_entropy((*model)(tape.leaf(x, false)), labels, loss_options);
    tape.backward(loss);
    {
      std::optional<ProfileRegion> region;
      if (profiler) region.emplace(*profiler, "optimizer.step");
      optimizer->step();
    }
    std::optional<ProfileRegion> region;
    if (profiler) region.emplace(*profiler, "optimizer.zero_grad");
    optimizer->zero_grad();
  }
};

std::shared_ptr<FashionState> make_fashion_state(FashionModel kind);

}  // namespace

Runner xtgrad_fashion_step(FashionModel kind) {
  std::shared_ptr<FashionState> state = make_fashion_state(kind);
  return [state] { state->run(); };
}

std::string xtgrad_fashion_profile(FashionModel kind, int warmup, int steps) {
  std::shared_ptr<FashionState> state = make_fashion_state(kind);
  for (int s = 0; s < warmup; ++s) state->run();
  Profiler profiler;
  state->profiler = &profiler;
  {
    ProfilerGuard<float> guard(state->tape, profiler);
    for (int s = 0; s < steps; ++s) {
      ProfileStep step(profiler);
      state->run();
    }
  }
  state->profiler = nullptr;
  return profiler.table();
}

namespace {

std::shared_ptr<FashionState> make_fashion_state(FashionModel kind) {
  auto state = std::make_shared<FashionState>();
  fashion::ModelConfig config;
  config.kind = fashion_model_name(kind);
  Generator generator(k_seed);
  state->model = fashion::make_model(config, generator);
  state->model->train(true);
  classifier_training(*state->model, 0);
  state->optimizer.emplace(state->model->parameters(),
                           optim::AdamWOptions(k_fashion_lr).weight_decay(k_fashion_weight_decay));
  state->loss_options.label_smoothing = k_fashion_label_smoothing;
  std::mt19937 engine(k_seed + 13);
  std::normal_distribution<float> pixel;
  state->x = xt::xarray<float>::from_shape({k_fashion_batch, k_fashion_pixels});
  for (float& v : state->x) v = pixel(engine);
  std::uniform_int_distribution<std::int64_t> label(0, 9);
  state->labels = Indices::from_shape({k_fashion_batch});
  for (std::int64_t& t : state->labels) t = label(engine);
  return state;
}

}  // namespace

Runner xtgrad_rowwise(RowOp op, Pass pass, RowShape shape) {
  auto state = std::make_shared<RowwiseState>();
  state->op = op;
  state->pass = pass;
  const Shape xs{shape.rows, shape.cols};
  state->x = Parameter<float>("x", uniform(xs, k_seed + 8, 4.0f));
  state->weight = Parameter<float>("weight", uniform({shape.cols}, k_seed + 9));
  state->bias = Parameter<float>("bias", uniform({shape.cols}, k_seed + 10));
  state->dy = uniform(xs, k_seed + 11);
  state->target = Indices::from_shape({shape.rows});
  std::mt19937 engine(k_seed + 12);
  std::uniform_int_distribution<std::int64_t> classes(0, static_cast<std::int64_t>(shape.cols) - 1);
  for (std::int64_t& t : state->target) t = classes(engine);
  return [state] { state->run(); };
}

Runner xtgrad_ffn(Family family, Pass pass, FfnShape shape) {
  auto state = std::make_shared<FfnState>();
  state->pass = pass;
  Generator generator(k_seed);
  switch (family) {
    case Family::relu:
      state->two_layer =
          std::make_unique<PositionwiseFFN<float>>(shape.d_model, shape.d_hidden, generator);
      break;
    case Family::gelu:
      state->two_layer = std::make_unique<FeedForward<float>>(shape.d_model, shape.d_hidden,
                                                              Activation::gelu, generator);
      break;
    case Family::swiglu:
      state->gated =
          std::make_unique<GatedFFN<float>>(shape.d_model, shape.d_hidden, shape.d_model,
                                            Activation::silu, GatedBias::none(), generator);
      break;
  }
  state->x = uniform({shape.tokens, shape.d_model}, k_seed + 1);
  state->dy = uniform({shape.tokens, shape.d_model}, k_seed + 2);
  return [state] { state->run(); };
}

Runner xtgrad_toy_step() {
  Generator generator(k_seed);
  auto state = std::make_shared<ToyState>(generator);
  return [state] { state->run(); };
}

Runner xtgrad_activation(Activation activation, Pass pass, std::size_t n) {
  auto state = std::make_shared<ActivationState>();
  state->activation = activation;
  state->pass = pass;
  // Inputs in [-6, 6]: every branch of the kernels (GELU's erf/erfc regions) is taken.
  state->x = Parameter<float>("x", uniform({n}, k_seed + 3, 6.0f));
  state->dy = uniform({n}, k_seed + 4);
  state->dx = xt::zeros<float>({n});
  return [state] { state->run(); };
}

Runner xtgrad_matmul(Pass pass, MatmulShape shape) {
  auto state = std::make_shared<MatmulState>();
  state->pass = pass;
  state->a = Parameter<float>("a", uniform({shape.batch, shape.m, shape.k}, k_seed + 5));
  state->b = Parameter<float>("b", uniform({shape.batch, shape.k, shape.n}, k_seed + 6));
  state->dy = uniform({shape.batch, shape.m, shape.n}, k_seed + 7);
  return [state] { state->run(); };
}

}  // namespace xtgrad::bench
