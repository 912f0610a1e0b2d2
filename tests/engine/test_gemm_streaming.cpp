// The small-batch path of detail::gemm (kernels/gemm_streaming.hpp): a few
// rows through a weight (m <= 8), for every transpose pair and both beta
// semantics, at the threshold and around it (9 goes to BLAS), against a
// plain double-precision loop, bit for bit the same on one and on two
// threads; and the gradient of a few rows, a sum of a few outer products
// (k <= 8, through OpenBLAS), against the same loop.
#include <doctest/doctest.h>

#include <vector>

#include <xtensor/xview.hpp>

#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/engine/kernels/gemm_streaming.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/gemm_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_gemm_all;
using xtgrad::testing::gemm_product;
using xtgrad::testing::GemmDims;
using xtgrad::testing::random_array;

namespace {

// Every row count of the path (each its own kernel: by rows up to 4, by
// strips from 5 on, strips of 4 and 3 vectors with AVX-512) and 9, past it.
const std::size_t k_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

}  // namespace

TEST_CASE_TEMPLATE("gemm: a few rows through a weight (x W^T, x W) equal a double loop", T, float,
                   double) {
  static_assert(detail::k_streaming_rows == 8, "the counts below straddle the threshold");
  std::uint32_t seed = 100;
  // k and n with vector tails, n past one column block of the x W kernel
  for (std::size_t m : k_counts) check_gemm_all<T>({m, 1030, 37}, seed);
  for (std::size_t m : k_counts) check_gemm_all<T>({m, 300, 129}, seed);
  // k long enough that six rows and more of x W^T go by blocks of k (their
  // rows of x over 48 KiB), with a tail, and columns left over after the steps
  for (std::size_t m : {6, 7, 8}) check_gemm_all<T>({m, 50, 2100}, seed);
  // w over 2 MiB, which two to four rows and seven and more of x W prefetch
  for (std::size_t m : {1, 2, 4, 7, 8}) check_gemm_all<T>({m, 500, 1100}, seed);
}

