// Bit-for-bit resume: a run of 2000 steps straight, and the same run stopped
// after 1000, saved to disk, loaded into fresh objects and continued, must
// end with every parameter and every optimizer and schedule state bit for
// bit equal. Also gradient accumulation over micro-batches against one batch.
// The training code is tests/optim/training_example.hpp, shown in docs/training.md.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include <xtensor/xview.hpp>

#include "optim/training_example.hpp"
#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;
using xtgrad::testing::check_close;
using xtgrad::testing::random_array;
using xtgrad::testing::TempDir;

namespace {

constexpr std::size_t k_d_model = 4, k_d_ff = 16, k_rows = 8;
constexpr std::int64_t k_steps = 2000, k_stop = 1000;

template <class T>
void check_bit_equal(const StateDict<T>& a, const StateDict<T>& b) {
  REQUIRE(a.arrays.size() == b.arrays.size());
  for (const auto& entry : a.arrays) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& array = std::get<1>(entry);
    CAPTURE(name);
    REQUIRE(b.arrays.count(name) == 1);
    CHECK(bit_equal(array, b.arrays.at(name)));
  }
  CHECK(a.integers == b.integers);
  CHECK(a.strings == b.strings);
  REQUIRE(a.reals.size() == b.reals.size());
  for (const auto& entry : a.reals) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& value = std::get<1>(entry);
    CAPTURE(name);
    REQUIRE(b.reals.count(name) == 1);
    CHECK(bit_equal(value, b.reals.at(name)));
  }
}

// The data of step s: the same for every run, whatever happened before.
template <class T>
xt::xarray<T> inputs_of(std::int64_t s) {
  return random_array<T>({k_rows, k_d_model}, static_cast<std::uint32_t>(1000 + s));
}
template <class T>
xt::xarray<T> targets_of(std::int64_t s) {
  return random_array<T>({k_rows, k_d_model}, static_cast<std::uint32_t>(900000 + s), -0.5, 0.5);
}

// A model, its optimizer and its schedule, built alike for every run; only
// the initialization seed differs between the first run and the fresh
// objects a resumed run loads into.
template <class T>
struct Run {
  virtual ~Run() = default;
  FeedForward<T> model;
  explicit Run(std::uint64_t seed)
      : model(k_d_model, k_d_ff, Activation::gelu, detail::lvalue(Generator(seed))) {}
  virtual optim::Optimizer<T>& optimizer() = 0;
  virtual optim::LRScheduler<T>& schedule() = 0;
  void train(std::int64_t from, std::int64_t to) {
    for (std::int64_t s = from; s < to; ++s)
      example::accumulate_and_step<T>(model, optimizer(), schedule(), {inputs_of<T>(s)},
                                      {targets_of<T>(s)});
  }
};

// AdamW, weight decay on the matrices only, linear warm-up then cosine.
template <class T>
struct AdamWRun : Run<T> {
  optim::AdamW<T> adamw{example::decay_groups(this->model, 3e-3, 0.1)};
  optim::WarmupCosineLR<T> cosine{adamw, 100, 1900, 0.01, 1e-4};
  explicit AdamWRun(std::uint64_t seed) : Run<T>(seed) {}
  optim::Optimizer<T>& optimizer() override { return adamw; }
  optim::LRScheduler<T>& schedule() override { return cosine; }
};

// SGD with Nesterov momentum and L2 decay on the matrices; heavy-ball
// momentum with dampening on the biases; a step schedule.
template <class T>
struct SgdRun : Run<T> {
  optim::SGD<T> sgd;
  optim::StepLR<T> steps{sgd, 300, 0.5};
  static std::vector<optim::SGDParamGroup<T>> groups(FeedForward<T>& model) {
    std::vector<Parameter<T>*> matrices, vectors;
    for (Parameter<T>* p : model.parameters())
      (p->value.dimension() >= 2 ? matrices : vectors).push_back(p);
    return {{matrices, optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3)},
            {vectors, optim::SGDOptions(0.02).momentum(0.8).dampening(0.1)}};
  }
  explicit SgdRun(std::uint64_t seed) : Run<T>(seed), sgd(groups(this->model)) {}
  optim::Optimizer<T>& optimizer() override { return sgd; }
  optim::LRScheduler<T>& schedule() override { return steps; }
};

template <class T>
void check_same_run(Run<T>& a, Run<T>& b) {
  const auto pa = a.model.named_parameters();
  const auto pb = b.model.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(bit_equal(pa[i].second->value, pb[i].second->value));
  }
  check_bit_equal(a.optimizer().state_dict(), b.optimizer().state_dict());
  check_bit_equal(a.schedule().state_dict(), b.schedule().state_dict());
  for (std::size_t g = 0; g < a.optimizer().group_count(); ++g)
    CHECK(bit_equal(a.optimizer().lr(g), b.optimizer().lr(g)));
}

