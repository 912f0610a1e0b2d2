// apply_rotary: Hugging Face LLaMA's rotary embedding (rotate_half
// convention) against a PyTorch fixture (make_rotary.py), hand-computed
// rotations, gradcheck, position offsets, edge shapes and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/rotary.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/bad_input.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/rotary_fixtures.hpp"
#include "support/shape_helpers.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace fx = xtgrad::fixtures::rotary;

namespace {

// y and dx of one fixture case, checked in T.
template <class T, std::size_t R, std::size_t N>
void check_case(const std::size_t (&shape)[R], const double (&x)[N], const double (&dy)[N],
                const double (&y)[N], const double (&dx)[N], std::size_t offset, double theta) {
  Tape<T> tape;
  auto v = tape.leaf(fixture_array<T>(shape, x));
  auto out = apply_rotary(v, offset, theta);
  // float: inputs of magnitude up to ~4, a rounding of the table, the products and the sum
  const double tol = std::is_same_v<T, float> ? 4e-6 : 1e-14;
  check_close(out.value(), fixture_array<double>(shape, y), tol, tol);
  tape.backward(out, fixture_array<T>(shape, dy));
  check_close(v.grad(), fixture_array<double>(shape, dx), tol, tol);
}

// The rotation written out with std::cos / std::sin in long double, row by
// row: the reference of the large and strided cases.
template <class T>
xt::xarray<double> rotated(const xt::xarray<T>& x, std::size_t offset, double theta) {
  const std::size_t dh = x.shape().back(), seq = x.shape()[x.dimension() - 2], h = dh / 2;
  xt::xarray<double> y = xt::zeros<double>(dims_of(x));
  for (std::size_t r = 0; r * dh < x.size(); ++r) {
    const long double p = static_cast<long double>(offset + r % seq);
    for (std::size_t i = 0; i < h; ++i) {
      const long double angle =
          p / std::pow(static_cast<long double>(theta), 2.0L * i / static_cast<long double>(dh));
      const long double a = x.data()[r * dh + i], b = x.data()[r * dh + i + h];
      y.data()[r * dh + i] = static_cast<double>(a * std::cos(angle) - b * std::sin(angle));
      y.data()[r * dh + i + h] = static_cast<double>(b * std::cos(angle) + a * std::sin(angle));
    }
  }
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("apply_rotary: values and gradients match Hugging Face LLaMA in torch", T, float,
                   double) {
  SUBCASE("heads [2, 3, 5, 8]") {
    check_case<T>(fx::heads_shape, fx::heads_x, fx::heads_dy, fx::heads_y, fx::heads_dx,
                  fx::heads_offset, fx::heads_theta);
  }
  SUBCASE("[4, 6] from position 7, theta 500") {
    check_case<T>(fx::offset_shape, fx::offset_x, fx::offset_dy, fx::offset_y, fx::offset_dx,
                  fx::offset_offset, fx::offset_theta);
  }
  SUBCASE("one step [1, 2, 1, 4] at position 100") {
    check_case<T>(fx::single_step_shape, fx::single_step_x, fx::single_step_dy, fx::single_step_y,
                  fx::single_step_dx, fx::single_step_offset, fx::single_step_theta);
  }
  SUBCASE("Dh 16 from position 2") {
    check_case<T>(fx::wide_shape, fx::wide_x, fx::wide_dy, fx::wide_y, fx::wide_dx, fx::wide_offset,
                  fx::wide_theta);
  }
}

TEST_CASE("apply_rotary: float agrees with Hugging Face's float32 tables within float rounding") {
  Tape<float> tape;
  auto x = tape.leaf(fixture_array<float>(fx::heads_shape, fx::heads_x));
  auto y = apply_rotary(x, fx::heads_offset, fx::heads_theta);
  check_close(y.value(), fixture_array<double>(fx::heads_shape, fx::heads_y_f32), 2e-6, 2e-6);
}

TEST_CASE_TEMPLATE("apply_rotary: hand-computed rotations", T, float, double) {
  const double tol = tolerance<T>();
  SUBCASE("Dh = 2: inv_freq = 1, row t of [1, 0] becomes [cos p, sin p], p = 3 + t") {
    Tape<T> tape;
    auto x = tape.leaf(xt::xarray<T>{{1, 0}, {1, 0}, {0, 1}});
    auto y = apply_rotary(x, 3, 10000.0);
    const xt::xarray<double> expected = {{std::cos(3.0), std::sin(3.0)},
                                         {std::cos(4.0), std::sin(4.0)},
                                         {-std::sin(5.0), std::cos(5.0)}};
    check_close(y.value(), expected, tol, tol);
    // dx rotates back: dy = y gives dx = x
    tape.backward(y, xt::xarray<T>(y.value()));
    check_close(x.grad(), xt::xarray<double>{{1, 0}, {1, 0}, {0, 1}}, tol, tol);
  }
  SUBCASE("Dh = 4, theta 100: inv_freq = [1, 1/10], position 1") {
    Tape<T> tape;
    auto x = tape.leaf(xt::xarray<T>{{0, 0, 0, 0}, {1, 2, 3, 4}});  // row 1 is at position 1
    auto y = apply_rotary(x, 0, 100.0);
    const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.1), s2 = std::sin(0.1);
    const xt::xarray<double> expected = {
        {0, 0, 0, 0}, {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2}};
    check_close(y.value(), expected, tol, tol);
    tape.backward(y, xt::xarray<T>{{0, 0, 0, 0}, {1, 0, 0, 0}});
    // dx[1] = [c1, 0, -s1, 0]: dy * cos + rotate_half^T(dy * sin), rotate_half^T(g) = [g2, -g1]
    check_close(x.grad(), xt::xarray<double>{{0, 0, 0, 0}, {c1, 0, -s1, 0}}, tol, tol);
  }
  SUBCASE("position 0 is the identity") {
    Tape<T> tape;
    const xt::xarray<T> xv = random_array<T>({1, 6}, 3);
    auto x = tape.leaf(xv);
    CHECK(apply_rotary(x).value() == xv);
  }
}

TEST_CASE_TEMPLATE("apply_rotary: an offset continues the positions (a KV cache step)", T, float,
                   double) {
  const xt::xarray<T> xv = random_array<T>({2, 3, 7, 8}, 5);
  Tape<T> tape;
  auto whole = apply_rotary(tape.leaf(xv), 0, 500.0);
  auto tail =
      apply_rotary(tape.leaf(xt::view(xv, xt::all(), xt::all(), xt::range(4, 7))), 4, 500.0);
  const xt::xarray<T> expected = xt::view(whole.value(), xt::all(), xt::all(), xt::range(4, 7));
  check_close(tail.value(), expected, tolerance<T>(), tolerance<T>());
  // A large offset against the long double rotation.
  auto far = apply_rotary(tape.leaf(xv), 100000, 10000.0);
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-9;
  check_close(far.value(), rotated(xv, 100000, 10000.0), tol, tol);
}

TEST_CASE_TEMPLATE("apply_rotary: calls with other positions, sizes or theta in between", T, float,
                   double) {
  // The tables of the last call are reused when the next call has the same
  // positions, head size and theta: every change of any of them must show.
  const xt::xarray<T> xv = random_array<T>({2, 5, 6}, 7);
  Tape<T> tape;
  auto x = tape.leaf(xv);
  const xt::xarray<T> first = apply_rotary(x, 3, 500.0).value();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  check_close(first, rotated(xv, 3, 500.0), tol, tol);
  check_close(apply_rotary(x, 4, 500.0).value(), rotated(xv, 4, 500.0), tol, tol);
  check_close(apply_rotary(x, 3, 400.0).value(), rotated(xv, 3, 400.0), tol, tol);
  const xt::xarray<T> longer = random_array<T>({7, 6}, 8), wider = random_array<T>({5, 8}, 9);
  check_close(apply_rotary(tape.leaf(longer), 3, 500.0).value(), rotated(longer, 3, 500.0), tol,
              tol);
  check_close(apply_rotary(tape.leaf(wider), 3, 500.0).value(), rotated(wider, 3, 500.0), tol, tol);
  CHECK(apply_rotary(x, 3, 500.0).value() == first);
}

TEST_CASE("apply_rotary: gradcheck with leading axes, T = 1 and an offset") {
  for (const Dims& shape : {Dims{3, 4}, Dims{2, 3, 5, 6}, Dims{2, 1, 2}, Dims{1, 2}}) {
    INFO(detail::shape_str(shape));
    check_gradients([](const std::vector<Var<double>>& v) { return apply_rotary(v[0]); },
                    {random_array(shape, 11)});
    check_gradients([](const std::vector<Var<double>>& v) { return apply_rotary(v[0], 11, 50.0); },
                    {random_array(shape, 12)});
  }
}

TEST_CASE_TEMPLATE("apply_rotary: edge shapes, views, threads and accumulation", T, float, double) {
  SUBCASE("empty [2, 0, 4], [3, 0] and [0, 6]") {
    for (const Dims& shape : {Dims{2, 0, 4}, Dims{3, 0}, Dims{0, 6}}) {
      Tape<T> tape;
      auto x = tape.leaf(xt::xarray<T>(xt::zeros<T>(shape)));
      auto y = apply_rotary(x, 2);
      CHECK(dims_of(y.value()) == shape);
      tape.backward(y, xt::xarray<T>(xt::zeros<T>(shape)));
      CHECK(dims_of(x.grad()) == shape);
    }
  }
  SUBCASE("a transposed view equals its contiguous copy") {
    const xt::xarray<T> m = random_array<T>({6, 3}, 21);  // transposed: [3, 6]
    const xt::xarray<T> dy = random_array<T>({3, 6}, 22);
    Tape<T> strided, contiguous;
    auto a = strided.leaf(xt::transpose(m));
    auto b = contiguous.leaf(xt::xarray<T>(xt::transpose(m)));
    auto ya = apply_rotary(a, 1);
    auto yb = apply_rotary(b, 1);
    CHECK(ya.value() == yb.value());
    strided.backward(ya, dy);
    contiguous.backward(yb, dy);
    CHECK(a.grad() == b.grad());
  }
  SUBCASE("a large [4, 4, 512, 64] input (threads) against the long double rotation") {
    const int before = get_num_threads();
    set_num_threads(2);  // two chunks, whatever the machine
    const xt::xarray<T> xv = random_array<T>({4, 4, 512, 64}, 23);
    Tape<T> tape;
    auto x = tape.leaf(xv);
    auto y = apply_rotary(x, 3);
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    check_close(y.value(), rotated(xv, 3, 10000.0), tol, tol);
    // The inverse rotation: backward of dy = y gives x back.
    tape.backward(y, xt::xarray<T>(y.value()));
    check_close(x.grad(), xv, tol, tol);
    // The same bits on one thread.
    set_num_threads(1);
    Tape<T> serial;
    auto xs = serial.leaf(xv);
    auto ys = apply_rotary(xs, 3);
    serial.backward(ys, xt::xarray<T>(y.value()));
    set_num_threads(before);
    CHECK(ys.value() == y.value());
    CHECK(xs.grad() == x.grad());
  }
  SUBCASE("gradients accumulate over two backwards") {
    Tape<T> tape;
    auto x = tape.leaf(random_array<T>({3, 4}, 24));
    auto y = apply_rotary(x, 5);
    const xt::xarray<T> dy = random_array<T>({3, 4}, 25);
    tape.backward(y, dy);
    const xt::xarray<T> once = x.grad();
    tape.backward(y, dy);
    check_close(x.grad(), xt::xarray<T>(T(2) * once), tolerance<T>(), 0.0);
  }
}

TEST_CASE_TEMPLATE("bad input: apply_rotary", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  Var<T> v = tape.leaf(random_array<T>({4}, 1));
  Var<T> s = tape.leaf(xt::xarray<T>(T(0.5)));  // 0-d
  Var<T> odd = tape.leaf(random_array<T>({2, 3, 5}, 2));
  Var<T> good = tape.leaf(random_array<T>({3, 4}, 3));
  tape.backward(apply_rotary(good), random_array<T>({3, 4}, 4));  // good holds a gradient
  const auto snapshot = snapshot_of<T>({&tape, &other}, {v, s, odd, good});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;

  bad("apply_rotary: 1-d x", [&] { apply_rotary(v); }, IA,
      {"apply_rotary", "'x'", "[4]", "rank >= 2"});
  bad("apply_rotary: 0-d x", [&] { apply_rotary(s); }, IA,
      {"apply_rotary", "'x'", "[]", "rank >= 2"});
  bad("apply_rotary: odd Dh", [&] { apply_rotary(odd, 2); }, IA,
      {"apply_rotary", "'x'", "[2, 3, 5]", "Dh even", "Dh = 5"});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double theta : {0.0, -0.0, -1.0, inf, -inf, nan})
    bad("apply_rotary: theta " + detail::number_str(theta),
        [&, theta] { apply_rotary(good, 0, theta); }, IA,
        {"apply_rotary", "'theta'", "is " + detail::number_str(theta), "finite value > 0"});
  add_handle_rows<T>(
      rows, "apply_rotary", {"x"}, {good},
      [](const std::vector<Var<T>>& a) { apply_rotary(a[0], 1); }, other, stale);
  report("rotary", run_rows(rows, snapshot));
}
