#pragma once
// Helpers of the shape, slice and index tests: arrays from element lists and
// index lists (from_fixture, in fixtures/fixture_array.hpp, reads the PyTorch
// fixtures of tests/support/fixtures/shape_fixtures.hpp) and plain row-major
// index arithmetic for the loop references. (Anomaly checks:
// check_forward_anomaly in test_helpers.hpp.)

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtgrad/engine/indices.hpp>

#include "support/fixtures/fixture_array.hpp"

namespace xtgrad::testing {

using Dims = std::vector<std::size_t>;

// An array of the given shape from its elements in row-major order (nested
// braces such as {{5}, {6}} are ambiguous for xt::xarray).
template <class T>
xt::xarray<T> shaped_as(const Dims& shape, std::initializer_list<double> values) {
  REQUIRE(values.size() == std::size_t(xt::compute_size(shape)));
  return from_fixture<T>(values.begin(), shape);
}

inline Indices indices_from(const std::int64_t* values, const Dims& shape) {
  return from_fixture<std::int64_t>(values, shape);
}

inline Indices indices_as(const Dims& shape, std::initializer_list<std::int64_t> values) {
  REQUIRE(values.size() == std::size_t(xt::compute_size(shape)));
  return from_fixture<std::int64_t>(values.begin(), shape);
}

// Row-major multi-index of flat position `flat` in `dims`, and back.
inline Dims unravel_index(std::size_t flat, const Dims& dims) {
  Dims index(dims.size());
  for (std::size_t k = dims.size(); k-- > 0;) {
    index[k] = flat % dims[k];
    flat /= dims[k];
  }
  return index;
}
inline std::size_t ravel_index(const Dims& index, const Dims& dims) {
  std::size_t flat = 0;
  for (std::size_t k = 0; k < dims.size(); ++k) flat = flat * dims[k] + index[k];
  return flat;
}

template <class T>
Dims dims_of(const xt::xarray<T>& a) {
  return Dims(a.shape().begin(), a.shape().end());
}

}  // namespace xtgrad::testing
