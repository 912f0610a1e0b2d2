// exp, log, sqrt, rsqrt, tanh, sigmoid, abs, square, pow, clamp, clamp_min
// and clamp_max: values and gradients against PyTorch fixtures and a
// long-double loop, gradcheck, edge shapes, bad input and anomaly mode.
#include <xtgrad/engine/kernels/softmax_kernels.hpp>
#include <xtgrad/engine/kernels/vector_math.hpp>  // first (through simd.hpp): see simd.hpp

#include <doctest/doctest.h>

#include <cfenv>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/errors.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/math.hpp>
#include <xtgrad/engine/ops/reduce.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/math_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::math;

namespace {

using Dims = std::vector<std::size_t>;

template <class T>
using UnaryFn = std::function<Var<T>(const Var<T>&)>;

template <class T>
xt::xarray<T> from(const double* values, std::size_t n) {
  xt::xarray<T> a = xt::empty<T>({n});
  for (std::size_t i = 0; i < n; ++i) a(i) = static_cast<T>(values[i]);
  return a;
}

// A few ulp of T, relative.
template <class T>
constexpr double ulps() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

struct Fixture {
  const char* name;
  const double *x, *dy, *y_d, *dx_d, *y_f, *dx_f;
  std::size_t n;
};
#define XTGRAD_FIXTURE(op)                                                                  \
  Fixture {                                                                                 \
#op, fx::op##_x, fx::op##_dy, fx::op##_y_d, fx::op##_dx_d, fx::op##_y_f, fx::op##_dx_f, \
        std::size(fx::op##_x)                                                               \
  }

template <class T>
UnaryFn<T> by_name(const std::string& name) {
  if (name == "exp") return [](const Var<T>& x) { return exp(x); };
  if (name == "log") return [](const Var<T>& x) { return log(x); };
  if (name == "sqrt") return [](const Var<T>& x) { return sqrt(x); };
  if (name == "rsqrt") return [](const Var<T>& x) { return rsqrt(x); };
  if (name == "tanh") return [](const Var<T>& x) { return tanh(x); };
  if (name == "sigmoid") return [](const Var<T>& x) { return sigmoid(x); };
  if (name == "abs") return [](const Var<T>& x) { return abs(x); };
  if (name == "square") return [](const Var<T>& x) { return square(x); };
  if (name == "pow") return [](const Var<T>& x) { return pow(x, 2.5); };
  if (name == "clamp") return [](const Var<T>& x) { return clamp(x, -0.5, 0.7); };
  if (name == "clamp_min") return [](const Var<T>& x) { return clamp_min(x, -0.5); };
  if (name == "clamp_max") return [](const Var<T>& x) { return clamp_max(x, 0.7); };
  FAIL("unknown op " << name);
  return {};
}

const std::vector<std::string> k_ops = {"exp", "log",    "sqrt", "rsqrt", "tanh",      "sigmoid",
                                        "abs", "square", "pow",  "clamp", "clamp_min", "clamp_max"};

// Inputs inside each op's domain and away from its kinks (abs at 0, the clamp
// bounds -0.5 and 0.7), deterministic.
template <class T>
xt::xarray<T> domain_input(const std::string& op, const Dims& shape, std::uint32_t seed) {
  if (op == "log" || op == "sqrt" || op == "rsqrt" || op == "pow")
    return random_array<T>(shape, seed, 0.2, 3.0);
  xt::xarray<T> x = random_away_from_zero<T>(shape, seed, 0.1, 2.0);
  for (auto& v : x)
    if (std::abs(v + T(0.5)) < T(0.02) || std::abs(v - T(0.7)) < T(0.02)) v += T(0.05);
  return x;
}

// f(x) and f'(x) in long double, written out here (not through the engine).
struct Reference {
  long double y, slope;
};
Reference reference(const std::string& op, long double x) {
  if (op == "exp") return {std::exp(x), std::exp(x)};
  if (op == "log") return {std::log(x), 1 / x};
  if (op == "sqrt") return {std::sqrt(x), 0.5L / std::sqrt(x)};
  if (op == "rsqrt") return {1 / std::sqrt(x), -0.5L / (x * std::sqrt(x))};
  if (op == "tanh") return {std::tanh(x), 1 - std::tanh(x) * std::tanh(x)};
  if (op == "sigmoid") {
    const long double s = 1 / (1 + std::exp(-x));
    return {s, s * (1 - s)};
  }
  if (op == "abs") return {std::fabs(x), x > 0 ? 1.0L : -1.0L};
  if (op == "square") return {x * x, 2 * x};
  if (op == "pow") return {std::pow(x, 2.5L), 2.5L * std::pow(x, 1.5L)};
  if (op == "clamp")
    return {std::min(std::max(x, -0.5L), 0.7L), x >= -0.5L && x <= 0.7L ? 1.0L : 0.0L};
  if (op == "clamp_min") return {std::max(x, -0.5L), x >= -0.5L ? 1.0L : 0.0L};
  if (op == "clamp_max") return {std::min(x, 0.7L), x <= 0.7L ? 1.0L : 0.0L};
  FAIL("unknown op " << op);
  return {};
}

}  // namespace

TEST_CASE_TEMPLATE("math: values and gradients match PyTorch, special values included", T, float,
                   double) {
  constexpr bool is_float = std::is_same_v<T, float>;
  for (const Fixture& f : {XTGRAD_FIXTURE(exp), XTGRAD_FIXTURE(log), XTGRAD_FIXTURE(sqrt),
                           XTGRAD_FIXTURE(rsqrt), XTGRAD_FIXTURE(tanh), XTGRAD_FIXTURE(sigmoid),
                           XTGRAD_FIXTURE(abs), XTGRAD_FIXTURE(square)}) {
    INFO(std::string(f.name));
    Tape<T> tape;
    auto x = tape.leaf(from<T>(f.x, f.n));
    auto y = by_name<T>(f.name)(x);
    // xsimd's exp returns 0 where the result would be subnormal (torch keeps
    // the subnormal): an absolute tolerance of the smallest normal T.
    check_ieee(y.value(), is_float ? f.y_f : f.y_d, f.n, ulps<T>(), std::numeric_limits<T>::min());
    tape.backward(y, from<T>(f.dy, f.n));
    // 1 - y^2 and (1 - y) y lose relative accuracy where y is near 1: an
    // absolute tolerance of a few ulp of dy there.
    check_ieee(x.grad(), is_float ? f.dx_f : f.dx_d, f.n, ulps<T>(), 4 * ulps<T>());
  }
}

TEST_CASE_TEMPLATE("math: pow matches PyTorch for fractional, negative and zero exponents", T,
                   float, double) {
  constexpr bool is_float = std::is_same_v<T, float>;
  const std::size_t n = std::size(fx::pow_x);
  for (std::size_t k = 0; k < std::size(fx::pow_p); ++k) {
    const double p = fx::pow_p[k];
    INFO("exponent " << p);
    Tape<T> tape;
    auto x = tape.leaf(from<T>(fx::pow_x, n));
    auto y = pow(x, p);
    check_ieee(y.value(), (is_float ? fx::pow_y_f : fx::pow_y_d) + k * n, n, ulps<T>(), 0.0);
    tape.backward(y, from<T>(fx::pow_dy, n));
    check_ieee(x.grad(), (is_float ? fx::pow_dx_f : fx::pow_dx_d) + k * n, n, ulps<T>(), 0.0);
  }
  // d/dx x^0 = 0 everywhere, also where the upstream gradient is NaN or inf.
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{0, -1, 2});
  auto y = pow(x, 0.0);
  CHECK(y.value() == xt::xarray<T>{1, 1, 1});
  tape.backward(
      y, xt::xarray<T>{std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(), 1});
  CHECK(x.grad() == xt::xarray<T>{0, 0, 0});
}

