#pragma once
// Vectorized math on xsimd batches (internal), shared by the activation
// formulas, the normal distribution and the optimizers' passes: constants
// broadcast to a batch, one-rounding multiply-add, polynomials, and an exp
// without xsimd's undefined behaviour.

#include <cstddef>
#include <type_traits>

#include "simd.hpp"  // first: see simd.hpp

namespace xtgrad::detail::simd_math {

template <class T>
using Batch = xsimd::batch<T>;

template <class B>
B broadcast(double value) {
  return B(static_cast<typename B::value_type>(value));
}

// a * b, except 0 where b == 0. The gates below reach exactly 0 (or 1 - s
// reaches 0) long before a overflows, so this only changes inf * 0 = NaN at
// x = +-inf (or x^3 = inf) into the limit 0.
template <class B>
B mul_or_zero(const B& a, const B& b) {
  return xsimd::select(b == broadcast<B>(0), broadcast<B>(0), a * b);
}

// x * y + z with one rounding. xsimd 8.1 has no AVX-512 fma (its generic
// fallback is x * y + z, rounded twice, and a * a - a * a then folds to 0), so
// AVX-512 calls the instruction itself; elsewhere xsimd::fma is the FMA3/NEON
// instruction where the target has one.
template <class B>
B fused_multiply_add(const B& x, const B& y, const B& z) {
  return xsimd::fma(x, y, z);
}
#if XSIMD_WITH_AVX512F
template <class A, std::enable_if_t<std::is_base_of_v<xsimd::avx512f, A>, int> = 0>
xsimd::batch<float, A> fused_multiply_add(const xsimd::batch<float, A>& x,
                                          const xsimd::batch<float, A>& y,
                                          const xsimd::batch<float, A>& z) {
  return _mm512_fmadd_ps(x, y, z);
}
template <class A, std::enable_if_t<std::is_base_of_v<xsimd::avx512f, A>, int> = 0>
xsimd::batch<double, A> fused_multiply_add(const xsimd::batch<double, A>& x,
                                           const xsimd::batch<double, A>& y,
                                           const xsimd::batch<double, A>& z) {
  return _mm512_fmadd_pd(x, y, z);
}
#endif

// a^2 - fl(a^2), exactly: one fused multiply-add, or Dekker's product (a
// Veltkamp split of a into two half-width parts) where the target has no FMA
// and the compiler therefore cannot contract the expression.
template <class B>
B square_rounding_error(const B& a, const B& square) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return fused_multiply_add(a, a, -square);
#else
  constexpr bool is_float = std::is_same_v<typename B::value_type, float>;
  const B t = broadcast<B>(is_float ? 4097.0 : 134217729.0) * a;  // 2^12 + 1, 2^27 + 1
  const B high = t - (t - a);
  const B low = a - high;
  return ((high * high - square) + broadcast<B>(2) * high * low) + low * low;
#endif
}

// Horner's rule: c[0] x^(N-1) + ... + c[N-1] (Cephes' polevl).
template <class B, std::size_t N>
B polynomial(const B& x, const double (&c)[N]) {
  B r = broadcast<B>(c[0]);
  for (std::size_t i = 1; i < N; ++i) r = fused_multiply_add(r, x, broadcast<B>(c[i]));
  return r;
}
// The same with an implicit leading 1: x^N + c[0] x^(N-1) + ... + c[N-1] (Cephes' p1evl).
template <class B, std::size_t N>
B monic_polynomial(const B& x, const double (&c)[N]) {
  B r = x + broadcast<B>(c[0]);
  for (std::size_t i = 1; i < N; ++i) r = fused_multiply_add(r, x, broadcast<B>(c[i]));
  return r;
}

// xsimd::exp with its undefined behaviour taken out: xsimd 8.1 converts
// round(v / ln 2) to an integer, which is undefined for NaN, +-inf and
// |v| beyond the integer range (UBSan: float-cast-overflow). Beyond +-limit
// the result is already inf or 0 in T, so v is clamped there; NaN is passed
// around the call and put back.
template <class B>
B exp_no_ub(const B& v) {
  constexpr bool is_float = std::is_same_v<typename B::value_type, float>;
  const B limit = broadcast<B>(is_float ? 110 : 750);  // exp(+-limit) is inf / 0 in T
  const auto nan = xsimd::isnan(v);  // not v != v: xsimd 8.1 on AVX-512 says NaN == NaN
  const B clamped = xsimd::select(v > limit, limit, xsimd::select(v < -limit, -limit, v));
  return xsimd::select(nan, v, xsimd::exp(xsimd::select(nan, broadcast<B>(0), clamped)));
}

}  // namespace xtgrad::detail::simd_math
