// The single-process half of distributed/: the sampler's shards against
// Batcher's batches, and dropout masks keyed by the global row.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/data_parallel.hpp>
#include <xtgrad/distributed/sampler.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using distributed::DistributedSampler;
using distributed::DistributedSamplerOptions;
using distributed::Shard;

namespace {

// Batcher's batches (the one-process order) as index lists.
std::vector<std::vector<std::size_t>> batcher_batches(std::size_t n, std::size_t b, bool drop_last,
                                                      std::uint64_t seed, std::uint64_t epoch) {
  Batcher<double> batcher(xt::zeros<double>({n, std::size_t{1}}), xt::zeros<std::int64_t>({n}),
                          BatcherOptions{b, true, drop_last, seed});
  batcher.start_epoch(epoch);
  std::vector<std::vector<std::size_t>> out;
  for (Batch<double> batch; batcher.next(batch);) out.push_back(batch.indices);
  return out;
}

// shards[k][r]: rank r's shard of global batch k.
std::vector<std::vector<Shard>> shards(std::size_t n, DistributedSamplerOptions o, int ranks,
                                       std::uint64_t epoch) {
  std::vector<std::vector<Shard>> out;
  for (int r = 0; r < ranks; ++r) {
    DistributedSampler sampler(n, o, r, ranks);
    sampler.start_epoch(epoch);
    std::size_t k = 0;
    for (Shard s; sampler.next(s); ++k) {
      if (out.size() <= k) out.emplace_back();
      out[k].push_back(s);
    }
    CHECK(k == sampler.batches_per_epoch());
  }
  return out;
}

}  // namespace

TEST_CASE("sampler: P ranks' shards of each global batch are one process's batch, cut in order") {
  for (const int ranks : {1, 2, 3}) {
    // 48 = 4 full batches of 12: the shards are exactly Batcher's batches.
    const auto expected = batcher_batches(48, 12, false, 5, 2);
    const auto got = shards(48, {12, true, false, 5}, ranks, 2);
    REQUIRE(got.size() == expected.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      REQUIRE(got[k].size() == static_cast<std::size_t>(ranks));
      std::vector<std::size_t> joined;
      for (int r = 0; r < ranks; ++r) {
        const Shard& s = got[k][static_cast<std::size_t>(r)];
        CHECK(s.indices.size() == 12 / static_cast<std::size_t>(ranks));
        CHECK(s.row_offset == static_cast<std::size_t>(r) * (12 / static_cast<std::size_t>(ranks)));
        CHECK(s.global_rows == 12);
        joined.insert(joined.end(), s.indices.begin(), s.indices.end());
      }
      CHECK(joined == expected[k]);
    }
  }
}

TEST_CASE("sampler: the last batch is padded by wrapping to a multiple of P, or dropped") {
  const std::vector<std::size_t> order = shuffled_order(50, 9, 0);
  // 50 examples, 3 ranks: padded to 51 with the order's first example.
  const auto padded = shards(50, {12, true, false, 9}, 3, 0);
  REQUIRE(padded.size() == 5);
  for (int r = 0; r < 3; ++r) {
    const Shard& last = padded[4][static_cast<std::size_t>(r)];
    CHECK(last.indices.size() == 1);
    CHECK(last.row_offset == static_cast<std::size_t>(r));
    CHECK(last.global_rows == 3);
  }
  CHECK(padded[4][0].indices[0] == order[48]);
  CHECK(padded[4][1].indices[0] == order[49]);
  CHECK(padded[4][2].indices[0] == order[0]);
  // 2 ranks: 50 is even, nothing padded; the last batch is Batcher's.
  const auto even = shards(50, {12, true, false, 9}, 2, 0);
  REQUIRE(even.size() == 5);
  CHECK(even[4][0].indices == std::vector<std::size_t>{order[48]});
  CHECK(even[4][1].indices == std::vector<std::size_t>{order[49]});
  // drop_last: Batcher's drop_last batches, every one full.
  const auto dropped = shards(50, {12, true, true, 9}, 3, 0);
  const auto expected = batcher_batches(50, 12, true, 9, 0);
  REQUIRE(dropped.size() == expected.size());
  CHECK(dropped.size() == 4);
  // Without shuffle the order is 0, 1, ...
  const auto plain = shards(6, {6, false, false, 0}, 2, 0);
  CHECK(plain[0][0].indices == std::vector<std::size_t>{0, 1, 2});
  CHECK(plain[0][1].indices == std::vector<std::size_t>{3, 4, 5});
}

TEST_CASE("sampler: bad arguments are refused with a clear message") {
  CHECK_THROWS_WITH_AS(
      DistributedSampler(10, {10, true, false, 0}, 0, 3),
      doctest::Contains("argument 'global_batch_size' is 10, not divisible by the 3 ranks"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, {6, true, false, 0}, 3, 3),
                       doctest::Contains("argument 'rank' is 3, expected a rank in [0, 3)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, {0, true, false, 0}, 0, 1),
                       doctest::Contains("argument 'global_batch_size'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, {2, true, false, 0}, 0, 0),
                       doctest::Contains("argument 'ranks' is 0"), std::invalid_argument);
  const xt::xarray<double> data{{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}};
  xt::xarray<double> rows;
  distributed::gather_rows(data, {2, 0}, rows);
  CHECK(rows == xt::xarray<double>{{5.0, 6.0}, {1.0, 2.0}});
  CHECK_THROWS_WITH_AS(distributed::gather_rows(data, {1, 3}, rows),
                       doctest::Contains("holds 3 at position 1, expected an index below 3"),
                       std::invalid_argument);
  CHECK(rows == xt::xarray<double>{{5.0, 6.0}, {1.0, 2.0}});  // unchanged
  Indices labels{7, 8, 9}, picked;
  distributed::gather_labels(labels, {1, 1}, picked);
  CHECK(picked == Indices{8, 8});
}

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
