// The mixture-of-experts op and layer (engine/ops/moe.hpp, modules/moe.hpp)
// against Hugging Face's Mixtral and Qwen2-MoE blocks rewritten in plain
// torch (tests/support/fixtures/make_moe.py): values, both auxiliary losses
// and every gradient; torch.topk's tie rule; gradcheck; bad input.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/moe.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/moe_fixtures.hpp"
#include "support/module_gradcheck.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::moe;

namespace {

// A block's fixture: the arrays of one case of make_moe.py.
struct Case {
  const std::size_t* x_shape;
  std::size_t x_rank;
  const double *x, *dy, *y, *dx, *values, *grads;
  double load_balancing_loss, z_loss, lb_scale, z_scale;
  const char* const* names;
  const std::size_t (*shapes)[2];
  std::size_t params;
  const std::size_t* kept;
};

#define XTGRAD_MOE_CASE(name)                                                                     \
  Case {                                                                                          \
    fx::name##_x_shape, std::size(fx::name##_x_shape), fx::name##_x, fx::name##_dy, fx::name##_y, \
        fx::name##_dx, fx::name##_values, fx::name##_grads, fx::name##_load_balancing_loss,       \
        fx::name##_z_loss, fx::name##_lb_scale, fx::name##_z_scale, fx::name##_names,             \
        fx::name##_shapes, std::size(fx::name##_names), fx::name##_kept                           \
  }

template <class T>
SparseMoe<T> mixtral_block() {
  SparseMoeOptions o;
  o.num_experts = fx::mixtral_e;
  o.top_k = fx::mixtral_k;
  return SparseMoe<T>(fx::mixtral_c, fx::mixtral_h, o);
}

template <class T>
SparseMoe<T> qwen_block() {
  SparseMoeOptions o;
  o.num_experts = fx::qwen_e;
  o.top_k = fx::qwen_k;
  o.norm_topk_prob = false;
  o.activation = Activation::gelu;
  o.capacity_factor = fx::qwen_capacity_factor;
  o.shared_expert_intermediate_size = fx::qwen_shared;
  o.expert_names = ExpertNames::llama;
  return SparseMoe<T>(fx::qwen_c, fx::qwen_h, o);
}

// The fixture's parameters as a state dict, by Hugging Face's names.
template <class T>
TensorDict<T> state_of(const Case& c, std::size_t skip = std::size_t(-1)) {
  TensorDict<T> dict;
  const double* at = c.values;
  for (std::size_t i = 0; i < c.params; ++i) {
    const std::vector<std::size_t> shape{c.shapes[i][0], c.shapes[i][1]};
    if (i != skip) dict.insert(c.names[i], from_fixture<T>(at, shape));
    at += shape[0] * shape[1];
  }
  return dict;
}

// Loads the case, runs loss = sum(y * dy) + lb_scale lb + z_scale z, and
// compares everything with PyTorch's.
template <class T>
void check_block(SparseMoe<T> block, const Case& c) {
  const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const double atol = std::is_same_v<T, float> ? 1e-5 : 1e-14;
  block.load_state_dict(state_of<T>(c));
  const std::vector<std::size_t> shape(c.x_shape, c.x_shape + c.x_rank);
  Tape<T> tape;
  const Var<T> x = tape.leaf(from_fixture<T>(c.x, shape));
  const MoeOutput<T> out = block.forward_with_losses(x);
  const Var<T> loss = add(add(sum(mul(out.y, tape.leaf(from_fixture<T>(c.dy, shape), false))),
                              scale(out.load_balancing_loss, static_cast<T>(c.lb_scale))),
                          scale(out.z_loss, static_cast<T>(c.z_scale)));
  tape.backward(loss);
  check_close(out.y.value(), from_fixture<double>(c.y, shape), rtol, atol);
  CHECK(double(out.load_balancing_loss.value()()) ==
        doctest::Approx(c.load_balancing_loss).epsilon(rtol));
  CHECK(double(out.z_loss.value()()) == doctest::Approx(c.z_loss).epsilon(rtol));
  check_close(x.grad(), from_fixture<double>(c.dx, shape), rtol, atol);
  const auto named = block.named_parameters();
  REQUIRE(named.size() == c.params);
  const double* g = c.grads;
  for (std::size_t i = 0; i < c.params; ++i) {
    INFO(c.names[i]);
    CHECK(named[i].first == c.names[i]);  // Hugging Face's names, in its order
    const std::vector<std::size_t> ps{c.shapes[i][0], c.shapes[i][1]};
    check_close(named[i].second->grad, from_fixture<double>(g, ps), rtol, atol);
    g += ps[0] * ps[1];
  }
  const std::vector<std::size_t> kept(c.kept, c.kept + block.experts.size());
  CHECK(out.stats.kept == kept);
  CHECK(block.router_stats().kept == kept);
  // inference: the same y on a private tape
  check_close(block.infer(from_fixture<T>(c.x, shape)), from_fixture<double>(c.y, shape), rtol,
              atol);
}

// Throws std::invalid_argument whose message holds every part, and records nothing.
template <class T, class F>
void check_refused(const Tape<T>& tape, F&& call, const std::vector<std::string>& parts) {
  const std::size_t before = tape.size();
  try {
    call();
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    for (const std::string& part : parts) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  }
  CHECK(tape.size() == before);
}

}  // namespace

