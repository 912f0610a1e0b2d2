// ZeRO stages 1 and 2 (distributed/sharded_optimizer.hpp), run by mpirun
// with 2, 3 and 4 ranks. References: one process on the whole batch and
// today's data-parallel training, computed in the same job.
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <unistd.h>

#include <xtgrad/training/training_state.hpp>

#include "mpi_test.hpp"
#include "zero_training.hpp"

using namespace xtgrad;
using namespace xtgrad::testing::zero;
using testing::world;

namespace {

constexpr int k_steps = 50;

const char* dtype_name(bool is_float) {
  return is_float ? "float" : "double";
}

}  // namespace

TEST_CASE_TEMPLATE("zero: stages 1 and 2 train like one process and like data-parallel", T, double,
                   float) {
  Run<T> one(Mode::one_process, nullptr);
  Run<T> ddp(Mode::ddp, &world());
  Run<T> zero1(Mode::zero1, &world());
  Run<T> zero2(Mode::zero2, &world());
  int clipped = 0;
  for (int s = 0; s < k_steps; ++s) {
    const double norm = one.step();
    clipped += norm > k_max_norm;
    ddp.step();
    const double n1 = zero1.step(), n2 = zero2.step();
    CHECK(std::abs(n1 - norm) <= 1e-5 * norm);  // the global norm, not the shard's
    CHECK(n1 == n2);
  }
  CHECK(clipped > k_steps / 2);  // clipping is in play
  const double e1 = testing::parameters_relative_error(*zero1.model, *one.model);
  const double e2 = testing::parameters_relative_error(*zero2.model, *one.model);
  const double e_ddp = testing::parameters_relative_error(*zero1.model, *ddp.model);
  if (world().rank() == 0)
    MESSAGE(world().size() << " ranks, " << std::string(dtype_name(std::is_same_v<T, float>))
                           << ": stage 1 vs one process " << e1 << ", stage 2 " << e2
                           << ", stage 1 vs data-parallel " << e_ddp);
  CHECK(e1 <= bound<T>());
  CHECK(e2 <= bound<T>());
  CHECK(e_ddp <= bound<T>());
  CHECK(testing::parameters_bit_equal(*zero1.model,
                                      *zero2.model));  // stage 2 changes memory, not arithmetic
  CHECK(zero1.sync->buckets().size() > 2);

  // The optimizer state is split: each rank holds its share of the elements
  // (N / P, within one) of exp_avg, exp_avg_sq and, in group 1, max_exp_avg_sq.
  auto& z = zero1.sharded();
  const std::size_t N = 184, P = static_cast<std::size_t>(world().size());
  CHECK(z.shard_elements() >= N / P);
  CHECK(z.shard_elements() <= N / P + 1);
  const auto all = world().all_gather(z.shard_elements());
  std::size_t sum = 0;
  for (const auto n : all) sum += n;
  CHECK(sum == N);
  CHECK(z.state_bytes() < 3 * (N / P + 1) * sizeof(T));
  // Stage 2 keeps no full gradient in the Parameters after a backward.
  zero2.tape.clear();
  zero2.opt->zero_grad();
  zero2.tape.backward(
      mse((*zero2.model)(zero2.tape.leaf(zero2.x, false)), zero2.tape.leaf(zero2.y, false)));
  zero2.sync->finish();
  for (const Parameter<T>* p : zero2.model->parameters()) {
    CHECK(p->grad.size() == 0);
    CHECK_FALSE(p->has_grad);
  }
}

