#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/engine/kernels/counter_rng.hpp>
#include <xtgrad/engine/ops/dropout.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Block = std::array<std::uint32_t, 4>;

// Philox4x32-10 written out from Salmon et al. 2011 (independent of the
// engine's copy; both are checked against Random123's known answers).
Block reference_philox(Block c, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t a = 0xD2511F53ull * c[0], b = 0xCD9E8D57ull * c[2];
    c = {std::uint32_t(b >> 32) ^ c[1] ^ k0, std::uint32_t(b), std::uint32_t(a >> 32) ^ c[3] ^ k1,
         std::uint32_t(a)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Random123's kat_vectors for philox4x32 10: {counter, key, output}.
struct Known {
  Block counter;
  std::array<std::uint32_t, 2> key;
  Block output;
};
const Known k_known[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

// Is element g of (seed, step) kept? u = word / 2^32 >= p, word g being lane
// g % 4 of the block with counter (g / 4, step) and key seed (dropout.hpp).
bool reference_kept(std::uint64_t seed, std::uint64_t step, std::uint64_t g, double p) {
  const std::uint64_t block = g / 4;
  const Block out = reference_philox({std::uint32_t(block), std::uint32_t(block >> 32),
                                      std::uint32_t(step), std::uint32_t(step >> 32)},
                                     std::uint32_t(seed), std::uint32_t(seed >> 32));
  return std::ldexp(static_cast<double>(out[g % 4]), -32) >= p;
}

// The kept elements (y != 0) of dropout over n ones.
std::vector<bool> mask_of(std::size_t n, double p, const DropoutKey& key) {
  Tape<float> tape;
  Var<float> y = dropout(tape.leaf(xt::xarray<float>(xt::ones<float>({n}))), p, true, key);
  std::vector<bool> kept(n);
  for (std::size_t i = 0; i < n; ++i) kept[i] = y.value()(i) != 0.0f;
  return kept;
}

}  // namespace

TEST_CASE("counter_rng: Philox4x32-10 gives Random123's known answers, batched too") {
  for (const Known& k : k_known) {
    CHECK(reference_philox(k.counter, k.key[0], k.key[1]) == k.output);
    CHECK(detail::philox4x32_10(k.counter, k.key) == k.output);
  }
  // the batch: block b of the batch is counter {block0 + b (64 bits), stream (64 bits)}
  const std::uint64_t block0 = 0xfffffffaull, stream = 0x0123456789abcdefull;
  std::uint32_t out[4 * detail::k_philox_batch];
  detail::philox4x32_10_batch(block0, stream, {0xa4093822, 0x299f31d0}, out);
  for (std::size_t b = 0; b < detail::k_philox_batch; ++b) {
    const std::uint64_t c = block0 + b;
    const Block expected = reference_philox({std::uint32_t(c), std::uint32_t(c >> 32),
                                             std::uint32_t(stream), std::uint32_t(stream >> 32)},
                                            0xa4093822, 0x299f31d0);
    for (std::size_t lane = 0; lane < 4; ++lane) CHECK(out[4 * b + lane] == expected[lane]);
  }
}

TEST_CASE_TEMPLATE("dropout: each element is kept iff its uniform is >= p, scaled by 1/(1-p)", T,
                   float, double) {
  const DropoutKey key{0x5eed0000deadbeefull, 0x100000007ull, 6};  // unaligned first element
  const xt::xarray<T> x = random_array<T>({7, 3, 13}, 1, -2.0, 2.0);
  const xt::xarray<T> dy = random_array<T>({7, 3, 13}, 2);
  for (double p : {0.1, 0.5, 0.8}) {
    CAPTURE(p);
    Tape<T> tape;
    Var<T> xv = tape.leaf(x);
    Var<T> y = dropout(xv, p, true, key);
    tape.backward(y, dy);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    std::size_t kept = 0, mismatches = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const bool k = reference_kept(key.seed, key.step, key.first_element + i, p);
      kept += k;
      // kept: x * scale; dropped: exactly 0; the gradient is mask / (1 - p) * dy
      mismatches += y.value().data()[i] != (k ? x.data()[i] * scale : T(0));
      mismatches += xv.grad().data()[i] != (k ? dy.data()[i] * scale : T(0));
    }
    CHECK(mismatches == 0);
    CHECK(kept > 0);
    CHECK(kept < x.size());
  }
}

TEST_CASE("dropout: the kept fraction over 1M elements is within 4 sigma of 1 - p") {
  const std::size_t n = 1 << 20;
  for (double p : {0.01, 0.1, 0.25, 0.5, 0.9}) {
    CAPTURE(p);
    const std::vector<bool> kept = mask_of(n, p, {42, 3, 0});
    std::size_t count = 0;
    for (bool k : kept) count += k;
    const double sigma = std::sqrt(p * (1 - p) / n);
    CHECK(std::abs(double(count) / n - (1 - p)) < 4 * sigma);
  }
}

TEST_CASE("dropout: masks of other steps and seeds differ and are uncorrelated") {
  const std::size_t n = 1 << 18;
  const double p = 0.3;
  const std::vector<bool> base = mask_of(n, p, {7, 0, 0});
  const DropoutKey others[] = {
      {7, 1, 0}, {8, 0, 0}, {7, 0, 1}, {1ull << 32 | 7, 0, 0}, {7, 1ull << 32, 0}};
  for (const DropoutKey& key : others) {
    CAPTURE(key.seed);
    CAPTURE(key.step);
    CAPTURE(key.first_element);
    const std::vector<bool> other = mask_of(n, p, key);
    std::size_t agree = 0;
    for (std::size_t i = 0; i < n; ++i) agree += base[i] == other[i];
    // independent masks agree with probability p^2 + (1-p)^2
    const double rate = p * p + (1 - p) * (1 - p), sigma = std::sqrt(rate * (1 - rate) / n);
    CHECK(std::abs(double(agree) / n - rate) < 4 * sigma);
  }
}

TEST_CASE_TEMPLATE("dropout: one key, one output - shards keyed by sample reproduce the batch", T,
                   float, double) {
  const std::size_t batch = 10, features = 13;  // 13: shard boundaries off the 4-word blocks
  const xt::xarray<T> x = random_array<T>({batch, features}, 3);
  const DropoutKey key{99, 5, 0};
  Tape<T> tape;
  Var<T> xv = tape.leaf(x);
  const xt::xarray<T> whole = dropout(xv, 0.4, true, key).value();
  const xt::xarray<T> again = dropout(xv, 0.4, true, key).value();
  CHECK(std::memcmp(whole.data(), again.data(), whole.size() * sizeof(T)) == 0);
  for (std::size_t split : {1, 3, 7}) {
    CAPTURE(split);
    const xt::xarray<T> first = xt::view(x, xt::range(0, split));
    const xt::xarray<T> second = xt::view(x, xt::range(split, batch));
    Var<T> a = dropout(tape.leaf(first), 0.4, true, {99, 5, 0});
    Var<T> b = dropout(tape.leaf(second), 0.4, true, {99, 5, split * features});
    const xt::xarray<T> joined = xt::concatenate(xt::xtuple(a.value(), b.value()), 0);
    CHECK(std::memcmp(whole.data(), joined.data(), whole.size() * sizeof(T)) == 0);
  }
  // float and double draw the same mask
  Tape<double> tape_d;
  const xt::xarray<double> yd =
      dropout(tape_d.leaf(xt::xarray<double>(xt::cast<double>(x))), 0.4, true, key).value();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK((yd.data()[i] == 0) == (whole.data()[i] == 0));
}

TEST_CASE_TEMPLATE("dropout: identity, p = 1 and non-finite values", T, float, double) {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const xt::xarray<T> x = {1, -2, nan, inf, 5, -inf, 7, 8};
  const xt::xarray<T> dy = {1, 2, 3, 4, 5, 6, 7, 8};
  Tape<T> tape;
  Var<T> xv = tape.leaf(x);
  for (auto [p, training] : {std::pair{0.5, false}, std::pair{0.0, true}, std::pair{1.0, false}}) {
    tape.zero_grad();
    Var<T> y = dropout(xv, p, training, {1, 2, 3});
    tape.backward(y, dy);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK((std::isnan(x(i)) ? std::isnan(y.value()(i)) : y.value()(i) == x(i)));
      CHECK(xv.grad()(i) == dy(i));
    }
  }
  tape.zero_grad();
  Var<T> zeros = dropout(xv, 1.0, true, {1, 2, 3});
  tape.backward(zeros, dy);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(zeros.value()(i) == 0);  // also NaN and Inf
    CHECK(xv.grad()(i) == 0);
  }
  // p = 0.5: a dropped NaN or Inf is 0, a kept one stays itself
  Var<T> half = dropout(xv, 0.5, true, {1, 2, 3});
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool k = reference_kept(1, 2, 3 + i, 0.5);
    if (!k) CHECK(half.value()(i) == 0);
    if (k && !std::isfinite(x(i))) CHECK(std::isnan(x(i)) == std::isnan(half.value()(i)));
  }
  // anomaly mode names dropout for a non-finite output, and records nothing
  Var<T> all_nan = tape.leaf(xt::xarray<T>(xt::ones<T>({16}) * nan));  // an Inf input is no anomaly
  Var<T> finite = tape.leaf(xt::xarray<T>(xt::ones<T>({16})));
  tape.set_detect_anomaly(true);
  for (bool training : {true, false}) {
    INFO("training: " << training);
    check_forward_anomaly(tape, "dropout", [&] { dropout(all_nan, 0.5, training, {4, 5, 6}); });
  }
  CHECK_NOTHROW(dropout(finite, 0.999, true, {4, 5, 6}));
}