TEST_CASE_TEMPLATE("math: clamp at its boundaries, crossed bounds, clamp_min and clamp_max", T,
                   float, double) {
  const std::size_t n = std::size(fx::clamp_x);
  struct Case {
    UnaryFn<T> f;
    const double *y, *dx;
  };
  const std::vector<Case> cases = {
      {[](const Var<T>& x) { return clamp(x, -1.0, 1.0); }, fx::clamp_y, fx::clamp_dx},
      {[](const Var<T>& x) { return clamp(x, 1.0, -1.0); }, fx::clamp_crossed_y,
       fx::clamp_crossed_dx},
      {[](const Var<T>& x) { return clamp_min(x, -0.5); }, fx::clamp_min_y, fx::clamp_min_dx},
      {[](const Var<T>& x) { return clamp_max(x, 0.5); }, fx::clamp_max_y, fx::clamp_max_dx}};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    Tape<T> tape;
    auto x = tape.leaf(from<T>(fx::clamp_x, n));
    auto y = cases[k].f(x);
    check_ieee(y.value(), cases[k].y, n, 0.0, 0.0);  // exact
    tape.backward(y, from<T>(fx::clamp_dy, n));
    check_ieee(x.grad(), cases[k].dx, n, 0.0, 0.0);
  }
}

