#include "activation_kernels.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "simd.hpp"  // first: see simd.hpp

namespace xtgrad::detail {

namespace {

constexpr double k_inv_sqrt_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double k_inv_sqrt_2pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)
constexpr double k_sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double k_gelu_tanh_cubic = 0.044715;  // Hendrycks & Gimpel 2016; torch GeluKernel kKappa
constexpr double k_gelu_sigmoid_scale = 1.702;  // Hendrycks & Gimpel 2016, sec. 2

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

// A value and a derivative, computed together where they share work.
template <class B>
struct ValueSlope {
  B value;
  B slope;
};

// relu(x) = max(x, 0), relu'(x) = [x > 0] (relu'(0) = 0 as in PyTorch).
// Written as a select so that relu(NaN) = NaN, as torch.relu.
struct Relu {
  template <class B>
  static B value(const B& x) {
    return xsimd::select(x < broadcast<B>(0), broadcast<B>(0), x);
  }
  template <class B>
  static B slope(const B& x) {
    return xsimd::select(x > broadcast<B>(0), broadcast<B>(1), broadcast<B>(0));
  }
  template <class B>
  static ValueSlope<B> value_and_slope(const B& x) {
    return {value(x), slope(x)};
  }
};

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

// Exact GELU, torch.nn.functional.gelu(approximate='none'):
// f = x Phi(x), f' = Phi(x) + x phi(x).
struct GeluErf {
  template <class B>
  static B value(const B& x) {
    return mul_or_zero(x, normal(x).cdf);
  }
  template <class B>
  static B slope(const B& x) {
    const Normal<B> n = normal(x);
    return n.cdf + mul_or_zero(x, n.pdf);
  }
  template <class B>
  static ValueSlope<B> value_and_slope(const B& x) {
    const Normal<B> n = normal(x);
    return {mul_or_zero(x, n.cdf), n.cdf + mul_or_zero(x, n.pdf)};
  }
};

// The activations of the form f(x) = x sigmoid(z(x)):
//   f'(x) = s (1 + x z'(x) (1 - s)),  s = sigmoid(z(x)).
// Gate supplies z(x) and z'(x).
template <class Gate>
struct SigmoidGated {
  template <class B>
  struct Sigmoid {
    B s;
    B one_minus_s;
  };
  // s = 1 / (1 + e) with e = exp(-z): 0 (not NaN) when e overflows, and
  // 1 - s = e s for z >= 0, where 1 - s itself would cancel.
  template <class B>
  static Sigmoid<B> sigmoid(const B& z) {
    const B e = exp_no_ub(-z);
    const B s = broadcast<B>(1) / (broadcast<B>(1) + e);
    return {s, xsimd::select(z >= broadcast<B>(0), e * s, broadcast<B>(1) - s)};
  }
  // s (1 + x z' (1 - s)), each inf * 0 at +-inf taken as its limit 0.
  template <class B>
  static B slope_from(const B& x, const Sigmoid<B>& sig) {
    const B t = mul_or_zero(x * Gate::dz(x), sig.one_minus_s);
    return mul_or_zero(broadcast<B>(1) + t, sig.s);
  }
  template <class B>
  static B value(const B& x) {
    const B s = broadcast<B>(1) / (broadcast<B>(1) + exp_no_ub(-Gate::z(x)));
    return mul_or_zero(x, s);
  }
  template <class B>
  static B slope(const B& x) {
    return slope_from(x, sigmoid(Gate::z(x)));
  }
  template <class B>
  static ValueSlope<B> value_and_slope(const B& x) {
    const Sigmoid<B> sig = sigmoid(Gate::z(x));
    return {mul_or_zero(x, sig.s), slope_from(x, sig)};
  }
};

// gelu_tanh, torch gelu(approximate='tanh'): 0.5 (1 + tanh u) = sigmoid(2u),
// u = sqrt(2/pi) (x + 0.044715 x^3), so z = 2u and z' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
struct TanhGate {
  template <class B>
  static B z(const B& x) {
    return broadcast<B>(2 * k_sqrt_2_over_pi) * x *
           fused_multiply_add(broadcast<B>(k_gelu_tanh_cubic), x * x, broadcast<B>(1));
  }
  template <class B>
  static B dz(const B& x) {
    return broadcast<B>(2 * k_sqrt_2_over_pi) *
           fused_multiply_add(broadcast<B>(3 * k_gelu_tanh_cubic), x * x, broadcast<B>(1));
  }
};

// gelu_sigmoid: z = 1.702 x.
struct ScaledGate {
  template <class B>
  static B z(const B& x) {
    return broadcast<B>(k_gelu_sigmoid_scale) * x;
  }
  template <class B>
  static B dz(const B&) {
    return broadcast<B>(k_gelu_sigmoid_scale);
  }
};

// silu: z = x.
struct IdentityGate {
  template <class B>
  static B z(const B& x) {
    return x;
  }
  template <class B>
  static B dz(const B&) {
    return broadcast<B>(1);
  }
};

using GeluTanh = SigmoidGated<TanhGate>;
using GeluSigmoid = SigmoidGated<ScaledGate>;
using Silu = SigmoidGated<IdentityGate>;

// Calls body(Act{}) with the functor of `activation`.
template <class Body>
void dispatch(Activation activation, const char* op, Body&& body) {
  switch (activation) {
    case Activation::relu:
      return body(Relu{});
    case Activation::gelu:
      return body(GeluErf{});
    case Activation::gelu_tanh:
      return body(GeluTanh{});
    case Activation::gelu_sigmoid:
      return body(GeluSigmoid{});
    case Activation::silu:
      return body(Silu{});
  }
  activation_name(activation, op, "activation");  // throws: not an enumerator
}

template <class T>
using Batch = xsimd::batch<T>;

// The last n % lanes elements: copied into a zero-padded batch-sized buffer
// so that they run through the same batch code as the rest.
template <class T>
struct Padded {
  T data[Batch<T>::size] = {};

