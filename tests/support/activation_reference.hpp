#pragma once
// The one scalar reference of the activations for every test: f and f' in
// long double, straight from the definitions (std::erfc, std::tanh,
// std::exp), never through the engine.

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <xtgrad/engine/activation.hpp>

namespace xtgrad::testing {

inline constexpr Activation k_all_activations[] = {Activation::relu,      Activation::gelu,
                                                   Activation::gelu_tanh, Activation::gelu_sigmoid,
                                                   Activation::silu,      Activation::tanh};

// |error| <= rtol |reference| + atol for one activation value computed in T:
// a few ulp where the value is O(1), an absolute floor in the tails and at
// the zero crossings of f'.
template <class T>
struct ActivationTolerance;
template <>
struct ActivationTolerance<float> {
  static constexpr double rtol = 1e-6, atol = 1e-7;
};
template <>
struct ActivationTolerance<double> {
  static constexpr double rtol = 1e-14, atol = 1e-15;
};

using Real = long double;
inline const Real k_pi = 3.14159265358979323846264338327950288L;

inline Real sigmoid(Real z) {
  return 1 / (1 + std::exp(-z));
}

// 0.5 (1 + erf(x / sqrt 2)), written with erfc so that the reference itself
// keeps its relative accuracy in the left tail.
inline Real normal_cdf(Real x) {
  return 0.5L * std::erfc(-x / std::sqrt(2.0L));
}

inline Real tanh_u(Real x) {
  return std::tanh(std::sqrt(2 / k_pi) * (x + 0.044715L * x * x * x));
}

inline Real reference_value(Activation a, Real x) {
  switch (a) {
    case Activation::relu:
      return x > 0 ? x : 0;
    case Activation::gelu:
      return x * normal_cdf(x);
    case Activation::gelu_tanh:
      return 0.5L * x * (1 + tanh_u(x));
    case Activation::gelu_sigmoid:
      return x * sigmoid(1.702L * x);
    case Activation::silu:
      return x * sigmoid(x);
    case Activation::tanh:
      return std::tanh(x);
  }
  return std::numeric_limits<Real>::quiet_NaN();
}

inline Real reference_slope(Activation a, Real x) {
  switch (a) {
    case Activation::relu:
      return x > 0 ? 1 : 0;
    case Activation::gelu:
      return normal_cdf(x) + x * std::exp(-x * x / 2) / std::sqrt(2 * k_pi);
    case Activation::gelu_tanh: {
      const Real t = tanh_u(x);
      return 0.5L * (1 + t) +
             0.5L * x * (1 - t * t) * std::sqrt(2 / k_pi) * (1 + 3 * 0.044715L * x * x);
    }
    case Activation::gelu_sigmoid: {
      const Real s = sigmoid(1.702L * x);
      return s + 1.702L * x * s * (1 - s);
    }
    case Activation::silu: {
      const Real s = sigmoid(x);
      return s * (1 + x * (1 - s));
    }
    case Activation::tanh: {
      const Real t = std::tanh(x);
      return 1 - t * t;
    }
  }
  return std::numeric_limits<Real>::quiet_NaN();
}

// The second and third derivatives by Faa di Bruno's formula on f = x g(x):
// f'' = 2 g' + x g'', f''' = 3 g'' + x g''' (another route than the engine's
// chain rule on f'), with g = Phi (gelu), (1 + tanh u) / 2 (gelu_tanh) or
// sigmoid(k x) (gelu_sigmoid, silu). relu's are 0. tanh is not of that form:
// its own, tanh'' = -2 t (1 - t^2), tanh''' = (1 - t^2) (6 t^2 - 2), t = tanh x.
struct GateDerivatives {
  Real d1, d2, d3;  // g', g'', g'''
};

inline GateDerivatives gate_derivatives(Activation a, Real x) {
  switch (a) {
    case Activation::relu:
    case Activation::tanh:  // not x g(x): see reference_second_derivative
      return {0, 0, 0};
    case Activation::gelu: {  // phi' = -x phi, phi'' = (x^2 - 1) phi
      const Real phi = std::exp(-x * x / 2) / std::sqrt(2 * k_pi);
      return {phi, -x * phi, (x * x - 1) * phi};
    }
    case Activation::gelu_tanh: {  // with t = tanh u, v = 1 - t^2 = tanh'(u)
      const Real c = std::sqrt(2 / k_pi), k = 0.044715L;
      const Real t = tanh_u(x), v = 1 - t * t;
      const Real u1 = c * (1 + 3 * k * x * x), u2 = c * 6 * k * x, u3 = c * 6 * k;
      const Real th2 = -2 * t * v, th3 = v * (6 * t * t - 2);  // tanh'', tanh'''
      return {v * u1 / 2, (th2 * u1 * u1 + v * u2) / 2,
              (th3 * u1 * u1 * u1 + 3 * th2 * u1 * u2 + v * u3) / 2};
    }
    case Activation::gelu_sigmoid:
    case Activation::silu: {  // sigmoid' = d = s (1 - s), '' = d (1 - 2s), ''' = d (1 - 6s + 6s^2)
      const Real k = a == Activation::silu ? 1 : 1.702L;
      const Real s = sigmoid(k * x), d = s * (1 - s);
      return {k * d, k * k * d * (1 - 2 * s), k * k * k * d * (1 - 6 * s + 6 * s * s)};
    }
  }
  return {0, 0, 0};
}

inline Real reference_second_derivative(Activation a, Real x) {
  if (a == Activation::tanh) {
    const Real t = std::tanh(x);
    return -2 * t * (1 - t * t);
  }
  const GateDerivatives g = gate_derivatives(a, x);
  return 2 * g.d1 + x * g.d2;
}

inline Real reference_third_derivative(Activation a, Real x) {
  if (a == Activation::tanh) {
    const Real t = std::tanh(x);
    return (1 - t * t) * (6 * t * t - 2);
  }
  const GateDerivatives g = gate_derivatives(a, x);
  return 3 * g.d2 + x * g.d3;
}

// The activation a test names as a string, mapped here independently of
// parse_activation (whose own tests live in test_activations.cpp).
inline Activation activation_named(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_tanh") return Activation::gelu_tanh;
  if (name == "gelu_sigmoid") return Activation::gelu_sigmoid;
  if (name == "silu") return Activation::silu;
  if (name == "tanh") return Activation::tanh;
  throw std::invalid_argument("activation_named: " + name);
}

}  // namespace xtgrad::testing