TEST_CASE_TEMPLATE("math: every op against a long-double loop over its domain", T, float, double) {
  for (const std::string& op : k_ops) {
    INFO(op);
    const xt::xarray<T> xv = domain_input<T>(op, {4099}, 31);  // not a multiple of any batch
    const xt::xarray<T> dy = random_array<T>({4099}, 32);
    xt::xarray<double> y_ref = xt::empty<double>({4099}), dx_ref = xt::empty<double>({4099});
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const Reference r = reference(op, xv(i));
      y_ref(i) = static_cast<double>(r.y);
      dx_ref(i) = static_cast<double>(static_cast<long double>(dy(i)) * r.slope);
    }
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = by_name<T>(op)(x);
    check_close(y.value(), y_ref, ulps<T>(), 0.0);
    tape.backward(y, dy);
    check_close(x.grad(), dx_ref, ulps<T>(), 4 * ulps<T>());
  }
}

TEST_CASE("math: float exp within 1.5 ulp of exp in double over its whole range, limits exact") {
  // Every float v in [-103.97, 88.72] (outside it exp is 0 or inf in float),
  // a million of them evenly spaced, and the subnormal results among them.
  const double low = -103.97, high = 88.72;
  const std::size_t n = 1 << 20;
  xt::xarray<float> v = xt::empty<float>({n + 8});
  for (std::size_t i = 0; i < n; ++i) v(i) = static_cast<float>(low + (high - low) * i / (n - 1));
  const float inf = std::numeric_limits<float>::infinity();
  const float limits[] = {-inf, inf, std::nanf(""), 88.73f, 1e30f, -104.0f, -1e30f, -0.0f};
  std::copy(std::begin(limits), std::end(limits), v.begin() + n);
  Tape<float> tape;
  const xt::xarray<float> y = exp(tape.leaf(v, false)).value();
  double worst = 0.0;
  float worst_at = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const double exact = std::exp(static_cast<double>(v(i)));
    const float rounded = static_cast<float>(exact);
    // the spacing of floats at the exact value (the subnormal one below 2^-126)
    const double ulp = std::nextafter(rounded, inf) - rounded;
    const double error = std::abs(static_cast<double>(y(i)) - exact) / ulp;
    if (error > worst) worst = error, worst_at = v(i);
  }
  CAPTURE(worst_at);
  CHECK(worst <= 1.5);
  CHECK(y(n) == 0.0f);
  CHECK(y(n + 1) == inf);
  CHECK(std::isnan(y(n + 2)));
  CHECK(y(n + 3) == inf);
  CHECK(y(n + 4) == inf);
  CHECK(y(n + 5) == 0.0f);
  CHECK(y(n + 6) == 0.0f);
  CHECK(y(n + 7) == 1.0f);
}

