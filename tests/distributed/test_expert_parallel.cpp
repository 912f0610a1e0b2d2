// Expert parallelism (distributed/expert_parallel.hpp), run by mpirun with 2
// and 4 ranks: a Linear, a SparseMoe and a Linear head on a fixed global
// batch, P ranks each on their slice against one process on all of it,
// computed in the same job. In double every value and gradient agrees to
// 1e-12 (the rows meet the same GEMMs in the same order; the expert
// gradients' 1/P is exact for P a power of two).
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/distributed.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "mpi_test.hpp"
#include "support/module_compare.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using testing::world;

namespace {

constexpr std::size_t k_batch = 16, k_in = 3, k_c = 4, k_h = 6;
constexpr double k_lb = 0.01, k_z = 0.001;  // the auxiliary losses' coefficients

struct Config {
  std::size_t experts, k;
  std::optional<double> capacity_factor;
  std::size_t shared = 0;  // shared expert's intermediate size
};

// x [.., 3] -> Linear -> SparseMoe -> Linear -> [.., 2]; mse + aux losses.
struct Net {
  Sequential<double> net;
  SparseMoe<double>* moe = nullptr;
  Tape<double> tape;
  xt::xarray<double> x, target;
  Var<double> y, loss;
  MoeStats stats;

  Net(const Config& c, bool slice) {
    Generator g(7);
    net.emplace_back<Linear<double>>(k_in, k_c, true, g);
    SparseMoeOptions o;
    o.num_experts = c.experts;
    o.top_k = c.k;
    o.capacity_factor = c.capacity_factor;
    o.shared_expert_intermediate_size = c.shared;
    moe = &net.emplace_back<SparseMoe<double>>(k_c, k_h, o, g);
    net.emplace_back<Linear<double>>(k_c, 2, true, g);
    const xt::xarray<double> gx = testing::random_array<double>({k_batch, k_in}, 31);
    const xt::xarray<double> gy = testing::random_array<double>({k_batch, 2}, 32);
    const std::size_t p = slice ? static_cast<std::size_t>(world().size()) : 1;
    const std::size_t rows = k_batch / p, first = slice ? rows * world().rank() : 0;
    x = xt::view(gx, xt::range(first, first + rows));
    target = xt::view(gy, xt::range(first, first + rows));
  }
  // The forward on this process's rows; returns the loss' value.
  void forward() {
    tape.clear();
    const MoeOutput<double> out = moe->forward_with_losses(net[0](tape.leaf(x, false)));
    y = net[2](out.y);
    loss = add(add(mse(y, tape.leaf(target, false)), scale(out.load_balancing_loss, k_lb)),
               scale(out.z_loss, k_z));
    stats = out.stats;
  }
};

// One process's model and this rank's, whose experts are sharded over the
// ranks and whose replicated parameters a synchronizer on its tape holds.
struct ShardedPair {
  Net one, ranks;
  distributed::GradientSynchronizer<double> sync;
  explicit ShardedPair(const Config& c)
      : one(c, false),
        ranks(c, true),
        sync((distributed::shard_experts(world(), ranks.net), world()), ranks.net,
             distributed::SynchronizerOptions().first_bucket(16).bucket(32)) {
    sync.attach(ranks.tape);
  }
};

std::map<std::string, Parameter<double>*> by_name(Module<double>& m) {
  std::map<std::string, Parameter<double>*> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p;
  return out;
}

// Every parameter of `ranks` (this rank's) against the same name in `one`.
void check_parameters(Module<double>& ranks, Module<double>& one, bool grads) {
  auto reference = by_name(one);
  for (auto& [name, p] : ranks.named_parameters()) {
    const std::string n = name;
    INFO(n);
    REQUIRE(reference.count(n) == 1);
    if (grads)
      testing::check_close(p->grad, reference[n]->grad);
    else
      testing::check_close(p->value, reference[n]->value);
  }
}

}  // namespace

