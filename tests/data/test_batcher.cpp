// Batcher and shuffled_order (data/batcher.hpp), and next_token_windows and
// random_token_windows (data/token_windows.hpp), the batches of a token sequence. The reference
// shuffle is written out again here as a plain loop from its description
// (std::mt19937_64 seeded by std::seed_seq, rejection draws, Fisher-Yates).
// Its rejection keeps the outputs below the largest multiple of the bound;
// the library's drops those below 2^64 mod bound: either is uniform, and at
// these sizes (a rejection has probability below bound / 2^64) neither ever
// rejects, so both consume the generator alike.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/data/batcher.hpp>
#include <xtgrad/data/counter_key.hpp>
#include <xtgrad/data/token_windows.hpp>

#include "support/bad_input.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

std::vector<std::size_t> reference_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::seed_seq words{std::uint32_t(seed & 0xffffffffu), std::uint32_t(seed >> 32),
                      std::uint32_t(epoch & 0xffffffffu), std::uint32_t(epoch >> 32)};
  std::mt19937_64 g(words);
  std::vector<std::size_t> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = i;
  for (std::size_t i = n - 1; i >= 1 && n > 0; --i) {
    const std::uint64_t bound = i + 1;
    const std::uint64_t limit = std::uint64_t(-1) - (std::uint64_t(-1) % bound + 1) % bound;
    std::uint64_t r;
    do r = g();
    while (r > limit);  // keep r in the largest multiple of bound
    std::swap(a[i], a[r % bound]);
  }
  return a;
}

// Inputs [n, 2]: row i is (i, -i); labels i % 3.
Batcher<double> numbered(std::size_t n, BatcherOptions options) {
  xt::xarray<double> x = xt::empty<double>({n, std::size_t{2}});
  Indices y = Indices::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) {
    x(i, 0) = double(i);
    x(i, 1) = -double(i);
    y(i) = std::int64_t(i % 3);
  }
  return Batcher<double>(x, y, options);
}

}  // namespace

TEST_CASE("shuffled_order: std::mt19937_64 is the standard's sequence") {
  // [rand.predef]: the 10000th output of a default-constructed mt19937_64.
  std::mt19937_64 g;
  g.discard(9999);
  CHECK(g() == 9981545732273789042ull);
}

TEST_CASE(
    "shuffled_order: equals the reference loop, is a permutation, and depends on seed and epoch") {
  for (const std::size_t n : {0, 1, 2, 7, 1000}) {
    for (const std::uint64_t seed : {0ull, 42ull, 0x123456789abcdefull}) {
      for (const std::uint64_t epoch : {0ull, 1ull, 1ull << 40}) {
        const auto order = shuffled_order(n, seed, epoch);
        CHECK(order == reference_order(n, seed, epoch));
        std::vector<std::size_t> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<std::size_t> identity(n);
        std::iota(identity.begin(), identity.end(), std::size_t{0});
        CHECK(sorted == identity);
      }
    }
  }
  CHECK(shuffled_order(1000, 0, 0) != shuffled_order(1000, 0, 1));
  CHECK(shuffled_order(1000, 0, 0) != shuffled_order(1000, 1, 0));
  CHECK(shuffled_order(1000, 1ull << 32, 0) !=
        shuffled_order(1000, 0, 0));  // both seed halves count
  CHECK(shuffled_order(1000, 5, 3) == shuffled_order(1000, 5, 3));
}

TEST_CASE("shuffled_order: each of the 6 orders of 3 items comes up about equally often") {
  std::map<std::vector<std::size_t>, std::size_t> counts;
  for (std::uint64_t epoch = 0; epoch < 6000; ++epoch) ++counts[shuffled_order(3, 7, epoch)];
  REQUIRE(counts.size() == 6);
  // Expected 1000 each, standard deviation about 29: 150 is five of them.
  for (const auto& [order, count] : counts) CHECK(std::abs(double(count) - 1000.0) < 150.0);
}

TEST_CASE(
    "Batcher: keeps or drops the last partial batch and yields [B, ...] rows with their labels") {
  for (const bool drop_last : {false, true}) {
    INFO("drop_last " << drop_last);
    Batcher<double> batcher = numbered(10, {4, true, drop_last, 3});
    CHECK(batcher.batches_per_epoch() == (drop_last ? 2u : 3u));
    const auto order = shuffled_order(10, 3, 2);
    batcher.start_epoch(2);
    Batch<double> batch;
    std::vector<std::size_t> seen, sizes;
    while (batcher.next(batch)) {
      const std::size_t b = batch.labels.size();
      sizes.push_back(b);
      REQUIRE(batch.inputs.shape() == std::vector<std::size_t>{b, 2});
      for (std::size_t k = 0; k < b; ++k) {
        const std::size_t i = batch.indices[k];
        CHECK(batch.inputs(k, 0) == double(i));
        CHECK(batch.inputs(k, 1) == -double(i));
        CHECK(batch.labels(k) == std::int64_t(i % 3));
        seen.push_back(i);
      }
    }
    CHECK(sizes ==
          (drop_last ? std::vector<std::size_t>{4, 4} : std::vector<std::size_t>{4, 4, 2}));
    const std::vector<std::size_t> expected(order.begin(), order.begin() + (drop_last ? 8 : 10));
    CHECK(seen == expected);
    const Batch<double> after = batch;
    CHECK_FALSE(batcher.next(batch));  // the epoch is over; batch unchanged
    CHECK(batch.indices == after.indices);
  }
}