TEST_CASE_TEMPLATE("math: the largest lane of a batch and of a row, wherever it is", T, float,
                   double) {
  // horizontal_max (a tree of shuffles with AVX-512) and row_max (vectors,
  // then a tail) against a scalar max, with the largest value in every lane
  // and at every row length; -inf and +inf included.
  using B = detail::simd_math::Batch<T>;
  constexpr T inf = std::numeric_limits<T>::infinity();
  std::vector<T> lane(B::size);
  for (std::size_t top = 0; top < B::size; ++top)
    for (T fill : {T(-3.5), -inf}) {
      for (std::size_t l = 0; l < B::size; ++l) lane[l] = fill - static_cast<T>(l);
      lane[top] = T(-1.25) + static_cast<T>(top);  // the largest, and a different value each time
      INFO("lane " << top << ", fill " << fill);
      CHECK(detail::simd_math::horizontal_max(B::load_unaligned(lane.data())) == lane[top]);
      lane[top] = inf;
      CHECK(detail::simd_math::horizontal_max(B::load_unaligned(lane.data())) == inf);
    }
  std::vector<T> row(3 * B::size + 3);
  for (std::size_t n = 0; n <= row.size(); ++n)
    for (std::size_t top = 0; top < n; ++top) {
      for (std::size_t j = 0; j < n; ++j) row[j] = -static_cast<T>((j * 7) % 11) - T(2);
      row[top] = T(0.5);
      INFO("length " << n << ", largest at " << top);
      CHECK(detail::row_max(row.data(), n) == T(0.5));
    }
  CHECK(detail::row_max(row.data(), 0) == -inf);
}

#if XSIMD_WITH_AVX512F && XSIMD_WITH_FMA3_AVX2
TEST_CASE("math: float exp on AVX-512 has the bits of its generic form on AVX2 with FMA") {
  // exp_no_ub's AVX-512 overload (VSCALEFPS) against the generic Cephes
  // form it restates, on the same values two AVX2 batches at a time.
  using Wide = xsimd::batch<float, xsimd::avx512f>;
  using Narrow = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
  std::vector<float> v = {std::nanf(""),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          88.7f,
                          -103.9f,
                          1e30f};
  for (int i = 0; i < 1 << 18; ++i)
    v.push_back(-120.0f + 240.0f * static_cast<float>(i) / (1 << 18));
  while (v.size() % Wide::size != 0) v.push_back(0.0f);
  std::size_t differ = 0;
  for (std::size_t j = 0; j < v.size(); j += Wide::size) {
    float wide[Wide::size], narrow[Wide::size];
    detail::simd_math::exp_no_ub(Wide::load_unaligned(&v[j])).store_unaligned(wide);
    for (std::size_t h = 0; h < Wide::size; h += Narrow::size)
      detail::simd_math::exp_no_ub(Narrow::load_unaligned(&v[j + h])).store_unaligned(narrow + h);
    for (std::size_t i = 0; i < Wide::size; ++i)
      differ += std::memcmp(&wide[i], &narrow[i], sizeof(float)) != 0;
  }
  CHECK(differ == 0);
}
#endif

TEST_CASE_TEMPLATE("math: sigmoid and tanh reach their limits exactly, with no overflow", T, float,
                   double) {
  const T big = std::numeric_limits<T>::max(), inf = std::numeric_limits<T>::infinity();
  Tape<T> tape;
  auto x = tape.leaf(xt::xarray<T>{-inf, -big, T(-1000), T(1000), big, inf});
  std::feclearexcept(FE_ALL_EXCEPT);
  auto s = sigmoid(x);
  CHECK_FALSE(std::fetestexcept(FE_OVERFLOW | FE_INVALID | FE_DIVBYZERO));
  CHECK(s.value() == xt::xarray<T>{0, 0, 0, 1, 1, 1});
  auto t = tanh(x);
  CHECK(t.value() == xt::xarray<T>{-1, -1, -1, 1, 1, 1});
  tape.backward(add(s, t), xt::ones<T>({6}));
  CHECK(x.grad() == xt::zeros<T>({6}));
  // NaN in, NaN out, for every op.
  for (const std::string& op : k_ops) {
    INFO(op);
    auto y = by_name<T>(op)(tape.leaf(xt::xarray<T>{std::numeric_limits<T>::quiet_NaN()}));
    CHECK(std::isnan(y.value()(0)));
  }
}