TEST_CASE("expert parallel: P ranks on a global batch equal one process (values, losses, grads)") {
  const std::size_t p = static_cast<std::size_t>(world().size());
  for (const std::size_t experts : {std::size_t(4), std::size_t(8)})
    for (const std::size_t k : {std::size_t(1), std::size_t(2)})
      for (const std::optional<double> cf : {std::optional<double>(), std::optional<double>(1.0)}) {
        const Config c{experts, k, cf, experts == 8 ? std::size_t(3) : 0};
        INFO("E = " << experts << ", k = " << k << ", capacity factor " << cf.value_or(0.0));
        ShardedPair pair(c);
        Net &one = pair.one, &ranks = pair.ranks;
        auto& sync = pair.sync;
        REQUIRE(ranks.moe->experts.size() == experts / p);
        CHECK(ranks.moe->first_expert() == world().rank() * (experts / p));
        CHECK(sync.parameters().size() ==
              ranks.net.parameters().size() - 3 * (experts / p));  // not the experts
        one.forward();
        ranks.forward();
        // values: this rank's rows of the output; the loss' mean over ranks
        const std::size_t rows = k_batch / p, first = rows * world().rank();
        testing::check_close(ranks.y.value(), xt::xarray<double>(xt::view(
                                                  one.y.value(), xt::range(first, first + rows))));
        const double mean = world().all_reduce_sum(ranks.loss.value()()) / double(p);
        CHECK(std::abs(mean - one.loss.value()()) <= 1e-12 * std::abs(one.loss.value()()));
        // the global batch's statistics on every rank
        CHECK(ranks.stats.routed == one.stats.routed);
        CHECK(ranks.stats.kept == one.stats.kept);
        CHECK(ranks.stats.tokens == one.stats.tokens);
        CHECK(ranks.stats.dropped == one.stats.dropped);
        if (cf && k == 2) CHECK(one.stats.dropped > 0);  // the capacity is in play
        // gradients after synchronization
        one.net.zero_grad();
        ranks.net.zero_grad();
        one.tape.backward(one.loss);
        ranks.tape.backward(ranks.loss);
        sync.finish();
        check_parameters(ranks.net, one.net, true);
        // no bucket went to the communication thread before the all-to-all's backward ran
        std::size_t moe_node = 0;
        while (std::strcmp(ranks.tape.node_op(moe_node), k_moe_experts_all_to_all) != 0) ++moe_node;
        for (const std::size_t left : sync.last_round().nodes_left_at_ready)
          CHECK(left <= moe_node);
        sync.detach();
      }
}

TEST_CASE("expert parallel: AdamW steps with ZeRO on the replicated parameters match one process") {
  const Config c{4, 2, 1.25, 3};
  ShardedPair pair(c);
  Net &one = pair.one, &ranks = pair.ranks;
  auto& sync = pair.sync;
  const auto options = optim::AdamWOptions(1e-2).weight_decay(0.1);
  optim::AdamW<double> one_opt(one.net.parameters(), options);
  distributed::ShardedOptimizer<double> zero(sync, options, distributed::ZeroOptions{2});
  optim::AdamW<double> experts_opt(
      distributed::parameters_of(distributed::expert_parameters(ranks.net)), options);
  for (int step = 0; step < 3; ++step) {
    one_opt.zero_grad();
    zero.zero_grad();
    experts_opt.zero_grad();
    one.forward();
    ranks.forward();
    one.tape.backward(one.loss);
    ranks.tape.backward(ranks.loss);
    one_opt.step();
    zero.step();  // finishes the synchronizer's round
    experts_opt.step();
  }
  check_parameters(ranks.net, one.net, false);
  sync.detach();
}

// One ShardedOptimizer over every parameter, the experts rank-local:
// clip_grad_norm counts each expert once (the one-process norm) and clips
// them too, and the steps (two groups) match one process's.
TEST_CASE("expert parallel: ZeRO with the experts rank-local clips and steps as one process") {
  const Config c{4, 2, 1.25, 3};
  ShardedPair pair(c);
  Net &one = pair.one, &ranks = pair.ranks;
  auto& sync = pair.sync;
  const auto options = optim::AdamWOptions(1e-2).weight_decay(0.1);
  const auto split = [&options](Module<double>& m) {  // the experts' w2 in a group of their own
    std::vector<optim::ParamGroup<double, optim::AdamWOptions>> g(2);
    for (auto& [name, p] : m.named_parameters())
      g[name.find(".w2.") != std::string::npos].params.push_back(p);
    g[0].options = options;
    g[1].options = optim::AdamWOptions(5e-3);
    return g;
  };
  optim::AdamW<double> one_opt(split(one.net));
  distributed::ShardedOptimizer<double> zero(sync, split(ranks.net),
                                             distributed::ZeroOptions{1, true});
  CHECK(zero.rank_local_count() == 3 * (4 / static_cast<std::size_t>(world().size())));
  for (int step = 0; step < 3; ++step) {
    one_opt.zero_grad();
    zero.zero_grad();
    one.forward();
    ranks.forward();
    one.tape.backward(one.loss);
    ranks.tape.backward(ranks.loss);
    const double max_norm = 0.05;  // below the norm: both clip
    const double expected = optim::clip_grad_norm(one.net.parameters(), max_norm);
    const double norm = zero.clip_grad_norm(max_norm);
    CHECK(expected > max_norm);
    CHECK(std::abs(norm - expected) <= 1e-12 * expected);
    one_opt.step();
    zero.step();
  }
  check_parameters(ranks.net, one.net, false);
  // A consolidated state cannot hold the experts: refused on every rank, the
  // state unchanged.
  const StateDict<double> before = zero.state_dict();
  CHECK_THROWS_WITH_AS(zero.consolidated_state_dict(),
                       doctest::Contains("ShardedOptimizer::consolidated_state_dict: rank 0 holds"),
                       std::logic_error);
  CHECK_THROWS_WITH_AS(zero.load_consolidated_state_dict(one_opt.state_dict()),
                       doctest::Contains("state with state_dict() and load_state_dict()"),
                       std::logic_error);
  const StateDict<double> after = zero.state_dict();
  CHECK(after.integers == before.integers);
  REQUIRE(after.arrays.size() == before.arrays.size());
  for (auto it = before.arrays.begin(); it != before.arrays.end(); ++it)
    CHECK(testing::bit_equal(it->second, after.arrays.at(it->first)));
  // Without rank_local, parameters outside the synchronizer are refused.
  CHECK_THROWS_WITH_AS(distributed::ShardedOptimizer<double>(sync, split(ranks.net)),
                       doctest::Contains("but the synchronizer holds"), std::invalid_argument);
  sync.detach();
}

