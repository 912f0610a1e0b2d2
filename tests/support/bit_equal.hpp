#pragma once
// Equality with no rounding allowed, for resumed runs and saved state: the
// same shape and the same bytes (-0.0 differs from 0.0, a NaN equals itself).

#include <cstring>

#include <xtensor/xarray.hpp>

namespace xtgrad::testing {

template <class T>
bool bit_equal(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

inline bool bit_equal(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace xtgrad::testing
