#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/engine/ops/attention.hpp>
#include <xtgrad/engine/ops/slice.hpp>

#include "support/attention_reference.hpp"
#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE("packed_qkv_attention: equals split, permute, attention and merge, gradient too") {
  struct Packed {
    const char* name;
    std::vector<std::size_t> shape;
    std::size_t heads;
    bool causal;
    double p;
    bool mask;
  };
  for (const Packed& c :
       {Packed{"[B, T, 3C], 3 heads of 5", {2, 7, 45}, 3, false, 0.0, false},
        Packed{"causal, dropout, boolean [B, 1, T, T], T 129", {2, 129, 48}, 2, true, 0.2, true},
        Packed{"unbatched [T, 3C]", {9, 39}, 1, true, 0.0, false}}) {
    INFO(std::string(c.name));
    const xt::xarray<double> x = random_array<double>(c.shape, 41);
    const std::size_t r = c.shape.size(), t = c.shape[r - 2], width = c.shape[r - 1] / 3;
    std::vector<std::size_t> mask_shape = {t, t};
    if (r == 3) mask_shape = {c.shape[0], 1, t, t};
    const xt::xarray<bool> keep = random_keep(mask_shape, 42);
    const AttentionMask<double> mask =
        c.mask ? AttentionMask<double>(keep) : AttentionMask<double>();
    std::vector<std::size_t> out_shape = c.shape;
    out_shape.back() = width;
    const xt::xarray<double> dy = random_array<double>(out_shape, 43);

    Tape<double> tape;
    Var<double> packed_in = tape.leaf(x);
    Var<double> packed = packed_qkv_attention(packed_in, c.heads, mask, c.causal, c.p, std::nullopt,
                                              k_attention_key);
    tape.backward(packed, dy);

    Tape<double> ref_tape;
    Var<double> split_in = ref_tape.leaf(x);
    const auto dh = static_cast<std::int64_t>(width / c.heads);
    const auto h = static_cast<std::int64_t>(c.heads), tt = static_cast<std::int64_t>(t);
    const auto part = [&](std::size_t which) {  // [.., T, C] -> [.., H, T, Dh]
      const auto lo = static_cast<std::int64_t>(which * width);
      Var<double> s = slice(split_in, -1, lo, lo + static_cast<std::int64_t>(width));
      if (r == 3)
        return permute(reshape(s, {static_cast<std::int64_t>(c.shape[0]), tt, h, dh}),
                       {0, 2, 1, 3});
      return permute(reshape(s, {tt, h, dh}), {1, 0, 2});
    };
    Var<double> heads_out = scaled_dot_product_attention(part(0), part(1), part(2), mask, c.causal,
                                                         c.p, std::nullopt, k_attention_key);
    std::vector<std::int64_t> merged(out_shape.begin(), out_shape.end());
    Var<double> split = r == 3 ? reshape(permute(heads_out, {0, 2, 1, 3}), merged)
                               : reshape(permute(heads_out, {1, 0, 2}), merged);
    ref_tape.backward(split, dy);
    // the same kernels on the same numbers, only read and written through
    // other strides: the same bits
    CHECK(bit_equal(packed.value(), split.value()));
    CHECK(bit_equal(packed_in.grad(), split_in.grad()));
  }
}

TEST_CASE("packed_qkv_attention: gradients accumulate over backwards") {
  Tape<double> packed_tape;
  Var<double> qkv = packed_tape.leaf(random_array({2, 9, 12}, 53));
  Var<double> z = packed_qkv_attention(qkv, 2, {}, true);
  const xt::xarray<double> dz = random_array({2, 9, 4}, 54);
  packed_tape.backward(z, dz);
  const xt::xarray<double> packed_once = qkv.grad();
  packed_tape.backward(z, dz);
  CHECK(bit_equal(qkv.grad(), xt::xarray<double>(2.0 * packed_once)));
}
