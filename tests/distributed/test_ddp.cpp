// Data-parallel training over MPI (distributed/), run by mpirun with 2 and 3
// ranks. The reference is ordinary one-process training on the whole batch,
// computed on every rank without any of distributed/.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/distributed.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "mpi_test.hpp"
#include "support/bit_equal.hpp"
#include "support/module_compare.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using distributed::GradientSynchronizer;
using distributed::SynchronizerOptions;
using testing::world;

namespace {

constexpr std::size_t k_batch = 48;  // global rows: a multiple of 2 and 3
constexpr int k_steps = 20;

enum class Model { toy_ffn, gated_ffn, dropout_block };
enum class Opt { sgd, adamw };

struct ModelSpec {
  std::size_t in, out;
};
ModelSpec spec(Model m) {
  switch (m) {
    case Model::toy_ffn:
      return {2, 2};
    case Model::gated_ffn:
      return {4, 3};
    default:
      return {6, 6};
  }
}
const char* model_name(Model m) {
  return m == Model::toy_ffn     ? "toy PositionwiseFFN"
         : m == Model::gated_ffn ? "GatedFFN"
                                 : "PreNormResidual with dropout";
}

template <class T>
std::unique_ptr<Module<T>> make_model(Model m, std::uint64_t seed) {
  Generator g(seed);
  switch (m) {
    case Model::toy_ffn:
      return std::make_unique<PositionwiseFFN<T>>(2, 16, g);
    case Model::gated_ffn:
      return std::make_unique<GatedFFN<T>>(4, 12, 3, Activation::silu, GatedBias::all(), g);
    default: {
      PreNormResidualOptions o;
      o.dropout = 0.2, o.ffn_dropout = 0.3;
      return std::make_unique<PreNormResidual<T>>(6, 16, o, g);
    }
  }
}

template <class T>
std::unique_ptr<optim::Optimizer<T>> make_optimizer(Opt o, Module<T>& model) {
  if (o == Opt::sgd)
    return std::make_unique<optim::SGD<T>>(model.parameters(),
                                           optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<optim::AdamW<T>>(model.parameters(), optim::AdamWOptions(1e-2));
}

// `steps` steps of mean-squared error on rows [first, first + rows) of (x, y),
// averaging the gradients through `sync` when given.
template <class T>
void train(Module<T>& model, Opt o, const xt::xarray<T>& x, const xt::xarray<T>& y,
           std::size_t first, std::size_t rows, GradientSynchronizer<T>* sync, int steps) {
  const auto opt = make_optimizer(o, model);
  const xt::xarray<T> xs = xt::view(x, xt::range(first, first + rows));
  const xt::xarray<T> ys = xt::view(y, xt::range(first, first + rows));
  if (sync) distributed::set_row_offset(model, first);
  Tape<T> tape;
  if (sync) sync->attach(tape);
  for (int s = 0; s < steps; ++s) {
    tape.clear();
    opt->zero_grad();
    const Var<T> loss = mse(model(tape.leaf(xs, false)), tape.leaf(ys, false));
    tape.backward(loss);
    if (sync) sync->finish();
    opt->step();
  }
  if (sync) sync->detach();
}

// Float: 20 steps of AdamW divide each gradient by its own running RMS, so
// a gradient's rounding (the shards' means summed in another order, about
// 2^-24 relative) reaches the parameters at lr * (a few ulp) per step; 2e-6
// relative to the largest element of each parameter is ~30 float ulps.
template <class T>
double bound() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}

template <class T>
void check_equivalence(Model m, Opt o) {
  const int P = world().size(), r = world().rank();
  const ModelSpec s = spec(m);
  const xt::xarray<T> x = testing::random_array<T>({k_batch, s.in}, 11);
  const xt::xarray<T> y = testing::random_array<T>({k_batch, s.out}, 12);
  const std::size_t rows = k_batch / static_cast<std::size_t>(P);

  const auto reference = make_model<T>(m, 7);  // one process, the whole batch
  train<T>(*reference, o, x, y, 0, k_batch, nullptr, k_steps);

  // Each rank starts from its own initialization, except for dropout seeds
  // (they come from the model's Generator, so the dropout model is built
  // from one seed on every rank); broadcast_parameters makes them rank 0's.
  const std::uint64_t seed =
      m == Model::dropout_block ? 7 : 7 + 1000 * static_cast<std::uint64_t>(r);
  const auto model = make_model<T>(m, seed);
  distributed::broadcast_parameters(world(), *model);
  GradientSynchronizer<T> sync(world(), *model, SynchronizerOptions().first_bucket(64).bucket(256));
  train<T>(*model, o, x, y, static_cast<std::size_t>(r) * rows, rows, &sync, k_steps);

  const double error = testing::parameters_relative_error(*model, *reference);
  if (r == 0)
    MESSAGE(P << " ranks, " << std::string(model_name(m)) << ", "
              << std::string(o == Opt::sgd ? "SGD" : "AdamW") << ", "
              << std::string(std::is_same_v<T, float> ? "float" : "double") << ": relative error "
              << error);
  CHECK(error <= bound<T>());
  CHECK(sync.buckets().size() > 1);  // several buckets are in play
}

}  // namespace