TEST_CASE_TEMPLATE("SparseMoe: Mixtral's block, values, losses and every gradient as PyTorch's", T,
                   float, double) {
  check_block(mixtral_block<T>(), XTGRAD_MOE_CASE(mixtral));
}

TEST_CASE_TEMPLATE(
    "SparseMoe: Qwen2-MoE's block (shared expert, no renormalization, GELU, tokens dropped)", T,
    float, double) {
  check_block(qwen_block<T>(), XTGRAD_MOE_CASE(qwen));
  std::size_t kept = 0;
  for (std::size_t e = 0; e < fx::qwen_e; ++e) kept += fx::qwen_kept[e];
  CHECK(kept < std::size(fx::qwen_selected));  // the case drops tokens
}

TEST_CASE("moe_route: ties go as torch.topk's on the CPU, not lowest index first") {
  const auto top = [](const auto& probs, std::size_t rows, std::size_t e, std::size_t k) {
    return moe_route(from_fixture<double>(probs, {rows, e}), k).expert;
  };
  using V = std::vector<std::size_t>;
  CHECK(top(fx::tie8, 3, 8, 2) == V(std::begin(fx::tie8_top2), std::end(fx::tie8_top2)));
  CHECK(top(fx::tie8, 3, 8, 3) == V(std::begin(fx::tie8_top3), std::end(fx::tie8_top3)));
  CHECK(top(fx::tie64, 2, 64, 1) == V(std::begin(fx::tie64_top1), std::end(fx::tie64_top1)));
  CHECK(top(fx::tie64, 2, 64, 2) == V(std::begin(fx::tie64_top2), std::end(fx::tie64_top2)));
  // the counting sort: expert by expert, token order within one; capacity 2 drops the third
  const MoeRouting r = moe_route(xt::xarray<double>{{0.7, 0.3}, {0.6, 0.4}, {0.9, 0.1}}, 1, 1.0);
  CHECK(r.capacity == 2);
  CHECK(r.routed == V{3, 0});
  CHECK(r.counts == V{2, 0});
  CHECK(r.source == V{0, 1});
  CHECK(r.row_of == V{0, 1, MoeRouting::k_dropped});
  CHECK(r.dropped() == 1);
}

TEST_CASE("moe_experts: gradcheck of x, the weights and every expert weight") {
  // A fixed routing (k = 2 of 3 experts, capacity 3 of 8 choices each drops some).
  const xt::xarray<double> probs = random_array({4, 3}, 11, 0.0, 1.0);
  const MoeRouting routing = moe_route(probs, 2, 0.75);
  REQUIRE(routing.dropped() > 0);
  std::vector<xt::xarray<double>> inputs{random_array({4, 3}, 1), random_array({4, 2}, 2)};
  for (std::size_t e = 0; e < 3; ++e) {
    inputs.push_back(random_array({2, 3}, 10 + std::uint32_t(e)));  // w1 [H, C]
    inputs.push_back(random_array({2, 3}, 20 + std::uint32_t(e)));  // w3 [H, C]
    inputs.push_back(random_array({3, 2}, 30 + std::uint32_t(e)));  // w2 [C, H]
  }
  check_gradients(
      [&](const std::vector<Var<double>>& v) {
        std::vector<Var<double>> w1, w3, w2;
        for (std::size_t e = 0; e < 3; ++e) {
          w1.push_back(v[2 + 3 * e]);
          w3.push_back(v[3 + 3 * e]);
          w2.push_back(v[4 + 3 * e]);
        }
        return moe_experts(v[0], v[1], routing, w1, w3, w2, Activation::silu);
      },
      inputs);
}

TEST_CASE("SparseMoe: gradcheck of the input and every parameter, away from top-k ties") {
  SparseMoeOptions o;
  o.num_experts = 3;
  o.top_k = 2;
  o.capacity_factor = 0.9;
  o.shared_expert_intermediate_size = 2;
  SparseMoe<double> block(3, 2, o);
  check_module_gradients(block, random_array({5, 3}, 7));
}

