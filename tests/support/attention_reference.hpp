#pragma once
// Scaled dot-product attention composed of the engine's unfused ops (matmul,
// transpose, scaling, add, softmax, dropout, matmul), the reference the fused
// op is held to, and the inputs of the attention tests. Masks enter the
// reference as an additive bias: 0 where a key may be seen, -inf where a
// boolean mask or causality hides it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>

#include <xtgrad/engine/ops/dropout.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/matmul.hpp>
#include <xtgrad/engine/ops/shape.hpp>
#include <xtgrad/engine/ops/softmax.hpp>

#include "test_helpers.hpp"

namespace xtgrad::testing {

// The dropout key of the attention tests (an unaligned first element).
inline const DropoutKey k_attention_key{0x1234abcd5678ef01ull, 3, 5};

// [..., Hkv, T, D] -> [..., Hkv * group, T, D], kv head g repeated for its
// query heads g * group .. (g + 1) * group - 1 (expand, then reshape).
template <class T>
Var<T> repeat_heads(const Var<T>& x, std::size_t group) {
  if (group == 1) return x;
  const auto& s = x.shape();
  const std::size_t r = s.size();
  std::vector<std::int64_t> split, wide, merged;
  for (std::size_t a = 0; a + 3 < r; ++a) split.push_back(static_cast<std::int64_t>(s[a]));
  wide = split;
  merged = split;
  const auto hkv = static_cast<std::int64_t>(s[r - 3]), t = static_cast<std::int64_t>(s[r - 2]),
             d = static_cast<std::int64_t>(s[r - 1]), g = static_cast<std::int64_t>(group);
  split.insert(split.end(), {hkv, 1, t, d});
  wide.insert(wide.end(), {hkv, g, t, d});
  merged.insert(merged.end(), {hkv * g, t, d});
  return reshape(expand(reshape(x, split), wide), merged);
}

// softmax(scale q k^T + bias) (dropped out when p > 0) . v, on the tape of q.
template <class T>
Var<T> composed_attention(Tape<T>& tape, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                          const xt::xarray<T>* bias, double scale, double p,
                          const DropoutKey& key) {
  const std::size_t r = q.shape().size();
  const std::size_t group = r >= 3 ? q.shape()[r - 3] / k.shape()[r - 3] : 1;
  Var<T> s = matmul(q, transpose(repeat_heads(k, group), -2, -1)) * static_cast<T>(scale);
  if (bias != nullptr) s = s + tape.leaf(*bias, false);
  Var<T> probabilities = softmax(s, -1);
  if (p > 0) probabilities = dropout(probabilities, p, true, key);
  return matmul(probabilities, repeat_heads(v, group));
}

// 0 / -inf for a boolean mask (true = may attend).
template <class T>
xt::xarray<T> bias_of(const xt::xarray<bool>& keep) {
  xt::xarray<T> bias = xt::zeros<T>(keep.shape());
  for (std::size_t e = 0; e < keep.size(); ++e)
    if (!keep.data()[e]) bias.data()[e] = -std::numeric_limits<T>::infinity();
  return bias;
}

// The causal bias [Tq, Tk]: -inf where j > i.
template <class T>
xt::xarray<T> causal_bias(std::size_t tq, std::size_t tk) {
  xt::xarray<T> bias = xt::zeros<T>({tq, tk});
  for (std::size_t i = 0; i < tq; ++i)
    for (std::size_t j = i + 1; j < tk; ++j) bias(i, j) = -std::numeric_limits<T>::infinity();
  return bias;
}

// A random boolean mask that keeps about 70 % of keys and always key 0
// (so that no row is fully masked, with or without causality).
inline xt::xarray<bool> random_keep(const std::vector<std::size_t>& shape, std::uint32_t seed) {
  const xt::xarray<double> u = random_array<double>(shape, seed, 0.0, 1.0);
  xt::xarray<bool> keep = xt::zeros<bool>(shape);
  const std::size_t tk = shape.back();
  for (std::size_t e = 0; e < u.size(); ++e) keep.data()[e] = e % tk == 0 || u.data()[e] < 0.7;
  return keep;
}

// A random additive mask in [-2, 2] with about 20 % -inf, never at key 0.
template <class T>
xt::xarray<T> random_additive(const std::vector<std::size_t>& shape, std::uint32_t seed) {
  xt::xarray<T> add = random_array<T>(shape, seed, -2.0, 2.0);
  const xt::xarray<double> u = random_array<double>(shape, seed + 1, 0.0, 1.0);
  const std::size_t tk = shape.back();
  for (std::size_t e = 0; e < add.size(); ++e)
    if (e % tk != 0 && u.data()[e] < 0.2) add.data()[e] = -std::numeric_limits<T>::infinity();
  return add;
}

// |actual - expected| <= rtol (|expected| + floor), floor = max(max |expected|,
// `floor`): relative to the element, with the array's largest magnitude (at
// least the scale of the inputs' products, which are O(1) here) as the floor
// near zero, where a gradient that is exactly 0 in exact arithmetic comes out
// as a rounding residue (T = 1, one-hot probabilities).
template <class A>
void check_relative(const xt::xarray<A>& actual, const xt::xarray<double>& expected, double rtol,
                    double floor = 1.0) {
  const double top = std::max(floor, expected.size() ? xt::amax(xt::abs(expected))() : 0.0);
  REQUIRE(actual.shape() == expected.shape());
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t e = 0; e < expected.size(); ++e) {
    const double error = std::abs(static_cast<double>(actual.data()[e]) - expected.data()[e]) /
                         (std::abs(expected.data()[e]) + top);
    if (!(error <= worst)) {
      worst = error;
      at = e;
    }
  }
  INFO("worst relative error " << worst << " at flat index " << at << ": "
                               << (expected.size() ? actual.data()[at] : 0) << " vs "
                               << (expected.size() ? expected.data()[at] : 0));
  CHECK(worst <= rtol);
}

}  // namespace xtgrad::testing
