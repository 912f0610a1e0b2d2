// scaled_dot_product_attention at MatmulPrecision::bf16, where its products
// run in bfloat16 with float sums (engine/kernels/attention_tiles_bf16.hpp):
// the packing conversions are to_bf16's bit for bit; the output and the
// gradients equal a double reference that rounds the same operands at the
// same points; they are within the bf16 error of the float path; the same
// bits at 1 and 2 threads; the precision is read by the forward and the
// backward each when they run; double is untouched.
//
// The reference (one key tile: Tk <= 64, so the running max of the online
// softmax is the row's max): with r() the rounding to bfloat16,
//   S = scale r(q) r(k)^T,  P~ = exp(S - max),  O = sum_j r(P~_j) r(v_j) / sum_j P~_j
//   P = exp(S - L),  dV = r(P)^T r(dO),  dP = r(dO) r(v)^T,  dS = scale P (dP - D)
//   dQ = r(dS) r(k),  dK = r(dS)^T r(q)     (D = rowsum(dO o O), unrounded)
// The kernel rounds float values of P~, P and dS that are within float's
// rounding of the reference's: where one of them lies that close to a
// rounding boundary of bfloat16 the two round it to neighbours, one bf16 step
// (2^-8) of one term apart. So the tolerance is float's accumulation (about
// 1e-7 of the scale here) plus such rare steps: 1e-4 of the array's scale
// (measured: at most 7e-8, and 3e-5 for dq and dk where one dS rounded the
// other way), against the 2^-8 ~ 4e-3 that rounding any other operand (or
// none) costs.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/engine/kernels/attention_tiles_bf16.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/ops/attention.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/bit_equal.hpp"
#include "support/precision_scope.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace attention = xtgrad::detail::attention;

namespace {

bool bf16_attention_runs() {
  return attention::k_bf16_kernel && matmul_precision_supported(MatmulPrecision::bf16);
}

struct Shape4 {
  const char* name;
  std::size_t b, h, t, dh, dv;
  bool causal;
  double dropout = 0.0;
};

struct Run {
  xt::xarray<double> q, k, v, dy;
};

Run inputs(const Shape4& c, std::uint32_t seed) {
  return {random_array<double>({c.b, c.h, c.t, c.dh}, seed),
          random_array<double>({c.b, c.h, c.t, c.dh}, seed + 1),
          random_array<double>({c.b, c.h, c.t, c.dv}, seed + 2),
          random_array<double>({c.b, c.h, c.t, c.dv}, seed + 3)};
}

template <class T>
struct Result {
  xt::xarray<T> y, dq, dk, dv;
};

// The fused op at `forward` precision, its backward at `backward`.
template <class T>
Result<T> fused(const Shape4& c, const Run& in, MatmulPrecision forward, MatmulPrecision backward) {
  Tape<T> tape;
  Var<T> q = tape.leaf(xt::xarray<T>(xt::cast<T>(in.q)));
  Var<T> k = tape.leaf(xt::xarray<T>(xt::cast<T>(in.k)));
  Var<T> v = tape.leaf(xt::xarray<T>(xt::cast<T>(in.v)));
  const Var<T> y = [&] {
    const PrecisionScope scope(forward);
    return scaled_dot_product_attention(q, k, v, {}, c.causal, c.dropout, std::nullopt,
                                        DropoutKey{0x5eed, 2, 0});
  }();
  const PrecisionScope scope(backward);
  tape.backward(y, xt::xarray<T>(xt::cast<T>(in.dy)));
  return {y.value(), q.grad(), k.grad(), v.grad()};
}

double rounded(double x) {
  return detail::from_bf16(detail::to_bf16(static_cast<float>(x)));
}

// The reference of the header comment, in double (no dropout).
Result<double> rounded_reference(const Shape4& c, const Run& in) {
  const std::size_t t = c.t, dh = c.dh, dv = c.dv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Result<double> r{xt::zeros<double>(in.dy.shape()), xt::zeros<double>(in.q.shape()),
                   xt::zeros<double>(in.k.shape()), xt::zeros<double>(in.v.shape())};
  std::vector<double> s(t * t), p(t * t), lse(t);
  for (std::size_t b = 0; b < c.b; ++b)
    for (std::size_t h = 0; h < c.h; ++h) {
      const auto seen = [&](std::size_t i, std::size_t j) { return !c.causal || j <= i; };
      for (std::size_t i = 0; i < t; ++i) {
        double m = -std::numeric_limits<double>::infinity(), l = 0.0;
        for (std::size_t j = 0; j < t; ++j) {
          double dot = 0.0;
          for (std::size_t d = 0; d < dh; ++d)
            dot += rounded(in.q(b, h, i, d)) * rounded(in.k(b, h, j, d));
          s[i * t + j] = scale * dot;
          if (seen(i, j)) m = std::max(m, s[i * t + j]);
        }
        for (std::size_t j = 0; j < t; ++j) {
          const double e = seen(i, j) ? std::exp(s[i * t + j] - m) : 0.0;
          l += e;
          for (std::size_t d = 0; d < dv; ++d)
            r.y(b, h, i, d) += rounded(e) * rounded(in.v(b, h, j, d));
        }
        for (std::size_t d = 0; d < dv; ++d) r.y(b, h, i, d) /= l;
        lse[i] = m + std::log(l);
      }
      for (std::size_t i = 0; i < t; ++i) {
        double row_dot = 0.0;
        for (std::size_t d = 0; d < dv; ++d) row_dot += in.dy(b, h, i, d) * r.y(b, h, i, d);
        for (std::size_t j = 0; j < t; ++j) {
          const double pij = seen(i, j) ? std::exp(s[i * t + j] - lse[i]) : 0.0;
          double dp = 0.0;
          for (std::size_t d = 0; d < dv; ++d) {
            dp += rounded(in.dy(b, h, i, d)) * rounded(in.v(b, h, j, d));
            r.dv(b, h, j, d) += rounded(pij) * rounded(in.dy(b, h, i, d));
          }
          const double ds = rounded(scale * pij * (dp - row_dot));
          for (std::size_t d = 0; d < dh; ++d) {
            r.dq(b, h, i, d) += ds * rounded(in.k(b, h, j, d));
            r.dk(b, h, j, d) += ds * rounded(in.q(b, h, i, d));
          }
        }
      }
    }
  return r;
}

// max |a - e| / max(1, max |e|) over the array.
template <class A>
double worst_error(const xt::xarray<A>& a, const xt::xarray<double>& e) {
  REQUIRE(a.shape() == e.shape());
  double top = 1.0, worst = 0.0;
  for (std::size_t i = 0; i < e.size(); ++i) top = std::max(top, std::abs(e.data()[i]));
  for (std::size_t i = 0; i < e.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a.data()[i]) - e.data()[i]) / top);
  return worst;
}

