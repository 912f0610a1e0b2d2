#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include <xtgrad/engine/ops/attention.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/attention_reference.hpp"
#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

enum class MaskKind { none, boolean, additive };

struct Case {
  const char* name;
  std::vector<std::size_t> q, k, v;
  MaskKind mask = MaskKind::none;
  std::vector<std::size_t> mask_shape = {};
  bool causal = false;
  double p = 0.0;
  std::optional<double> scale = std::nullopt;
  bool gqa = false;
};

const std::vector<Case> k_cases = {
    {"one head, no mask", {1, 1, 7, 5}, {1, 1, 7, 5}, {1, 1, 7, 5}},
    {"Dh 13, Tk 129, boolean [Tq, Tk]",
     {2, 2, 7, 13},
     {2, 2, 129, 13},
     {2, 2, 129, 13},
     MaskKind::boolean,
     {7, 129}},
    {"Tq 129 > Tk 7, Dv 6, additive [B, 1, Tq, Tk]",
     {2, 3, 129, 5},
     {2, 3, 7, 5},
     {2, 3, 7, 6},
     MaskKind::additive,
     {2, 1, 129, 7}},
    {"boolean [1, H, 1, Tk]",
     {2, 3, 9, 8},
     {2, 3, 33, 8},
     {2, 3, 33, 8},
     MaskKind::boolean,
     {1, 3, 1, 33}},
    {"causal, Tq 5 < Tk 9", {1, 2, 5, 13}, {1, 2, 9, 13}, {1, 2, 9, 13}, MaskKind::none, {}, true},
    {"causal, Tq 9 > Tk 5", {1, 2, 9, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}, MaskKind::none, {}, true},
    {"causal and boolean, T 129",
     {1, 2, 129, 13},
     {1, 2, 129, 13},
     {1, 2, 129, 13},
     MaskKind::boolean,
     {129, 129},
     true},
    {"T 1", {2, 2, 1, 5}, {2, 2, 1, 5}, {2, 2, 1, 5}},
    {"GQA 4 over 2 heads, Dv 3 != Dh 5",
     {2, 4, 7, 5},
     {2, 2, 11, 5},
     {2, 2, 11, 3},
     MaskKind::none,
     {},
     false,
     0.0,
     std::nullopt,
     true},
    {"unbatched [H, T, D], causal and boolean",
     {3, 7, 5},
     {3, 9, 5},
     {3, 9, 5},
     MaskKind::boolean,
     {7, 9},
     true},
    {"unbatched [T, D], additive [Tk]", {7, 5}, {9, 5}, {9, 6}, MaskKind::additive, {9}},
    {"logits of +-1e4 (scale 1e4)",
     {1, 2, 7, 5},
     {1, 2, 7, 5},
     {1, 2, 7, 5},
     MaskKind::none,
     {},
     false,
     0.0,
     1e4},
    {"dropout 0.3, causal, additive",
     {2, 2, 7, 5},
     {2, 2, 70, 5},
     {2, 2, 70, 5},
     MaskKind::additive,
     {7, 70},
     true,
     0.3},
    {"dropout 0.5, GQA, causal, T 129",
     {1, 4, 129, 13},
     {1, 2, 129, 13},
     {1, 2, 129, 7},
     MaskKind::none,
     {},
     true,
     0.5,
     0.25,
     true},
};

struct Inputs {
  xt::xarray<double> q, k, v, dy, additive;
  xt::xarray<bool> keep;
};

Inputs inputs_of(const Case& c, std::uint32_t seed = 1) {
  Inputs in;
  in.q = random_array<double>(c.q, seed);
  in.k = random_array<double>(c.k, seed + 1);
  in.v = random_array<double>(c.v, seed + 2);
  std::vector<std::size_t> out = c.q;
  out.back() = c.v.back();
  in.dy = random_array<double>(out, seed + 3);
  if (c.mask == MaskKind::boolean) in.keep = random_keep(c.mask_shape, seed + 4);
  if (c.mask == MaskKind::additive) in.additive = random_additive<double>(c.mask_shape, seed + 5);
  return in;
}

template <class T>
struct Outcome {
  xt::xarray<T> y, dq, dk, dv;
};

