// A completed backward frees its graph at the next recording that starts a
// new graph (tape.hpp, "Lifetime"): a training loop without clear() stays the
// size of one step, while retain_graph, create_graph, grad, hvp, keep_graph()
// and the explicit clear() behave as before; a loop that only runs forward
// on one tape is warned about once.
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <string>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::random_array;

namespace {

// One step of a small regression: fresh inputs, a Linear, an MSE, backward.
std::size_t step(Tape<double>& tape, Linear<double>& model, std::uint32_t seed) {
  const Var<double> x = tape.leaf(random_array({4, 3}, seed), false);
  const Var<double> y = tape.leaf(random_array({4, 2}, seed + 1), false);
  tape.backward(mse(model(x), y));
  return tape.size();
}

}  // namespace

TEST_CASE("tape lifetime: a training loop without clear() keeps the tape the size of one step") {
  Generator generator(1);
  Linear<double> model(3, 2, true, generator);
  Tape<double> tape;
  const std::size_t one_step = step(tape, model, 10);
  // Every later step frees the last one; the two leaves that led the first
  // step are kept (as leaves are in PyTorch) until clear().
  for (std::uint32_t k = 0; k < 20; ++k) CHECK(step(tape, model, 20 + k) == one_step + 2);
  // Parameters still accumulate across the steps, as with clear().
  Generator same(1);
  Linear<double> reference(3, 2, true, same);
  Tape<double> fresh;
  for (std::uint32_t k = 0; k < 21; ++k) {
    fresh.clear();
    step(fresh, reference, k == 0 ? 10 : 19 + k);
  }
  check_close(model.weight.grad, reference.weight.grad);
}

TEST_CASE("tape lifetime: the graph stays readable until a new one starts, its leaves after") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({2, 3}, 1));
  const Var<double> y = sum(square(x));
  tape.backward(y);
  const xt::xarray<double> first = x.grad();
  CHECK(y.value()() > 0.0);
  tape.backward(y);  // a second backward on the same recording
  check_close(x.grad(), first * 2.0);
  const Var<double> metric = mean(x);  // an op after backward appends
  CHECK(metric.value().size() == 1);
  CHECK(tape.size() == 4);
  const Var<double> next = tape.leaf(random_array({2, 3}, 2));  // a new graph: the old one is freed
  CHECK(tape.size() == 2);                                      // x, which led the tape, and next
  CHECK_THROWS_WITH_AS(exp(y), doctest::Contains("freed when recording started again"),
                       std::logic_error);
  CHECK_THROWS_AS(metric.value(), std::logic_error);
  CHECK_THROWS_AS(y.index(), std::logic_error);
  // The leading leaf lives on and keeps accumulating, as a torch leaf tensor does.
  tape.backward(sum(mul(x, next)));
  check_close(x.grad(), first * 2.0 + next.value());
}

TEST_CASE("tape lifetime: a module given a Var of the freed graph throws, never reads a new node") {
  Generator generator(2);
  Linear<double> model(3, 3, true, generator);
  Tape<double> tape;
  const Var<double> h = relu(tape.leaf(random_array({2, 3}, 3), false));  // node 1
  tape.backward(sum(model(h)));
  // The Linear checks h, then records its weight (a fresh graph: node 1 is
  // now the weight) and reads h's index: refused, not the weight's values.
  CHECK_THROWS_WITH_AS(model(h), doctest::Contains("freed when recording started again"),
                       std::logic_error);
}

TEST_CASE("tape lifetime: retain_graph, keep_graph and create_graph keep the graph") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({3}, 4));
  const Var<double> sq = mul(x, x);
  const Var<double> y = sum(sq);
  tape.backward(y, retain_graph);
  const Var<double> c = tape.leaf(random_array({3}, 5), false);
  tape.backward(sum(mul(sq, c)));  // sq is alive: d/dx = 2x + 2x c
  check_close(x.grad(), 2.0 * x.value() + 2.0 * x.value() * c.value());

  tape.keep_graph();  // after the fact
  const Var<double> d = tape.leaf(random_array({3}, 6), false);
  CHECK(mul(sq, d).value().size() == 3);

  tape.zero_grad();
  tape.backward(y, create_graph);  // gradient Vars live on the graph
  const Var<double> g = x.grad_var();
  const Var<double> u = tape.leaf(random_array({3}, 7), false);
  tape.zero_grad();
  tape.backward(sum(mul(g, u)));  // d<2x, u>/dx = 2u
  check_close(x.grad(), 2.0 * u.value());
}

