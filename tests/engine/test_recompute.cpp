// recompute(fn, inputs) (engine/recompute.hpp): gradients equal, bit for
// bit, to the same computation recorded plainly; what the recording holds;
// several outputs, nested recomputes, backward twice; the readiness of
// Parameters for a BackwardObserver; the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/recompute.hpp>

#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;
using xtgrad::testing::random_array;

namespace {

// A small two-Parameter block with a keyed dropout: out = x + W2 tanh(dropout(W1 x + b1)).
template <class T>
struct Block {
  Parameter<T> w1{"w1", random_array<T>({6, 4}, 11)};
  Parameter<T> b1{"b1", random_array<T>({6}, 12)};
  Parameter<T> w2{"w2", random_array<T>({4, 6}, 13)};
  std::uint64_t step = 7;

  Var<T> operator()(const Var<T>& x) {
    Tape<T>& tape = x.tape();
    const Var<T> h = linear(x, tape.param(w1), std::optional(tape.param(b1)));
    const Var<T> d = dropout(tanh(h), 0.25, true, DropoutKey{99, step, 0});
    return x + linear(d, tape.param(w2));
  }
  std::vector<Parameter<T>*> parameters() { return {&w1, &b1, &w2}; }
  void zero_grad() {
    for (Parameter<T>* p : parameters()) p->zero_grad();
  }
};

template <class T>
std::vector<xt::xarray<T>> grads(const std::vector<Parameter<T>*>& ps) {
  std::vector<xt::xarray<T>> out;
  for (const Parameter<T>* p : ps) out.push_back(p->grad);
  return out;
}

template <class T>
bool all_bit_equal(const std::vector<xt::xarray<T>>& a, const std::vector<xt::xarray<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (!bit_equal(a[k], b[k])) return false;
  return true;
}

// The loss of three blocks on x, the middle one (or all) recomputed.
template <class T>
Var<T> three_blocks(Block<T>& block, const Var<T>& x, bool recomputed) {
  const auto run = [&block](const Var<T>& h) { return block(h); };
  Var<T> h = block(x);
  h = recomputed ? recompute<T>(run, h) : block(h);
  h = block(h);
  return sum(h * h);
}

// Snapshots each Parameter's gradient at node_done(i) of its earliest reader
// (the rule BackwardObserver documents) and whether that node is a
// recompute: a gradient taken then must be the final one.
template <class T>
class Readiness : public BackwardObserver<T> {
 public:
  std::map<const Parameter<T>*, xt::xarray<T>> at_ready;
  std::map<const Parameter<T>*, std::string> reader_op;

  void backward_begin(const Tape<T>& tape, std::size_t root) override {
    earliest_.clear();
    for (std::size_t i = 0; i <= root; ++i)
      for (std::size_t k = 0; k < tape.node_parent_count(i); ++k)
        if (const Parameter<T>* p = tape.node_param(tape.node_parent(i, k)))
          if (!earliest_.count(p)) earliest_[p] = i;
  }
  void node_done(const Tape<T>& tape, std::size_t index) override {
    for (const auto& [p, i] : earliest_)
      if (i == index) {
        at_ready[p] = p->grad;
        reader_op[p] = tape.node_op(index);
      }
  }
  void backward_end(const Tape<T>&) override {}

 private:
  std::map<const Parameter<T>*, std::size_t> earliest_;
};

}  // namespace

TEST_CASE_TEMPLATE(
    "recompute: gradients of inputs and Parameters equal the plain ones, bit for bit", T, float,
    double) {
  Block<T> block;
  const xt::xarray<T> xv = random_array<T>({5, 4}, 1);
  std::vector<xt::xarray<T>> expected;
  xt::xarray<T> expected_dx, expected_loss;
  {
    Tape<T> tape;
    const Var<T> x = tape.leaf(xv);
    const Var<T> loss = three_blocks(block, x, false);
    tape.backward(loss);
    expected = grads(block.parameters());
    expected_dx = x.grad();
    expected_loss = loss.value();
  }
  block.zero_grad();
  Tape<T> tape;
  const Var<T> x = tape.leaf(xv);
  const Var<T> loss = three_blocks(block, x, true);
  CHECK(bit_equal(loss.value(), expected_loss));
  tape.backward(loss);
  CHECK(all_bit_equal(grads(block.parameters()), expected));
  CHECK(bit_equal(x.grad(), expected_dx));
}