template <class T, template <class> class Kind>
void check_resume() {
  using RunType = Kind<T>;
  RunType straight(42);
  straight.train(0, k_steps);

  TempDir dir("resume");
  const auto state = dir / "state";
  {
    RunType first(42);
    CHECK(example::resume(state, first.model, first.optimizer(), first.schedule()) == 0);
    first.train(0, k_stop);
    example::save(state, first.model, first.optimizer(), first.schedule(), k_stop);
  }
  RunType resumed(7);  // another initialization: the load must overwrite it
  CHECK_FALSE(
      bit_equal(resumed.model.parameters()[0]->value, straight.model.parameters()[0]->value));
  const std::int64_t from =
      example::resume(state, resumed.model, resumed.optimizer(), resumed.schedule());
  CHECK(from == k_stop);
  resumed.train(from, k_steps);
  check_same_run<T>(straight, resumed);

  // The control: restoring the parameters alone (a checkpoint, a fresh
  // optimizer and schedule) does not give the same run.
  RunType params_only(42);
  params_only.train(0, k_stop);
  params_only.model.save(dir / "params");
  RunType restarted(7);
  restarted.model.load(dir / "params");
  restarted.train(k_stop, k_steps);
  CHECK_FALSE(
      bit_equal(restarted.model.parameters()[0]->value, straight.model.parameters()[0]->value));
}

}  // namespace

TEST_CASE_TEMPLATE("resume: AdamW with groups, warm-up + cosine and clipping resumes bit for bit",
                   T, float, double) {
  check_resume<T, AdamWRun>();
}

TEST_CASE_TEMPLATE("resume: SGD with momentum groups and StepLR resumes bit for bit", T, float,
                   double) {
  check_resume<T, SgdRun>();
}

TEST_CASE_TEMPLATE("gradient accumulation: k micro-batches with loss / k give one batch's gradient",
                   T, float, double) {
  constexpr std::size_t k = 3, rows = 12;
  const xt::xarray<T> x = random_array<T>({rows, k_d_model}, 5);
  const xt::xarray<T> y = random_array<T>({rows, k_d_model}, 6);
  FeedForward<T> model(k_d_model, k_d_ff, Activation::gelu, detail::lvalue(Generator(3)));
  FeedForward<T> accumulated = model;

  {
    Tape<T> tape;
    tape.backward(mse(model(tape.leaf(x, false)), tape.leaf(y, false)));
  }
  const std::size_t m = rows / k;
  for (std::size_t b = 0; b < k; ++b) {
    Tape<T> tape;
    const xt::xarray<T> xb = xt::view(x, xt::range(b * m, (b + 1) * m), xt::all());
    const xt::xarray<T> yb = xt::view(y, xt::range(b * m, (b + 1) * m), xt::all());
    tape.backward(mse(accumulated(tape.leaf(xb, false)), tape.leaf(yb, false)) * (T(1) / T(k)));
  }
  const auto one = model.named_parameters();
  const auto many = accumulated.named_parameters();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(one[i].first);
    REQUIRE(many[i].second->has_grad);
    check_close(many[i].second->grad, one[i].second->grad, tol, tol);
  }

  // And one optimizer step from the accumulated gradient equals one step from
  // the whole batch (accumulate_and_step with one micro-batch), to rounding.
  FeedForward<T> whole_model(k_d_model, k_d_ff, Activation::gelu, detail::lvalue(Generator(3)));
  FeedForward<T> micro_model = whole_model;
  optim::AdamW<T> whole_opt(example::decay_groups(whole_model, 1e-2, 0.1));
  optim::AdamW<T> micro_opt(example::decay_groups(micro_model, 1e-2, 0.1));
  optim::LinearWarmup<T> whole_schedule(whole_opt, 0, 1.0);
  optim::LinearWarmup<T> micro_schedule(micro_opt, 0, 1.0);
  std::vector<xt::xarray<T>> xs, ys;
  for (std::size_t b = 0; b < k; ++b) {
    xs.push_back(xt::view(x, xt::range(b * m, (b + 1) * m), xt::all()));
    ys.push_back(xt::view(y, xt::range(b * m, (b + 1) * m), xt::all()));
  }
  example::accumulate_and_step<T>(whole_model, whole_opt, whole_schedule, {x}, {y});
  example::accumulate_and_step<T>(micro_model, micro_opt, micro_schedule, xs, ys);
  const auto w = whole_model.named_parameters();
  const auto u = micro_model.named_parameters();
  for (std::size_t i = 0; i < w.size(); ++i) {
    CAPTURE(w[i].first);
    check_close(u[i].second->value, w[i].second->value, tol, tol);
  }
}
