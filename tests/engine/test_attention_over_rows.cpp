// attention_over_rows (ops/attention.hpp): keys and values read in place from
// a strided buffer, as a KV cache holds them, give the bits of
// scaled_dot_product_attention over the same rows copied out; its refusals.

#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/engine/ops/attention.hpp>

#include "support/attention_reference.hpp"
#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// A [batch, kv_heads, capacity, head_dim] buffer and its first `length` rows.
template <class T>
struct Buffer {
  xt::xarray<T> k, v;
  KeyValueRows<T> rows(std::size_t length) const {
    const auto& s = k.shape();
    KeyValueRows<T> r;
    r.k = k.data();
    r.v = v.data();
    r.batch = s[0];
    r.kv_heads = s[1];
    r.length = length;
    r.head_dim = s[3];
    r.head_stride = s[2] * s[3];
    r.batch_stride = s[1] * r.head_stride;
    return r;
  }
};

template <class T>
Buffer<T> buffer(const std::vector<std::size_t>& shape, std::uint32_t seed) {
  return {random_array<T>(shape, seed), random_array<T>(shape, seed + 1)};
}

}  // namespace

TEST_CASE_TEMPLATE("attention_over_rows: the bits of scaled_dot_product_attention", T, float,
                   double) {
  struct Case {
    const char* name;
    std::size_t batch, heads, kv_heads, q_len, length, capacity, head_dim;
    bool mask;
  };
  // (row and column counts off the 8 x 8 and 4 x 4 transposed blocks, and
  // more keys than one tile)
  for (const Case& c :
       {Case{"grouped heads, masked, 13 of 21 rows, Dh 12", 2, 4, 2, 3, 13, 21, 12, true},
        Case{"one query row, 70 of 90 rows, Dh 64", 3, 2, 2, 1, 70, 90, 64, false}}) {
    INFO(c.name);
    const Buffer<T> cache = buffer<T>({c.batch, c.kv_heads, c.capacity, c.head_dim}, 3);
    const xt::xarray<T> q = random_array<T>({c.batch, c.heads, c.q_len, c.head_dim}, 5);
    const xt::xarray<bool> keep = random_keep({c.batch, 1, c.q_len, c.length}, 7);
    const AttentionMask<T> mask = c.mask ? AttentionMask<T>(keep) : AttentionMask<T>();
    Tape<T> tape;
    tape.set_grad_enabled(false);
    const auto filled = [&](const xt::xarray<T>& a) {
      return xt::xarray<T>(xt::view(a, xt::all(), xt::all(), xt::range(0, c.length), xt::all()));
    };
    const Var<T> expected = scaled_dot_product_attention(
        tape.leaf(q), tape.leaf(filled(cache.k)), tape.leaf(filled(cache.v)), mask, false, 0.0,
        std::nullopt, DropoutKey{}, c.heads != c.kv_heads);
    const Var<T> y = attention_over_rows(tape.leaf(q), cache.rows(c.length), mask);
    CHECK(bit_equal(y.value(), expected.value()));
  }
}

TEST_CASE("attention_over_rows: a recording tape or a q of other sizes throws, records nothing") {
  const Buffer<double> cache = buffer<double>({2, 2, 6, 4}, 11);
  Tape<double> recording;
  const Var<double> q = recording.leaf(random_array<double>({2, 4, 1, 4}, 13));
  std::size_t nodes = recording.size();
  CHECK_THROWS_AS(attention_over_rows(q, cache.rows(5)), std::logic_error);
  CHECK(recording.size() == nodes);

  Tape<double> tape;
  tape.set_grad_enabled(false);
  for (const std::vector<std::size_t>& shape :
       std::vector<std::vector<std::size_t>>{{3, 4, 1, 4}, {2, 3, 1, 4}, {2, 4, 1, 5}, {4, 1, 4}}) {
    const Var<double> bad = tape.leaf(random_array<double>(shape, 17));
    nodes = tape.size();
    CHECK_THROWS_AS(attention_over_rows(bad, cache.rows(5)), std::invalid_argument);
    CHECK(tape.size() == nodes);
  }
  const Var<double> good = tape.leaf(random_array<double>({2, 4, 1, 4}, 19));
  const xt::xarray<bool> wrong_mask = xt::ones<bool>({2, 1, 1, 4});  // 5 keys, not 4
  CHECK_THROWS_AS(attention_over_rows(good, cache.rows(5), AttentionMask<double>(wrong_mask)),
                  std::invalid_argument);
}