TEST_CASE("recompute: the recording keeps the outputs, a reader node per Parameter, nothing else") {
  Block<double> block;
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array<double>({5, 4}, 2));
  const Var<double> y = recompute<double>([&block](const Var<double>& h) { return block(h); }, x);
  // leaf, three param nodes, the recompute, its output
  REQUIRE(tape.size() == 6);
  std::vector<const Parameter<double>*> read;
  for (std::size_t i = 1; i <= 3; ++i) {
    CHECK(std::string(tape.node_op(i)) == "param");
    read.push_back(tape.node_param(i));
  }
  std::sort(read.begin(), read.end());
  std::vector<const Parameter<double>*> expected{&block.w1, &block.b1, &block.w2};
  std::sort(expected.begin(), expected.end());
  CHECK(read == expected);
  CHECK(std::string(tape.node_op(4)) == "recompute");
  CHECK(tape.node_parent_count(4) == 4);
  CHECK(tape.node_parent(4, 0) == x.index());
  CHECK(tape.node_parent(4, 3) == 3);
  CHECK(tape.value(4).size() == 0);
  CHECK(std::string(tape.node_op(5)) == "recompute_output");
  CHECK(y.index() == 5);
  CHECK(y.shape() == Shape{5, 4});
  CHECK(y.requires_grad());
}

TEST_CASE("recompute: a Parameter's gradient is final at node_done of its earliest reader") {
  // Parameters read only inside the recompute: the recompute node is their
  // reader, so an observer (the gradient synchronizer of distributed/) sees
  // the gradients final right after the re-run, and they are.
  Block<double> block;
  Parameter<double> head{"head", random_array<double>({4, 4}, 3)};
  Tape<double> tape;
  Readiness<double> observer;
  tape.add_backward_observer(&observer);
  const Var<double> x = tape.leaf(random_array<double>({5, 4}, 4));
  const Var<double> h = recompute<double>([&block](const Var<double>& v) { return block(v); }, x);
  tape.backward(sum(linear(h, tape.param(head))));
  tape.remove_backward_observer(&observer);
  for (Parameter<double>* p : {&block.w1, &block.b1, &block.w2, &head}) {
    INFO(p->name);
    REQUIRE(observer.at_ready.count(p) == 1);
    CHECK(p->has_grad);
    CHECK(bit_equal(observer.at_ready[p], p->grad));
    CHECK(observer.reader_op[p] == (p == &head ? "linear" : "recompute"));
  }
}

TEST_CASE("recompute: a Parameter used inside and outside gets the plain sum, bit for bit") {
  // w is used before, inside and after the recompute, in this order.
  Parameter<double> w{"w", random_array<double>({4, 4}, 5)};
  const xt::xarray<double> xv = random_array<double>({3, 4}, 6);
  const auto net = [&w](const Var<double>& x, bool recomputed) {
    Tape<double>& tape = x.tape();
    const Var<double> a = tanh(linear(x, tape.param(w)));
    const auto inner = [&w](const Var<double>& h) {
      return sigmoid(linear(h, h.tape().param(w))) * h;
    };
    const Var<double> b = recomputed ? recompute<double>(inner, a) : inner(a);
    return sum(linear(b, tape.param(w)));
  };
  Tape<double> plain;
  plain.backward(net(plain.leaf(xv), false));
  const xt::xarray<double> expected = w.grad;
  w.zero_grad();
  Tape<double> tape;
  const Var<double> x = tape.leaf(xv);
  tape.backward(net(x, true));
  CHECK(bit_equal(w.grad, expected));
}

TEST_CASE_TEMPLATE("recompute: an input also used after it, over two passes, gets the plain sum", T,
                   float, double) {
  // x feeds the recompute and two ops after it; the leaf accumulates over two
  // backward passes; x and y given twice sum both shares.
  Block<T> block;
  const xt::xarray<T> xv = random_array<T>({5, 4}, 30), yv = random_array<T>({5, 4}, 31);
  const auto fn = [&block](const std::vector<Var<T>>& in) {
    return std::vector<Var<T>>{block(in[0]) * in[1], in[1] * in[2]};
  };
  const auto loss_of = [](const Var<T>& x, const std::vector<Var<T>>& z) {
    return sum(square(z[0] + x)) + sum(tanh(x) * z[1]);
  };
  Tape<T> plain;
  const Var<T> x0 = plain.leaf(xv), y0 = plain.leaf(yv);
  const Var<T> l0 = loss_of(x0, fn({x0, y0, y0}));
  plain.backward(l0);
  plain.backward(l0);
  const std::vector<xt::xarray<T>> expected = grads(block.parameters());
  block.zero_grad();
  Tape<T> tape;
  const Var<T> x = tape.leaf(xv), y = tape.leaf(yv);
  const Var<T> loss = loss_of(x, recompute<T>(fn, {x, y, y}));
  tape.backward(loss);
  tape.backward(loss);
  CHECK(bit_equal(x.grad(), x0.grad()));
  CHECK(all_bit_equal(grads(block.parameters()), expected));
  xtgrad::testing::check_close(y.grad(), y0.grad(), xtgrad::testing::tolerance<T>(),
                               xtgrad::testing::tolerance<T>());
}