TEST_CASE("dropout: gradcheck with a fixed key") {
  const auto x = random_array<double>({4, 9}, 4, -2.0, 2.0);
  using V = std::vector<Var<double>>;
  check_gradients([](const V& v) { return dropout(v[0], 0.3, true, {11, 12, 13}); }, {x});
  check_gradients([](const V& v) { return dropout(v[0], 0.3, false, {11, 12, 13}); }, {x});
  check_gradients([](const V& v) { return dropout(v[0], 1.0, true, {11, 12, 13}); }, {x});
}

TEST_CASE_TEMPLATE("dropout: edge shapes, strided views, accumulation", T, float, double) {
  Tape<T> tape;
  const DropoutKey key{21, 22, 23};
  // 0-d: element 0 of the key; [0, D]: empty
  Var<T> s = tape.leaf(xt::xarray<T>(T(2)));
  Var<T> ys = dropout(s, 0.5, true, key);
  CHECK(ys.shape() == Shape{});
  CHECK(ys.value()() == (reference_kept(21, 22, 23, 0.5) ? T(4) : T(0)));
  Var<T> empty = tape.leaf(xt::xarray<T>(xt::zeros<T>({0, 5})));
  Var<T> ye = dropout(empty, 0.5, true, key);
  CHECK(ye.shape() == Shape{0, 5});
  tape.backward(ye, xt::xarray<T>(xt::zeros<T>({0, 5})));
  // 3-d is the flat sequence of its elements
  const xt::xarray<T> x3 = random_array<T>({2, 3, 5}, 5);
  const xt::xarray<T> flat = xt::flatten(x3);
  Var<T> a = dropout(tape.leaf(x3), 0.25, true, key), b = dropout(tape.leaf(flat), 0.25, true, key);
  check_close(xt::xarray<T>(xt::flatten(a.value())), b.value(), 0, 0);
  // a strided view is masked as its contiguous copy
  const auto strided = xt::view(xt::transpose(x3), xt::all(), xt::range(0, 3, 2));
  const xt::xarray<T> copy = strided;
  Var<T> vs = tape.leaf(strided), vc = tape.leaf(copy);
  Var<T> y1 = dropout(vs, 0.25, true, key), y2 = dropout(vc, 0.25, true, key);
  check_close(y1.value(), y2.value(), 0, 0);
  // two backwards give twice the gradient
  const xt::xarray<T> dy =
      random_array<T>(std::vector<std::size_t>(copy.shape().begin(), copy.shape().end()), 6);
  tape.backward(y1, dy);
  const xt::xarray<T> once = vs.grad();
  tape.backward(y1, dy);
  check_close(vs.grad(), xt::xarray<T>(2 * once), 0, 0);
  // needs no gradient: none recorded
  Var<T> data = tape.leaf(copy, false);
  CHECK_FALSE(dropout(data, 0.5, true, key).requires_grad());
}

TEST_CASE_TEMPLATE("bad input: dropout", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));
  tape.backward(sum(dropout(x, 0.5, true, {1, 2, 3})));
  const auto snapshot = snapshot_of<T>({&tape}, {x});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  for (double p : {-0.1, 1.5, -k_inf, k_inf, k_nan}) {
    const std::string shown = p != p        ? "nan"
                              : p == k_inf  ? "inf"
                              : p == -k_inf ? "-inf"
                              : p == -0.1   ? "-0.1"
                                            : "1.5";
    bad("dropout: p = " + shown, [&, p] { dropout(x, p, true, {}); }, IA,
        {"dropout", "'p'", "is " + shown, "[0, 1]"});
    bad("dropout: p = " + shown + " outside training", [&, p] { dropout(x, p, false, {}); }, IA,
        {"dropout", "'p'", "is " + shown});
  }
  add_handle_rows<T>(
      rows, "dropout", {"x"}, {x},
      [](const std::vector<Var<T>>& a) { dropout(a[0], 0.5, true, {}); }, other, stale);
  report("dropout", run_rows(rows, snapshot));
}
