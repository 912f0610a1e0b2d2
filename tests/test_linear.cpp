#include <doctest/doctest.h>

#include <xtgrad/engine/ops/linear.hpp>
#include <xtensor/xio.hpp>

using namespace xtgrad;

TEST_CASE("linear: smoke") {
  Tape<double> tape;
  auto x = tape.leaf(xt::xarray<double>{{1.0, 2.0}});
  auto w = tape.leaf(xt::xarray<double>{{1.0, 0.0}, {0.0, 1.0}, {1.0, 1.0}});
  auto b = tape.leaf(xt::xarray<double>{0.5, 0.5, 0.5});
  auto y = linear(x, w, b);
  CHECK(y.value() == xt::xarray<double>{{1.5, 2.5, 3.5}});
  tape.backward(y, xt::ones<double>({1, 3}));
  CHECK(x.grad() == xt::xarray<double>{{2.0, 2.0}});
}