TEST_CASE_TEMPLATE("recompute: several outputs, an output no gradient reaches, an input as output",
                   T, float, double) {
  const xt::xarray<T> av = random_array<T>({3, 4}, 7), bv = random_array<T>({3, 4}, 8);
  const auto fn = [](const std::vector<Var<T>>& in) {
    const Var<T> p = in[0] * in[1];
    return std::vector<Var<T>>{tanh(p), exp(in[1]) + p, in[0], tanh(p)};
  };
  // The loss reads outputs 0, 2 and 3 (1 is unused): 0 and 3 are equal values
  // from different nodes, 2 is the input a itself.
  const auto loss_of = [](const std::vector<Var<T>>& y) {
    return sum(y[0] * y[2]) + sum(square(y[3]));
  };
  Tape<T> plain;
  const Var<T> a0 = plain.leaf(av), b0 = plain.leaf(bv);
  plain.backward(loss_of(fn({a0, b0})));

  Tape<T> tape;
  const Var<T> a = tape.leaf(av), b = tape.leaf(bv);
  const std::vector<Var<T>> y = recompute<T>(fn, {a, b});
  REQUIRE(y.size() == 4);
  CHECK(bit_equal(y[2].value(), av));
  tape.backward(loss_of(y));
  CHECK(bit_equal(a.grad(), a0.grad()));
  CHECK(bit_equal(b.grad(), b0.grad()));

  // Only output 1 this time (backward from it directly, with a dy): fn re-runs
  // again and the earlier pass's outputs are forgotten.
  const xt::xarray<T> dy = random_array<T>({3, 4}, 9);
  tape.zero_grad();
  plain.zero_grad();
  tape.backward(y[1], dy);
  plain.backward(fn({a0, b0})[1], dy);
  CHECK(bit_equal(a.grad(), a0.grad()));
  CHECK(bit_equal(b.grad(), b0.grad()));
}

TEST_CASE("recompute: one Var returned twice, and a Parameter returned, are outputs like any") {
  Parameter<double> w{"w", random_array<double>({3}, 41)};
  const xt::xarray<double> xv = random_array<double>({3}, 42);
  const auto fn = [&w](const std::vector<Var<double>>& in) {
    const Var<double> t = tanh(in[0]);
    return std::vector<Var<double>>{t, t, in[0].tape().param(w)};
  };
  const auto loss_of = [](const std::vector<Var<double>>& y) {
    return sum(y[0] * y[2]) + sum(square(y[1]));
  };
  Tape<double> plain;
  const Var<double> x0 = plain.leaf(xv);
  plain.backward(loss_of(fn({x0})));
  const xt::xarray<double> expected = w.grad;
  w.zero_grad();
  Tape<double> tape;
  const Var<double> x = tape.leaf(xv);
  const std::vector<Var<double>> y = recompute<double>(fn, {x});
  CHECK(bit_equal(y[0].value(), y[1].value()));
  CHECK(bit_equal(y[2].value(), w.value));
  tape.backward(loss_of(y));
  CHECK(bit_equal(x.grad(), x0.grad()));
  CHECK(bit_equal(w.grad, expected));
}

TEST_CASE("recompute: an input that needs no gradient gets none, the others theirs") {
  Tape<double> tape;
  const xt::xarray<double> cv = random_array<double>({2, 3}, 10);
  const Var<double> c = tape.leaf(cv, false), x = tape.leaf(random_array<double>({2, 3}, 11));
  const std::vector<Var<double>> y = recompute<double>(
      [](const std::vector<Var<double>>& in) { return std::vector<Var<double>>{in[0] * in[1]}; },
      {c, x});
  tape.backward(sum(y[0]));
  CHECK_FALSE(c.requires_grad());
  CHECK(bit_equal(x.grad(), cv));  // d sum(c x) / dx = c
  // Nothing needs a gradient: recorded, but nothing requires one.
  const std::vector<Var<double>> z = recompute<double>(
      [](const std::vector<Var<double>>& in) { return std::vector<Var<double>>{in[0] * 2.0}; },
      {c});
  CHECK_FALSE(z[0].requires_grad());
  CHECK(bit_equal(z[0].value(), xt::xarray<double>(cv * 2.0)));
}

