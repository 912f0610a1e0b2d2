#pragma once
// Sets a module's parameters from a PyTorch fixture case of
// make_modules.py, by name: the names must be exactly the fixture's, in its
// order, and each shape must already match.

#include <cstddef>
#include <vector>

#include <doctest/doctest.h>
#include <xtgrad/modules/module.hpp>

#include "fixtures/fixture_array.hpp"
#include "fixtures/modules_fixtures.hpp"

namespace xtgrad::testing {

template <class T, std::size_t N>
void load_fixture(Module<T>& module, const fixtures::modules::Tensor (&params)[N]) {
  auto named = module.named_parameters();
  REQUIRE(named.size() == N);
  for (std::size_t i = 0; i < N; ++i) {
    CHECK(named[i].first == params[i].name);
    const std::vector<std::size_t> shape(params[i].shape, params[i].shape + params[i].rank);
    REQUIRE(named[i].second->value.shape() == Shape(shape.begin(), shape.end()));
    named[i].second->value = from_fixture<T>(params[i].values, shape);
  }
}

}  // namespace xtgrad::testing
