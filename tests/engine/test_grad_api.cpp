// grad and hvp (engine/grad.hpp): torch.autograd.grad's semantics (values,
// no accumulation into .grad, allow_unused, grad_outputs), Parameters as
// inputs, the double-backward Hessian-vector product, and the errors.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE("grad api: gradients as values, nothing accumulated into .grad or Parameter::grad") {
  Tape<double> tape;
  const xt::xarray<double> xv = {0.5, -1.5, 2.0};
  const xt::xarray<double> wv = {1.25, 0.5, -0.75};
  Parameter<double> w("w", wv);
  const Var<double> x = tape.leaf(xv);
  const Var<double> wn = tape.param(w);
  const Var<double> h = mul(mul(x, x), wn);  // w x^2
  const Var<double> y = sum(h);
  // An earlier backward leaves gradients that grad must not change.
  tape.backward(y);
  const xt::xarray<double> x_before = x.grad(), w_before = w.grad, h_before = h.grad();
  CHECK(w.has_grad);
  for (const bool create : {false, true}) {
    INFO("create_graph " << create);
    const std::vector<Var<double>> g = grad(tape, {y}, {x, w}, GradOptions<double>{{}, create});
    REQUIRE(g.size() == 2);
    check_close(g[0].value(), xt::xarray<double>(2.0 * wv * xv));  // dy/dx = 2 w x
    check_close(g[1].value(), xt::xarray<double>(xv * xv));        // dy/dw = x^2
    CHECK(g[0].requires_grad() == create);
    CHECK(x.grad() == x_before);
    CHECK(w.grad == w_before);
    CHECK(h.grad() == h_before);
    CHECK(w.has_grad);
  }
  // An intermediate as input: dy/dh = 1.
  check_close(grad(tape, {y}, {h})[0].value(), xt::xarray<double>(xt::ones<double>({3})));
  // A Parameter's Var stands for the Parameter.
  check_close(grad(tape, {y}, {wn})[0].value(), xt::xarray<double>(xv * xv));
}

TEST_CASE("grad api: a Parameter recorded twice gets the sum over its nodes") {
  Tape<double> tape;
  Parameter<double> p("p", xt::xarray<double>{2.0, -1.0});
  const Var<double> a = tape.param(p);
  const Var<double> b = tape.param(p);
  const Var<double> y = sum(mul(a, b));  // p^2: 2 p
  check_close(grad(tape, {y}, {p})[0].value(), xt::xarray<double>{4.0, -2.0});
  const Var<double> g = grad(tape, {y}, {p}, GradOptions<double>{{}, true})[0];
  check_close(grad(tape, {sum(g)}, {p})[0].value(), xt::xarray<double>{2.0, 2.0});
  CHECK(!p.has_grad);
}

TEST_CASE("grad api: a Parameter also read under NoGradGuard is differentiated where it was used") {
  Tape<double> tape;
  Parameter<double> p("p", xt::xarray<double>{2.0, -1.0});
  const Var<double> a = tape.param(p);
  const Var<double> y = sum(mul(a, a));  // p^2: 2 p
  {
    NoGradGuard<double> evaluation(tape);
    const Var<double> z = sum(tape.param(p));  // a read for evaluation, after y
    CHECK(!z.requires_grad());
  }
  check_close(grad(tape, {y}, {p})[0].value(), xt::xarray<double>{4.0, -2.0});
  Parameter<double> unused("unused", xt::xarray<double>{1.0});
  {
    NoGradGuard<double> evaluation(tape);
    tape.param(unused);
  }
  CHECK_THROWS_WITH_PARTS(grad(tape, {y}, {unused}), std::invalid_argument,
                          {"xtgrad::grad", "'inputs[0]'", "not used"});
  check_close(grad(tape, {y}, {unused}, GradOptions<double>{{}, false, true})[0].value(),
              xt::xarray<double>{0.0});
}

TEST_CASE("grad api: second and third derivatives by repeated create_graph") {
  Tape<double> tape;
  const xt::xarray<double> xv = {0.5, -1.5, 2.0};
  const Var<double> x = tape.leaf(xv);
  const Var<double> x2 = mul(x, x);
  const Var<double> f = sum(mul(x2, x2));  // x^4
  const Var<double> g1 = grad(tape, {f}, {x}, GradOptions<double>{{}, true})[0];
  check_close(g1.value(), xt::xarray<double>(4.0 * xv * xv * xv));
  const Var<double> g2 = grad(tape, {sum(g1)}, {x}, GradOptions<double>{{}, true})[0];
  check_close(g2.value(), xt::xarray<double>(12.0 * xv * xv));
  const Var<double> g3 = grad(tape, {sum(g2)}, {x})[0];
  check_close(g3.value(), xt::xarray<double>(24.0 * xv));
  check_close(x.grad(), xt::xarray<double>(xt::zeros<double>({3})));
}

TEST_CASE("grad api: grad_outputs weigh several outputs - the same output twice adds") {
  Tape<double> tape;
  const xt::xarray<double> xv = {{1.0, 2.0}, {-0.5, 0.25}};
  const Var<double> x = tape.leaf(xv);
  const Var<double> y1 = mul(x, x);
  const Var<double> y2 = scale(x, 3.0);
  const xt::xarray<double> v1 = {{1.0, -1.0}, {0.5, 2.0}};
  const xt::xarray<double> v2 = {{0.25, 0.5}, {-1.0, 1.5}};
  for (const bool create : {false, true}) {
    const Var<double> g =
        grad(tape, {y1, y2, y1}, {x}, GradOptions<double>{{v1, v2, v1}, create})[0];
    check_close(g.value(), xt::xarray<double>(2.0 * 2.0 * xv * v1 + 3.0 * v2));
  }
}