TEST_CASE("tape lifetime: grad and hvp after a backward read the graph it left") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({3}, 8));
  const Var<double> y = sum(mul(mul(x, x), x));  // sum x^3
  tape.backward(y);
  const std::vector<Var<double>> g = grad(tape, {y}, {x});
  check_close(g[0].value(), 3.0 * x.value() * x.value());
  const xt::xarray<double> v = random_array({3}, 9);
  const std::vector<Var<double>> hv = hvp(tape, y, {x}, {v});
  check_close(hv[0].value(), 6.0 * x.value() * v);
}

TEST_CASE("tape lifetime: an explicit clear() works as before") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({3}, 10));
  tape.backward(sum(x));
  tape.clear();
  CHECK(tape.size() == 0);
  CHECK_THROWS_WITH_AS(x.value(), doctest::Contains("cleared since it was recorded"),
                       std::logic_error);
  const Var<double> z = tape.leaf(random_array({3}, 11));
  tape.backward(sum(z), retain_graph);
  CHECK(tape.size() == 2);
  tape.leaf(random_array({3}, 12));
  CHECK(tape.size() == 3);  // retained: appended
  tape.backward(sum(exp(z)));
  tape.clear();  // forgets the kept leaves too
  tape.leaf(random_array({3}, 13));
  CHECK(tape.size() == 1);
  CHECK_THROWS_AS(z.value(), std::logic_error);
}

namespace {

// std::cerr's output while `body` runs.
template <class F>
std::string stderr_of(F&& body) {
  std::ostringstream captured;
  std::streambuf* previous = std::cerr.rdbuf(captured.rdbuf());
  try {
    body();
  } catch (...) {
    std::cerr.rdbuf(previous);
    throw;
  }
  std::cerr.rdbuf(previous);
  return captured.str();
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("tape lifetime: a forward-only loop on one tape warns once, naming the fix") {
  Generator generator(1);
  Linear<double> model(3, 2, true, generator);
  Tape<double> tape;
  const xt::xarray<double> x = random_array({4, 3}, 5);
  // model(x) in a loop, no backward, no clear(): the tape keeps every iteration.
  const std::string warned = stderr_of([&] {
    for (int k = 0; k < 40; ++k) model(tape.leaf(x, false));
  });
  CHECK(occurrences(warned, "xtgrad::Tape: warning:") == 1);
  CHECK(warned.find("Parameter 'weight' was recorded 16 times since the last backward or "
                    "clear()") != std::string::npos);
  CHECK(warned.find("tape.clear() at the start of each iteration") != std::string::npos);
  CHECK(warned.find("Module::infer") != std::string::npos);
  CHECK(tape.growth_warning() == 16);

  // Loops that free their recordings, or a few forwards that one backward
  // combines, say nothing; nor does a tape with the warning off.
  const std::string quiet = stderr_of([&] {
    Tape<double> cleared;
    for (int k = 0; k < 40; ++k) {
      cleared.clear();
      model(cleared.leaf(x, false));
    }
    Tape<double> trained;
    for (int k = 0; k < 40; ++k) trained.backward(sum(model(trained.leaf(x, false))));
    Tape<double> combined;
    Var<double> total = sum(model(combined.leaf(x, false)));
    for (int k = 0; k < 8; ++k) total = add(total, sum(model(combined.leaf(x, false))));
    combined.backward(total);
    Tape<double> off;
    off.set_growth_warning(0);
    for (int k = 0; k < 40; ++k) model(off.leaf(x, false));
  });
  CHECK(quiet.empty());
}
