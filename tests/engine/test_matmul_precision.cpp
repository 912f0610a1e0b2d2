// MatmulPrecision (matmul_precision.hpp): the float -> bfloat16 rounding
// against an independent scalar reference; every transpose pair and beta of
// the GEMM under bf16 within the bf16 bound of the exact product, and equal to
// the exact product of the rounded operands (so it is bf16, not float); the
// split path; the fused FFN ops and linear under bf16 near float; double
// untouched; switching between calls; bad values.
//
// The bound: rounding to nearest with an 8-bit significand moves a float by
// at most 2^-9 of itself, so a product a_ik b_kj of rounded operands is off by
// at most (2 * 2^-9 + 2^-18) |a_ik b_kj|, and an element of C by at most
// 2^-8 sum_k |a_ik||b_kj| to first order. The tests allow twice that,
// 2 * 2^-8 sum_k |a_ik||b_kj|, which also covers the float accumulation
// (k * 2^-24 relative, far below 2^-8 at these k).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/engine/kernels/bf16.hpp>
#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/ops/activation_derivatives.hpp>
#include <xtgrad/engine/ops/activations.hpp>
#include <xtgrad/engine/ops/fused_linear.hpp>
#include <xtgrad/engine/ops/gated.hpp>
#include <xtgrad/engine/ops/linear.hpp>
#include <xtgrad/engine/tape.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/gemm_reference.hpp"
#include "support/precision_scope.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::gemm_product;
using xtgrad::testing::gemm_reference;
using xtgrad::testing::GemmDims;
using xtgrad::testing::PrecisionScope;
using xtgrad::testing::random_array;