TEST_CASE("grad api: allow_unused gives zeros, otherwise an unused input is refused") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>{1.0, 2.0});
  const Var<double> z = tape.leaf(xt::xarray<double>(xt::ones<double>({1, 1})));
  const Var<double> y = sum(mul(x, x));
  const Var<double> later = mul(z, z);  // recorded after y: not used by it
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(grad(tape, {y}, {x, z}), std::invalid_argument,
                          {"xtgrad::grad", "'inputs[1]'", "not used", "allow_unused"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {y}, {x, later}), std::invalid_argument,
                          {"xtgrad::grad", "'inputs[1]'", "not used"});
  CHECK(tape.size() == before + 0);
  for (const bool create : {false, true}) {
    const std::vector<Var<double>> g =
        grad(tape, {y}, {x, z}, GradOptions<double>{{}, create, true});
    check_close(g[0].value(), xt::xarray<double>{2.0, 4.0});
    check_close(g[1].value(), xt::xarray<double>(xt::zeros<double>({1, 1})));
    CHECK(!g[1].requires_grad());
  }
}

TEST_CASE("grad api: bad arguments name the function and the argument, and change nothing") {
  Tape<double> tape;
  Tape<double> other;
  const Var<double> x = tape.leaf(xt::xarray<double>{1.0, 2.0});
  const Var<double> c = tape.leaf(xt::xarray<double>{1.0, 2.0}, false);
  const Var<double> y = mul(x, x);  // [2]
  const Var<double> s = sum(y);
  const Var<double> foreign = other.leaf(xt::xarray<double>{1.0});
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(grad(tape, {y}, {x}), std::invalid_argument,
                          {"xtgrad::grad", "'outputs[0]'", "[2]", "grad_outputs"});
  CHECK_THROWS_WITH_PARTS(
      grad(tape, {y}, {x}, GradOptions<double>{{xt::xarray<double>{1.0, 2.0, 3.0}}}),
      std::invalid_argument, {"xtgrad::grad", "'grad_outputs[0]'", "[3]", "[2]"});
  CHECK_THROWS_WITH_PARTS(
      grad(tape, {y, s}, {x}, GradOptions<double>{{xt::xarray<double>{1.0, 2.0}}}),
      std::invalid_argument, {"xtgrad::grad", "'grad_outputs'", "1 entries", "2"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {}, {x}), std::invalid_argument,
                          {"xtgrad::grad", "'outputs'", "empty"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {s}, {}), std::invalid_argument,
                          {"xtgrad::grad", "'inputs'", "empty"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {s}, {c}), std::logic_error,
                          {"xtgrad::grad", "'inputs[0]'", "does not require a gradient"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {sum(c)}, {x}), std::logic_error,
                          {"xtgrad::grad", "'outputs[0]'", "does not require a gradient"});
  CHECK_THROWS_WITH_PARTS(grad(tape, {s}, {foreign}), std::logic_error,
                          {"xtgrad::grad", "'inputs[0]'", "different tape"});
  CHECK(tape.size() == before + 1);  // sum(c) above
  // hvp
  CHECK_THROWS_WITH_PARTS(hvp(tape, y, {x}, {xt::xarray<double>{1.0, 1.0}}), std::invalid_argument,
                          {"xtgrad::hvp", "'output'", "[2]"});
  CHECK_THROWS_WITH_PARTS(hvp(tape, s, {x}, {}), std::invalid_argument,
                          {"xtgrad::hvp", "'v'", "0 entries", "1"});
  CHECK_THROWS_WITH_PARTS(hvp(tape, s, {x}, {xt::xarray<double>{1.0}}), std::invalid_argument,
                          {"xtgrad::hvp", "'v[0]'", "[1]", "[2]"});
  CHECK_THROWS_WITH_PARTS(hvp(tape, s, {}, {}), std::invalid_argument,
                          {"xtgrad::hvp: argument 'inputs' is empty"});
  CHECK(tape.size() == before + 1);
}

TEST_CASE("grad api: hvp of sum(w x^3) equals the hand-written Hessian times v") {
  Tape<double> tape;
  const xt::xarray<double> xv = {0.5, -1.5, 2.0};
  const xt::xarray<double> wv = {1.25, 0.5, -0.75};
  Parameter<double> w("w", wv);
  const Var<double> x = tape.leaf(xv);
  const Var<double> f = sum(mul(mul(mul(x, x), x), tape.param(w)));
  const xt::xarray<double> vx = {1.0, -2.0, 0.5};
  const xt::xarray<double> vw = {0.25, 1.5, -1.0};
  // d2f/dx2 = diag(6 w x), d2f/dxdw = diag(3 x^2), d2f/dw2 = 0
  const std::vector<Var<double>> h = hvp(tape, f, {x, w}, {vx, vw});
  check_close(h[0].value(), xt::xarray<double>(6.0 * wv * xv * vx + 3.0 * xv * xv * vw));
  check_close(h[1].value(), xt::xarray<double>(3.0 * xv * xv * vx));
  CHECK(!h[0].requires_grad());
  CHECK(!w.has_grad);
  // A function linear in the inputs has H = 0; with create_graph H v is differentiable.
  const Var<double> lin = sum(mul(x, tape.leaf(wv, false)));
  check_close(hvp(tape, lin, {x}, {vx})[0].value(), xt::xarray<double>(xt::zeros<double>({3})));
  const Var<double> hv = hvp(tape, f, {x}, {vx}, HvpOptions{true})[0];  // 6 w x vx
  CHECK(hv.requires_grad());
  check_close(grad(tape, {sum(hv)}, {x})[0].value(), xt::xarray<double>(6.0 * wv * vx));
}
