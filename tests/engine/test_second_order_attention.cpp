// Second derivatives of the fused attention (scaled_dot_product_attention and
// packed_qkv_attention, their GradRules): gradgradcheck in double, causal and
// with boolean and additive masks, GQA, dropout and a row that sees no key;
// the create_graph gradient against the fused backward's; and a gradient
// penalty through a causal self-attention layer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Inputs = std::vector<Var<double>>;
using Sdpa = std::function<Var<double>(const Var<double>&, const Var<double>&, const Var<double>&)>;

// One configuration of scaled_dot_product_attention over q [1, 2, 3, 2] and
// k, v [1, kv_heads, 4, 2].
struct Case {
  const char* name;
  std::size_t kv_heads;
  Sdpa op;
};

xt::xarray<bool> keep_mask() {  // [3, 4]; query 2 sees no key
  return {{true, false, true, true}, {false, true, true, false}, {false, false, false, false}};
}

xt::xarray<double> additive_mask() {  // [2, 1, 4]: per head and key, -inf blocks
  constexpr double minus_inf = -std::numeric_limits<double>::infinity();
  return {{{0.5, minus_inf, -1.0, 0.25}}, {{minus_inf, 0.0, 2.0, -0.5}}};
}

std::vector<Case> cases() {
  const DropoutKey key{5, 2, 0};
  return {
      {"causal", 2,
       [](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, {}, true); }},
      {"boolean mask, a row without keys", 2,
       [](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, keep_mask()); }},
      {"additive mask and causal, scale 0.7", 2,
       [](auto q, auto k, auto v) {
         return scaled_dot_product_attention(q, k, v, additive_mask(), true, 0.0, 0.7);
       }},
      {"GQA, causal", 1,
       [](auto q, auto k, auto v) {
         return scaled_dot_product_attention(q, k, v, {}, true, 0.0, std::nullopt, {}, true);
       }},
      {"GQA, boolean mask", 1,
       [](auto q, auto k, auto v) {
         return scaled_dot_product_attention(q, k, v, keep_mask(), false, 0.0, std::nullopt, {},
                                             true);
       }},
      {"dropout 0.3, causal", 2,
       [key](auto q, auto k, auto v) {
         return scaled_dot_product_attention(q, k, v, {}, true, 0.3, std::nullopt, key);
       }},
  };
}

std::vector<xt::xarray<double>> case_inputs(std::size_t kv_heads, std::uint32_t seed) {
  return {random_array({1, 2, 3, 2}, seed), random_array({1, kv_heads, 4, 2}, seed + 1),
          random_array({1, kv_heads, 4, 2}, seed + 2), random_array({1, 2, 3, 2}, seed + 3)};
}

// The gradients of sum(op(q, k, v) * w) for q, k, v (w: a fixed weight, so
// that dy is not all ones), by a plain or a create_graph backward.
std::vector<xt::xarray<double>> gradients(const std::vector<xt::xarray<double>>& in,
                                          const std::function<Var<double>(const Inputs&)>& f,
                                          bool create_graph) {
  Tape<double> tape;
  Inputs vars;
  for (std::size_t i = 0; i + 1 < in.size(); ++i) vars.push_back(tape.leaf(in[i]));
  const Var<double> w = tape.leaf(in.back(), false);
  GradOptions<double> options;
  options.create_graph = create_graph;
  const std::vector<GradInput<double>> wrt(vars.begin(), vars.end());
  std::vector<xt::xarray<double>> out;
  for (const Var<double>& g : grad(tape, {sum(mul(f(vars), w))}, wrt, options))
    out.push_back(g.value());
  return out;
}

void check_equal_gradients(const std::vector<xt::xarray<double>>& in,
                           const std::function<Var<double>(const Inputs&)>& f) {
  const std::vector<xt::xarray<double>> fused = gradients(in, f, false);
  const std::vector<xt::xarray<double>> composed = gradients(in, f, true);
  REQUIRE(fused.size() == composed.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fused[i].shape() == composed[i].shape());
    const double gap = xt::amax(xt::abs(fused[i] - composed[i]))();
    CHECK(gap <= 1e-12);
    CHECK(std::all_of(fused[i].begin(), fused[i].end(), [](double x) { return std::isfinite(x); }));
  }
}

}  // namespace

TEST_CASE("second order attention: gradgradcheck, masks, GQA and dropout") {
  std::uint32_t seed = 10;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const Sdpa op = c.op;
    // times a weight input: the first derivative then depends on dy as well
    const auto f = [op](const Inputs& in) { return mul(op(in[0], in[1], in[2]), in[3]); };
    const GradcheckResult result = gradgradcheck(f, case_inputs(c.kv_heads, seed));
    INFO(result.report());
    CHECK(result.passed);
    seed += 4;
  }
  // one Var as q, k and v (self-attention gets three shares)
  const GradcheckResult self = gradgradcheck(
      [](const Inputs& in) {
        return mul(scaled_dot_product_attention(in[0], in[0], in[0], {}, true), in[1]);
      },
      {random_array({2, 3, 2}, 40), random_array({2, 3, 2}, 41)});
  INFO(self.report());
  CHECK(self.passed);
}

TEST_CASE("second order attention: packed_qkv_attention, causal and with a mask") {
  const GradcheckResult causal = gradgradcheck(
      [](const Inputs& in) { return mul(packed_qkv_attention(in[0], 2, {}, true), in[1]); },
      {random_array({2, 3, 12}, 50), random_array({2, 3, 4}, 51)});
  INFO(causal.report());
  CHECK(causal.passed);
  const GradcheckResult masked = gradgradcheck(
      [](const Inputs& in) {
        const xt::xarray<bool> keep = {
            {true, false, true}, {true, true, false}, {false, true, true}};
        return mul(packed_qkv_attention(in[0], 2, keep), in[1]);
      },
      {random_array({3, 12}, 52), random_array({3, 4}, 53)});
  INFO(masked.report());
  CHECK(masked.passed);
}

TEST_CASE("second order attention: the create_graph gradient is the fused backward's") {
  std::uint32_t seed = 60;
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const Sdpa op = c.op;
    check_equal_gradients(case_inputs(c.kv_heads, seed),
                          [op](const Inputs& in) { return op(in[0], in[1], in[2]); });
    seed += 4;
  }
  check_equal_gradients(
      {random_array({2, 5, 12}, 80), random_array({2, 5, 4}, 81)}, [](const Inputs& in) {
        return packed_qkv_attention(in[0], 2, {}, true, 0.2, std::nullopt, DropoutKey{3, 1, 0});
      });
}

TEST_CASE("second order attention: a gradient penalty through causal self-attention") {
  CausalSelfAttentionOptions options;
  options.n_heads = 2;
  Generator generator(7);
  CausalSelfAttention<double> layer(4, options, generator);
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({2, 3, 4}, 90));
  const Var<double> y = layer.forward(x);
  GradOptions<double> options_graph;
  options_graph.create_graph = true;
  const Var<double> dx = grad(tape, {sum(mul(y, y))}, {x}, options_graph)[0];
  tape.backward(sum(mul(dx, dx)));  // || d loss / dx ||^2, differentiated again
  std::size_t with_grad = 0;
  for (Parameter<double>* p : layer.parameters()) {
    REQUIRE(p->has_grad);
    CHECK(std::all_of(p->grad.begin(), p->grad.end(), [](double g) { return std::isfinite(g); }));
    with_grad += xt::amax(xt::abs(p->grad))() > 0.0 ? 1 : 0;
  }
  CHECK(with_grad == layer.parameters().size());
}