// Per-rank checkpoints: the model's state dict (its experts under their
// global names), the ZeRO shard and the experts' optimizer; a run resumed
// from them continues bit for bit.
TEST_CASE("expert parallel: per-rank checkpoints resume bit for bit") {
  const Config c{4, 2, 1.25, 0};
  const auto options = optim::AdamWOptions(1e-2);
  struct Trainer {
    Net net;
    distributed::GradientSynchronizer<double> sync;
    distributed::ShardedOptimizer<double> zero;
    optim::AdamW<double> experts;
    Trainer(const Config& c, const optim::AdamWOptions& o)
        : net(c, true),
          sync((distributed::shard_experts(world(), net.net), world()), net.net),
          zero(sync, o, distributed::ZeroOptions{1}),
          experts(distributed::parameters_of(distributed::expert_parameters(net.net)), o) {
      sync.attach(net.tape);
    }
    ~Trainer() { sync.detach(); }
    void steps(int n) {
      for (int s = 0; s < n; ++s) {
        zero.zero_grad();
        experts.zero_grad();
        net.forward();
        net.tape.backward(net.loss);
        zero.step();
        experts.step();
      }
    }
  };
  Trainer a(c, options);
  a.steps(2);
  const TensorDict<double> model = a.net.net.state_dict();
  const StateDict<double> zero = a.zero.state_dict(), experts = a.experts.state_dict();
  // this rank's experts, and only those, under their global names
  const std::size_t first = a.net.moe->first_expert(), local = a.net.moe->experts.size();
  for (std::size_t e = 0; e < c.experts; ++e)
    CHECK(model.contains("1.experts." + std::to_string(e) + ".w1.weight") ==
          (e >= first && e < first + local));
  a.steps(2);
  Trainer b(c, options);
  b.net.net.load_state_dict(model);
  b.zero.load_state_dict(zero);
  b.experts.load_state_dict(experts);
  b.steps(2);
  CHECK(testing::parameters_bit_equal(b.net.net, a.net.net));
}

TEST_CASE("expert parallel: errors on every rank") {
  const int p = world().size();
  SUBCASE("num_experts not a multiple of the ranks") {
    Net net({static_cast<std::size_t>(p) + 1, 1, {}}, true);
    const std::string message =
        testing::message_of([&] { distributed::shard_experts(world(), net.net); });
    CHECK(message.find("num_experts = " + std::to_string(p + 1) + ", expected a multiple of the " +
                       std::to_string(p) + " ranks") != std::string::npos);
    CHECK_FALSE(net.moe->experts_sharded());
  }
  SUBCASE("options that differ across ranks") {
    Net net({4, world().rank() == 1 ? std::size_t(2) : std::size_t(1), {}}, true);
    CHECK_THROWS_AS(distributed::shard_experts(world(), net.net), std::invalid_argument);
    const std::string message =
        testing::message_of([&] { distributed::shard_experts(world(), net.net); });
    CHECK(message.find("the ranks hold different models: '1' SparseMoe(") != std::string::npos);
    CHECK(message.find("top_k=1") != std::string::npos);
    CHECK(message.find("top_k=2") != std::string::npos);
    CHECK_FALSE(net.moe->experts_sharded());
  }
  SUBCASE("sharding twice") {
    Net net({4, 1, {}}, true);
    distributed::shard_experts(world(), net.net);
    CHECK_THROWS_AS(distributed::shard_experts(world(), net.net), std::logic_error);
    CHECK_THROWS_AS(net.moe->shard_experts(nullptr), std::invalid_argument);
  }
}