template <class T>
AttentionMask<T> mask_of(const Case& c, const Inputs& in) {
  if (c.mask == MaskKind::boolean) return in.keep;
  if (c.mask == MaskKind::additive) return xt::xarray<T>(xt::cast<T>(in.additive));
  return {};
}

template <class T>
Outcome<T> fused(const Case& c, const Inputs& in) {
  Tape<T> tape;
  Var<T> q = tape.leaf(xt::xarray<T>(xt::cast<T>(in.q)));
  Var<T> k = tape.leaf(xt::xarray<T>(xt::cast<T>(in.k)));
  Var<T> v = tape.leaf(xt::xarray<T>(xt::cast<T>(in.v)));
  Var<T> y = scaled_dot_product_attention(q, k, v, mask_of<T>(c, in), c.causal, c.p, c.scale,
                                          k_attention_key, c.gqa);
  tape.backward(y, xt::xarray<T>(xt::cast<T>(in.dy)));
  return {y.value(), q.grad(), k.grad(), v.grad()};
}

Outcome<double> composed(const Case& c, const Inputs& in) {
  Tape<double> tape;
  Var<double> q = tape.leaf(in.q), k = tape.leaf(in.k), v = tape.leaf(in.v);
  std::optional<xt::xarray<double>> bias;
  if (c.mask == MaskKind::boolean) bias = bias_of<double>(in.keep);
  if (c.mask == MaskKind::additive) bias = in.additive;
  const std::size_t tq = c.q[c.q.size() - 2], tk = c.k[c.k.size() - 2];
  if (c.causal)
    bias = bias ? xt::xarray<double>(*bias + causal_bias<double>(tq, tk))
                : causal_bias<double>(tq, tk);
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.q.back()));
  Var<double> y =
      composed_attention(tape, q, k, v, bias ? &*bias : nullptr, scale, c.p, k_attention_key);
  tape.backward(y, in.dy);
  return {y.value(), q.grad(), k.grad(), v.grad()};
}

// dq and dk carry the factor scale: their rounding residues scale with it.
template <class A>
void check_outcome(const Case& c, const Outcome<A>& a, const Outcome<double>& e, double rtol) {
  const double scaled = std::max(1.0, c.scale.value_or(1.0));
  check_relative(a.y, e.y, rtol);
  check_relative(a.dq, e.dq, rtol, scaled);
  check_relative(a.dk, e.dk, rtol, scaled);
  check_relative(a.dv, e.dv, rtol);
}

}  // namespace

TEST_CASE("attention: double equals matmul, softmax, dropout and matmul composed, to 1e-12") {
  for (const Case& c : k_cases) {
    INFO(std::string(c.name));
    const Inputs in = inputs_of(c);
    check_outcome(c, fused<double>(c, in), composed(c, in), 1e-12);
  }
}

// Float accumulates dot products of up to 129 terms and sums of up to 129
// probabilities in float (each rounding 2^-24 ~ 6e-8 relative, exp within 2
// ulp, errors growing like sqrt(n) for random signs), against the double
// composition: the worst error measured over these cases is 2.3e-7 of the
// array's scale; 2e-6 leaves a margin of about ten.
TEST_CASE("attention: float equals the double composition within float rounding") {
  for (const Case& c : k_cases) {
    INFO(std::string(c.name));
    const Inputs in = inputs_of(c, 11);
    check_outcome(c, fused<float>(c, in), composed(c, in), 2e-6);
  }
}

TEST_CASE("attention: gradcheck, small double cases") {
  const xt::xarray<bool> keep = random_keep({3, 4}, 7);
  const xt::xarray<double> additive = random_additive<double>({2, 1, 3, 4}, 8);
  check_gradients(
      [&](const std::vector<Var<double>>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], AttentionMask<double>(keep), true);
      },
      {random_array({2, 2, 3, 5}, 1), random_array({2, 2, 4, 5}, 2),
       random_array({2, 2, 4, 3}, 3)});
  check_gradients(
      [&](const std::vector<Var<double>>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], AttentionMask<double>(additive),
                                            false, 0.4, 0.7, k_attention_key, true);
      },
      {random_array({2, 4, 3, 5}, 4), random_array({2, 2, 4, 5}, 5),
       random_array({2, 2, 4, 3}, 6)});
  check_gradients(
      [&](const std::vector<Var<double>>& x) {
        return packed_qkv_attention(x[0], 2, {}, true, 0.2, std::nullopt, k_attention_key);
      },
      {random_array({2, 5, 12}, 9)});
}