TEST_CASE_TEMPLATE("ddp: P ranks train like one process on the whole batch (SGD, AdamW)", T, double,
                   float) {
  for (const Model m : {Model::toy_ffn, Model::gated_ffn, Model::dropout_block})
    for (const Opt o : {Opt::sgd, Opt::adamw}) check_equivalence<T>(m, o);
}

TEST_CASE("ddp: ranks with different models get the same clear error, and no hang") {
  const int r = world().rank();
  Generator g(1);
  PositionwiseFFN<double> ffn(2, r == 1 ? 8 : 16, g);
  const std::string expected =
      "parameter 0 is 'w1.weight' [16, 2] double on rank 0 but 'w1.weight' [8, 2] double on rank 1";
  CHECK_THROWS_WITH_AS(distributed::broadcast_parameters(world(), ffn),
                       doctest::Contains(expected.c_str()), std::invalid_argument);
  CHECK_THROWS_WITH_AS(GradientSynchronizer<double>(world(), ffn),
                       doctest::Contains(expected.c_str()), std::invalid_argument);
  // A parameter more on the last rank: named by its position.
  Sequential<double> net;
  net.emplace_back<Linear<double>>(3, 3, true, g);
  if (r == world().size() - 1) net.emplace_back<Linear<double>>(3, 3, true, g);
  const std::string last = std::to_string(world().size() - 1);
  CHECK_THROWS_WITH_AS(distributed::broadcast_parameters(world(), net),
                       doctest::Contains(("parameter 2 is no parameter (it has 2) on rank 0 but "
                                          "'1.weight' [3, 3] double on rank " +
                                          last)
                                             .c_str()),
                       std::invalid_argument);
  // The same model everywhere passes; a bad root is refused on every rank.
  PositionwiseFFN<double> same(2, 16, g);
  CHECK_NOTHROW(distributed::broadcast_parameters(world(), same));
  CHECK_THROWS_WITH_AS(distributed::broadcast_parameters(world(), same, world().size()),
                       doctest::Contains("argument 'root'"), std::invalid_argument);
}

namespace {
// A model with a parameter its forward never reads.
struct WithUnused : Module<double> {
  explicit WithUnused(Generator& g) : used(3, 2, true, g), unused(3, 2, true, g) {}
  Var<double> forward(const Var<double>& x) override { return used(x); }
  void collect_parameters(const std::string& prefix, NamedParameters& out) override {
    add_child(prefix, "used", used, out), add_child(prefix, "unused", unused, out);
  }
  Linear<double> used, unused;
};
}  // namespace