// A MoeExchange of one process: every collective is a copy. (The ranks of
// MPI: tests/distributed/test_expert_parallel.cpp.)
struct OneRank final : MoeExchange {
  std::size_t rank() const override { return 0; }
  std::size_t size() const override { return 1; }
  std::vector<std::uint64_t> all_gather(const std::vector<std::uint64_t>& v) const override {
    return v;
  }
  std::vector<std::uint64_t> all_to_all(const std::vector<std::uint64_t>& v,
                                        std::size_t) const override {
    return v;
  }
  void all_to_all_v(const float* s, const std::vector<std::size_t>& n, float* r,
                    const std::vector<std::size_t>&) const override {
    std::copy(s, s + n[0], r);
  }
  void all_to_all_v(const double* s, const std::vector<std::size_t>& n, double* r,
                    const std::vector<std::size_t>&) const override {
    std::copy(s, s + n[0], r);
  }
};

TEST_CASE("SparseMoe: experts sharded over one rank compute as unsharded - gradcheck of the op") {
  SparseMoeOptions o;
  o.num_experts = 3;
  o.top_k = 2;
  o.capacity_factor = 0.9;
  SparseMoe<double> plain(3, 2, o), sharded(3, 2, o);
  const auto exchange = std::make_shared<OneRank>();
  sharded.shard_experts(exchange);
  CHECK(sharded.experts_sharded());
  CHECK(sharded.expert_parameters().size() == 9);
  CHECK_THROWS_AS(sharded.shard_experts(exchange), std::logic_error);
  Tape<double> tape;
  const xt::xarray<double> x = random_array({5, 3}, 7);
  const MoeOutput<double> a = plain.forward_with_losses(tape.leaf(x, false));
  const MoeOutput<double> b = sharded.forward_with_losses(tape.leaf(x, false));
  CHECK(std::string(tape.node_op(b.y.index())) == k_moe_experts_all_to_all);
  CHECK(xt::all(xt::equal(a.y.value(), b.y.value())));
  CHECK(a.load_balancing_loss.value()() == doctest::Approx(b.load_balancing_loss.value()()));
  CHECK(a.z_loss.value()() == doctest::Approx(b.z_loss.value()()));
  CHECK(a.stats.kept == b.stats.kept);
  tape.backward(add(sum(mul(a.y, a.y)), sum(mul(b.y, b.y))));
  const auto pa = plain.parameters(), pb = sharded.parameters();
  for (std::size_t k = 0; k < pa.size(); ++k) CHECK(xt::all(xt::equal(pa[k]->grad, pb[k]->grad)));

  const xt::xarray<double> probs = random_array({4, 3}, 11, 0.0, 1.0);
  const MoeRouting routing = moe_route(probs, 2, 0.75, *exchange);
  REQUIRE(routing.dropped() > 0);
  std::vector<xt::xarray<double>> inputs{random_array({4, 3}, 1), random_array({4, 2}, 2)};
  for (std::size_t e = 0; e < 3; ++e) {
    inputs.push_back(random_array({2, 3}, 10 + std::uint32_t(e)));
    inputs.push_back(random_array({2, 3}, 20 + std::uint32_t(e)));
    inputs.push_back(random_array({3, 2}, 30 + std::uint32_t(e)));
  }
  const auto op = [&](const std::vector<Var<double>>& v, std::shared_ptr<const MoeExchange> with) {
    std::vector<Var<double>> w1, w3, w2;
    for (std::size_t e = 0; e < 3; ++e) {
      w1.push_back(v[2 + 3 * e]);
      w3.push_back(v[3 + 3 * e]);
      w2.push_back(v[4 + 3 * e]);
    }
    return moe_experts(v[0], v[1], routing, w1, w3, w2, Activation::silu, with);
  };
  check_gradients([&](const std::vector<Var<double>>& v) { return op(v, exchange); }, inputs);
  Tape<double> t2;
  std::vector<Var<double>> v;
  for (const auto& in : inputs) v.push_back(t2.leaf(in));
  CHECK(message_of([&] { op(v, nullptr); }).find("'exchange' is null") != std::string::npos);
}

TEST_CASE("SparseMoe: zero tokens - create_graph refuses the experts op") {
  SparseMoe<double> block = mixtral_block<double>();
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>::from_shape({0, fx::mixtral_c}));
  const Var<double> y = block(x);
  CHECK(y.shape() == Shape{0, fx::mixtral_c});
  tape.backward(sum(y));
  CHECK(x.grad().size() == 0);
  CHECK(xt::all(xt::equal(block.experts[0].down.weight.grad, 0.0)));
  // the experts op has no differentiable backward
  const Var<double> x1 = tape.leaf(random_array({2, fx::mixtral_c}, 3));
  try {
    tape.backward(sum(block(x1)), create_graph);
    FAIL("expected std::logic_error");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("not twice differentiable: moe_experts") != std::string::npos);
  }
}