  Padded(const T* source, std::size_t count) { std::copy(source, source + count, data); }
  Batch<T> load() const { return Batch<T>::load_unaligned(data); }
};

// How a kernel writes an output. A compile-time parameter, never a runtime
// bool inside the loop: GCC 12.2 at -O3 (AVX-512) turned a loop-invariant
// `accumulate ? value + old : value` on batch<double> into a masked add whose
// mask was the bool itself (kmovb 1: lane 0 only), dropping the += on the
// other lanes.
enum class Output { skip, write, add };

constexpr Output output_mode(const void* buffer, bool accumulate) {
  return buffer == nullptr ? Output::skip : accumulate ? Output::add : Output::write;
}

// Calls body(std::integral_constant<Output, mode>{}).
template <class Body>
void with_output(Output mode, Body&& body) {
  switch (mode) {
    case Output::skip:
      return body(std::integral_constant<Output, Output::skip>{});
    case Output::write:
      return body(std::integral_constant<Output, Output::write>{});
    case Output::add:
      return body(std::integral_constant<Output, Output::add>{});
  }
}

// An output that is a product a * b, written as such or added onto dst as
// fma(a, b, dst): one rounding, and the same in the body and in the tail (a
// product and a separate sum may be fused by the compiler in one place and
// not the other, and then an element's result would depend on where it lies).
template <class B>
struct Product {
  B a, b;
};

template <Output mode, class T>
void store(T* dst, const Product<Batch<T>>& p) {
  if constexpr (mode == Output::add)
    fused_multiply_add(p.a, p.b, Batch<T>::load_unaligned(dst)).store_unaligned(dst);
  else if constexpr (mode == Output::write)
    (p.a * p.b).store_unaligned(dst);
}

// A plain value: written, never added.
template <Output mode, class T>
void store(T* dst, const Batch<T>& value) {
  static_assert(mode != Output::add, "a value output is written, not accumulated");
  if constexpr (mode == Output::write) value.store_unaligned(dst);
}

// The last count < lanes elements, through the same batch arithmetic.
template <Output mode, class T>
void store_tail(T* dst, const Batch<T>& result, std::size_t count) {
  if constexpr (mode != Output::skip) {
    T buffer[Batch<T>::size];
    result.store_unaligned(buffer);
    std::copy(buffer, buffer + count, dst);
  }
}
template <Output mode, class T>
void store_tail(T* dst, const Product<Batch<T>>& p, std::size_t count) {
  if constexpr (mode == Output::add)
    store_tail<mode>(dst, fused_multiply_add(p.a, p.b, Padded<T>(dst, count).load()), count);
  else if constexpr (mode == Output::write)
    store_tail<mode>(dst, Batch<T>(p.a * p.b), count);
}

template <class Act, class T>
void forward_pass(const T* x, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    store<Output::write>(y + i, Act::value(Batch<T>::load_unaligned(x + i)));
  if (i < n) store_tail<Output::write>(y + i, Act::value(Padded<T>(x + i, n - i).load()), n - i);
}

// One batch of the backward pass: dx = dy f'(x), and y = f(x) when y is
// wanted (value_and_slope shares erf / exp between the two).
template <class Act, Output dx_mode, Output y_mode, class T>
void backward_batch(const Batch<T>& x, const Batch<T>& dy, T* dx, T* y, std::size_t count) {
  constexpr std::size_t lanes = Batch<T>::size;
  if constexpr (y_mode != Output::skip) {
    const ValueSlope<Batch<T>> f = Act::value_and_slope(x);
    if (count == lanes) {
      store<y_mode>(y, f.value);
      store<dx_mode>(dx, Product<Batch<T>>{dy, f.slope});
    } else {
      store_tail<y_mode>(y, f.value, count);
      store_tail<dx_mode>(dx, Product<Batch<T>>{dy, f.slope}, count);
    }
  } else if (count == lanes) {
    store<dx_mode>(dx, Product<Batch<T>>{dy, Act::slope(x)});
  } else {
    store_tail<dx_mode>(dx, Product<Batch<T>>{dy, Act::slope(x)}, count);
  }
}

template <class Act, Output dx_mode, Output y_mode, class T>
void backward_pass(const T* x, const T* dy, T* dx, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    backward_batch<Act, dx_mode, y_mode>(Batch<T>::load_unaligned(x + i),
                                         Batch<T>::load_unaligned(dy + i), dx + i,
                                         y_mode == Output::skip ? y : y + i, lanes);
  if (i < n) {
    const std::size_t rest = n - i;
    backward_batch<Act, dx_mode, y_mode>(Padded<T>(x + i, rest).load(),
                                         Padded<T>(dy + i, rest).load(), dx + i,
                                         y_mode == Output::skip ? y : y + i, rest);
  }
}

template <class Act, class T>
void gated_forward_pass(const T* u, const T* g, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    store<Output::write>(
        y + i, Batch<T>::load_unaligned(u + i) * Act::value(Batch<T>::load_unaligned(g + i)));
  if (i < n) {
    const std::size_t rest = n - i;
    store_tail<Output::write>(
        y + i, Padded<T>(u + i, rest).load() * Act::value(Padded<T>(g + i, rest).load()), rest);
  }
}

// One batch of gated_backward: du = dy f(g), dg = (dy u) f'(g) as products,
// y = u f(g). Only what is wanted is computed; the rest is left zero.
template <class B>
struct GatedGrads {
  Product<B> du, dg;
  B y;
};

template <class Act, bool want_du, bool want_dg, bool want_y, class B>
GatedGrads<B> gated_grads(const B& u, const B& g, const B& dy) {
  const B zero = broadcast<B>(0);
  constexpr bool want_value = want_du || want_y;
  if constexpr (want_value && want_dg) {
    const ValueSlope<B> f = Act::value_and_slope(g);
    return {{dy, want_du ? f.value : zero}, {dy * u, f.slope}, want_y ? u * f.value : zero};
  } else if constexpr (want_value) {
    const B f = Act::value(g);
    return {{dy, want_du ? f : zero}, {zero, zero}, want_y ? u * f : zero};
  } else {
    return {{zero, zero}, {dy * u, Act::slope(g)}, zero};
  }
}

template <class Act, Output du_mode, Output dg_mode, Output y_mode, class T>
void gated_backward_pass(const T* u, const T* g, const T* dy, T* du, T* dg, T* y, std::size_t n) {
  constexpr bool want_du = du_mode != Output::skip, want_dg = dg_mode != Output::skip,
                 want_y = y_mode != Output::skip;
  if constexpr (want_du || want_dg || want_y) {
    constexpr std::size_t lanes = Batch<T>::size;
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
      const GatedGrads<Batch<T>> r = gated_grads<Act, want_du, want_dg, want_y>(
          Batch<T>::load_unaligned(u + i), Batch<T>::load_unaligned(g + i),
          want_du || want_dg ? Batch<T>::load_unaligned(dy + i) : Batch<T>(T(0)));
      store<du_mode>(du_mode == Output::skip ? du : du + i, r.du);
      store<dg_mode>(dg_mode == Output::skip ? dg : dg + i, r.dg);  // after du: they may alias
      store<y_mode>(y_mode == Output::skip ? y : y + i, r.y);
    }
    if (i < n) {
      const std::size_t rest = n - i;
      const GatedGrads<Batch<T>> r = gated_grads<Act, want_du, want_dg, want_y>(
          Padded<T>(u + i, rest).load(), Padded<T>(g + i, rest).load(),
          want_du || want_dg ? Padded<T>(dy + i, rest).load() : Batch<T>(T(0)));
      store_tail<du_mode>(du_mode == Output::skip ? du : du + i, r.du, rest);
      store_tail<dg_mode>(dg_mode == Output::skip ? dg : dg + i, r.dg, rest);
      store_tail<y_mode>(y_mode == Output::skip ? y : y + i, r.y, rest);
    }
  }
}

}  // namespace