TEST_CASE("ddp: an unused parameter never hangs a step - its gradient is zero on every rank") {
  const int P = world().size(), r = world().rank();
  const std::size_t rows = k_batch / static_cast<std::size_t>(P);
  const xt::xarray<double> x = testing::random_array<double>({k_batch, 3}, 21);
  const xt::xarray<double> y = testing::random_array<double>({k_batch, 2}, 22);
  Generator g0(3), g1(3);
  WithUnused model(g0), reference(g1);
  // One bucket per parameter: the unused ones are buckets of their own.
  GradientSynchronizer<double> sync(world(), model,
                                    SynchronizerOptions().first_bucket(1).bucket(1));
  optim::AdamW<double> opt(model.parameters(), optim::AdamWOptions(1e-2));
  optim::AdamW<double> ref_opt(reference.parameters(), optim::AdamWOptions(1e-2));
  const xt::xarray<double> xs = xt::view(x, xt::range(r * rows, (r + 1) * rows));
  const xt::xarray<double> ys = xt::view(y, xt::range(r * rows, (r + 1) * rows));
  Tape<double> tape, ref_tape;
  sync.attach(tape);
  for (int step = 0; step < 5; ++step) {
    tape.clear(), ref_tape.clear();
    opt.zero_grad(), ref_opt.zero_grad();
    tape.backward(mse(model(tape.leaf(xs, false)), tape.leaf(ys, false)));
    sync.finish();
    ref_tape.backward(mse(reference(ref_tape.leaf(x, false)), ref_tape.leaf(y, false)));
    CHECK_FALSE(model.unused.weight.has_grad);
    CHECK_FALSE(model.unused.bias.has_grad);
    CHECK(xt::all(xt::equal(model.unused.weight.grad, 0.0)));
    CHECK(xt::all(xt::equal(model.unused.bias.grad, 0.0)));
    CHECK(model.used.weight.has_grad);
    CHECK(xt::allclose(model.used.weight.grad, reference.used.weight.grad, 1e-12, 1e-14));
    opt.step(), ref_opt.step();
  }
  sync.detach();
  CHECK(testing::parameters_relative_error(model, reference) <= 1e-12);
  CHECK(testing::parameters_bit_equal(model.unused, reference.unused));  // never stepped in either
}

TEST_CASE("ddp: bucket 0's all-reduce is issued while the reverse pass still runs") {
  const int P = world().size(), r = world().rank();
  const std::size_t rows = 512;  // the first block's backward takes milliseconds
  const xt::xarray<float> x = testing::random_array<float>({rows * P, 128}, 31);
  const xt::xarray<float> xs = xt::view(x, xt::range(r * rows, (r + 1) * rows));
  Generator g(5), g2(5);
  Sequential<float> net, same;
  for (Sequential<float>* n : {&net, &same}) {
    Generator& gen = n == &net ? g : g2;
    n->emplace_back<GatedFFN<float>>(128, 1024, 128, Activation::silu, GatedBias::all(), gen);
    n->emplace_back<GatedFFN<float>>(128, 64, 128, Activation::silu, GatedBias::all(), gen);
  }
  // Every parameter its own bucket, in reverse order.
  GradientSynchronizer<float> sync(world(), net, SynchronizerOptions().first_bucket(1).bucket(1));
  GradientSynchronizer<float> after(
      world(), same, SynchronizerOptions().first_bucket(1).bucket(1).with_overlap(false));
  const std::size_t n = net.parameters().size();
  REQUIRE(sync.buckets().size() == n);
  for (std::size_t k = 0; k < n; ++k)
    CHECK(sync.buckets()[k] == std::vector<std::size_t>{n - 1 - k});

  bool started_during_walk = false;
  for (int step = 0; step < 5; ++step) {
    Tape<float> tape;
    sync.attach(tape);
    net.zero_grad();
    const Var<float> in = tape.leaf(xs, false);
    const Var<float> h = net[0](in);
    const std::size_t first_block_nodes = tape.size();  // x and the first block
    tape.backward(sum(net[1](h)));
    sync.finish();
    sync.detach();
    const distributed::RoundStats& stats = sync.last_round();
    // Bucket 0 (the second block's last parameter) was final, and handed to
    // the communication thread, before the first block's backward ran.
    CHECK(stats.nodes_left_at_ready[0] >= first_block_nodes);
    CHECK(stats.nodes_left_at_ready[0] < stats.walk_nodes);
    CHECK(stats.nodes_left_at_ready[n - 1] < first_block_nodes);
    started_during_walk = started_during_walk || stats.nodes_left_at_allreduce[0] > 0;

    Tape<float> tape2;
    after.attach(tape2);
    same.zero_grad();
    tape2.backward(sum(same(tape2.leaf(xs, false))));
    after.finish();
    after.detach();
    for (std::size_t k = 0; k < n; ++k) CHECK(after.last_round().nodes_left_at_ready[k] == 0);
    // The same sums in the same order: overlap changes no bit.
    const auto a = net.parameters(), b = same.parameters();
    for (std::size_t k = 0; k < n; ++k)
      CHECK(std::equal(a[k]->grad.begin(), a[k]->grad.end(), b[k]->grad.begin()));
  }
  if (r == 0)
    MESSAGE("bucket 0 all-reduce issued with nodes left: "
            << sync.last_round().nodes_left_at_allreduce[0] << " of "
            << sync.last_round().walk_nodes);
  CHECK(started_during_walk);
}