TEST_CASE("SparseMoe, moe_route, moe_experts: bad input names the argument, changes nothing") {
  const auto ctor = [](std::size_t e, std::size_t k, std::optional<double> cf) {
    SparseMoeOptions o;
    o.num_experts = e;
    o.top_k = k;
    o.capacity_factor = cf;
    return [o] { SparseMoe<double>(4, 3, o); };
  };
  Tape<double> tape;
  check_refused(tape, ctor(2, 3, {}), {"SparseMoe", "'top_k' is 3", "num_experts = 2"});
  check_refused(tape, ctor(2, 0, {}), {"SparseMoe", "'top_k' is 0"});
  check_refused(tape, ctor(0, 1, {}), {"SparseMoe", "'num_experts' is 0"});
  check_refused(tape, ctor(2, 1, 0.0), {"SparseMoe", "'capacity_factor' is 0"});
  check_refused(tape, ctor(2, 1, -1.5), {"SparseMoe", "'capacity_factor' is -1.5"});
  const xt::xarray<double> p = random_array({3, 2}, 3, 0.0, 1.0);
  check_refused(tape, [&] { moe_route(p, 3); }, {"moe_route", "'k' is 3", "<= 2"});
  check_refused(tape, [&] { moe_route(p, 0); }, {"moe_route", "'k' is 0"});
  check_refused(tape,
                [&] {
                  moe_route(xt::xarray<double>::from_shape({3, 0}), 1);
                },
                {"moe_route", "'probs'", "0 experts"});
  check_refused(tape, [&] { moe_route(p, 1, 0.0); }, {"moe_route", "'capacity_factor' is 0"});

  // Widths that no longer fit: the router, then one expert.
  SparseMoe<double> block = mixtral_block<double>();
  const Var<double> x = tape.leaf(random_array({3, fx::mixtral_c}, 4));
  const TensorDict<double> before = block.state_dict();
  block.gate.weight.value = random_array({fx::mixtral_e, fx::mixtral_c + 1}, 5);
  check_refused(tape, [&] { block(x); }, {"SparseMoe", "'gate.weight'", "[4, 7]", "[4, 6]"});
  block.gate.weight.value = before.at("gate.weight");
  block.experts[2].down.weight.value = random_array({fx::mixtral_c, fx::mixtral_h + 1}, 6);
  check_refused(tape, [&] { block(x); },
                {"SparseMoe", "'experts.2.w2.weight'", "[6, 6]", "[6, 5]"});
  block.experts[2].down.weight.value = before.at("experts.2.w2.weight");
  const Var<double> x5 = tape.leaf(random_array({3, 5}, 7));
  check_refused(tape, [&] { block(x5); }, {"SparseMoe", "'x'", "[3, 5]"});

  // moe_experts: mismatched lists and widths, a routing for other tokens.
  const MoeRouting routing = moe_route(random_array({3, 2}, 8, 0.0, 1.0), 1);
  const Var<double> xs = tape.leaf(random_array({3, 4}, 9));
  const Var<double> w = tape.leaf(random_array({3, 1}, 10));
  const Var<double> a = tape.leaf(random_array({5, 4}, 11)),
                    b = tape.leaf(random_array({4, 5}, 12));
  const Var<double> narrow = tape.leaf(random_array({5, 3}, 13));
  check_refused(tape,
                [&] {
                  moe_experts(xs, w, routing, {a, a}, {a}, {b, b});
                },
                {"moe_experts", "'w3'", "has 1 weights, expected 2"});
  check_refused(tape,
                [&] {
                  moe_experts(xs, w, routing, {a, a}, {a, narrow}, {b, b});
                },
                {"moe_experts", "'w3[1]'", "[5, 3]", "[5, 4]"});
  check_refused(tape,
                [&] {
                  moe_experts(xs, w, routing, {a, a, a}, {a, a, a}, {b, b, b});
                },
                {"moe_experts", "'routing'", "2 experts", "expected 3 tokens"});

  MoeRouting broken = routing;
  broken.source.assign(broken.source.size(), 0);
  check_refused(tape,
                [&] {
                  moe_experts(xs, w, broken, {a, a}, {a, a}, {b, b});
                },
                {"moe_experts", "'routing'", "inconsistently"});

  // A state dict missing an expert's weight: refused whole, nothing loaded.
  SparseMoe<double> other = mixtral_block<double>();
  const TensorDict<double> kept = other.state_dict();
  check_refused(tape, [&] { other.load_state_dict(state_of<double>(XTGRAD_MOE_CASE(mixtral), 4)); },
                {"Missing key(s)", "experts.1.w1.weight"});
  for (const auto& [name, value] : other.state_dict()) CHECK(value == kept.at(name));
}