namespace {

// The bfloat16 nearest to x, ties to the even significand, computed in
// double arithmetic on the value (not on its bits): x's neighbours with 8
// significant bits at x's exponent, the nearer one, on a tie the one whose
// last significant bit is 0. NaN gives NaN, infinities themselves; finite x
// past the largest bfloat16 round to infinity, as IEEE 754 says.
float reference_bf16(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  const double v = std::abs(static_cast<double>(x));
  int exponent = std::ilogb(v);          // v in [2^e, 2^(e+1))
  if (exponent < -126) exponent = -126;  // subnormals: the spacing of the smallest normals
  const double ulp = std::ldexp(1.0, exponent - 7);
  const double below = std::floor(v / ulp) * ulp, above = below + ulp;
  double r;
  if (v - below < above - v)
    r = below;
  else if (above - v < v - below)
    r = above;
  else
    r = std::fmod(below / ulp, 2.0) == 0.0 ? below : above;
  const double largest = std::ldexp(255.0 / 128.0, 127);  // (2 - 2^-7) 2^127
  if (r > largest) r = std::numeric_limits<double>::infinity();
  return static_cast<float>(x < 0 ? -r : r);
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

xt::xarray<float> rounded(const xt::xarray<float>& a) {
  xt::xarray<float> r = a;
  for (auto& v : r) v = reference_bf16(v);
  return r;
}

// sum_k |op(a)_ik| |op(b)_kj|, the scale of the bf16 bound.
xt::xarray<double> magnitudes(const xt::xarray<float>& a, bool ta, const xt::xarray<float>& b,
                              bool tb, GemmDims d) {
  const xt::xarray<float> abs_a = xt::abs(a), abs_b = xt::abs(b);
  return gemm_reference(abs_a, ta, abs_b, tb, xt::xarray<float>(xt::zeros<float>({d.m, d.n})),
                        false, d);
}

// max_ij |c - reference| / sum_k |a_ik||b_kj|.
double worst_relative(const xt::xarray<float>& c, const xt::xarray<double>& reference,
                      const xt::xarray<double>& scale) {
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    worst = std::max(worst, std::abs(c.data()[i] - reference.data()[i]) / scale.data()[i]);
  return worst;
}

constexpr double k_bf16_bound = 2.0 / 256.0;  // 2 * 2^-8, see the top of the file

// Products past the small-product and few-row loops (they reach oneDNN), with
// tails of every kind (the split path has a case of its own below).
const std::vector<GemmDims> k_dims = {{40, 50, 60}, {9, 33, 70}, {129, 65, 33}};

bool bf16_supported() {
  if (matmul_precision_supported(MatmulPrecision::bf16)) return true;
  MESSAGE("bf16 GEMMs skipped: matmul_precision_supported(bf16) is false ("
          << (detail::onednn_compiled() ? "oneDNN has no native bf16 kernel on this CPU: \"" +
                                              detail::onednn_bf16_kernel() + "\""
                                        : std::string("built without oneDNN"))
          << ")");
  return false;
}

}  // namespace

TEST_CASE("matmul precision: float -> bf16 rounds to nearest, ties to even, like the reference") {
  // ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 -> 1 (even); 1 + 3 * 2^-8 -> 1 + 2^-6
  CHECK(detail::from_bf16(detail::to_bf16(1.0f + 0x1p-8f)) == 1.0f);
  CHECK(detail::from_bf16(detail::to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  CHECK(detail::from_bf16(detail::to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(detail::from_bf16(detail::to_bf16(inf)) == inf);
  CHECK(detail::from_bf16(detail::to_bf16(-inf)) == -inf);
  CHECK(detail::from_bf16(detail::to_bf16(std::numeric_limits<float>::max())) == inf);
  // NaNs stay NaN (one whose payload sits in the low 16 bits only, too), sign kept
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff80ffffu, 0x7fffffffu}) {
    const std::uint16_t h = detail::to_bf16(float_of(nan));
    CHECK(std::isnan(detail::from_bf16(h)));
    CHECK((h >> 15) == (nan >> 31));
  }
  // every pattern of the low 17 bits (kept bit and dropped bits) at a few
  // exponents and both signs, subnormals included, plus random floats: the
  // matrix pass (strided and contiguous) equals the scalar reference
  std::vector<float> values;
  for (std::uint32_t high : {0x3f800000u, 0x00000000u, 0x00800000u, 0x7f000000u, 0xc2fe0000u})
    for (std::uint32_t low = 0; low < (1u << 17); low += 7) values.push_back(float_of(high | low));
  // NaNs and infinities among ordinary floats (no subnormal near them)
  for (std::uint32_t special : {0x7fc00000u, 0x7f800001u, 0xff80ffffu, 0x7fffffffu, 0x7f800000u,
                                0xff800000u, 0x7f7fffffu, 0x80000000u})
    for (int i = 0; i < 40; ++i) values.push_back(i % 5 == 0 ? float_of(special) : 1.5f * i);
  for (float v : random_array<float>({4099}, 11, -1e6, 1e6)) values.push_back(v);
  const std::size_t cols = 61, rows = values.size() / cols;
  std::vector<std::uint16_t> contiguous(rows * cols), strided(rows * (cols - 3));
  detail::to_bf16_matrix(values.data(), cols, rows, cols, contiguous.data());
  detail::to_bf16_matrix(values.data(), cols, rows, cols - 3, strided.data());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < rows * cols; ++i) {
    if (std::isnan(values[i])) {  // the reference keeps a NaN's bits; to_bf16 makes it quiet
      if (contiguous[i] != detail::to_bf16(values[i])) ++wrong;
    } else if (bits_of(detail::from_bf16(contiguous[i])) != bits_of(reference_bf16(values[i]))) {
      ++wrong;
    }
    if (i % cols < cols - 3 &&
        strided[(i / cols) * (cols - 3) + i % cols] != detail::to_bf16(values[i]))
      ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("matmul precision: the choice, bad values, and what can run here") {
  CHECK(get_matmul_precision() == MatmulPrecision::highest);
  CHECK(matmul_precision_supported(MatmulPrecision::highest));
  CHECK(matmul_precision_name(MatmulPrecision::bf16) == "bf16");
  const auto bad = static_cast<MatmulPrecision>(7);
  CHECK_FALSE(matmul_precision_supported(bad));
  CHECK_THROWS_WITH_AS(set_matmul_precision(bad),
                       "xtgrad::set_matmul_precision: argument 'precision' is MatmulPrecision(7), "
                       "expected MatmulPrecision::highest or MatmulPrecision::bf16",
                       std::invalid_argument);
  CHECK(get_matmul_precision() == MatmulPrecision::highest);
  if (!bf16_supported()) {
    CHECK_THROWS_AS(set_matmul_precision(MatmulPrecision::bf16), std::invalid_argument);
    CHECK(get_matmul_precision() == MatmulPrecision::highest);
    return;
  }
  CHECK(detail::native_bf16_kernel(detail::onednn_bf16_kernel()));
  const PrecisionScope scope(MatmulPrecision::bf16);
  CHECK(get_matmul_precision() == MatmulPrecision::bf16);
  CHECK(gemm_backend_info() == detail::onednn_info(MatmulPrecision::bf16));
  CHECK(gemm_backend_info().find(detail::onednn_bf16_kernel()) != std::string::npos);
}

TEST_CASE("matmul precision: bf16 GEMMs, every transpose and beta, within the bf16 bound") {
  if (!bf16_supported()) return;
  std::uint32_t seed = 100;
  for (const GemmDims d : k_dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(d.k);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const xt::xarray<float> a =
              random_array<float>(ta ? std::vector{d.k, d.m} : std::vector{d.m, d.k}, seed++);
          const xt::xarray<float> b =
              random_array<float>(tb ? std::vector{d.n, d.k} : std::vector{d.k, d.n}, seed++);
          const xt::xarray<float> c0 = random_array<float>({d.m, d.n}, seed++);
          xt::xarray<float> c_bf16, c_f32;
          {
            const PrecisionScope scope(MatmulPrecision::bf16);
            c_bf16 = gemm_product(a, ta, b, tb, c0, accumulate, d);
          }
          c_f32 = gemm_product(a, ta, b, tb, c0, accumulate, d);
          const xt::xarray<double> exact = gemm_reference(a, ta, b, tb, c0, accumulate, d);
          const xt::xarray<double> scale = magnitudes(a, ta, b, tb, d);
          CHECK(worst_relative(c_bf16, exact, scale) <= k_bf16_bound);
          // bf16 is bf16: it is the product of the rounded operands to float
          // accuracy, and it is farther from the exact product than float is
          const xt::xarray<double> of_rounded =
              gemm_reference(rounded(a), ta, rounded(b), tb, c0, accumulate, d);
          const double tol = 2e-6 * (10.0 + d.k);
          check_close(c_bf16, of_rounded, tol, tol);
          CHECK(worst_relative(c_bf16, exact, scale) > 2e-5);
          CHECK(worst_relative(c_f32, exact, scale) < 2e-6);
        }
}

TEST_CASE("matmul precision: a split bf16 product is bf16 in every part, at 1 and 2 threads") {
  if (!bf16_supported()) return;
  // at least 2 * k_onednn_parallel_macs multiply-adds: split over the columns of C
  const GemmDims d{128, 520, 256};
  const xt::xarray<float> a = random_array<float>({d.m, d.k}, 5);
  const xt::xarray<float> b = random_array<float>({d.n, d.k}, 6);
  const xt::xarray<float> c0 = xt::zeros<float>({d.m, d.n});
  const std::size_t threads_before = get_num_threads();
  const PrecisionScope scope(MatmulPrecision::bf16);
  set_num_threads(1);
  const xt::xarray<float> one = gemm_product(a, false, b, true, c0, false, d);
  set_num_threads(2);
  const xt::xarray<float> two = gemm_product(a, false, b, true, c0, false, d);
  set_num_threads(threads_before);
  CHECK(one == two);
  check_close(one, gemm_reference(rounded(a), false, rounded(b), true, c0, false, d), 6e-4, 6e-4);
  CHECK(worst_relative(one, gemm_reference(a, false, b, true, c0, false, d),
                       magnitudes(a, false, b, true, d)) <= k_bf16_bound);
}

TEST_CASE("matmul precision: switching between calls, and double is never affected") {
  const GemmDims d{64, 48, 40};
  const xt::xarray<double> ad = random_array<double>({d.m, d.k}, 1),
                           bd = random_array<double>({d.k, d.n}, 2);
  const xt::xarray<double> cd = xt::zeros<double>({d.m, d.n});
  const xt::xarray<double> double_before = gemm_product(ad, false, bd, false, cd, false, d);
  if (!bf16_supported()) return;
  const xt::xarray<float> a = xt::cast<float>(ad), b = xt::cast<float>(bd);
  const xt::xarray<float> c0 = xt::zeros<float>({d.m, d.n});
  const xt::xarray<float> f32 = gemm_product(a, false, b, false, c0, false, d);
  set_matmul_precision(MatmulPrecision::bf16);
  const xt::xarray<float> bf16 = gemm_product(a, false, b, false, c0, false, d);
  const xt::xarray<double> double_bf16 = gemm_product(ad, false, bd, false, cd, false, d);
  set_matmul_precision(MatmulPrecision::highest);
  const xt::xarray<float> f32_again = gemm_product(a, false, b, false, c0, false, d);
  CHECK(f32_again == f32);
  CHECK(bf16 != f32);
  CHECK(double_bf16 == double_before);  // bit for bit
  {
    const PrecisionScope scope(MatmulPrecision::bf16);
    CHECK(gemm_product(a, false, b, false, c0, false, d) == bf16);
  }
}

TEST_CASE("matmul precision: linear and the fused FFN ops, forward and backward, near float") {
  if (!bf16_supported()) return;
  // x [32, 64] -> h [32, 128] -> a = gelu(h) or silu(g) * u -> y [32, 64]
  const std::size_t n = 32, d = 64, hidden = 128;
  const xt::xarray<float> x0 = random_array<float>({n, d}, 21);
  const xt::xarray<float> w10 = random_array<float>({hidden, d}, 22, -0.2, 0.2);
  const xt::xarray<float> wg0 = random_array<float>({hidden, d}, 23, -0.2, 0.2);
  const xt::xarray<float> w20 = random_array<float>({d, hidden}, 24, -0.2, 0.2);
  const xt::xarray<float> b10 = random_array<float>({hidden}, 25),
                          b20 = random_array<float>({d}, 26);
  const xt::xarray<float> dy = random_array<float>({n, d}, 27);
  struct Result {
    std::vector<xt::xarray<float>> values;
  };
  const auto run = [&](bool gated) {
    Tape<float> tape;
    Var<float> x = tape.leaf(x0), w1 = tape.leaf(w10), wg = tape.leaf(wg0), w2 = tape.leaf(w20);
    Var<float> b1 = tape.leaf(b10), b2 = tape.leaf(b20);
    Var<float> h = linear(x, w1, b1);
    Var<float> y = gated ? gated_linear(h, linear(x, wg), Activation::silu, w2, b2)
                         : activation_linear(h, Activation::gelu, w2, b2);
    tape.backward(y, dy);
    return Result{{y.value(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()}};
  };
  for (bool gated : {false, true}) {
    CAPTURE(gated);
    const Result f32 = run(gated);
    Result bf16;
    {
      const PrecisionScope scope(MatmulPrecision::bf16);
      bf16 = run(gated);
    }
    for (std::size_t i = 0; i < f32.values.size(); ++i) {
      CAPTURE(i);
      double norm = 0, diff = 0;
      for (std::size_t j = 0; j < f32.values[i].size(); ++j) {
        const double v = f32.values[i].data()[j], w = bf16.values[i].data()[j];
        norm += v * v;
        diff += (w - v) * (w - v);
      }
      norm = std::sqrt(norm);
      diff = std::sqrt(diff);
      CHECK(diff <= 2e-2 * norm);             // a few times 2^-8, the error of each GEMM
      if (i != 5) CHECK(diff > 1e-6 * norm);  // and not float (db2 = sum of dy: no GEMM)
    }
  }
}

TEST_CASE("matmul precision: the fused ops' block products are those of the rounded operands") {
  if (!bf16_supported()) return;
  // in = 1024: row blocks of 512, so 600 rows are two blocks, each product
  // reading the weight (rounded once for all of them). Against the exact
  // products of the rounded operands, to float accumulation: y = a W^T + b
  // and da = dy W, a = f(h) or u * f(g) computed by the unfused float ops.
  const std::size_t n = 600, in = 1024, out = 24;
  const xt::xarray<float> u0 = random_array<float>({n, in}, 41);
  const xt::xarray<float> g0 = random_array<float>({n, in}, 42, -3.0, 3.0);
  const xt::xarray<float> w0 = random_array<float>({out, in}, 43);
  const xt::xarray<float> b0 = random_array<float>({out}, 44);
  const xt::xarray<float> dy = random_array<float>({n, out}, 45);
  const xt::xarray<float> bias_rows = xt::broadcast(b0, {n, out});
  const PrecisionScope scope(MatmulPrecision::bf16);
  for (bool gated_op : {false, true}) {
    CAPTURE(gated_op);
    const Activation f = gated_op ? Activation::silu : Activation::gelu;
    Tape<float> tape;
    const Var<float> u = tape.leaf(u0), g = tape.leaf(g0), w = tape.leaf(w0), b = tape.leaf(b0);
    const Var<float> y = gated_op ? gated_linear(u, g, f, w, b) : activation_linear(g, f, w, b);
    tape.backward(y, dy);
    // the unfused float ops (no GEMM): a, and the factor of da in g's gradient
    const xt::xarray<float> a = gated_op ? gated(u, g, f).value() : activation(g, f).value();
    const xt::xarray<float> slope = activation_derivative(g, f, 1).value();
    const xt::xarray<double> expected_y =
        gemm_reference(rounded(a), false, rounded(w0), true, bias_rows, true, {n, out, in});
    check_close(y.value(), expected_y, 2e-6 * (10.0 + in), 2e-6 * (10.0 + in));
    const xt::xarray<double> da = gemm_reference(rounded(dy), false, rounded(w0), false,
                                                 xt::xarray<float>(), false, {n, in, out});
    const xt::xarray<double> expected_dg =
        gated_op ? xt::xarray<double>(da * xt::cast<double>(u0) * xt::cast<double>(slope))
                 : xt::xarray<double>(da * xt::cast<double>(slope));
    check_close(g.grad(), expected_dg, 2e-6 * (10.0 + out), 2e-6 * (10.0 + out));
  }
}

TEST_CASE(
    "matmul precision: linear's backward rounds dy once, with the bits of each product's own") {
  if (!bf16_supported()) return;
  // dx = dy . op(W) and dW = dy^T . x (or x^T . dy) share one rounding of dy:
  // the result must be bit for bit that of each product rounding dy itself,
  // in both weight layouts, with one or both gradients required.
  const std::size_t n = 48, in = 40, out = 56;
  const xt::xarray<float> x0 = random_array<float>({n, in}, 31);
  const xt::xarray<float> dy = random_array<float>({n, out}, 32);
  const xt::xarray<float> zeros_dx = xt::zeros<float>({n, in});
  const PrecisionScope scope(MatmulPrecision::bf16);
  for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out})
    for (bool x_grad : {false, true}) {
      const bool out_in = layout == WeightLayout::out_in;
      CAPTURE(out_in);
      CAPTURE(x_grad);
      const xt::xarray<float> w0 =
          random_array<float>(out_in ? std::vector{out, in} : std::vector{in, out}, 33);
      Tape<float> tape;
      Var<float> x = tape.leaf(x0, x_grad), w = tape.leaf(w0);
      tape.backward(linear(x, w, std::nullopt, layout), dy);
      const xt::xarray<float> zeros_dw = xt::zeros<float>(w0.shape());
      const auto weight_grad = [&] {
        return out_in ? gemm_product(dy, true, x0, false, zeros_dw, false, {out, in, n})
                      : gemm_product(x0, true, dy, false, zeros_dw, false, {in, out, n});
      };
      CHECK(w.grad() == weight_grad());
      if (x_grad)
        CHECK(x.grad() == gemm_product(dy, false, w0, !out_in, zeros_dx, false, {n, in, out}));
      const PrecisionScope float_scope(MatmulPrecision::highest);
      CHECK(w.grad() != weight_grad());  // the products above ran in bf16
    }
}