TEST_CASE("zero: SGD with Nesterov momentum and Adam with amsgrad, sharded, equal one process") {
  for (const int which : {0, 1}) {
    Generator g0(3), g1(3 + static_cast<std::uint64_t>(world().rank()));
    PositionwiseFFN<double> one(5, 9, g0), model(5, 9, g1);
    distributed::broadcast_parameters(world(), model);
    distributed::GradientSynchronizer<double> sync(
        world(), model, distributed::SynchronizerOptions().first_bucket(40).bucket(100));
    std::unique_ptr<optim::Optimizer<double>> ref, sharded;
    if (which == 0) {
      const auto o = optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3);
      ref = std::make_unique<optim::SGD<double>>(one.parameters(), o);
      sharded = std::make_unique<distributed::ShardedOptimizer<double>>(
          sync, o, distributed::ZeroOptions{2});
    } else {
      const auto o = optim::AdamOptions(1e-2).amsgrad(true).weight_decay(1e-2);
      ref = std::make_unique<optim::Adam<double>>(one.parameters(), o);
      sharded = std::make_unique<distributed::ShardedOptimizer<double>>(sync, o);
    }
    const xt::xarray<double> x = testing::random_array<double>({24, 5}, 31);
    const std::size_t rows = 24 / static_cast<std::size_t>(world().size());
    const xt::xarray<double> xs =
        xt::view(x, xt::range(rows * static_cast<std::size_t>(world().rank()),
                              rows * static_cast<std::size_t>(world().rank() + 1)));
    Tape<double> t1, t2;
    sync.attach(t2);
    for (int s = 0; s < 30; ++s) {
      t1.clear(), t2.clear(), ref->zero_grad(), sharded->zero_grad();
      t1.backward(mean(square(one(t1.leaf(x, false)))));
      t2.backward(mean(square(model(t2.leaf(xs, false)))));
      ref->step();
      sharded->step();
    }
    sync.detach();
    CHECK(testing::parameters_relative_error(model, one) <= 1e-12);
  }
}