TEST_CASE("attention: a query that sees no key gives 0 and passes no gradient") {
  const Case c{"row 2 fully masked", {2, 2, 5, 6},      {2, 2, 9, 6},
               {2, 2, 9, 4},         MaskKind::boolean, {2, 2, 5, 9}};
  Inputs in = inputs_of(c);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t j = 0; j < 9; ++j) in.keep(b, h, 2, j) = false;
  Outcome<double> got = fused<double>(c, in);
  // reference: row 2 given any visible key and no upstream gradient
  Inputs ref = in;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 2; ++h) {
      ref.keep(b, h, 2, 0) = true;
      for (std::size_t d = 0; d < 4; ++d) ref.dy(b, h, 2, d) = 0.0;
    }
  const Outcome<double> expected = composed(c, ref);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::size_t d = 0; d < 4; ++d) CHECK(got.y(b, h, 2, d) == 0.0);
      for (std::size_t d = 0; d < 6; ++d) CHECK(got.dq(b, h, 2, d) == 0.0);
      for (std::size_t d = 0; d < 4; ++d) got.y(b, h, 2, d) = expected.y(b, h, 2, d);
    }
  check_relative(got.y, expected.y, 1e-12);
  check_relative(got.dq, expected.dq, 1e-12);
  check_relative(got.dk, expected.dk, 1e-12);
  check_relative(got.dv, expected.dv, 1e-12);
}

TEST_CASE("attention: zero queries average the visible values") {
  const Case c{"zero q, causal", {1, 2, 6, 5}, {1, 2, 6, 5}, {1, 2, 6, 3},
               MaskKind::none,   {},           true};
  Inputs in = inputs_of(c);
  in.q = xt::zeros<double>(c.q);
  const Outcome<double> got = fused<double>(c, in);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t d = 0; d < 3; ++d) {
        double mean = 0.0;
        for (std::size_t j = 0; j <= i; ++j) mean += in.v(0, h, j, d) / static_cast<double>(i + 1);
        CHECK(std::abs(got.y(0, h, i, d) - mean) <= 1e-15);
      }
}

TEST_CASE_TEMPLATE("attention: dropout keeps exactly the elements dropout keeps", T, float,
                   double) {
  // with v = identity [Tk, Tk], y is the dropped probability matrix itself
  const std::size_t tq = 9, tk = 70;
  const xt::xarray<T> q = random_array<T>({2, 3, tq, 4}, 1), k = random_array<T>({2, 3, tk, 4}, 2);
  xt::xarray<T> v = xt::zeros<T>({std::size_t(2), std::size_t(3), tk, tk});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t j = 0; j < tk; ++j) v(b, h, j, j) = T(1);
  Tape<T> tape;
  Var<T> qv = tape.leaf(q), kv = tape.leaf(k), vv = tape.leaf(v);
  const xt::xarray<T> fused_y =
      scaled_dot_product_attention(qv, kv, vv, {}, false, 0.4, std::nullopt, k_attention_key)
          .value();
  const xt::xarray<T> dropped =
      dropout(softmax(matmul(qv, transpose(kv, -2, -1)) * T(0.5), -1), 0.4, true, k_attention_key)
          .value();
  std::size_t differ = 0, kept = 0;
  for (std::size_t e = 0; e < dropped.size(); ++e) {
    differ += (fused_y.data()[e] == T(0)) != (dropped.data()[e] == T(0));
    kept += dropped.data()[e] != T(0);
  }
  CHECK(differ == 0);
  CHECK(kept > dropped.size() / 2);
  CHECK(kept < dropped.size());
}

