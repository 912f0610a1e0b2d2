// training/data_parallel.hpp and training/training_optimizer.hpp in one
// process (a program built without distributed/, or not started by
// mpirun): Parallel is rank 0 of 1, GradientAverager and Shards do nothing,
// and TrainingOptimizer is the plain optimizer for every ZeRO stage, so a
// loop written for mpirun trains bit for bit as the plain loop does. Their
// MPI side runs in the demos' mpirun comparisons (tests/demos/demo_zero.cmake).

#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include <xtgrad/training/expert_parallel.hpp>
#include <xtgrad/training/training_optimizer.hpp>
#include <xtgrad/training/training_run.hpp>

#include "support/bit_equal.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;

namespace {

int g_argc = 1;
char g_name[] = "test";
char* g_args[] = {g_name, nullptr};
char** g_argv = g_args;

// Five steps of a Linear(3 -> 2) on fixed data, `step` after each backward
// pass; returns the final weight.
template <class Step>
xt::xarray<float> train(Linear<float>& model, Tape<float>& tape, Step step) {
  const xt::xarray<float> x = {{0.5f, -1.0f, 2.0f}, {1.5f, 0.25f, -0.75f}};
  const xt::xarray<float> y = {{1.0f, 0.0f}, {-1.0f, 2.0f}};
  for (int i = 0; i < 5; ++i) {
    tape.clear();
    const Var<float> loss = mse(model(tape.leaf(x, false)), tape.leaf(y, false));
    tape.backward(loss);
    step();
  }
  return model.weight.value;
}

}  // namespace

TEST_CASE("training::Parallel: one process is rank 0 of 1 and every collective is the identity") {
  training::Parallel parallel(g_argc, g_argv);
  CHECK_FALSE(parallel.active());
  CHECK(parallel.rank() == 0);
  CHECK(parallel.size() == 1);
  CHECK_FALSE(parallel.quiet());
  CHECK(parallel.out() == stdout);
  CHECK(parallel.mean(2.5) == 2.5);
  CHECK(parallel.slice(12, "the batch") == std::pair<std::size_t, std::size_t>{0, 12});
  parallel.fail("nothing happens in one process");
  training::Shards shards(parallel, 10, {4, true, false, 0});
  CHECK_FALSE(shards.active());
}

TEST_CASE(
    "training::TrainingOptimizer: every ZeRO stage trains as the plain optimizer in one process") {
  Generator g0(7);
  Linear<float> plain_model(3, 2, true, g0);
  Tape<float> plain_tape;
  optim::AdamW<float> plain({{plain_model.parameters(), optim::AdamWOptions(1e-2)}});
  const xt::xarray<float> expected = train(plain_model, plain_tape, [&] {
    plain.step();
    plain.zero_grad();
  });
  for (int zero : {0, 1, 2}) {
    CAPTURE(zero);
    Generator g(7);
    Linear<float> m(3, 2, true, g);
    Tape<float> t;
    training::Parallel parallel(g_argc, g_argv);
    training::GradientAverager<float> gradients(parallel, m, t);
    training::TrainingOptimizer<float> optimizer(
        parallel, gradients,
        std::vector<optim::AdamWParamGroup<float>>{{m.parameters(), optim::AdamWOptions(1e-2)}},
        zero);
    CHECK_FALSE(optimizer.sharded());
    const xt::xarray<float> got = train(m, t, [&] {
      optimizer.finish();
      optimizer.step();
      optimizer.zero_grad();
    });
    CHECK(bit_equal(got, expected));
  }
}

TEST_CASE(
    "training::TrainingOptimizer: save and resume hand over the one optimizer - a bad stage is "
    "refused") {
  Generator g(3);
  Linear<float> m(3, 2, true, g);
  Tape<float> t;
  training::Parallel parallel(g_argc, g_argv);
  training::GradientAverager<float> gradients(parallel, m, t);
  using Groups = std::vector<optim::SGDParamGroup<float>>;
  const Groups groups{{m.parameters(), optim::SGDOptions(0.1)}};
  CHECK_THROWS_WITH_AS(training::TrainingOptimizer<float>(parallel, gradients, groups, 3),
                       "--zero 3: expected 0, 1 or 2", std::invalid_argument);
  training::TrainingOptimizer<float> optimizer(parallel, gradients, groups, 1);
  const optim::Optimizer<float>* saved = nullptr;
  optimizer.save([&](const optim::Optimizer<float>& full) { saved = &full; });
  CHECK(saved == &optimizer.optimizer());
  optim::StepLR<float> schedule(optimizer.optimizer(), 10);
  const auto make_schedule = [](optim::Optimizer<float>& o) {
    return std::make_unique<optim::StepLR<float>>(o, 10);
  };
  const int loaded = optimizer.resume(
      schedule, make_schedule, [&](optim::Optimizer<float>& o, optim::LRScheduler<float>& s) {
        CHECK(&o == &optimizer.optimizer());
        CHECK(&s == &schedule);
        return 42;
      });
  CHECK(loaded == 42);
}

