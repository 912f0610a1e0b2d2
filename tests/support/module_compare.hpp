#pragma once
// Two models' parameters compared, for runs that should train alike (data-
// parallel and sharded runs against one process, resumed against
// uninterrupted runs). Both models list their parameters in the same order.
#include <algorithm>
#include <cmath>

#include <doctest/doctest.h>

#include <xtgrad/modules/module.hpp>

#include "bit_equal.hpp"

namespace xtgrad::testing {

// max |a - b| / max |b| over each parameter, the largest over all of them.
template <class T>
double parameters_relative_error(Module<T>& a, Module<T>& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0.0;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    REQUIRE(pa[k]->value.shape() == pb[k]->value.shape());
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < pb[k]->value.size(); ++i) {
      diff =
          std::max(diff, std::abs(double(pa[k]->value.data()[i]) - double(pb[k]->value.data()[i])));
      scale = std::max(scale, std::abs(double(pb[k]->value.data()[i])));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-300));
  }
  return worst;
}

template <class T>
bool parameters_bit_equal(Module<T>& a, Module<T>& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (std::size_t k = 0; k < pa.size(); ++k)
    if (!bit_equal(pa[k]->value, pb[k]->value)) return false;
  return true;
}

}  // namespace xtgrad::testing