template <class T>
void activation_forward(Activation activation, const T* x, T* y, std::size_t n) {
  dispatch(activation, "activation_forward",
           [&](auto act) { forward_pass<decltype(act)>(x, y, n); });
}

template <class T>
void activation_backward(Activation activation, const T* x, const T* dy, T* dx, std::size_t n,
                         bool accumulate) {
  activation_value_and_backward(activation, x, dy, dx, accumulate, static_cast<T*>(nullptr), n);
}

template <class T>
void activation_value_and_backward(Activation activation, const T* x, const T* dy, T* dx,
                                   bool accumulate, T* y, std::size_t n) {
  dispatch(activation, "activation_backward", [&](auto act) {
    using Act = decltype(act);
    with_output(accumulate ? Output::add : Output::write, [&](auto dx_mode) {
      with_output(output_mode(y, false), [&](auto y_mode) {
        if constexpr (dx_mode.value != Output::skip && y_mode.value != Output::add)
          backward_pass<Act, dx_mode.value, y_mode.value>(x, dy, dx, y, n);
      });
    });
  });
}

template <class T>
void gated_forward(Activation activation, const T* u, const T* g, T* y, std::size_t n) {
  dispatch(activation, "gated_forward",
           [&](auto act) { gated_forward_pass<decltype(act)>(u, g, y, n); });
}