// Each element is summed the same way whichever kernel its row count picks
// (by rows, by strips, by blocks of k): row i of a product of eight rows has
// the bits of row i alone, and of the first m rows for every m.
TEST_CASE_TEMPLATE("gemm: a row of a few-row product has the same bits whatever rows come with it",
                   T, float, double) {
  std::uint32_t seed = 400;
  for (const GemmDims d : {GemmDims{8, 50, 2100}, GemmDims{8, 70, 300}, GemmDims{8, 500, 1100}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          CAPTURE(d.k);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const xt::xarray<T> a = random_array<T>({d.m, d.k}, seed++);  // row i: x[i, :]
          const xt::xarray<T> b =
              tb ? random_array<T>({d.n, d.k}, seed++) : random_array<T>({d.k, d.n}, seed++);
          const xt::xarray<T> c0 = random_array<T>({d.m, d.n}, seed++);
          const auto rows = [&](std::size_t first, std::size_t count) {
            const xt::xarray<T> part = xt::view(a, xt::range(first, first + count), xt::all());
            const xt::xarray<T> operand = ta ? xt::xarray<T>(xt::transpose(part)) : part;
            const xt::xarray<T> c_part = xt::view(c0, xt::range(first, first + count), xt::all());
            return gemm_product<T>(operand, ta, b, tb, c_part, accumulate, {count, d.n, d.k});
          };
          const xt::xarray<T> all = rows(0, d.m);
          for (std::size_t m = 1; m < d.m; ++m) {
            CAPTURE(m);
            CHECK(rows(0, m) == xt::view(all, xt::range(0, m), xt::all()));
            CHECK(rows(m, 1) == xt::view(all, xt::range(m, m + 1), xt::all()));
          }
        }
}

TEST_CASE_TEMPLATE("gemm: a sum of a few outer products (dy^T x) equals a double loop", T, float,
                   double) {
  std::uint32_t seed = 200;
  for (std::size_t k : k_counts) check_gemm_all<T>({300, 517, k}, seed);
  for (std::size_t k : k_counts) check_gemm_all<T>({2500, 13, k}, seed);
}

TEST_CASE("gemm: the few-rows path gives the same bits on one and on two threads") {
  const int before = get_num_threads();
  std::uint32_t seed = 300;
  // Sizes where two threads split the work (kernels/gemm_streaming.cpp).
  const GemmDims dims[] = {
      {1, 3000, 100}, {3, 2000, 64}, {6, 1800, 90}, {8, 1500, 70}, {8, 300, 2100}};
  for (const GemmDims& d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          CAPTURE(d.m);
          CAPTURE(d.k);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const xt::xarray<float> a = ta ? random_array<float>({d.k, d.m}, seed++)
                                         : random_array<float>({d.m, d.k}, seed++);
          const xt::xarray<float> b = tb ? random_array<float>({d.n, d.k}, seed++)
                                         : random_array<float>({d.k, d.n}, seed++);
          const xt::xarray<float> c0 = random_array<float>({d.m, d.n}, seed++);
          set_num_threads(1);
          const xt::xarray<float> one = gemm_product(a, ta, b, tb, c0, accumulate, d);
          set_num_threads(2);
          const xt::xarray<float> two = gemm_product(a, ta, b, tb, c0, accumulate, d);
          CHECK(one == two);
        }
  set_num_threads(before);
}

TEST_CASE("gemm: a shape mismatch of a few rows is the same logic_error, c untouched") {
  std::vector<double> a(3 * 512, 1.0), b(512 * 2048, 2.0), c(3 * 2048, 7.0);
  CHECK_THROWS_WITH_PARTS(
      detail::gemm<double>("some_op", {a.data(), 3, 512}, false, {b.data(), 2048, 511}, true,
                           {c.data(), 3, 2048}, false),
      std::logic_error, {"xtgrad::some_op", "[3x512] . [511x2048] -> [3x2048]"});
  // a few terms: dW [2048, 512] = dy^T [2048, 3] . x [4, 512]
  std::vector<double> dw(2048 * 512, 7.0);
  CHECK_THROWS_WITH_PARTS(
      detail::gemm<double>("some_op", {c.data(), 3, 2048}, true, {b.data(), 4, 512}, false,
                           {dw.data(), 2048, 512}, true),
      std::logic_error, {"xtgrad::some_op", "[2048x3] . [4x512] -> [2048x512]"});
  CHECK(c == std::vector<double>(3 * 2048, 7.0));
  CHECK(dw == std::vector<double>(2048 * 512, 7.0));
}

TEST_CASE("set_num_threads: at least one thread, else invalid_argument naming it") {
  const int before = get_num_threads();
  CHECK(before >= 1);
  CHECK_THROWS_WITH_PARTS(set_num_threads(0), std::invalid_argument,
                          {"set_num_threads", "'n'", "is 0, expected at least 1"});
  CHECK(get_num_threads() == before);  // unchanged
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  set_num_threads(before);
}

// c at offsets from a cache line (the x W path splits its columns by index,
// never by address): the same bits at each offset, on one and two threads,
// and only c's own elements written.
TEST_CASE("gemm: the few-rows path writes the same bits wherever c lies in memory") {
  const int before = get_num_threads();
  std::uint32_t seed = 400;
  const GemmDims dims[] = {{2, 1500, 200}, {8, 1500, 70}};
  for (const GemmDims& d : dims)
    for (bool accumulate : {false, true}) {
      const xt::xarray<float> a = random_array<float>({d.m, d.k}, seed++);
      const xt::xarray<float> b = random_array<float>({d.k, d.n}, seed++);
      const xt::xarray<float> c0 = random_array<float>({d.m, d.n}, seed++);
      set_num_threads(1);
      const xt::xarray<float> aligned = gemm_product(a, false, b, false, c0, accumulate, d);
      for (int threads : {1, 2})
        for (std::size_t offset : {1, 5, 15}) {
          CAPTURE(d.m);
          CAPTURE(accumulate);
          CAPTURE(threads);
          CAPTURE(offset);
          set_num_threads(threads);
          const float guard = -7.5f;
          std::vector<float> buffer(offset + d.m * d.n + 16, guard);
          std::copy(c0.begin(), c0.end(), buffer.begin() + static_cast<std::ptrdiff_t>(offset));
          detail::gemm<float>("test", {a.data(), d.m, d.k}, false, {b.data(), d.k, d.n}, false,
                              {buffer.data() + offset, d.m, d.n}, accumulate);
          bool same = true;
          for (std::size_t e = 0; e < d.m * d.n; ++e)
            same = same && buffer[offset + e] == aligned[e];
          CHECK(same);
          for (std::size_t e = 0; e < offset; ++e) CHECK(buffer[e] == guard);
          for (std::size_t e = offset + d.m * d.n; e < buffer.size(); ++e)
            CHECK(buffer[e] == guard);
        }
    }
  set_num_threads(before);
}