template <class A>
void check_all(const Result<A>& a, const Result<double>& e, double tolerance) {
  const double y = worst_error(a.y, e.y), dq = worst_error(a.dq, e.dq);
  const double dk = worst_error(a.dk, e.dk), dv = worst_error(a.dv, e.dv);
  INFO("worst errors y " << y << ", dq " << dq << ", dk " << dk << ", dv " << dv);
  CHECK(std::max({y, dq, dk, dv}) <= tolerance);
}

template <class T>
Result<double> as_double(const Result<T>& r) {
  return {xt::cast<double>(r.y), xt::cast<double>(r.dq), xt::cast<double>(r.dk),
          xt::cast<double>(r.dv)};
}

// Odd and even head dimensions not a multiple of 16, odd T not a multiple of
// the vector width, both inside one key tile.
const std::vector<Shape4> k_one_tile = {{"Dh 13, Dv 7, T 50", 1, 2, 50, 13, 7, false},
                                        {"causal, Dh 24, T 47", 2, 1, 47, 24, 24, true}};

}  // namespace

TEST_CASE("attention bf16: the packed words are to_bf16's, NaN and subnormals included") {
  const float specials[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -1.0f - 0x1p-8f,
                            0x1p-140f,      -0x1.8p-130f,   std::numeric_limits<float>::quiet_NaN(),
                            -INFINITY,      3.4e38f,        -0.0f};
  constexpr std::size_t rows = 5, cols = 37;
  xt::xarray<float> x = random_array<float>({rows, cols}, 3, -4.0, 4.0);
  for (std::size_t e = 0; e < std::size(specials); ++e) x.data()[e * 4] = specials[e];
  const auto at = [&](std::size_t r, std::size_t c) {
    return r < rows && c < cols ? x(r, c) : 0.0f;
  };
  std::vector<attention::Word> words(rows * 19), pairs(3 * 48), columns(19 * 16);
  attention::convert_rows(x.data(), cols, rows, cols, words.data(), 19);
  attention::pack_pair_rows(x.data(), cols, rows, cols, pairs.data(), 48);
  attention::pack_pair_columns(x.data(), cols, rows, cols, columns.data(), 16);
  bool same = true;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t w = 0; w < 19; ++w) {
      same = same && words[r * 19 + w] == attention::pair_word(at(r, 2 * w), at(r, 2 * w + 1));
      same = same && columns[w * 16 + r] == attention::pair_word(at(r, 2 * w), at(r, 2 * w + 1));
    }
  for (std::size_t r = rows; r < 16; ++r)
    for (std::size_t w = 0; w < 19; ++w) same = same && columns[w * 16 + r] == 0u;
  for (std::size_t p = 0; p < 3; ++p)
    for (std::size_t c = 0; c < 48; ++c)
      same = same && pairs[p * 48 + c] == attention::pair_word(at(2 * p, c), at(2 * p + 1, c));
  CHECK(same);
}

TEST_CASE("attention bf16: equals a double reference of the same rounded operands") {
  if (!bf16_attention_runs()) {
    MESSAGE("skipped: no bf16 attention kernel in this build or on this CPU");
    return;
  }
  for (const Shape4& c : k_one_tile) {
    INFO(std::string(c.name));
    const Run in = inputs(c, 5);
    check_all(fused<float>(c, in, MatmulPrecision::bf16, MatmulPrecision::bf16),
              rounded_reference(c, in), 1e-4);
  }
}