TEST_CASE("Batcher: without shuffle the order is 0..N-1, and an epoch replays exactly") {
  Batcher<double> plain = numbered(5, {2, false, false, 9});
  plain.start_epoch(7);
  Batch<double> batch;
  std::vector<std::size_t> seen;
  while (plain.next(batch)) seen.insert(seen.end(), batch.indices.begin(), batch.indices.end());
  CHECK(seen == std::vector<std::size_t>{0, 1, 2, 3, 4});

  Batcher<double> shuffled = numbered(9, {4, true, false, 9});
  auto epoch_indices = [&](std::uint64_t e) {
    shuffled.start_epoch(e);
    std::vector<std::size_t> out;
    Batch<double> b;
    while (shuffled.next(b)) out.insert(out.end(), b.indices.begin(), b.indices.end());
    return out;
  };
  const auto e1 = epoch_indices(1), e2 = epoch_indices(2);
  CHECK(e1 != e2);
  CHECK(epoch_indices(1) == e1);
}

TEST_CASE("Batcher: higher-rank examples and a batch larger than the data set") {
  xt::xarray<float> x = xt::empty<float>({3, 2, 2});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = float(i);
  Batcher<float> batcher(x, Indices{0, 1, 2}, {8, false, false, 0});
  Batch<float> batch;
  REQUIRE(batcher.next(batch));
  CHECK(batch.inputs == x);
  CHECK_FALSE(batcher.next(batch));
  Batcher<float> dropped(x, Indices{0, 1, 2}, {8, true, true, 0});
  CHECK(dropped.batches_per_epoch() == 0);
  CHECK_FALSE(dropped.next(batch));
  Batcher<float> none(xt::empty<float>({0, 4}), Indices::from_shape({0}), {2, true, false, 0});
  CHECK(none.batches_per_epoch() == 0);
  CHECK_FALSE(none.next(batch));
}

TEST_CASE("bad input: Batcher") {
  const std::vector<Row> rows = {
      {"0-d inputs",
       [] { Batcher<float>(xt::xarray<float>(1.0f), Indices{0}, {}); },
       Expect::invalid_argument,
       {"Batcher", "'inputs'", "is 0-d"}},
      {"fewer labels than rows",
       [] {
         Batcher<float>(xt::zeros<float>({3, 2}), Indices{0, 1}, {});
       },
       Expect::invalid_argument,
       {"Batcher", "'labels'", "[2]", "expected [3]"}},
      {"labels of rank 2",
       [] {
         Batcher<float>(xt::zeros<float>({2, 2}), Indices::from_shape({2, 1}), {});
       },
       Expect::invalid_argument,
       {"Batcher", "'labels'", "[2, 1]", "expected [2]"}},
      {"batch_size 0",
       [] {
         Batcher<float>(xt::zeros<float>({2, 2}), Indices{0, 1}, {0, true, false, 0});
       },
       Expect::invalid_argument,
       {"Batcher", "'batch_size'", "is 0"}},
  };
  MESSAGE(run_rows(rows, [] { return State(); }) << " rows");
}

TEST_CASE(
    "next_token_windows: each row and its targets one token further on, bad windows refused") {
  const std::vector<std::int64_t> ids = {10, 11, 12, 13, 14, 15};
  const TokenWindows w = next_token_windows(ids.data(), ids.size(), {3, 0}, 2);
  CHECK(w.inputs == Indices{{13, 14}, {10, 11}});
  CHECK(w.targets == Indices{14, 15, 11, 12});
  const std::vector<Row> rows = {
      {"a window past the end",
       [&] {
         next_token_windows(ids.data(), ids.size(), {0, 4}, 2);
       },
       Expect::invalid_argument,
       {"next_token_windows", "'starts'", "window 1 from 4", "needs 3 tokens"}},
      {"T 0",
       [&] { next_token_windows(ids.data(), ids.size(), {0}, 0); },
       Expect::invalid_argument,
       {"next_token_windows", "'T'", "is 0"}},
  };
  MESSAGE(run_rows(rows, [] { return State(); }) << " rows");
}

TEST_CASE("random_token_windows: rows keyed by (seed, step, row), so that slices make the batch") {
  std::vector<std::int64_t> ids(40);
  std::iota(ids.begin(), ids.end(), 100);
  const TokenWindows whole = random_token_windows(ids.data(), ids.size(), 5, 7, 3, 0, 4);
  for (std::size_t r = 0; r < 4; ++r) {  // row r from counter_key(seed, "window", step, r)
    const auto start = std::int64_t(counter_key(7, 0x77696e646f77ULL, 3, r) % (40 - 5));
    CHECK(whole.inputs(r, 0) == 100 + start);
  }
  const TokenWindows rows_2_3 = random_token_windows(ids.data(), ids.size(), 5, 7, 3, 2, 2);
  for (std::size_t t = 0; t < 5; ++t) {
    CHECK(rows_2_3.inputs(0, t) == whole.inputs(2, t));
    CHECK(rows_2_3.inputs(1, t) == whole.inputs(3, t));
  }
  CHECK(random_token_windows(ids.data(), ids.size(), 5, 7, 4, 0, 4).inputs != whole.inputs);
  CHECK_THROWS_WITH_AS(random_token_windows(ids.data(), 5, 5, 7, 3, 0, 1),
                       "xtgrad::random_token_windows: argument 'length' is 5, expected at least "
                       "T + 1 = 6",
                       std::invalid_argument);
}
