// The bad-input table of attention and what it is built from: the fused
// attention ops, the mask ops and builders, and rotary embedding (the
// machinery is in tests/support/bad_input.hpp). Every row must throw before
// anything is recorded.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE_TEMPLATE("bad input: attention, masks and rotary embedding", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();

  const Var<T> q = tape.leaf(random_array<T>({2, 4, 5, 3}, 1));   // [B, H, Tq, Dh]
  const Var<T> k = tape.leaf(random_array<T>({2, 4, 6, 3}, 2));   // [B, H, Tk, Dh]
  const Var<T> v = tape.leaf(random_array<T>({2, 4, 6, 2}, 3));   // [B, H, Tk, Dv]
  const Var<T> k2 = tape.leaf(random_array<T>({2, 2, 6, 3}, 4));  // 2 kv heads
  const Var<T> v2 = tape.leaf(random_array<T>({2, 2, 6, 2}, 5));
  const Var<T> k3 = tape.leaf(random_array<T>({2, 3, 6, 3}, 6));  // 3 kv heads
  const Var<T> v3 = tape.leaf(random_array<T>({2, 3, 6, 2}, 7));
  const Var<T> kb = tape.leaf(random_array<T>({3, 4, 6, 3}, 13));  // another batch
  const Var<T> vb = tape.leaf(random_array<T>({3, 4, 6, 2}, 14));
  const Var<T> v7 = tape.leaf(random_array<T>({2, 4, 7, 2}, 15));          // another Tk
  const Var<T> q0 = tape.leaf(xt::xarray<T>(xt::zeros<T>({2, 4, 5, 0})));  // Dh = 0
  const Var<T> k0 = tape.leaf(xt::xarray<T>(xt::zeros<T>({2, 4, 6, 0})));
  const Var<T> qkv = tape.leaf(random_array<T>({2, 5, 12}, 8));  // [B, T, 3C], C = 4
  const Var<T> qkv0 = tape.leaf(xt::xarray<T>(xt::zeros<T>({2, 5, 0})));
  const Var<T> v5 = tape.leaf(random_array<T>({5}, 9));
  const Var<T> m23 = tape.leaf(random_array<T>({2, 3}, 10));
  const Var<T> m24 = tape.leaf(random_array<T>({2, 4}, 11));
  const Var<T> c5 = tape.leaf(random_array<T>({2, 3, 5}, 12));  // odd Dh
  const Var<T> scalar = tape.leaf(xt::xarray<T>(T(0.5)));
  const auto snapshot = snapshot_of<T>({&tape, &other}, {q, k, v, k2, v2, k3, v3, kb, vb, v7, q0,
                                                         k0, qkv, qkv0, v5, m23, m24, c5, scalar});

  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const char* sdpa = "scaled_dot_product_attention";
  const auto attend = [](const Var<T>& a, const Var<T>& b, const Var<T>& c,
                         const AttentionMask<T>& mask = {}, double p = 0.0,
                         std::optional<double> s = std::nullopt, bool gqa = false) {
    scaled_dot_product_attention(a, b, c, mask, false, p, s, {}, gqa);
  };

  // scaled_dot_product_attention: each argument's rank, each size, each scalar
  bad("sdpa: 1-d q", [&] { attend(v5, v5, v5); }, IA, {sdpa, "'q'", "[5]", "rank 4"});
  bad("sdpa: 0-d q", [&] { attend(scalar, k, v); }, IA, {sdpa, "'q'", "[]", "rank 4"});
  bad("sdpa: k of another rank", [&] { attend(q, m23, v); }, IA, {sdpa, "'k'", "[2, 3]", "rank 4"});
  bad("sdpa: v of another rank", [&] { attend(q, k, c5); }, IA, {sdpa, "'v'", "[2, 3, 5]"});
  bad("sdpa: k of another batch", [&] { attend(q, kb, v); }, IA,
      {sdpa, "'k'", "[3, 4, 6, 3]", "batch size 2"});
  bad("sdpa: v of another batch", [&] { attend(q, k, vb); }, IA,
      {sdpa, "'v'", "[3, 4, 6, 2]", "batch size 2"});
  bad("sdpa: k of another Dh", [&] { attend(q, v, v); }, IA,
      {sdpa, "'k'", "[2, 4, 6, 2]", "Dh = 3"});
  bad("sdpa: v of another Tk", [&] { attend(q, k, v7); }, IA,
      {sdpa, "'v'", "[2, 4, 7, 2]", "Tk = 6"});
  bad("sdpa: v with other kv heads than k", [&] { attend(q, k, v2); }, IA,
      {sdpa, "'v'", "[2, 2, 6, 2]", "4 heads like 'k'"});
  bad("sdpa: fewer kv heads without enable_gqa", [&] { attend(q, k2, v2); }, IA,
      {sdpa, "'k'", "[2, 2, 6, 3]", "enable_gqa"});
  bad("sdpa: kv heads that do not divide the heads", [&] { attend(q, k3, v3, {}, 0.0, {}, true); },
      IA, {sdpa, "'k'", "[2, 3, 6, 3]", "divides the 4 heads"});
  bad("sdpa: Dh = 0 with the default scale", [&] { attend(q0, k0, v); }, IA,
      {sdpa, "'q'", "[2, 4, 5, 0]", "Dh >= 1"});
  bad("sdpa: a boolean mask of 5 axes",
      [&] {
        attend(q, k, v, xt::xarray<bool>(xt::ones<bool>({1, 2, 4, 5, 6})));
      },
      IA, {sdpa, "'mask'", "[1, 2, 4, 5, 6]", "broadcasts to [2, 4, 5, 6]"});
  bad("sdpa: a boolean mask over Tq x Tq",
      [&] {
        attend(q, k, v, xt::xarray<bool>(xt::ones<bool>({5, 5})));
      },
      IA, {sdpa, "'mask'", "[5, 5]", "broadcasts to [2, 4, 5, 6]"});
  bad("sdpa: an additive mask of 3 heads",
      [&] {
        attend(q, k, v, xt::xarray<T>(xt::zeros<T>({3, 1, 6})));
      },
      IA, {sdpa, "'mask'", "[3, 1, 6]"});
  for (double p : {-0.1, 1.0, k_nan, k_inf})
    bad("sdpa: dropout_p " + std::to_string(p), [=] { attend(q, k, v, {}, p); }, IA,
        {sdpa, "'dropout_p'", "expected a probability in [0, 1)"});
  for (double s : {0.0, -1.0, k_nan, k_inf})
    bad("sdpa: scale " + std::to_string(s), [=] { attend(q, k, v, {}, 0.0, s); }, IA,
        {sdpa, "'scale'", "expected a finite number > 0"});
  add_handle_rows<T>(
      rows, sdpa, {"q", "k", "v"}, {q, k, v},
      [](const std::vector<Var<T>>& a) { scaled_dot_product_attention(a[0], a[1], a[2]); }, other,
      stale);

  // packed_qkv_attention
  const char* packed = "packed_qkv_attention";
  bad("packed: 1-d qkv", [&] { packed_qkv_attention(v5, 1); }, IA,
      {packed, "'qkv'", "[5]", "rank 3"});
  bad("packed: 4-d qkv", [&] { packed_qkv_attention(q, 1); }, IA,
      {packed, "'qkv'", "[2, 4, 5, 3]"});
  bad("packed: width not a multiple of 3", [&] { packed_qkv_attention(m24, 1); }, IA,
      {packed, "'qkv'", "[2, 4]", "multiple of 3"});
  bad("packed: 0 heads", [&] { packed_qkv_attention(qkv, 0); }, IA,
      {packed, "'n_heads'", "is 0", "positive divisor of C = 4"});
  bad("packed: heads that do not divide C", [&] { packed_qkv_attention(qkv, 3); }, IA,
      {packed, "'n_heads'", "is 3"});
  bad("packed: C = 0 with the default scale", [&] { packed_qkv_attention(qkv0, 1); }, IA,
      {packed, "'qkv'", "[2, 5, 0]", "Dh = C / n_heads >= 1"});
  bad("packed: a mask over T x 3C",
      [&] {
        packed_qkv_attention(qkv, 2, xt::xarray<bool>(xt::ones<bool>({5, 12})));
      },
      IA, {packed, "'mask'", "[5, 12]", "broadcasts to [2, 2, 5, 5]"});
  bad("packed: dropout_p 1", [&] { packed_qkv_attention(qkv, 2, {}, true, 1.0); }, IA,
      {packed, "'dropout_p'"});
  bad("packed: scale NaN", [&] { packed_qkv_attention(qkv, 2, {}, true, 0.0, k_nan); }, IA,
      {packed, "'scale'"});
  add_handle_rows<T>(
      rows, packed, {"qkv"}, {qkv},
      [](const std::vector<Var<T>>& a) { packed_qkv_attention(a[0], 2); }, other, stale);

  // masked_fill, where, triu, tril and the mask builders
  const xt::xarray<bool> row4 = xt::ones<bool>({4}), col2 = xt::ones<bool>({2, 1});
  bad("masked_fill: a mask that does not broadcast", [&] { masked_fill(m23, row4, 0.0); }, IA,
      {"masked_fill", "'mask'", "[4]", "[2, 3]"});
  if constexpr (std::is_same_v<T, float>)
    bad("masked_fill: a value past float", [&] { masked_fill(m23, col2, 1e300); }, IA,
        {"masked_fill", "'value'", "overflows the element type"});
  add_handle_rows<T>(
      rows, "masked_fill", {"x"}, {m23},
      [col2](const std::vector<Var<T>>& a) { masked_fill(a[0], col2, 0.0); }, other, stale);
  bad("where: a cond that does not broadcast", [&] { xtgrad::where(row4, m23, m23); }, IA,
      {"where", "'cond'", "[4]"});
  bad("where: a and b that do not broadcast", [&] { xtgrad::where(col2, m23, m24); }, IA,
      {"where", "[2, 3]", "[2, 4]"});
  add_handle_rows<T>(
      rows, "where", {"a", "b"}, {m23, m23},
      [col2](const std::vector<Var<T>>& a) { xtgrad::where(col2, a[0], a[1]); }, other, stale);
  for (const char* op : {"triu", "tril"}) {
    const std::string name = op;
    const auto apply = [name](const Var<T>& x) { return name == "triu" ? triu(x) : tril(x); };
    bad(name + ": 1-d x", [=] { apply(v5); }, IA, {name, "'x'", "[5]", "rank >= 2"});
    bad(name + ": 0-d x", [=] { apply(scalar); }, IA, {name, "'x'", "[]", "rank >= 2"});
    add_handle_rows<T>(
        rows, name, {"x"}, {m23}, [apply](const std::vector<Var<T>>& a) { apply(a[0]); }, other,
        stale);
  }
  bad("length_mask: 2-d lengths",
      [] {
        length_mask(Indices{{1, 2}}, 3);
      },
      IA, {"length_mask", "'lengths'", "[1, 2]", "1-d"});
  bad("length_mask: a length past max_length",
      [] {
        length_mask(Indices{1, 4}, 3);
      },
      IA, {"length_mask", "'lengths'", "holds 4 at position 1", "[0, 3]"});
  bad("length_mask: a negative length", [] { length_mask(Indices{-1}, 3); }, IA,
      {"length_mask", "'lengths'", "holds -1 at position 0"});

  // apply_rotary
  const char* rope = "apply_rotary";
  bad("rotary: 1-d x", [&] { apply_rotary(v5); }, IA, {rope, "'x'", "[5]", "rank >= 2"});
  bad("rotary: odd Dh", [&] { apply_rotary(c5); }, IA, {rope, "'x'", "[2, 3, 5]", "Dh = 5"});
  for (double theta : {0.0, -2.0, k_nan, k_inf})
    bad("rotary: theta " + std::to_string(theta), [=] { apply_rotary(m24, 0, theta); }, IA,
        {rope, "'theta'", "expected a finite value > 0"});
  bad("rotary: a position_offset whose last position overflows",
      [&] { apply_rotary(m24, std::numeric_limits<std::size_t>::max()); }, IA,
      {rope, "'position_offset'", "18446744073709551615", "overflows std::size_t"});
  RopeScaling linear_zero{RopeScaling::Type::linear, 0.0};
  RopeScaling llama_inverted{RopeScaling::Type::llama3, 8.0, 4.0, 1.0};
  RopeScaling llama_no_context{RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 0.0};
  RopeScaling unknown{static_cast<RopeScaling::Type>(7)};
  bad("rotary: linear factor 0", [&] { apply_rotary(m24, 0, 1e4, linear_zero); }, IA,
      {rope, "'scaling'", "factor 0"});
  bad("rotary: llama3 low_freq_factor >= high_freq_factor",
      [&] { apply_rotary(m24, 0, 1e4, llama_inverted); }, IA,
      {rope, "'scaling'", "low_freq_factor 4", "high_freq_factor 1"});
  bad("rotary: llama3 context 0", [&] { apply_rotary(m24, 0, 1e4, llama_no_context); }, IA,
      {rope, "'scaling'", "original_max_position_embeddings 0"});
  bad("rotary: a scaling type outside the enumeration", [&] { apply_rotary(m24, 0, 1e4, unknown); },
      IA, {rope, "'scaling'", "none, linear or llama3"});
  add_handle_rows<T>(
      rows, rope, {"x"}, {m24}, [](const std::vector<Var<T>>& a) { apply_rotary(a[0]); }, other,
      stale);

  report("attention", run_rows(rows, snapshot));
}