TEST_CASE_TEMPLATE("recompute: nested recomputes give the plain gradients, bit for bit", T, float,
                   double) {
  Block<T> block;
  const xt::xarray<T> xv = random_array<T>({5, 4}, 12);
  const auto inner = [&block](const Var<T>& h) { return block(block(h)); };
  const auto outer = [&block, &inner](const Var<T>& h) {
    return block(recompute<T>(inner, block(h)));
  };
  Tape<T> plain;
  const Var<T> x0 = plain.leaf(xv);
  plain.backward(sum(square(block(block(block(block(x0)))))));
  const std::vector<xt::xarray<T>> expected = grads(block.parameters());
  block.zero_grad();
  Tape<T> tape;
  const Var<T> x = tape.leaf(xv);
  const Var<T> y = recompute<T>(outer, x);
  CHECK(tape.size() == 6);  // leaf, three params, recompute, output: the inner one is inside
  tape.backward(sum(square(y)));
  CHECK(all_bit_equal(grads(block.parameters()), expected));
  CHECK(bit_equal(x.grad(), x0.grad()));
}

TEST_CASE("recompute: backward twice accumulates into Parameters as the plain recording does") {
  Block<double> block;
  const xt::xarray<double> xv = random_array<double>({5, 4}, 13);
  Tape<double> plain;
  const Var<double> x0 = plain.leaf(xv);
  const Var<double> l0 = three_blocks(block, x0, false);
  plain.backward(l0);
  plain.backward(l0);
  const std::vector<xt::xarray<double>> expected = grads(block.parameters());
  block.zero_grad();
  Tape<double> tape;
  const Var<double> x = tape.leaf(xv);
  const Var<double> loss = three_blocks(block, x, true);
  tape.backward(loss);
  tape.backward(loss);
  CHECK(all_bit_equal(grads(block.parameters()), expected));
  CHECK(bit_equal(x.grad(), x0.grad()));
}

TEST_CASE("recompute: with recording off fn just runs on the tape of the inputs") {
  Block<double> block;
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array<double>({5, 4}, 14));
  const std::size_t before = tape.size();
  NoGradGuard<double> no_grad(tape);
  int calls = 0;
  const Var<double> y = recompute<double>(
      [&](const Var<double>& h) {
        ++calls;
        return block(h);
      },
      x);
  CHECK(calls == 1);
  CHECK(std::string(tape.node_op(y.index())) == "add");
  CHECK(tape.size() > before + 3);
  CHECK_FALSE(y.requires_grad());
}

TEST_CASE("recompute: a re-run that differs is refused before any gradient is written") {
  Block<double> block;
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array<double>({5, 4}, 15));
  // The dropout key changes between the runs: other masks.
  const Var<double> y = recompute<double>(
      [&block](const Var<double>& h) {
        ++block.step;
        return block(h);
      },
      x);
  const Var<double> loss = sum(y);
  CHECK_THROWS_WITH_PARTS(
      tape.backward(loss), std::logic_error,
      {"recompute", "re-run", "output 0 different values", "step of its forward"});
  for (Parameter<double>* p : block.parameters()) CHECK_FALSE(p->has_grad);

  // Another shape.
  Tape<double> t2;
  int calls = 0;
  const Var<double> z = recompute<double>(
      [&calls](const Var<double>& h) { return ++calls == 1 ? h * 2.0 : sum(h, 0); },
      t2.leaf(random_array<double>({5, 4}, 16)));
  CHECK_THROWS_WITH_PARTS(t2.backward(sum(z)), std::logic_error,
                          {"recompute", "output 0 the shape [4], the forward [5, 4]"});

  // A Parameter changed between the forward and the backward.
  Tape<double> t3;
  const Var<double> w = recompute<double>([&block](const Var<double>& h) { return block(h); },
                                          t3.leaf(random_array<double>({5, 4}, 17)));
  block.w2.value(0, 0) += 1.0;
  CHECK_THROWS_WITH_PARTS(t3.backward(sum(w)), std::logic_error, {"recompute", "different values"});

  // Another number of outputs.
  Tape<double> t4;
  int runs = 0;
  const std::vector<Var<double>> v = recompute<double>(
      [&runs](const std::vector<Var<double>>& in) {
        return ++runs == 1 ? std::vector<Var<double>>{in[0] * 2.0}
                           : std::vector<Var<double>>{in[0] * 2.0, in[0]};
      },
      {t4.leaf(random_array<double>({2}, 18))});
  CHECK_THROWS_WITH_PARTS(t4.backward(sum(v[0])), std::logic_error,
                          {"recompute", "returned 2 outputs, the forward 1"});

  // A Parameter the forward did not read.
  Tape<double> t5;
  Parameter<double> extra{"extra", random_array<double>({2}, 19)};
  runs = 0;
  const Var<double> u = recompute<double>(
      [&runs, &extra](const Var<double>& h) {
        return ++runs == 1 ? h * 1.0 : h + h.tape().param(extra) * 0.0;
      },
      t5.leaf(random_array<double>({2}, 20)));
  CHECK_THROWS_WITH_PARTS(t5.backward(sum(u)), std::logic_error,
                          {"recompute", "read Parameter 'extra'", "forward did not"});
  CHECK_FALSE(extra.has_grad);
}