TEST_CASE(
    "training::TrainingRun: clip_grad_norm and step are optim::clip_grad_norm, the optimizer's "
    "and the schedule's steps in one process") {
  Generator g0(5);
  Linear<float> plain_model(3, 2, true, g0);
  Tape<float> plain_tape;
  optim::AdamW<float> plain(training::decay_groups(plain_model, optim::AdamWOptions(1e-2)));
  optim::WarmupCosineLR<float> schedule(plain, 2, 3);
  std::vector<double> plain_norms, norms;
  const xt::xarray<float> expected = train(plain_model, plain_tape, [&] {
    plain_norms.push_back(optim::clip_grad_norm(plain_model.parameters(), 0.05));
    plain.step();
    plain.zero_grad();
    schedule.step();
  });
  Generator g(5);
  Linear<float> m(3, 2, true, g);
  training::Parallel parallel(g_argc, g_argv);
  training::TrainingRun run(parallel, m, training::decay_groups(m, optim::AdamWOptions(1e-2)), 1,
                            training::warmup_cosine(2, 5));
  const xt::xarray<float> got = train(m, run.tape, [&] {
    run.optimizer.finish();
    norms.push_back(run.clip_grad_norm(0.05));
    run.step();
  });
  CHECK(bit_equal(got, expected));
  CHECK(norms == plain_norms);
  CHECK(run.schedule->last_lr() == schedule.last_lr());
}

TEST_CASE(
    "training::save_sizes and SavedRun::sizes: a list of sizes and back - a missing one named") {
  TrainingExtras extras;
  training::save_sizes(extras, "experts.0.", {3, 0, 7});
  CHECK(extras.integers.size() == 3);
  CHECK(extras.integers.at("experts.0.2") == 7);
  const training::SavedRun saved{extras, "run_dir", "train_x"};
  CHECK(saved.sizes("experts.0.", 3) == std::vector<std::size_t>{3, 0, 7});
  CHECK(saved.sizes("experts.0.", 0).empty());
  CHECK_THROWS_WITH_AS(saved.sizes("experts.0.", 4),
                       "--resume 'run_dir': not a train_x run: no 'experts.0.3'",
                       std::invalid_argument);
}

TEST_CASE("training::position_extras: the identity, the step and the history, as save_history") {
  struct Record {
    std::size_t epoch;
    double loss;
  };
  const training::HistoryFields<Record> fields{{{"epoch", &Record::epoch}},
                                               {{"loss", &Record::loss}}};
  TrainingExtras identity;
  identity.integers["option.seed"] = 7;
  const std::vector<Record> history{{1, 0.5}, {2, 0.25}};
  const TrainingExtras extras =
      training::position_extras(identity, 12, "epochs_done", history, fields);
  TrainingExtras expected = identity;
  expected.integers["step"] = 12;
  training::save_history(expected, "epochs_done", history, fields);
  CHECK(extras.integers == expected.integers);
  CHECK(extras.reals == expected.reals);
  CHECK(extras.integers.at("history.1.epoch") == 2);
}

TEST_CASE("training::routed_tokens_by_layer: one row of E counts per layer - a bad E refused") {
  const std::vector<std::size_t> tokens{1, 2, 3, 4, 5, 6};
  using Rows = std::vector<std::vector<std::size_t>>;
  CHECK(training::routed_tokens_by_layer(tokens, 3) == Rows{{1, 2, 3}, {4, 5, 6}});
  CHECK(training::routed_tokens_by_layer(tokens, 2) == Rows{{1, 2}, {3, 4}, {5, 6}});
  CHECK(training::routed_tokens_by_layer({}, 4).empty());
  CHECK_THROWS_WITH_AS(training::routed_tokens_by_layer(tokens, 4),
                       "xtgrad::training::routed_tokens_by_layer: argument 'experts' is 4, "
                       "expected a positive divisor of the 6 counts",
                       std::invalid_argument);
  CHECK_THROWS_AS(training::routed_tokens_by_layer(tokens, 0), std::invalid_argument);
}

TEST_CASE("training::add_routed_tokens: in one process, each forward's router counts, added up") {
  GPTConfig c;  // a dense layer, then a sparse one of 4 experts, 2 per token
  c.vocab_size = 7;
  c.block_size = 4;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 6;
  c.decoder_sparse_step = 2;
  Generator g(1);
  GPT<float> model(c, g);
  training::Parallel parallel(g_argc, g_argv);
  std::vector<std::size_t> tokens;
  const Indices ids{{1, 2, 3}, {4, 5, 6}};
  Tape<float> tape;
  (void)model.forward(tape, ids);
  training::add_routed_tokens(tokens, model, parallel, false);
  const std::vector<std::size_t> first = tokens;
  const std::vector<MoeStats> stats = model.router_stats();
  REQUIRE(stats.size() == 2);
  REQUIRE(stats[1].routed.size() == 4);
  tape.clear();
  (void)model.forward(tape, ids);
  training::add_routed_tokens(tokens, model, parallel, false);
  REQUIRE(tokens.size() == 2 * 4);
  std::size_t sparse_total = 0;
  for (std::size_t e = 0; e < 4; ++e) {
    CHECK(tokens[e] == 0);  // the dense layer
    CHECK(tokens[4 + e] == 2 * first[4 + e]);
    CHECK(first[4 + e] == stats[1].routed[e]);
    sparse_total += first[4 + e];
  }
  CHECK(sparse_total == 6 * 2);  // 6 tokens, 2 choices each
}
