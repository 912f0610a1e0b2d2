#pragma once
// Vectorized math on xsimd batches (internal), shared by the activation
// formulas, the normal distribution and the optimizers' passes: constants
// broadcast to a batch, one-rounding multiply-add, polynomials, and an exp
// without xsimd's undefined behaviour.

#include <cstddef>
#include <iterator>
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

// The largest lane of v. NaN lanes may be skipped. With AVX-512 a tree of
// shuffles (four deep for 16 floats) instead of a chain of 15 dependent
// maxes: attention takes it for every row of every score tile, rows of a few
// vectors, where the chain cost more than the vector loop.
template <class B>
typename B::value_type horizontal_max(const B& v) {
  using T = typename B::value_type;
  T lane[B::size];
  v.store_unaligned(lane);
  T r = lane[0];
  for (std::size_t l = 1; l < B::size; ++l)
    if (r < lane[l]) r = lane[l];  // std::max(r, lane[l])
  return r;
}
#if XSIMD_WITH_AVX512F
template <class A, std::enable_if_t<std::is_base_of_v<xsimd::avx512f, A>, int> = 0>
float horizontal_max(const xsimd::batch<float, A>& v) {
  return _mm512_reduce_max_ps(v);
}
template <class A, std::enable_if_t<std::is_base_of_v<xsimd::avx512f, A>, int> = 0>
double horizontal_max(const xsimd::batch<double, A>& v) {
  return _mm512_reduce_max_pd(v);
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

// Cephes' expf (S. L. Moshier, cephes/single/expf.c), for float batches:
// exp(v) = 2^k exp(r), k = round(v / ln 2), r = v - k ln 2 with ln 2 in two
// parts (k ln2_high is exact for |k| < 2^15), exp(r) = 1 + r + r^2 p(r) by a
// polynomial p of degree 5. Within 1.3 ulp of double's exp (25 million
// points of [-104, 88.7]).
constexpr double k_log2e = 1.44269504088896341;
constexpr double k_ln2_high = 0.693359375, k_ln2_low = -2.12194440e-4;
constexpr double k_expf_p[] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                               4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
// A float batch's v is clamped to +-k_exp_limit first: exp is inf or 0 in
// float well before, and 2^k stays within two normal powers of two.
constexpr double k_exp_limit = 110;

// exp(v) for a float batch v, |v| <= k_exp_limit, no NaN.
template <class B>
[[gnu::always_inline]] inline B cephes_expf(const B& v) {
  const B k = xsimd::nearbyint(v * broadcast<B>(k_log2e));
  const B r = fused_multiply_add(-k, broadcast<B>(k_ln2_low),
                                 fused_multiply_add(-k, broadcast<B>(k_ln2_high), v));
  const B p = fused_multiply_add(polynomial(r, k_expf_p), r * r, r + broadcast<B>(1));
  // p 2^k as (p 2^h) 2^(k - h), h = trunc(k / 2): both powers normal floats
  // (|k| <= 159), the first product exact, the second rounded once (to a
  // subnormal or 0 where exp underflows, to inf where it overflows).
  const B h = xsimd::trunc(k * broadcast<B>(0.5));
  return xsimd::ldexp(xsimd::ldexp(p, xsimd::to_int(h)), xsimd::to_int(k - h));
}

// exp without xsimd's undefined behaviour: xsimd 8.1 converts round(v /
// ln 2) to an integer, which is undefined for NaN, +-inf and |v| beyond the
// integer range (UBSan: float-cast-overflow). Beyond +-limit the result is
// already inf or 0 in T, so v is clamped there; NaN is passed around the call
// and put back. Float batches take Cephes' expf above (xsimd 8.1's exp
// returns inf on (88.38, 88.72], where exp is still finite), double ones
// xsimd's exp.
template <class B>
[[gnu::always_inline]] inline B exp_no_ub(const B& v) {
  constexpr bool is_float = std::is_same_v<typename B::value_type, float>;
  const B limit = broadcast<B>(is_float ? k_exp_limit : 750);  // exp(+-limit) is inf / 0 in T
  const auto nan = xsimd::isnan(v);  // not v != v: xsimd 8.1 on AVX-512 says NaN == NaN
  const B clamped = xsimd::select(v > limit, limit, xsimd::select(v < -limit, -limit, v));
  const B safe = xsimd::select(nan, broadcast<B>(0), clamped);
  if constexpr (is_float)
    return xsimd::select(nan, v, cephes_expf(safe));
  else
    return xsimd::select(nan, v, xsimd::exp(safe));
}
#if XSIMD_WITH_AVX512F
// The same on AVX-512 float batches, with the same bits as cephes_expf
// with FMA (AVX2) in about two thirds of the time: min and max clamp v and pass a NaN through (they return their
// second operand when either is NaN), and VSCALEFPS multiplies by 2^k in one
// rounding.
template <class A, std::enable_if_t<std::is_base_of_v<xsimd::avx512f, A>, int> = 0>
[[gnu::always_inline]] inline xsimd::batch<float, A> exp_no_ub(const xsimd::batch<float, A>& v) {
  const __m512 limit = _mm512_set1_ps(static_cast<float>(k_exp_limit));
  const __m512 x =
      _mm512_min_ps(limit, _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), limit), v));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(static_cast<float>(k_log2e))),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fnmadd_ps(k, _mm512_set1_ps(static_cast<float>(k_ln2_low)),
                       _mm512_fnmadd_ps(k, _mm512_set1_ps(static_cast<float>(k_ln2_high)), x));
  __m512 p = _mm512_set1_ps(static_cast<float>(k_expf_p[0]));
  for (std::size_t i = 1; i < std::size(k_expf_p); ++i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(static_cast<float>(k_expf_p[i])));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, k);
}
#endif

}  // namespace xtgrad::detail::simd_math
