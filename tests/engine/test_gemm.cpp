// detail::gemm (both its small-product kernels and the BLAS path),
// broadcast_rows, sum_rows and thread_scratch, against long-double loops.
#include <doctest/doctest.h>

#include <array>
#include <thread>
#include <vector>

#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/engine/kernels/scratch.hpp>

#include "support/gemm_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::check_gemm_all;
using xtgrad::testing::GemmDims;
using xtgrad::testing::random_array;

namespace {

// Shapes that reach each small-product form (rows: n >= a vector or n >= m;
// columns: n narrow, a transposed; dots: n narrow, a not transposed), vector
// tails of every kind (k, n, m not multiples of 16 or 8), the toy model's
// layers, and products above k_small_gemm_macs (the BLAS path).
const std::vector<GemmDims> k_dims = {{128, 16, 2}, {128, 2, 16}, {2, 16, 128}, {16, 2, 128},
                                      {1, 1, 1},    {7, 3, 5},    {3, 17, 33},  {40, 3, 37},
                                      {19, 5, 70},  {1, 300, 7},  {300, 1, 9},  {33, 15, 4},
                                      {40, 50, 60}, {64, 3, 100}, {3, 64, 100}, {129, 65, 33}};

}  // namespace

TEST_CASE_TEMPLATE("gemm: every transpose pair and shape class equals a scalar loop", T, float,
                   double) {
  std::uint32_t seed = 1;
  for (const GemmDims& d : k_dims) check_gemm_all<T>(d, seed);
}

TEST_CASE("gemm: empty products, and a shape mismatch is a logic_error naming the op") {
  std::vector<double> a(6, 1.0), b(6, 2.0), c(4, 7.0);
  // k = 0: c = 0, or unchanged when accumulating
  detail::gemm<double>("empty", {a.data(), 2, 0}, false, {b.data(), 0, 2}, false, {c.data(), 2, 2},
                       true);
  CHECK(c == std::vector<double>(4, 7.0));
  detail::gemm<double>("empty", {a.data(), 2, 0}, false, {b.data(), 0, 2}, false, {c.data(), 2, 2},
                       false);
  CHECK(c == std::vector<double>(4, 0.0));
  // m = 0: nothing to write
  detail::gemm<double>("empty", {a.data(), 0, 3}, false, {b.data(), 3, 2}, false, {c.data(), 0, 2},
                       false);
  CHECK_THROWS_WITH_PARTS(detail::gemm<double>("some_op", {a.data(), 2, 3}, false, {b.data(), 2, 3},
                                               false, {c.data(), 2, 2}, false),
                          std::logic_error, {"xtgrad::some_op", "[2x3] . [2x3] -> [2x2]"});
}

TEST_CASE_TEMPLATE("broadcast_rows and sum_rows: narrow and wide rows, every row count", T, float,
                   double) {
  for (std::size_t cols : {1, 2, 7, 15, 16, 17, 100})
    for (std::size_t n : {0, 1, 3, 4, 9, 130}) {
      CAPTURE(cols);
      CAPTURE(n);
      const xt::xarray<T> b = random_array<T>({cols}, 11);
      xt::xarray<T> y = xt::zeros<T>({n, cols});
      detail::broadcast_rows(b.data(), y.data(), n, cols);
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t j = 0; j < cols; ++j) REQUIRE(y(r, j) == b(j));

      const xt::xarray<T> dy = random_array<T>({n, cols}, 12);
      xt::xarray<double> expected = xt::zeros<double>({cols});
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t j = 0; j < cols; ++j) expected(j) += dy(r, j);
      const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
      xt::xarray<T> db = xt::full_like(b, T(123));  // garbage: overwritten
      detail::sum_rows(dy.data(), n, cols, db.data(), false);
      check_close(db, expected, tol, tol);
      detail::sum_rows(dy.data(), n, cols, db.data(), true);  // += adds the sum again
      check_close(db, xt::xarray<double>(2.0 * expected), tol, tol);
    }
}

TEST_CASE("thread_scratch: one buffer per slot and thread, kept and grown") {
  using detail::ScratchSlot;
  double* first = detail::thread_scratch<double>(ScratchSlot::fused_activation, 10);
  first[9] = 42.0;
  CHECK(detail::thread_scratch<double>(ScratchSlot::fused_activation, 5) == first);  // kept
  CHECK(detail::thread_scratch<double>(ScratchSlot::fused_activation, 5)[9] == 42.0);
  CHECK(detail::thread_scratch<double>(ScratchSlot::fused_gradient, 10) != first);  // another slot
  double* grown = detail::thread_scratch<double>(ScratchSlot::fused_activation, 1 << 16);
  grown[(1 << 16) - 1] = 1.0;  // writable to its full size
  double* other_thread = nullptr;
  std::thread([&] {
    other_thread = detail::thread_scratch<double>(ScratchSlot::fused_activation, 10);
  }).join();
  CHECK(other_thread != grown);  // another thread, another buffer
}