TEST_CASE("zero: resuming from sharded checkpoints equals the uninterrupted run") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("xtgrad_zero_resume_" + std::to_string(::getpid()) + "_" + std::to_string(world().rank()));
  for (const Mode mode : {Mode::zero1, Mode::zero2}) {
    Run<double> straight(mode, &world());
    straight.steps(k_steps);

    Run<double> first(mode, &world());
    first.steps(25);
    save_training_state(dir, *first.model, *first.opt, first.schedule.get());
    // A fresh job: other initial values, nothing of the first run.
    Run<double> resumed(mode, &world());
    load_training_state(dir, *resumed.model, *resumed.opt, resumed.schedule.get());
    resumed.steps(k_steps - 25);
    CHECK(testing::parameters_bit_equal(*resumed.model, *straight.model));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("zero: the consolidated state is the one-process optimizer's, and loads back sharded") {
  // 25 sharded steps, consolidated on rank 0.
  Run<double> sharded(Mode::zero2, &world());
  sharded.steps(25);
  const StateDict<double> full = sharded.sharded().consolidated_state_dict();
  CHECK(full.empty() == (world().rank() != 0));
  // Loaded into one process (plain AdamW over the same groups) it continues
  // as the uninterrupted one-process run.
  Run<double> straight(Mode::one_process, nullptr);
  straight.steps(k_steps);
  Run<double> single(Mode::one_process, nullptr);
  copy_values(*single.model, *sharded.model);
  if (world().rank() == 0) {
    single.opt->load_state_dict(full);
    single.schedule->load_state_dict(sharded.schedule->state_dict());
    single.steps(k_steps - 25);
    CHECK(testing::parameters_relative_error(*single.model, *straight.model) <= 1e-12);
    // Its arrays have the parameters' shapes, as AdamW's own state dict.
    CHECK(full.arrays.at("state.0.exp_avg").shape() ==
          single.model->parameters()[0]->value.shape());
  }
  // The one-process run's state loads into a sharded optimizer on P ranks.
  Run<double> reference(Mode::one_process, nullptr);
  reference.steps(25);
  Run<double> loaded(Mode::zero1, &world());
  copy_values(*loaded.model, *reference.model);
  loaded.sharded().load_consolidated_state_dict(reference.opt->state_dict());
  loaded.schedule->load_state_dict(reference.schedule->state_dict());
  loaded.steps(k_steps - 25);
  CHECK(testing::parameters_relative_error(*loaded.model, *straight.model) <= 1e-12);
}

TEST_CASE("zero: bad input is refused on every rank before anything changes") {
  Run<double> run(Mode::zero1, &world());
  run.steps(3);
  const int P = world().size(), r = world().rank();
  CHECK_THROWS_WITH_AS(distributed::ShardedOptimizer<double>(*run.sync, groups(*run.model),
                                                             distributed::ZeroOptions{3}),
                       doctest::Contains("argument 'zero.stage' is 3, expected 1 or 2"),
                       std::invalid_argument);
  auto partial = groups(*run.model);
  partial.pop_back();
  CHECK_THROWS_WITH_AS(distributed::ShardedOptimizer<double>(*run.sync, partial),
                       doctest::Contains("miss the synchronizer's parameter"),
                       std::invalid_argument);
  // Groups that differ across ranks: every rank throws, none hangs.
  auto swapped = groups(*run.model);
  if (r == P - 1) std::swap(swapped[0].params, swapped[1].params);
  CHECK_THROWS_WITH_AS(distributed::ShardedOptimizer<double>(*run.sync, swapped),
                       doctest::Contains("differ across ranks"), std::invalid_argument);
  // Parameters that differ across ranks: the synchronizer's check, on every rank.
  Generator g(1);
  PositionwiseFFN<double> other(2, r == P - 1 ? 8 : 16, g);
  CHECK_THROWS_AS(distributed::GradientSynchronizer<double>(world(), other), std::invalid_argument);

  // Mismatched shards: each rank given its neighbour's. Every rank throws,
  // and nothing changes anywhere.
  const StateDict<double> own = run.opt->state_dict();
  StateDict<double> neighbour = own;
  neighbour.integers["zero.rank"] = (r + 1) % P;
  CHECK_THROWS_WITH_AS(run.opt->load_state_dict(r == 0 ? neighbour : own),
                       doctest::Contains("expected 0 (rank 0 of"), std::invalid_argument);
  StateDict<double> other_size = own;
  other_size.integers["zero.world_size"] = P + 1;
  CHECK_THROWS_WITH_AS(run.opt->check_state_dict(other_size),
                       doctest::Contains(("zero.world_size = " + std::to_string(P + 1)).c_str()),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.opt->load_state_dict(run.sharded().consolidated_state_dict()),
                       doctest::Contains("has no entry 'zero.world_size'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run.sharded().load_consolidated_state_dict(own),
                       doctest::Contains("expected an unsharded state"), std::invalid_argument);
  CHECK(run.opt->state_dict().arrays == own.arrays);
  CHECK(run.opt->state_dict().integers == own.integers);
  CHECK_THROWS_WITH_AS(run.sharded().clip_grad_norm(-1.0), doctest::Contains("max_norm"),
                       std::invalid_argument);
  // A reduce-scatter plan that does not cover the buckets is refused by the synchronizer.
  const auto& buckets = run.sync->buckets();
  distributed::ReduceScatterPlan plan{
      std::vector<std::vector<int>>(buckets.size(), std::vector<int>(P, 0))};
  CHECK_THROWS_WITH_AS(run.sync->reduce_scatter(plan), doctest::Contains("summing to its"),
                       std::invalid_argument);
  plan.counts.pop_back();
  CHECK_THROWS_WITH_AS(run.sync->reduce_scatter(plan), doctest::Contains("expected"),
                       std::invalid_argument);
  run.steps(1);  // still sharded as before
  CHECK(run.opt->state_dict().integers.at("zero.rank") == r);
}

TEST_CASE("zero: byte gather and broadcast cross message boundaries, any length per rank") {
  const distributed::Communicator& comm = world();
  const int ranks = comm.size();
  // Rank r sends 0, 1, 7, 8, 9, 20 ... bytes: empty, shorter than, equal to
  // and past one message of 8 bytes, and several messages.
  const std::size_t lengths[] = {0, 1, 7, 8, 9, 20, 33};
  auto bytes_of = [&](int r) {
    std::string s(lengths[static_cast<std::size_t>(r) % 7], '\0');
    for (std::size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<char>('a' + (static_cast<std::size_t>(r) * 31 + i) % 26);
    return s;
  };
  for (const int root : {0, ranks - 1}) {
    for (const std::size_t message : {std::size_t(1), std::size_t(8), std::size_t(1) << 30}) {
      const std::vector<std::string> all =
          distributed::detail::gather_bytes(comm.comm(), bytes_of(comm.rank()), root, message);
      if (comm.rank() == root) {
        REQUIRE(all.size() == static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) CHECK(all[static_cast<std::size_t>(r)] == bytes_of(r));
      } else {
        CHECK(all.empty());
      }
      const std::string long_text = bytes_of(root) + std::string(19, 'z') + bytes_of(root);
      const std::string got = distributed::detail::broadcast_bytes(
          comm.comm(), comm.rank() == root ? long_text : std::string("stale"), root, message);
      CHECK(got == long_text);
    }
  }
}