template <class T>
void gated_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                    bool du_accumulate, T* dg, bool dg_accumulate, std::size_t n) {
  gated_value_and_backward(activation, u, g, dy, du, du_accumulate, dg, dg_accumulate,
                           static_cast<T*>(nullptr), n);
}

template <class T>
void gated_value_and_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                              bool du_accumulate, T* dg, bool dg_accumulate, T* y, std::size_t n) {
  dispatch(activation, "gated_backward", [&](auto act) {
    using Act = decltype(act);
    with_output(output_mode(du, du_accumulate), [&](auto du_mode) {
      with_output(output_mode(dg, dg_accumulate), [&](auto dg_mode) {
        with_output(output_mode(y, false), [&](auto y_mode) {
          if constexpr (y_mode.value != Output::add)
            gated_backward_pass<Act, du_mode.value, dg_mode.value, y_mode.value>(u, g, dy, du, dg,
                                                                                 y, n);
        });
      });
    });
  });
}

#define XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(T)                                                \
  template void activation_forward<T>(Activation, const T*, T*, std::size_t);                   \
  template void activation_backward<T>(Activation, const T*, const T*, T*, std::size_t, bool);  \
  template void gated_forward<T>(Activation, const T*, const T*, T*, std::size_t);              \
  template void gated_backward<T>(Activation, const T*, const T*, const T*, T*, bool, T*, bool, \
                                  std::size_t);                                                 \
  template void activation_value_and_backward<T>(Activation, const T*, const T*, T*, bool, T*,  \
                                                 std::size_t);                                  \
  template void gated_value_and_backward<T>(Activation, const T*, const T*, const T*, T*, bool, \
                                            T*, bool, T*, std::size_t);
XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(float)
XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(double)
#undef XTGRAD_INSTANTIATE_ACTIVATION_KERNELS

}  // namespace xtgrad::detail
