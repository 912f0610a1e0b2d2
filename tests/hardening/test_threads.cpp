// Threads: tapes share nothing, so several threads, each
// with its own tape and optimizer, can train copies of one model at the same
// time, and get bit for bit what the same training gives when run alone;
// and the thread pool of the elementwise passes (engine/kernels/parallel),
// shared by all of them, gives each the bits it gets alone.
// Built and run under ThreadSanitizer by .ci/run, which then also checks that
// no hidden shared state (a static buffer, a lazily built table) is written.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::random_array;

namespace {

constexpr std::size_t k_threads = 4;
constexpr int k_steps = 30;

// What a training run produces: the loss at every step and the final values.
template <class T>
struct Trace {
  std::vector<T> losses;
  std::vector<xt::xarray<T>> values;
};

template <class T>
std::vector<xt::xarray<T>> values_of(const Module<T>& model) {
  std::vector<xt::xarray<T>> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p->value);
  return out;
}

// Trains `model` (a copy: each run owns its parameters) on data of `seed`
// with an optimizer and model kind chosen by `kind`, so that the threads
// between them exercise every op family, kernel and optimizer.
template <class T, class Model>
Trace<T> train(Model model, std::uint32_t seed, int kind) {
  const std::size_t d = 4;
  const xt::xarray<T> x = random_array<T>({16, d}, seed);
  const xt::xarray<T> target = random_array<T>({16, d}, seed + 1);
  std::unique_ptr<optim::Optimizer<T>> opt;
  if (kind == 0)
    opt = std::make_unique<optim::Adam<T>>(model.parameters(), optim::AdamOptions(1e-2));
  else if (kind == 1)
    opt = std::make_unique<optim::AdamW<T>>(model.parameters(),
                                            optim::AdamWOptions(1e-2).amsgrad(true));
  else
    opt = std::make_unique<optim::SGD<T>>(model.parameters(),
                                          optim::SGDOptions(5e-2).momentum(0.9).nesterov(true));
  optim::CosineAnnealingLR<T> schedule(*opt, k_steps);
  Tape<T> tape;
  Trace<T> trace;
  for (int step = 0; step < k_steps; ++step) {
    Var<T> xv = tape.leaf(x, false);
    Var<T> y = model(xv);
    // A little of everything: broadcasting, a product, a reduction, a loss.
    Var<T> loss = mse(y, tape.leaf(target, false)) + scale(mean(mul(y, y)), T(1e-3));
    trace.losses.push_back(loss.value()());
    tape.backward(loss);
    optim::clip_grad_norm(opt->parameters(), 1.0);
    opt->step();
    opt->zero_grad();
    schedule.step();
    tape.clear();
  }
  trace.values = values_of(model);
  return trace;
}

template <class T>
Trace<T> train_kind(std::uint32_t seed, int kind, const PositionwiseFFN<T>& ffn,
                    const FeedForward<T>& gelu_ffn, const GatedFFN<T>& swiglu) {
  if (kind == 0) return train<T>(ffn, seed, kind);
  if (kind == 1) return train<T>(gelu_ffn, seed, kind);
  return train<T>(swiglu, seed, kind);
}

template <class T>
void check_same(const Trace<T>& a, const Trace<T>& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i] == b.losses[i]);
  REQUIRE(a.values.size() == b.values.size());
  for (std::size_t i = 0; i < a.values.size(); ++i) CHECK(a.values[i] == b.values[i]);
}

}  // namespace