TEST_CASE("math: gradcheck of every op in double, and of pow for several exponents") {
  for (const std::string& op : k_ops) {
    INFO(op);
    check_gradients(
        [f = by_name<double>(op)](const std::vector<Var<double>>& v) { return f(v[0]); },
        {domain_input<double>(op, {3, 4}, 41)});
  }
  for (double p : {0.5, 0.3, -0.5, -1.0, -1.5, -2.0, 1.0, 2.0, 3.0, 0.0}) {
    INFO("pow " << p);
    check_gradients([p](const std::vector<Var<double>>& v) { return pow(v[0], p); },
                    {random_array({2, 5}, 42, 0.3, 2.0)});
  }
  // Integer exponents of negative x.
  for (double p : {2.0, 3.0, -1.0, -2.0, 4.0}) {
    INFO("pow of negative x " << p);
    check_gradients([p](const std::vector<Var<double>>& v) { return pow(v[0], p); },
                    {random_array({2, 5}, 43, -2.0, -0.3)});
  }
  // A chain: sigmoid(log(x)) * tanh(x) + sqrt(exp(x)).
  check_gradients(
      [](const std::vector<Var<double>>& v) {
        return add(mul(sigmoid(log(v[0])), tanh(v[0])), sqrt(exp(v[0])));
      },
      {random_array({6}, 44, 0.3, 2.0)});
}

TEST_CASE_TEMPLATE("math: edge shapes [D], [0, D], [2, 3, D], [] and strided views", T, float,
                   double) {
  for (const std::string& op : k_ops) {
    INFO(op);
    const UnaryFn<T> f = by_name<T>(op);
    for (const Dims& shape : {Dims{5}, Dims{0, 5}, Dims{2, 3, 5}, Dims{}}) {
      INFO(detail::shape_str(shape));
      const xt::xarray<T> xv = domain_input<T>(op, shape, 51);
      const xt::xarray<T> dy = random_array<T>(shape, 52);
      Tape<T> tape;
      auto x = tape.leaf(xv);
      auto y = f(x);
      REQUIRE(y.shape() == x.shape());
      for (std::size_t i = 0; i < xv.size(); ++i)
        CHECK(
            static_cast<double>(y.value().data()[i]) ==
            doctest::Approx(static_cast<double>(reference(op, xv.data()[i]).y)).epsilon(ulps<T>()));
      tape.backward(y, dy);
      CHECK(x.grad().shape() == x.shape());
      CHECK(x.value() == xv);  // the input is unchanged
    }
    // A transposed view and a stepped view give the contiguous results.
    const xt::xarray<T> m = domain_input<T>(op, {3, 8}, 53);
    const xt::xarray<T> dy = random_array<T>({4, 3}, 54);
    const xt::xarray<T> view_copy = xt::transpose(xt::view(m, xt::all(), xt::range(0, 8, 2)));
    Tape<T> strided, contiguous;
    auto a = strided.leaf(xt::transpose(xt::view(m, xt::all(), xt::range(0, 8, 2))));
    auto b = contiguous.leaf(view_copy);
    auto ya = f(a);
    auto yb = f(b);
    CHECK(ya.value() == yb.value());
    strided.backward(ya, dy);
    contiguous.backward(yb, dy);
    CHECK(a.grad() == b.grad());
  }
}

