#pragma once
// The second and third derivatives of the activations of activation.hpp on
// xsimd batches (internal), for the derivative ops of
// ops/activation_derivatives.hpp: the op y = f'(x) has dx = dy f''(x), and
// the op y = f''(x) has dx = dy f'''(x). f and f' are in
// activation_formulas.hpp; Curvature<Act>::second(x) = f''(x) and
// Curvature<Act>::third(x) = f'''(x) sit beside them here.
//
//   relu          f'' = f''' = 0 (PyTorch's threshold_backward has a zero
//                 derivative with respect to its input; at 0 too)
//   gelu          f = x Phi(x), Phi' = phi, phi' = -x phi:
//                 f''  = phi(x) (2 - x^2)
//                 f''' = x phi(x) (x^2 - 4)
//   x sigmoid(z(x))   (gelu_tanh, gelu_sigmoid, silu; z and its derivatives
//                 z1 = z', z2 = z'', z3 = z''' from the Gate structs), with
//                 s = sigmoid(z), q = s (1 - s) = ds/dz, w = 1 - 2 s
//                 (dq/dz = q w, dw/dz = -2 q):
//                 f''  = q A,   A = 2 z1 + x z2 + x z1^2 w
//                 f''' = q (z1 w A + 3 z2 + x z3 + w (z1^2 + 2 x z1 z2) - 2 x z1^3 q)
//   tanh          f = tanh x = 2 s - 1 with s = sigmoid(2x), q = s (1 - s),
//                 t = tanh x (ds/dx = 2q, dq/dx = -2 q t, dt/dx = 4q):
//                 f'   = 4 q
//                 f''  = -8 q t
//                 f''' = 16 q (t^2 - 2 q)
//   (Differentiating f' = s + x z1 q of activation_formulas.hpp by the chain
//   rule; checked against finite differences of f' and f'' by gradcheck in
//   tests/engine/test_activation_derivatives.cpp.)
//
// Limits: f'' and f''' are 0 at +-inf and finite for finite x. Beyond
// |x| = k_derivative_clamp every activation's q (or phi) is exactly 0 in
// float and double, so x is clamped there first: the polynomial factors stay
// finite (no 0 * inf) and nothing else changes. NaN stays NaN.

#include "activation_formulas.hpp"

namespace xtgrad::detail::simd_math {

// |x| beyond which f'' and f''' are exactly 0 in T: sigmoid(z)(1 - sigmoid(z))
// underflows for |z| > 750 (z >= x for every gate here) and phi(x) for |x| > 40.
constexpr double k_derivative_clamp = 1000;

template <class B>
B clamp_for_derivatives(const B& x) {
  const B limit = broadcast<B>(k_derivative_clamp);
  return xsimd::select(x > limit, limit, xsimd::select(x < -limit, -limit, x));
}

template <class Act>
struct Curvature;

template <>
struct Curvature<Relu> {
  template <class B>
  static B second(const B&) {
    return broadcast<B>(0);
  }
  template <class B>
  static B third(const B&) {
    return broadcast<B>(0);
  }
};

template <>
struct Curvature<GeluErf> {
  // f'' = phi(x) (2 - x^2)
  template <class B>
  static B second(const B& x) {
    const B c = clamp_for_derivatives(x);
    return normal(c).pdf * fused_multiply_add(-c, c, broadcast<B>(2));
  }
  // f''' = x phi(x) (x^2 - 4)
  template <class B>
  static B third(const B& x) {
    const B c = clamp_for_derivatives(x);
    return c * normal(c).pdf * fused_multiply_add(c, c, broadcast<B>(-4));
  }
};

template <class Gate>
struct Curvature<SigmoidGated<Gate>> {
  // What f'' and f''' share: the gate's derivatives at the clamped x, q, w and A.
  template <class B>
  struct Terms {
    B x, z1, z2, q, w, a;
  };
  template <class B>
  static Terms<B> terms(const B& x_in) {
    const B x = clamp_for_derivatives(x_in);
    const auto sig = SigmoidGated<Gate>::sigmoid(Gate::z(x));
    const B z1 = Gate::dz(x), z2 = Gate::d2z(x);
    const B q = sig.s * sig.one_minus_s;
    const B w = sig.one_minus_s - sig.s;  // 1 - 2 s
    // A = 2 z1 + x z2 + x z1^2 w
    const B a = broadcast<B>(2) * z1 + x * z2 + x * z1 * z1 * w;
    return {x, z1, z2, q, w, a};
  }
  // f'' = q A
  template <class B>
  static B second(const B& x) {
    const Terms<B> t = terms(x);
    return t.q * t.a;
  }
  // f''' = q (z1 w A + 3 z2 + x z3 + w (z1^2 + 2 x z1 z2) - 2 x z1^3 q)
  template <class B>
  static B third(const B& x) {
    const Terms<B> t = terms(x);
    const B z3 = Gate::d3z(t.x);
    const B inner = t.z1 * t.w * t.a + broadcast<B>(3) * t.z2 + t.x * z3 +
                    t.w * (t.z1 * t.z1 + broadcast<B>(2) * t.x * t.z1 * t.z2) -
                    broadcast<B>(2) * t.x * t.z1 * t.z1 * t.z1 * t.q;
    return t.q * inner;
  }
};

template <>
struct Curvature<Tanh> {
  // q = s (1 - s), s = sigmoid(2x); no clamp needed: q reaches 0 and t +-1.
  template <class B>
  static B q(const B& x) {
    const auto sig = Silu::sigmoid(broadcast<B>(2) * x);
    return sig.s * sig.one_minus_s;
  }
  // f'' = -8 q t
  template <class B>
  static B second(const B& x) {
    return broadcast<B>(-8) * q(x) * Tanh::value(x);
  }
  // f''' = 16 q (t^2 - 2 q)
  template <class B>
  static B third(const B& x) {
    const B qx = q(x), t = Tanh::value(x);
    return broadcast<B>(16) * qx * fused_multiply_add(t, t, broadcast<B>(-2) * qx);
  }
};

// The derivative of order 1, 2 or 3 of Act at x (f', f'', f''').
template <int Order, class Act, class B>
B derivative(const B& x) {
  static_assert(Order >= 1 && Order <= 3, "derivative: order 1, 2 or 3");
  if constexpr (Order == 1)
    return Act::slope(x);
  else if constexpr (Order == 2)
    return Curvature<Act>::second(x);
  else
    return Curvature<Act>::third(x);
}

}  // namespace xtgrad::detail::simd_math