TEST_CASE("ddp: buckets of about 1 MiB first, then 25 MiB, in reverse parameter order") {
  Generator g(1);
  Sequential<float> net;  // weights of 512 x 512 floats = 1 MiB
  for (int k = 0; k < 3; ++k) net.emplace_back<Linear<float>>(512, 512, true, g);
  GradientSynchronizer<float> sync(world(), net);
  // bias 2 (2 KiB), weight 2 (1 MiB): the first bucket reaches 1 MiB and closes.
  CHECK(sync.buckets() == std::vector<std::vector<std::size_t>>{{5, 4}, {3, 2, 1, 0}});
}

TEST_CASE("ddp: a second backward before finish() is refused before it writes anything") {
  Generator g(2);
  PositionwiseFFN<double> ffn(2, 4, g);
  GradientSynchronizer<double> sync(world(), ffn);
  Tape<double> tape;
  sync.attach(tape);
  const Var<double> loss = sum(ffn(tape.leaf(testing::random_array<double>({3, 2}, 4), false)));
  tape.backward(loss);
  const xt::xarray<double> before = ffn.w1.weight.grad;
  CHECK_THROWS_WITH_AS(tape.backward(loss), doctest::Contains("before finish()"), std::logic_error);
  CHECK(xt::all(xt::equal(ffn.w1.weight.grad, before)));
  sync.finish();
  CHECK_NOTHROW(sync.finish());  // nothing in flight: nothing to do
  sync.detach();
  // A tape whose backward reaches none of the parameters leaves the synchronizer out.
  Tape<double> other;
  sync.attach(other);
  const Var<double> a = other.leaf(xt::xarray<double>{1.0, 2.0});
  other.backward(sum(a));
  CHECK_FALSE(sync.in_flight());
  sync.detach();
}

TEST_CASE("ddp: a recomputed model averages the plain gradients - buckets go out per block") {
  // The recompute records a reader of each Parameter its blocks use, so the
  // synchronizer takes each block's gradients as final right after that
  // block's re-run, never as unused.
  const int P = world().size(), r = world().rank();
  const std::size_t rows = 16;
  const xt::xarray<double> x = testing::random_array<double>({rows * P, 8}, 41);
  const xt::xarray<double> xs = xt::view(x, xt::range(r * rows, (r + 1) * rows));
  Generator g(9), g2(9);
  PreNormResidualOptions o;
  o.dropout = 0.2, o.ffn_dropout = 0.1;
  Sequential<double> net, plain;
  for (int k = 0; k < 3; ++k) {
    net.emplace_back<PreNormResidual<double>>(8, 16, o, g);
    plain.emplace_back<PreNormResidual<double>>(8, 16, o, g2);
  }
  net.set_recompute_every(1);
  distributed::set_row_offset(net, r * rows), distributed::set_row_offset(plain, r * rows);
  const auto one_bucket_each = SynchronizerOptions().first_bucket(1).bucket(1);
  GradientSynchronizer<double> sync(world(), net, one_bucket_each);
  GradientSynchronizer<double> sync_plain(world(), plain, one_bucket_each);
  const std::size_t n = net.parameters().size();
  for (int step = 0; step < 3; ++step) {
    Tape<double> tape, plain_tape;
    sync.attach(tape), sync_plain.attach(plain_tape);
    net.zero_grad(), plain.zero_grad();
    tape.backward(sum(square(net(tape.leaf(xs, false)))));
    plain_tape.backward(sum(square(plain(plain_tape.leaf(xs, false)))));
    sync.finish(), sync_plain.finish();
    sync.detach(), sync_plain.detach();
    std::size_t first_recompute = 0;
    while (std::string(tape.node_op(first_recompute)) != "recompute") ++first_recompute;
    const distributed::RoundStats& stats = sync.last_round();
    // The first block's Parameters are final at its recompute node, the last
    // block's earlier in the walk; none is taken as unused (final at once).
    CHECK(stats.nodes_left_at_ready[n - 1] == first_recompute);
    CHECK(stats.nodes_left_at_ready[0] > first_recompute);
    CHECK(stats.nodes_left_at_ready[0] < stats.walk_nodes);
    const auto a = net.parameters(), b = plain.parameters();
    for (std::size_t k = 0; k < n; ++k) {
      CHECK(a[k]->has_grad);
      CHECK(testing::bit_equal(a[k]->grad, b[k]->grad));
    }
  }
}