TEST_CASE_TEMPLATE("math: gradients accumulate, and an input without requires_grad gets none", T,
                   float, double) {
  for (const std::string& op : k_ops) {
    INFO(op);
    const UnaryFn<T> f = by_name<T>(op);
    const xt::xarray<T> dy = random_array<T>({2, 3}, 61);
    Tape<T> tape;
    auto x = tape.leaf(domain_input<T>(op, {2, 3}, 62));
    auto y = f(x);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    CHECK(xt::any(xt::not_equal(once, T(0))));
    tape.backward(y, dy);  // the same recording again: the leaf accumulates
    CHECK(x.grad() == xt::xarray<T>(T(2) * once));

    // Used twice in one graph: the two claims add up.
    Tape<T> tape2;
    auto x2 = tape2.leaf(x.value());
    tape2.backward(add(f(x2), f(x2)), dy);
    CHECK(x2.grad() == xt::xarray<T>(T(2) * once));

    auto constant = tape.leaf(x.value(), false);
    CHECK_FALSE(f(constant).requires_grad());
    NoGradGuard<T> no_grad(tape);
    CHECK_FALSE(f(x).requires_grad());
  }
}

TEST_CASE("math: anomaly mode names the op whose value is not finite") {
  Tape<double> tape;
  auto zero = tape.leaf(xt::xarray<double>{0.0, 1.0});
  auto minus = tape.leaf(xt::xarray<double>{-1.0, 1.0});
  auto big = tape.leaf(xt::xarray<double>{1000.0});
  auto nan = tape.leaf(xt::xarray<double>{std::nan(""), 1.0});
  auto huge = tape.leaf(xt::xarray<double>{1e200}, false);  // square overflows
  tape.set_detect_anomaly(true);
  const std::vector<std::pair<std::string, std::function<Var<double>()>>> cases = {
      {"exp", [&] { return exp(big); }},        {"log", [&] { return log(zero); }},
      {"log", [&] { return log(minus); }},      {"sqrt", [&] { return sqrt(minus); }},
      {"rsqrt", [&] { return rsqrt(zero); }},   {"pow", [&] { return pow(zero, -1.0); }},
      {"pow", [&] { return pow(minus, 0.5); }}, {"square", [&] { return square(huge); }},
      {"tanh", [&] { return tanh(nan); }},      {"sigmoid", [&] { return sigmoid(nan); }},
      {"abs", [&] { return abs(nan); }},        {"clamp", [&] { return clamp(nan, 0.0, 1.0); }},
  };
  for (const auto& [op, call] : cases) check_forward_anomaly(tape, op, call);
  // sqrt'(0) is inf: a backward anomaly, naming sqrt.
  auto y = sqrt(zero);
  check_backward_anomaly(tape, "sqrt", [&] { tape.backward(y, xt::xarray<double>{1.0, 1.0}); });
}

TEST_CASE_TEMPLATE("bad input: math", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> x = tape.leaf(random_array<T>({2, 3}, 71));
  tape.backward(sum(exp(x)));  // x holds a nonzero gradient
  const auto snapshot = snapshot_of<T>({&tape}, {x});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  bad("clamp: NaN min", [&] { clamp(x, nan, T(1)); }, IA, {"xtgrad::clamp", "'min'", "nan"});
  bad("clamp: NaN max", [&] { clamp(x, T(0), nan); }, IA, {"xtgrad::clamp", "'max'", "nan"});
  bad("clamp: NaN both", [&] { clamp(x, nan, nan); }, IA, {"xtgrad::clamp", "'min'", "nan"});
  bad("clamp_min: NaN min", [&] { clamp_min(x, nan); }, IA, {"xtgrad::clamp_min", "'min'", "nan"});
  bad("clamp_max: NaN max", [&] { clamp_max(x, nan); }, IA, {"xtgrad::clamp_max", "'max'", "nan"});
  for (const std::string& op : k_ops) {
    const UnaryFn<T> f = by_name<T>(op);
    add_handle_rows<T>(
        rows, op, {"x"}, {x}, [f](const std::vector<Var<T>>& v) { f(v[0]); }, other, stale);
  }
  report("math", run_rows(rows, snapshot));
}
