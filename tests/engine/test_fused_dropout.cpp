// The hidden dropout of activation_linear and gated_linear
// (engine/ops/fused_linear): equal to the unfused composition
// linear(dropout(activation(h) or gated(u, g)), W, b) with the same key, in
// value and every gradient, over several row blocks and both layouts;
// gradcheck; p = 0 and p = 1; the error for a bad p.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/ops/fused_linear.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

struct Grads {
  xt::xarray<double> y, du, dg, dw, db;
};

// One call, fused or as the composition of the unfused engine ops, then a
// backward with upstream dy; gated when u is given.
template <class T>
Grads run(bool fused, const std::optional<xt::xarray<T>>& uv, const xt::xarray<T>& gv,
          const xt::xarray<T>& wv, const xt::xarray<T>& bv, Activation f, WeightLayout layout,
          double p, const DropoutKey& key, const xt::xarray<T>& dy) {
  Tape<T> tape;
  const std::optional<Var<T>> u = uv ? std::optional(tape.leaf(*uv)) : std::nullopt;
  const Var<T> g = tape.leaf(gv), w = tape.leaf(wv), b = tape.leaf(bv);
  Var<T> y;
  if (fused) {
    const HiddenDropout drop{p, key};
    y = u ? gated_linear(*u, g, f, w, b, layout, drop)
          : activation_linear(g, f, w, b, layout, drop);
  } else {
    const Var<T> a = u ? gated(*u, g, f) : activation(g, f);
    y = linear(dropout(a, p, true, key), w, b, layout);
  }
  tape.backward(y, dy);
  Grads r;
  r.y = xt::cast<double>(y.value());
  if (u) r.du = xt::cast<double>(u->grad());
  r.dg = xt::cast<double>(g.grad());
  r.dw = xt::cast<double>(w.grad());
  r.db = xt::cast<double>(b.grad());
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("fused dropout: equals linear(dropout(f(h)), W, b) over several row blocks", T,
                   float, double) {
  // in = 4096: a backward row block is 64 (double) or 128 (float) rows, a
  // forward one 128 or 256, so 300 rows are several blocks, the last one
  // partial; the mask must follow each element's flat index across them.
  const std::size_t n = 300, in = 4096, out = 3;
  const DropoutKey key{20261201, 7, 12345};
  const double p = 0.3;
  for (const Activation f : {Activation::relu, Activation::gelu, Activation::silu}) {
    for (const WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      for (const bool gated_op : {false, true}) {
        CAPTURE(to_string(f));
        CAPTURE(layout == WeightLayout::out_in);
        CAPTURE(gated_op);
        const xt::xarray<T> g = random_array<T>({n, in}, 1);
        const std::optional<xt::xarray<T>> u =
            gated_op ? std::optional(random_array<T>({n, in}, 2)) : std::nullopt;
        const xt::xarray<T> w = layout == WeightLayout::out_in ? random_array<T>({out, in}, 3)
                                                               : random_array<T>({in, out}, 3);
        const xt::xarray<T> b = random_array<T>({out}, 4), dy = random_array<T>({n, out}, 5);
        const Grads fused = run<T>(true, u, g, w, b, f, layout, p, key, dy);
        const Grads plain = run<T>(false, u, g, w, b, f, layout, p, key, dy);
        // The hidden and its gradient are element for element the unfused
        // ones; only the GEMM sums may round differently.
        const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
        check_close(fused.y, plain.y, tol, tol);
        check_close(fused.dg, plain.dg, tol, tol);
        if (gated_op) check_close(fused.du, plain.du, tol, tol);
        check_close(fused.dw, plain.dw, tol, tol);
        check_close(fused.db, plain.db, tol, tol);
        // The dropped elements are exactly zero in both: same mask.
        const xt::xarray<bool> zero_fused = xt::equal(fused.dg, 0.0);
        CHECK(zero_fused == xt::xarray<bool>(xt::equal(plain.dg, 0.0)));
        // About p of the hidden gradient is dropped (relu' = 0 zeroes more).
        if (f == Activation::relu) continue;
        const double dropped = double(xt::sum(xt::cast<double>(zero_fused))()) / double(n * in);
        CHECK(std::abs(dropped - p) < 0.01);
      }
    }
  }
}

TEST_CASE("fused dropout: gradcheck of both ops and layouts in double") {
  const DropoutKey key{3, 1, 0};
  for (const Activation f : {Activation::gelu, Activation::silu, Activation::gelu_tanh}) {
    CAPTURE(to_string(f));
    const xt::xarray<double> h = random_array({2, 3, 4}, 10), u = random_array({2, 3, 4}, 11);
    const xt::xarray<double> w = random_array({5, 4}, 12), wt = random_array({4, 5}, 13);
    const xt::xarray<double> b = random_array({5}, 14);
    check_gradients(
        [f, key](const std::vector<Var<double>>& v) {
          return activation_linear(v[0], f, v[1], v[2], WeightLayout::out_in,
                                   HiddenDropout{0.4, key});
        },
        {h, w, b});
    check_gradients(
        [f, key](const std::vector<Var<double>>& v) {
          return gated_linear(v[0], v[1], f, v[2], v[3], WeightLayout::in_out,
                              HiddenDropout{0.4, key});
        },
        {u, h, wt, b});
  }
}

TEST_CASE("fused dropout: p = 0 is no dropout, p = 1 drops the whole hidden") {
  const xt::xarray<double> h = random_array({6, 4}, 20), w = random_array({3, 4}, 21);
  const xt::xarray<double> b = random_array({3}, 22), dy = random_array({6, 3}, 23);
  const DropoutKey key{1, 2, 3};
  for (const double p : {0.0, 1.0}) {
    CAPTURE(p);
    Tape<double> tape;
    Var<double> hv = tape.leaf(h), wv = tape.leaf(w), bv = tape.leaf(b);
    Var<double> y = activation_linear(hv, Activation::gelu, wv, bv, WeightLayout::out_in,
                                      HiddenDropout{p, key});
    tape.backward(y, dy);
    Tape<double> ref;
    Var<double> hr = ref.leaf(h), wr = ref.leaf(w), br = ref.leaf(b);
    Var<double> yr = activation_linear(hr, Activation::gelu, wr, br);
    ref.backward(yr, dy);
    if (p == 0.0) {  // exactly the op without dropout
      CHECK(y.value() == yr.value());
      CHECK(hv.grad() == hr.grad());
      CHECK(wv.grad() == wr.grad());
    } else {  // y = b on every row; no gradient reaches h or W
      for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t o = 0; o < 3; ++o) CHECK(y.value()(r, o) == b(o));
      CHECK(hv.grad() == xt::zeros<double>({6, 4}));
      CHECK(wv.grad() == xt::zeros<double>({3, 4}));
      CHECK(bv.grad() == br.grad());
    }
  }
}

TEST_CASE_TEMPLATE("fused dropout: a p outside [0, 1] is refused before anything is recorded", T,
                   float, double) {
  Tape<T> tape;
  Var<T> h = tape.leaf(random_array<T>({2, 4}, 30)), w = tape.leaf(random_array<T>({3, 4}, 31));
  const std::size_t before = tape.size();
  for (const double p : {-0.1, 1.5, std::nan("")}) {
    CAPTURE(p);
    CHECK_THROWS_WITH_PARTS(
        activation_linear(h, Activation::relu, w, {}, WeightLayout::out_in, HiddenDropout{p, {}}),
        std::invalid_argument, {"activation_linear", "'dropout.p'", "[0, 1]"});
    CHECK_THROWS_WITH_PARTS(
        gated_linear(h, h, Activation::silu, w, {}, WeightLayout::out_in, HiddenDropout{p, {}}),
        std::invalid_argument, {"gated_linear", "'dropout.p'", "[0, 1]"});
  }
  CHECK(tape.size() == before);
}
