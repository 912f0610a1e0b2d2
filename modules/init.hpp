#pragma once
// Parameter initialization shared by the modules.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/checked_size.hpp"  // checked_allocation, for every module constructor
#include "../engine/errors.hpp"        // check_positive_size, for every module constructor

namespace xtgrad {

// The generator modules draw their initial weights from. Pass your own,
// seeded, to control initialization; modules built without one use a
// generator seeded with k_default_seed, so they are reproducible too.
using Generator = std::mt19937_64;
inline constexpr std::uint64_t k_default_seed = 5489u;

namespace detail {

// Lets a constructor hand a temporary generator to one taking Generator&; the
// temporary lives until the end of the full expression.
template <class G>
G& lvalue(G&& temporary) {
  return temporary;
}

// Uniform in [-bound, bound): PyTorch's default for nn.Linear, whose
// kaiming_uniform_(a = sqrt(5)) on the weight and uniform bias both reduce to
// bound = 1 / sqrt(fan_in) (torch/nn/modules/linear.py, reset_parameters).
template <class T>
xt::xarray<T> uniform_fan_in(const std::vector<std::size_t>& shape, std::size_t fan_in,
                             Generator& generator) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  std::uniform_real_distribution<double> uniform(-bound, bound);
  xt::xarray<T> values = xt::empty<T>(shape);
  for (auto& v : values) v = static_cast<T>(uniform(generator));
  return values;
}

// Standard normal N(0, 1): torch.nn.init.normal_, nn.Embedding's default.
template <class T>
xt::xarray<T> standard_normal(const std::vector<std::size_t>& shape, Generator& generator) {
  std::normal_distribution<double> normal(0.0, 1.0);
  xt::xarray<T> values = xt::empty<T>(shape);
  for (auto& v : values) v = static_cast<T>(normal(generator));
  return values;
}

}  // namespace detail
}  // namespace xtgrad