TEST_CASE("recompute: bad arguments and bad fns are refused before anything is recorded") {
  Tape<double> tape, other;
  const Var<double> x = tape.leaf(random_array<double>({2}, 21));
  const Var<double> o = other.leaf(random_array<double>({2}, 22));
  const auto identity = [](const std::vector<Var<double>>& in) { return in; };
  CHECK_THROWS_WITH_PARTS(recompute<double>(RecomputeFn<double>(), {x}), std::invalid_argument,
                          {"recompute", "'fn'", "empty"});
  CHECK_THROWS_WITH_PARTS(recompute<double>(identity, std::vector<Var<double>>{}),
                          std::invalid_argument, {"recompute", "'inputs'", "at least one"});
  CHECK_THROWS_WITH_PARTS(recompute<double>(identity, {x, o}), std::logic_error,
                          {"recompute", "'inputs[1]'", "different tape"});
  CHECK_THROWS_WITH_PARTS(recompute<double>(identity, {Var<double>()}), std::logic_error,
                          {"recompute", "'inputs[0]'", "empty Var"});
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(
      recompute<double>([](const std::vector<Var<double>>&) { return std::vector<Var<double>>{}; },
                        {x}),
      std::logic_error, {"recompute", "no outputs"});
  CHECK_THROWS_WITH_PARTS(
      recompute<double>([&o](const std::vector<Var<double>>&) { return std::vector{o}; }, {x}),
      std::logic_error, {"recompute", "output 0 of fn", "another tape", "as one of the inputs"});
  // An op mixing a private Var with one captured from outside.
  CHECK_THROWS_WITH_PARTS(recompute<double>([&x](const Var<double>& h) { return h + x; }, x),
                          std::logic_error, {"different tapes"});
  CHECK(tape.size() == before);
  tape.clear();
  CHECK_THROWS_WITH_PARTS(recompute<double>(identity, {x}), std::logic_error,
                          {"recompute", "'inputs[0]'", "cleared"});
}

TEST_CASE("recompute: anomaly mode reaches inside fn") {
  Tape<double> tape;
  tape.set_detect_anomaly(true);
  const Var<double> x = tape.leaf(xt::xarray<double>{-1.0, 2.0});
  CHECK_THROWS_AS(recompute<double>([](const Var<double>& h) { return log(h); }, x), AnomalyError);
}

TEST_CASE(
    "recompute: a Var kept from inside fn is stale afterwards - the kept tapes can be freed") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array<double>({3}, 40));
  Var<double> inside;
  const Var<double> y = recompute<double>(
      [&inside](const Var<double>& h) {
        inside = h * 2.0;
        return tanh(inside);
      },
      x);
  CHECK_THROWS_WITH_PARTS(inside.value(), std::logic_error, {"cleared"});
  release_recompute_tapes<double>();
  tape.backward(sum(y));                    // the re-run takes a new private tape
  xt::xarray<double> expected = x.value();  // d tanh(2x) / dx = 2 (1 - tanh(2x)^2)
  for (double& e : expected) e = 2.0 * (1.0 - std::tanh(2.0 * e) * std::tanh(2.0 * e));
  xtgrad::testing::check_close(x.grad(), expected);
}
