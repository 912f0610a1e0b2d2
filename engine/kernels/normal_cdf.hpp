#pragma once
// The standard normal distribution on xsimd batches (internal): Phi(x) and
// phi(x) together, for the exact GELU and its derivative.

#include "vector_math.hpp"

namespace xtgrad::detail::simd_math {

constexpr double k_inv_sqrt_2 = 0.70710678118654752440;    // 1 / sqrt(2)
constexpr double k_inv_sqrt_2pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// Rational approximations of erf and erfc from the Cephes Math Library
// (S. L. Moshier, ndtr.c; the copy in SciPy's scipy/special/cephes):
//   erf(z)  = z T(z^2) / U(z^2)             0 <= z < 1
//   erfc(z) = exp(-z^2) P(z) / Q(z)         1 <= z < 8
//   erfc(z) = exp(-z^2) R(z) / S(z)         z >= 8
constexpr double k_erf_t[] = {9.60497373987051638749E0, 9.00260197203842689217E1,
                              2.23200534594684319226E3, 7.00332514112805075473E3,
                              5.55923013010394962768E4};
constexpr double k_erf_u[] = {3.35617141647503099647E1, 5.21357949780152679795E2,
                              4.59432382970980127987E3, 2.26290000613890934246E4,
                              4.92673942608635921086E4};
constexpr double k_erfc_p[] = {
    2.46196981473530512524E-10, 5.64189564831068821977E-1, 7.46321056442269912687E0,
    4.86371970985681366614E1,   1.96520832956077098242E2,  5.26445194995477358631E2,
    9.34528527171957607540E2,   1.02755188689515710272E3,  5.57535335369399327526E2};
constexpr double k_erfc_q[] = {1.32281951154744992508E1, 8.67072140885989742329E1,
                               3.54937778887819891062E2, 9.75708501743205489753E2,
                               1.82390916687909736289E3, 2.24633760818710981792E3,
                               1.65666309194161350182E3, 5.57535340817727675546E2};
constexpr double k_erfc_r[] = {5.64189583547755073984E-1, 1.27536670759978104416E0,
                               5.01905042251180477414E0,  6.16021097993053585195E0,
                               7.40974269950448939160E0,  2.97886665372100240670E0};
constexpr double k_erfc_s[] = {2.26052863220117276590E0, 9.39603524938001434673E0,
                               1.20489539808096656605E1, 1.70814450747565897222E1,
                               9.60896809063285878198E0, 3.36907645100081516050E0};
constexpr double k_erfc_far = 8;  // where erfc switches from P/Q to R/S
// Beyond |x| = 40, Phi(-|x|) < 1e-348 and phi(x) are 0 in double: clamping
// there keeps x^2 finite and changes no result.
constexpr double k_normal_clamp = 40;

template <class B>
struct Normal {
  B cdf;  // Phi(x)
  B pdf;  // phi(x)
};

// The standard normal distribution at x, to a few ulp over the whole line.
// Phi(x) is 0.5 erfc(|x| / sqrt 2) or one minus it: the left tail keeps its
// relative accuracy where 0.5 (1 + erf(x / sqrt 2)) cancels to 0. exp(-x^2/2)
// is computed from x^2 split exactly in two (FMA or Dekker), since rounding x^2 would
// cost x^2/2 ulp. (xsimd 8.1's erfc is not used: 4e-12 relative error in
// double near x = -3, NaN for |x| > 1e51.)
template <class B>
Normal<B> normal(const B& x) {
  const B one = broadcast<B>(1);
  const B magnitude = xsimd::abs(x);
  const B a = xsimd::select(magnitude > broadcast<B>(k_normal_clamp), broadcast<B>(k_normal_clamp),
                            magnitude);  // NaN stays NaN
  const B square = a * a;
  const B square_error = square_rounding_error(a, square);  // a^2 = square + square_error
  // exp(-a^2 / 2) = exp(-square / 2) exp(-square_error / 2), the second factor to first order
  const B gauss = exp_no_ub(broadcast<B>(-0.5) * square) *
                  fused_multiply_add(broadcast<B>(-0.5), square_error, one);
  const B z = a * broadcast<B>(k_inv_sqrt_2);

  // erfc(z) = numerator / denominator, one division for whichever region each lane is in
  B numerator = broadcast<B>(0), denominator = one;
  // P/Q stays within 1e-8 (relative) of erfc down to z = 0, finer than float's
  // precision: float skips the erf branch (z < 1, |x| < sqrt 2) and its cost.
  constexpr bool is_float = std::is_same_v<typename B::value_type, float>;
  const auto near = z < broadcast<B>(is_float ? 0 : 1);
  const auto far = z >= broadcast<B>(k_erfc_far);
  const auto middle = !near && !far;
  if (!is_float && xsimd::any(near)) {  // 1 - z T / U = (U - z T) / U
    const B w = z * z;
    const B u = monic_polynomial(w, k_erf_u);
    numerator = xsimd::select(near, fused_multiply_add(-z, polynomial(w, k_erf_t), u), numerator);
    denominator = xsimd::select(near, u, denominator);
  }
  if (xsimd::any(middle)) {
    numerator = xsimd::select(middle, gauss * polynomial(z, k_erfc_p), numerator);
    denominator = xsimd::select(middle, monic_polynomial(z, k_erfc_q), denominator);
  }
  if (xsimd::any(far)) {
    numerator = xsimd::select(far, gauss * polynomial(z, k_erfc_r), numerator);
    denominator = xsimd::select(far, monic_polynomial(z, k_erfc_s), denominator);
  }
  const B erfc_z = numerator / denominator;
  const B tail = broadcast<B>(0.5) * erfc_z;  // Phi(-|x|)
  return {xsimd::select(x < broadcast<B>(0), tail, one - tail),
          broadcast<B>(k_inv_sqrt_2pi) * gauss};
}

}  // namespace xtgrad::detail::simd_math