// Rounding each operand moves it by at most 2^-9 of itself, so each product
// by at most about 2^-8 of the sum of its terms' magnitudes (the GEMMs' bound,
// test_matmul_precision.cpp), and an error of the scores moves P by as much
// relatively. Against the float path, scaled by each array's largest
// magnitude, the worst measured here is 2.2e-3 (y and dv); 2 * 2^-8 = 7.8e-3
// leaves a margin of about three and a half.
TEST_CASE("attention bf16: within bfloat16's error of the float path") {
  if (!bf16_attention_runs()) {
    MESSAGE("skipped: no bf16 attention kernel in this build or on this CPU");
    return;
  }
  std::vector<Shape4> cases = k_one_tile;
  cases.push_back(
      {"causal, dropout 0.2, T 150 over key tiles, Dh 20", 1, 3, 150, 20, 20, true, 0.2});
  for (const Shape4& c : cases) {
    INFO(std::string(c.name));
    const Run in = inputs(c, 7);
    const Result<float> low = fused<float>(c, in, MatmulPrecision::bf16, MatmulPrecision::bf16);
    const Result<float> high =
        fused<float>(c, in, MatmulPrecision::highest, MatmulPrecision::highest);
    check_all(low, as_double(high), 2.0 / 256.0);
    CHECK_FALSE(bit_equal(low.y, high.y));
  }
  // packed_qkv_attention: q, k and v read in place from the [B, T, 3C] rows
  const xt::xarray<float> qkv = random_array<float>({2, 33, 3 * 2 * 12}, 13);
  const xt::xarray<float> dy = random_array<float>({2, 33, 2 * 12}, 14);
  const auto packed = [&](MatmulPrecision precision) {
    const PrecisionScope scope(precision);
    Tape<float> tape;
    Var<float> x = tape.leaf(qkv);
    Var<float> y = packed_qkv_attention(x, 2, {}, true);
    tape.backward(y, dy);
    return std::array<xt::xarray<double>, 2>{xt::cast<double>(y.value()),
                                             xt::cast<double>(x.grad())};
  };
  const auto low = packed(MatmulPrecision::bf16), high = packed(MatmulPrecision::highest);
  INFO("packed: worst errors y " << worst_error(low[0], high[0]) << ", dqkv "
                                 << worst_error(low[1], high[1]));
  CHECK(std::max(worst_error(low[0], high[0]), worst_error(low[1], high[1])) <= 2.0 / 256.0);
  CHECK_FALSE(bit_equal(low[1], high[1]));
}

TEST_CASE("attention bf16: the same bits on 1 and 2 threads") {
  if (!bf16_attention_runs()) {
    MESSAGE("skipped: no bf16 attention kernel in this build or on this CPU");
    return;
  }
  const int before = get_num_threads();
  // a task per head (B H = 8), and one head's key tiles split over tasks
  for (const Shape4& c : {Shape4{"8 heads", 2, 4, 96, 20, 20, true, 0.1},
                          Shape4{"1 head, T 300", 1, 1, 300, 17, 17, false}}) {
    INFO(std::string(c.name));
    const Run in = inputs(c, 9);
    set_num_threads(1);
    const Result<float> one = fused<float>(c, in, MatmulPrecision::bf16, MatmulPrecision::bf16);
    set_num_threads(2);
    const Result<float> two = fused<float>(c, in, MatmulPrecision::bf16, MatmulPrecision::bf16);
    CHECK(bit_equal(one.y, two.y));
    CHECK(bit_equal(one.dq, two.dq));
    CHECK(bit_equal(one.dk, two.dk));
    CHECK(bit_equal(one.dv, two.dv));
  }
  set_num_threads(before);
}

TEST_CASE("attention bf16: forward and backward each read the precision - double is untouched") {
  if (!bf16_attention_runs()) {
    MESSAGE("skipped: no bf16 attention kernel in this build or on this CPU");
    return;
  }
  const Shape4& c = k_one_tile[1];
  const Run in = inputs(c, 11);
  constexpr MatmulPrecision low = MatmulPrecision::bf16, high = MatmulPrecision::highest;
  const Result<float> f32 = fused<float>(c, in, high, high);
  const Result<float> bf16 = fused<float>(c, in, low, low);
  const Result<float> mixed = fused<float>(c, in, high, low);  // bf16 backward only
  CHECK(bit_equal(mixed.y, f32.y));
  CHECK_FALSE(bit_equal(mixed.dq, f32.dq));
  check_all(mixed, as_double(f32), 2.0 / 256.0);
  const Result<float> other = fused<float>(c, in, low, high);  // bf16 forward only
  CHECK(bit_equal(other.y, bf16.y));
  CHECK_FALSE(bit_equal(other.dk, bf16.dk));
  const Result<double> d_low = fused<double>(c, in, low, low);
  const Result<double> d_high = fused<double>(c, in, high, high);
  CHECK((bit_equal(d_low.y, d_high.y) && bit_equal(d_low.dq, d_high.dq) &&
         bit_equal(d_low.dk, d_high.dk) && bit_equal(d_low.dv, d_high.dv)));
}
