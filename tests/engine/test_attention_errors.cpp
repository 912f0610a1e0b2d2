#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include <xtgrad/engine/ops/attention.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

constexpr const char* sdpa = "xtgrad::scaled_dot_product_attention:";
constexpr const char* packed = "xtgrad::packed_qkv_attention:";
constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double k_inf = std::numeric_limits<double>::infinity();

Var<double> leaf(Tape<double>& tape, const std::vector<std::size_t>& shape) {
  return tape.leaf(xt::xarray<double>(xt::zeros<double>(shape)));
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: bad shapes throw naming the argument, record nothing") {
  Tape<double> tape;
  const Var<double> q = leaf(tape, {2, 4, 5, 3}), k = leaf(tape, {2, 4, 6, 3});
  const Var<double> v = leaf(tape, {2, 4, 6, 2});
  // a call on new leaves of these shapes, which must record nothing when it throws
  const auto call = [&](const std::vector<std::size_t>& qs, const std::vector<std::size_t>& ks,
                        const std::vector<std::size_t>& vs, bool gqa = false) {
    const Var<double> a = leaf(tape, qs), b = leaf(tape, ks), c = leaf(tape, vs);
    const std::size_t leaves = tape.size();
    try {
      return scaled_dot_product_attention(a, b, c, {}, false, 0.0, std::nullopt, {}, gqa);
    } catch (const std::exception&) {
      CHECK(tape.size() == leaves);
      throw;
    }
  };
  CHECK_THROWS_WITH_PARTS(call({5}, {5}, {5}), std::invalid_argument,
                          {sdpa, "'q'", "[5]", "rank 4"});
  CHECK_THROWS_WITH_PARTS(call({1, 2, 2, 5, 3}, {2, 6, 3}, {2, 6, 3}), std::invalid_argument,
                          {sdpa, "'q'", "rank 4"});
  CHECK_THROWS_WITH_PARTS(call({2, 5, 3}, {6, 3}, {6, 3}), std::invalid_argument,
                          {sdpa, "'k'", "[6, 3]", "rank 3"});
  CHECK_THROWS_WITH_PARTS(call({2, 5, 3}, {2, 6, 3}, {6, 3}), std::invalid_argument,
                          {sdpa, "'v'", "rank 3"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {3, 4, 6, 3}, {2, 4, 6, 2}), std::invalid_argument,
                          {sdpa, "'k'", "batch size 2"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 4, 6, 3}, {1, 4, 6, 2}), std::invalid_argument,
                          {sdpa, "'v'", "batch size 2"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 4, 6, 4}, {2, 4, 6, 2}), std::invalid_argument,
                          {sdpa, "'k'", "[2, 4, 6, 4]", "Dh = 3"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 4, 6, 3}, {2, 4, 7, 2}), std::invalid_argument,
                          {sdpa, "'v'", "Tk = 6"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 4, 6, 3}, {2, 2, 6, 2}), std::invalid_argument,
                          {sdpa, "'v'", "4 heads like 'k'"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 2, 6, 3}, {2, 2, 6, 2}), std::invalid_argument,
                          {sdpa, "'k'", "4 heads", "enable_gqa"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 3}, {2, 3, 6, 3}, {2, 3, 6, 2}, true),
                          std::invalid_argument, {sdpa, "'k'", "divides the 4 heads"});
  CHECK_THROWS_WITH_PARTS(call({2, 4, 5, 0}, {2, 4, 6, 0}, {2, 4, 6, 2}), std::invalid_argument,
                          {sdpa, "'q'", "Dh >= 1"});
  // masks that do not broadcast to [2, 4, 5, 6]
  const std::size_t before = tape.size();
  for (const std::vector<std::size_t>& shape :
       std::vector<std::vector<std::size_t>>{{5, 5}, {3, 1, 1}, {1, 2, 4, 5, 6}, {2, 4, 6, 5}}) {
    const xt::xarray<bool> keep = xt::ones<bool>(shape);
    CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, k, v, keep), std::invalid_argument,
                            {sdpa, "'mask'", "broadcasts to [2, 4, 5, 6]"});
    const xt::xarray<double> additive = xt::zeros<double>(shape);
    CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, k, v, additive), std::invalid_argument,
                            {sdpa, "'mask'", "broadcasts to [2, 4, 5, 6]"});
  }
  CHECK(tape.size() == before);
}

TEST_CASE("scaled_dot_product_attention: bad scalars and mixed tapes throw, record nothing") {
  Tape<double> tape, other;
  const Var<double> q = leaf(tape, {4, 5, 3}), k = leaf(tape, {4, 6, 3}), v = leaf(tape, {4, 6, 2});
  const std::size_t before = tape.size();
  for (double p : {-0.1, 1.0, 1.5, k_nan})
    CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, k, v, {}, false, p),
                            std::invalid_argument, {sdpa, "'dropout_p'", "[0, 1)"});
  for (double s : {0.0, -1.0, k_inf, k_nan})
    CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, k, v, {}, false, 0.0, s),
                            std::invalid_argument, {sdpa, "'scale'", "finite number > 0"});
  CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, leaf(other, {4, 6, 3}), v),
                          std::logic_error, {sdpa, "'q'", "'k'", "different tapes"});
  CHECK_THROWS_WITH_PARTS(scaled_dot_product_attention(q, k, leaf(other, {4, 6, 2})),
                          std::logic_error, {sdpa, "'v'", "different tapes"});
  CHECK(tape.size() == before);
}

TEST_CASE("packed_qkv_attention: bad shapes, head counts and scalars throw, record nothing") {
  Tape<double> tape;
  const Var<double> qkv = leaf(tape, {2, 5, 12});
  const Var<double> rank4 = leaf(tape, {1, 2, 5, 12}), width = leaf(tape, {2, 5, 13});
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_PARTS(packed_qkv_attention(rank4, 2), std::invalid_argument,
                          {packed, "'qkv'", "[1, 2, 5, 12]", "rank 3"});
  CHECK_THROWS_WITH_PARTS(packed_qkv_attention(width, 1), std::invalid_argument,
                          {packed, "'qkv'", "multiple of 3"});
  for (std::size_t heads : {0, 3, 8})
    CHECK_THROWS_WITH_PARTS(packed_qkv_attention(qkv, heads), std::invalid_argument,
                            {packed, "'n_heads'", "divisor of C = 4"});
  CHECK_THROWS_WITH_PARTS(packed_qkv_attention(qkv, 2, {}, false, 1.0), std::invalid_argument,
                          {packed, "'dropout_p'"});
  CHECK_THROWS_WITH_PARTS(packed_qkv_attention(qkv, 2, {}, false, 0.0, -2.0), std::invalid_argument,
                          {packed, "'scale'"});
  const xt::xarray<bool> keep =
      xt::ones<bool>({std::size_t(3), std::size_t(1), std::size_t(5), std::size_t(5)});
  CHECK_THROWS_WITH_PARTS(packed_qkv_attention(qkv, 2, keep), std::invalid_argument,
                          {packed, "'mask'", "broadcasts to [2, 2, 5, 5]"});
  CHECK(tape.size() == before);
}
