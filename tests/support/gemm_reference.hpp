#pragma once
// The check both GEMM test files share: detail::gemm over every transpose
// pair and both beta semantics of one shape, against a long-double loop.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/engine/kernels/gemm.hpp>

#include "test_helpers.hpp"

namespace xtgrad::testing {

struct GemmDims {
  std::size_t m, n, k;
};

// c (+)= op(a) op(b) in long double; a, b stored as gemm reads them (row
// major, contiguous). Raw indexing rather than xtensor's operator(): the
// sanitized build compiles the tests at -O0, where each a(i, p) is a chain of
// calls and these loops took most of the GEMM tests' time.
template <class T>
xt::xarray<double> gemm_reference(const xt::xarray<T>& a, bool ta, const xt::xarray<T>& b, bool tb,
                                  const xt::xarray<T>& c0, bool accumulate, GemmDims d) {
  // the shapes the raw indexing below assumes
  using S = std::vector<std::size_t>;
  REQUIRE(S(a.shape().begin(), a.shape().end()) == (ta ? S{d.k, d.m} : S{d.m, d.k}));
  REQUIRE(S(b.shape().begin(), b.shape().end()) == (tb ? S{d.n, d.k} : S{d.k, d.n}));
  REQUIRE((!accumulate || c0.size() == d.m * d.n));
  xt::xarray<double> c = xt::zeros<double>({d.m, d.n});
  const T* const av = a.data();
  const T* const bv = b.data();
  double* const cv = c.data();
  // a(i, p) is av[i * a_row + p * a_col], b(p, j) is bv[p * b_row + j * b_col]
  const std::size_t a_row = ta ? 1 : d.k, a_col = ta ? d.m : 1;
  const std::size_t b_row = tb ? 1 : d.n, b_col = tb ? d.k : 1;
  for (std::size_t i = 0; i < d.m; ++i)
    for (std::size_t j = 0; j < d.n; ++j) {
      long double s = accumulate ? c0.data()[i * d.n + j] : 0;
      for (std::size_t p = 0; p < d.k; ++p)
        s += static_cast<long double>(av[i * a_row + p * a_col]) * bv[p * b_row + j * b_col];
      cv[i * d.n + j] = static_cast<double>(s);
    }
  return c;
}

// c0 with op(a) op(b) written (accumulate false) or added (true) by detail::gemm.
template <class T>
xt::xarray<T> gemm_product(const xt::xarray<T>& a, bool ta, const xt::xarray<T>& b, bool tb,
                           const xt::xarray<T>& c0, bool accumulate, GemmDims d) {
  xt::xarray<T> c = c0;
  detail::gemm<T>("test", {a.data(), a.shape()[0], a.shape()[1]}, ta,
                  {b.data(), b.shape()[0], b.shape()[1]}, tb, {c.data(), d.m, d.n}, accumulate);
  return c;
}

// Every transpose pair and beta of `d` on random operands, against gemm_reference.
template <class T>
void check_gemm_all(GemmDims d, std::uint32_t& seed) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool accumulate : {false, true}) {
        CAPTURE(d.m);
        CAPTURE(d.n);
        CAPTURE(d.k);
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(accumulate);
        const xt::xarray<T> a =
            ta ? random_array<T>({d.k, d.m}, seed++) : random_array<T>({d.m, d.k}, seed++);
        const xt::xarray<T> b =
            tb ? random_array<T>({d.n, d.k}, seed++) : random_array<T>({d.k, d.n}, seed++);
        const xt::xarray<T> c0 = random_array<T>({d.m, d.n}, seed++);
        const double tol = std::is_same_v<T, float> ? 2e-6 * (10.0 + d.k) : 1e-13 * (10.0 + d.k);
        check_close(gemm_product(a, ta, b, tb, c0, accumulate, d),
                    gemm_reference(a, ta, b, tb, c0, accumulate, d), tol, tol);
      }
}

}  // namespace xtgrad::testing
