// The xtgrad side of bench_attention's attention rows: the fused op
// scaled_dot_product_attention on q, k, v Parameters (recorded without a
// copy), backward from a fixed dO, one tape reused (clear() keeps its buffers).
#include <memory>
#include <random>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/ops/attention.hpp>

#include "attention_cases.hpp"

namespace xtgrad::bench {

namespace {

constexpr unsigned k_seed = 4096;

xt::xarray<float> uniform(const Shape& shape, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  xt::xarray<float> a = xt::xarray<float>::from_shape(shape);
  for (float& v : a) v = dist(engine);
  return a;
}

struct AttentionState {
  bool causal = false;
  Parameter<float> q, k, v;
  xt::xarray<float> d_out;
  Tape<float> tape;

  void run() {
    tape.clear();
    // What zero_grad leaves, without its fill: the backward writes every gradient.
    for (Parameter<float>* p : {&q, &k, &v}) p->has_grad = false;
    const Var<float> out =
        scaled_dot_product_attention(tape.param(q), tape.param(k), tape.param(v), {}, causal);
    tape.backward(out, d_out);
  }
};

}  // namespace

Runner xtgrad_attention(const AttentionShape& shape) {
  auto state = std::make_shared<AttentionState>();
  state->causal = shape.causal;
  const Shape size{shape.batch, shape.heads, shape.tokens, shape.head_dim};
  state->q = Parameter<float>("q", uniform(size, k_seed));
  state->k = Parameter<float>("k", uniform(size, k_seed + 1));
  state->v = Parameter<float>("v", uniform(size, k_seed + 2));
  state->d_out = uniform(size, k_seed + 3);
  return [state] { state->run(); };
}

}  // namespace xtgrad::bench