TEST_CASE("attention: the same bits on 1 and 2 threads, split key tiles included") {
  const int before = get_num_threads();
  // B Hkv = 1 with many key tiles (split over tasks), and B H = 12 (a task per head)
  for (const Case& c : {k_cases[6], k_cases[13],
                        Case{"GQA 2 over 1 head, Tk 1500",
                             {1, 2, 40, 16},
                             {1, 1, 1500, 16},
                             {1, 1, 1500, 16},
                             MaskKind::none,
                             {},
                             true,
                             0.2,
                             std::nullopt,
                             true},
                        Case{"12 heads",
                             {3, 4, 129, 16},
                             {3, 4, 100, 16},
                             {3, 4, 100, 16},
                             MaskKind::additive,
                             {3, 1, 129, 100},
                             true,
                             0.1}}) {
    INFO(std::string(c.name));
    const Inputs in = inputs_of(c, 21);
    set_num_threads(1);
    const Outcome<float> one = fused<float>(c, in);
    set_num_threads(2);
    const Outcome<float> two = fused<float>(c, in);
    CHECK(bit_equal(one.y, two.y));
    CHECK(bit_equal(one.dq, two.dq));
    CHECK(bit_equal(one.dk, two.dk));
    CHECK(bit_equal(one.dv, two.dv));
  }
  set_num_threads(before);
}

TEST_CASE("attention: under no-grad the same values, and no gradient") {
  const Case& c = k_cases[13];
  const Inputs in = inputs_of(c, 31);
  const Outcome<float> recorded = fused<float>(c, in);
  Tape<float> tape;
  Var<float> q = tape.leaf(xt::xarray<float>(xt::cast<float>(in.q)));
  Var<float> k = tape.leaf(xt::xarray<float>(xt::cast<float>(in.k)));
  Var<float> v = tape.leaf(xt::xarray<float>(xt::cast<float>(in.v)));
  NoGradGuard<float> guard(tape);
  Var<float> y =
      scaled_dot_product_attention(q, k, v, {}, c.causal, c.p, c.scale, k_attention_key, c.gqa);
  CHECK(bit_equal(y.value(), recorded.y));
  CHECK(!y.requires_grad());
}

TEST_CASE("attention: no keys give zeros, no queries an empty result") {
  Tape<double> tape;
  Var<double> q = tape.leaf(random_array({2, 3, 4}, 1));
  Var<double> k = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 0, 4})));
  Var<double> v = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 0, 5})));
  Var<double> y = scaled_dot_product_attention(q, k, v);
  CHECK(y.value() == xt::xarray<double>(xt::zeros<double>({2, 3, 5})));
  tape.backward(y, random_array({2, 3, 5}, 2));
  CHECK(q.grad() == xt::xarray<double>(xt::zeros<double>({2, 3, 4})));
  CHECK(k.grad().shape() == k.shape());

  Var<double> none = tape.leaf(xt::xarray<double>(xt::zeros<double>({2, 0, 4})));
  Var<double> k2 = tape.leaf(random_array({2, 6, 4}, 3)),
              v2 = tape.leaf(random_array({2, 6, 5}, 4));
  Var<double> empty = scaled_dot_product_attention(none, k2, v2, {}, true);
  CHECK(empty.shape() == Shape{2, 0, 5});
  tape.backward(empty, xt::xarray<double>(xt::zeros<double>({2, 0, 5})));
  CHECK(k2.grad() == xt::xarray<double>(xt::zeros<double>({2, 6, 4})));
  CHECK(v2.grad() == xt::xarray<double>(xt::zeros<double>({2, 6, 5})));
}

TEST_CASE("attention: one Var as q, k and v, and gradients that accumulate over backwards") {
  const xt::xarray<double> x = random_array({2, 3, 9, 6}, 51), dy = random_array({2, 3, 9, 6}, 52);
  Tape<double> tape;
  Var<double> xv = tape.leaf(x);
  Var<double> y = scaled_dot_product_attention(xv, xv, xv, {}, true);
  tape.backward(y, dy);
  const xt::xarray<double> once = xv.grad();
  tape.backward(y, dy);  // a second pass adds the same again
  Tape<double> ref;
  Var<double> xr = ref.leaf(x);
  const xt::xarray<double> bias = causal_bias<double>(9, 9);
  Var<double> yr = composed_attention(ref, xr, xr, xr, &bias, 1.0 / std::sqrt(6.0), 0.0, {});
  ref.backward(yr, dy);
  check_relative(y.value(), yr.value(), 1e-12);
  check_relative(once, xr.grad(), 1e-12);
  check_relative(xv.grad(), xt::xarray<double>(2.0 * xr.grad()), 1e-12);
}
