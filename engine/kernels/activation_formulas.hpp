#pragma once
// The activation formulas of activation.hpp as functions of an xsimd batch
// (internal): for each activation f, value(x) = f(x), slope(x) = f'(x) and
// value_and_slope(x), which computes both where they share work (erf, exp).
// Every kernel of kernels/activation_kernels.cpp, and so every op that applies
// an activation, fused or not, evaluates f and f' through these and nothing
// else; dispatch() maps an Activation to its formula.

#include "../activation.hpp"
#include "normal_cdf.hpp"
#include "vector_math.hpp"

namespace xtgrad::detail::simd_math {

constexpr double k_sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double k_gelu_tanh_cubic = 0.044715;  // Hendrycks & Gimpel 2016; torch GeluKernel kKappa
constexpr double k_gelu_sigmoid_scale = 1.702;  // Hendrycks & Gimpel 2016, sec. 2

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
// u = sqrt(2/pi) (x + 0.044715 x^3), so z = 2u and z' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2),
// z'' = 2 sqrt(2/pi) 6 * 0.044715 x, z''' = 2 sqrt(2/pi) 6 * 0.044715 (for the higher
// derivatives of activation_derivatives.hpp).
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
  template <class B>
  static B d2z(const B& x) {
    return broadcast<B>(2 * k_sqrt_2_over_pi * 6 * k_gelu_tanh_cubic) * x;
  }
  template <class B>
  static B d3z(const B&) {
    return broadcast<B>(2 * k_sqrt_2_over_pi * 6 * k_gelu_tanh_cubic);
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
  template <class B>
  static B d2z(const B&) {
    return broadcast<B>(0);
  }
  template <class B>
  static B d3z(const B&) {
    return broadcast<B>(0);
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
  template <class B>
  static B d2z(const B&) {
    return broadcast<B>(0);
  }
  template <class B>
  static B d3z(const B&) {
    return broadcast<B>(0);
  }
};

using GeluTanh = SigmoidGated<TanhGate>;
using GeluSigmoid = SigmoidGated<ScaledGate>;
using Silu = SigmoidGated<IdentityGate>;

// tanh, torch tanh: f = tanh(x), f' = 1 - tanh^2(x) = 4 s (1 - s) with
// s = sigmoid(2x). f is xsimd's tanh (Cephes' rational approximation below
// |x| = 0.625, relative accuracy kept near 0; 1 - 2 / (1 + exp(2x)) above).
// Its exp converts to an integer (undefined for NaN and huge |x|, see
// exp_no_ub), so x is clamped to +-k_tanh_saturation, where tanh is +-1 in
// float and double already, and NaN is passed around it. f' comes from s and
// 1 - s of the sigmoid, not from 1 - tanh^2, which cancels to 0 for |x| > ~19
// while the true f' is still a normal number.
constexpr double k_tanh_saturation = 40;

struct Tanh {
  template <class B>
  static B value(const B& x) {
    const B limit = broadcast<B>(k_tanh_saturation);
    const auto nan = xsimd::isnan(x);
    const B clamped = xsimd::select(x > limit, limit, xsimd::select(x < -limit, -limit, x));
    return xsimd::select(nan, x, xsimd::tanh(xsimd::select(nan, broadcast<B>(0), clamped)));
  }
  // 4 s (1 - s), s = sigmoid(2x)
  template <class B>
  static B slope(const B& x) {
    const auto sig = Silu::sigmoid(broadcast<B>(2) * x);
    return broadcast<B>(4) * sig.s * sig.one_minus_s;
  }
  template <class B>
  static ValueSlope<B> value_and_slope(const B& x) {
    return {value(x), slope(x)};
  }
};

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
    case Activation::tanh:
      return body(Tanh{});
  }
  activation_name(activation, op, "activation");  // throws: not an enumerator
}

}  // namespace xtgrad::detail::simd_math