TEST_CASE_TEMPLATE("threads: copies of one model trained concurrently match the sequential runs", T,
                   float, double) {
  Generator generator(7);
  const PositionwiseFFN<T> ffn(4, 16, generator);
  const FeedForward<T> gelu_ffn(4, 16, Activation::gelu, generator);
  const GatedFFN<T> swiglu(4, 12, 4, Activation::silu, GatedBias::all(), generator);

  std::vector<Trace<T>> sequential;
  for (std::size_t i = 0; i < k_threads; ++i)
    sequential.push_back(train_kind<T>(100 + i, int(i % 3), ffn, gelu_ffn, swiglu));

  std::vector<Trace<T>> concurrent(k_threads);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < k_threads; ++i)
    threads.emplace_back(
        [&, i] { concurrent[i] = train_kind<T>(100 + i, int(i % 3), ffn, gelu_ffn, swiglu); });
  for (std::thread& t : threads) t.join();

  for (std::size_t i = 0; i < k_threads; ++i) {
    INFO("thread " << i);
    check_same(concurrent[i], sequential[i]);
  }
  // The shared originals were only read.
  Generator again(7);
  CHECK(values_of<T>(ffn) == values_of<T>(PositionwiseFFN<T>(4, 16, again)));
}

// OpenBLAS's own count (its API; set_num_threads sets it too).
extern "C" void openblas_set_num_threads(int num_threads);

TEST_CASE("threads: the pool's passes, shared by concurrent trainings, match the runs alone") {
  const int before = get_num_threads();
  set_num_threads(2);
  openblas_set_num_threads(1);  // the pool's work, not OpenBLAS's threads, is under test here
  // Large enough that the activation, bias, norm-free FFN passes and the
  // optimizers' updates split over the pool (kernels/parallel.hpp thresholds).
  Generator generator(11);
  const FeedForward<float> model(512, 1024, Activation::gelu, generator);
  const auto run = [&model](std::uint32_t seed) {
    FeedForward<float> copy = model;
    optim::AdamW<float> opt(copy.parameters(), optim::AdamWOptions(1e-3));
    const xt::xarray<float> x = random_array<float>({64, 512}, seed);
    Tape<float> tape;
    std::vector<float> losses;
    for (int step = 0; step < 3; ++step) {
      const Var<float> y = copy(tape.leaf(x, false));
      const Var<float> loss = mean(mul(y, y));
      losses.push_back(loss.value()());
      tape.backward(loss);
      opt.step();
      opt.zero_grad();
      tape.clear();
    }
    for (const auto& [name, p] : copy.named_parameters())
      losses.insert(losses.end(), p->value.begin(), p->value.end());
    return losses;
  };
  std::vector<std::vector<float>> alone;
  for (std::uint32_t i = 0; i < 3; ++i) alone.push_back(run(40 + i));
  std::vector<std::vector<float>> together(3);
  std::vector<std::thread> threads;
  for (std::uint32_t i = 0; i < 3; ++i) threads.emplace_back([&, i] { together[i] = run(40 + i); });
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < 3; ++i) CHECK(together[i] == alone[i]);
  set_num_threads(before);
}

TEST_CASE("threads: one model serves several inference threads, read only") {
  Generator generator(3);
  PositionwiseFFN<double> model(4, 32, generator);
  const xt::xarray<double> x = random_array({8, 4}, 5);
  xt::xarray<double> expected;
  {
    Tape<double> tape;
    NoGradGuard<double> no_grad(tape);
    expected = model(tape.leaf(x, false)).value();
  }
  std::vector<xt::xarray<double>> got(k_threads);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < k_threads; ++i)
    threads.emplace_back([&, i] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        Tape<double> tape;
        NoGradGuard<double> no_grad(tape);
        got[i] = model(tape.leaf(x, false)).value();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expected);
}

TEST_CASE("threads: anomaly mode and recording mode belong to one tape, not to the thread") {
  // One thread detects anomalies and meets a NaN; the other, with the mode
  // off on its own tape, computes through the same NaN without a word.
  bool caught = false, propagated = false;
  std::thread checked([&] {
    Tape<double> tape;
    tape.set_detect_anomaly(true);
    try {
      sum(tape.leaf(xt::xarray<double>{1.0, std::nan("")}));
    } catch (const AnomalyError&) {
      caught = true;
    }
  });
  std::thread plain([&] {
    Tape<double> tape;
    for (int i = 0; i < 100; ++i) {
      propagated = std::isnan(sum(tape.leaf(xt::xarray<double>{1.0, std::nan("")})).value()());
      tape.clear();
    }
  });
  checked.join();
  plain.join();
  CHECK(caught);
  CHECK(propagated);
}
