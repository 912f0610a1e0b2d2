// DistributedSampler (data/distributed_sampler.hpp): P ranks' shards against
// Batcher's batches, the padding or dropping of the last batch, bad
// arguments, and gather_rows / gather_labels.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include <xtgrad/data/data.hpp>

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
