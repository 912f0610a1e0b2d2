// The single-process half of distributed/: dropout masks keyed by the
// global row (distributed/data_parallel.hpp). The sampler's tests are
// tests/data/test_distributed_sampler.cpp.
#include <doctest/doctest.h>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/data_parallel.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;

namespace {

// Runs model(x) in training on a fresh tape; returns the output.
template <class M>
xt::xarray<double> train_forward(M& model, const xt::xarray<double>& x) {
  Tape<double> tape;
  return model(tape.leaf(x, false)).value();
}

// The rows [0, 2) and [2, 4) of x [4, 3, 6] through two copies of one model,
// the second keyed from row `second_offset`, joined.
template <class M, class Make>
xt::xarray<double> halves(Make make, const xt::xarray<double>& x, std::uint64_t second_offset) {
  M a = make(), b = make();
  distributed::set_row_offset(b, second_offset);
  const xt::xarray<double> top = train_forward(a, xt::xarray<double>(xt::view(x, xt::range(0, 2))));
  const xt::xarray<double> bottom =
      train_forward(b, xt::xarray<double>(xt::view(x, xt::range(2, 4))));
  return xt::concatenate(xt::xtuple(top, bottom), 0);
}

template <class M, class Make>
void check_rows_reproduce(Make make) {
  const xt::xarray<double> x = testing::random_array<double>({4, 3, 6}, 3);
  M whole = make();
  const xt::xarray<double> one_process = train_forward(whole, x);
  CHECK(xt::allclose(halves<M>(make, x, 2), one_process, 1e-13, 1e-15));
  // Without the offset the second half repeats the first half's masks.
  CHECK_FALSE(xt::allclose(halves<M>(make, x, 0), one_process, 1e-6, 1e-8));
}

}  // namespace

TEST_CASE("row offset: a rank's rows get the dropout masks one process gives them") {
  check_rows_reproduce<Dropout<double>>([] { return Dropout<double>(0.5, 17); });
  check_rows_reproduce<FeedForward<double>>([] {
    Generator g(4);
    return FeedForward<double>(6, 8, Activation::gelu, 0.4, g);
  });
  check_rows_reproduce<GatedFFN<double>>([] {
    Generator g(4);
    return GatedFFN<double>(6, 8, 5, Activation::silu, GatedBias{}, 0.4, g);
  });
  check_rows_reproduce<Mlp<double>>([] {
    Generator g(4);
    return Mlp<double>(6, {8, 8}, 3, {Activation::relu, 0.4}, g);
  });
  PreNormResidualOptions o;
  o.dropout = 0.3, o.ffn_dropout = 0.4;
  check_rows_reproduce<PreNormResidual<double>>([o] {
    Generator g(4);
    return PreNormResidual<double>(6, 8, o, g);
  });
}

TEST_CASE("row offset: 0 by default, and the one-process mask of Dropout is unchanged") {
  Dropout<double> d(0.5, 17);
  CHECK(d.row_offset() == 0);
  const xt::xarray<double> x = xt::ones<double>({2, 3});
  Tape<double> tape;
  const xt::xarray<double> y = d(tape.leaf(x, false)).value();
  // The key of that forward was (17, 0, 0): the ops-level dropout with it.
  const xt::xarray<double> direct =
      dropout(tape.leaf(x, false), 0.5, true, DropoutKey{17, 0, 0}).value();
  CHECK(y == direct);
  CHECK(detail::elements_per_row({4, 3, 6}, 8) == 24);
  CHECK(detail::elements_per_row({5}, 5) == 5);
  CHECK(detail::elements_per_row({}, 1) == 1);
}
