#include "../kernels/vector_math.hpp"  // first (through simd.hpp): see simd.hpp

#include "math.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "../check.hpp"
#include "../errors.hpp"
#include "elementwise.hpp"

namespace xtgrad {

namespace {

using detail::simd_math::Batch;
using detail::simd_math::broadcast;

// y[i] = f(x[i]) over xsimd batches; the last n % lanes elements go through
// the same batch code on a zero-padded copy, so no result depends on n.
template <class T, class F>
void map_batches(const T* x, T* y, std::size_t n, F f) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) f(Batch<T>::load_unaligned(x + i)).store_unaligned(y + i);
  if (i < n) {
    T buffer[lanes] = {};
    std::copy(x + i, x + n, buffer);
    f(Batch<T>::load_unaligned(buffer)).store_unaligned(buffer);
    std::copy(buffer, buffer + (n - i), y + i);
  }
}

// y[i] = f(x[i]): a plain loop, which the compiler vectorizes for simple f.
template <class T, class F>
void map_plain(const T* x, T* y, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// dx[i] (+)= term(dy[i], s[i]). Accumulate is a template parameter, never a
// runtime bool inside the loop (see kernels/activation_kernels.cpp, Output).
template <bool Accumulate, class T, class Term>
void backward_loop(const T* dy, const T* s, T* dx, std::size_t n, Term term) {
  for (std::size_t i = 0; i < n; ++i) {
    const T v = term(dy[i], s[i]);
    if constexpr (Accumulate)
      dx[i] += v;
    else
      dx[i] = v;
  }
}

enum class Saves { input, output };

// Records y = forward(x) (forward fills n elements of y from x) with the
// backward rule dx (+)= term(dy, s), elementwise, where s is the input x or
// the output y as `saves` says, and `rule`, the same derivative as ops
// (GradRule, grad_rule.hpp). term and rule capture scalars only.
template <class T, class Forward, class Term, class Rule>
Var<T> unary(const char* op, const Var<T>& x, Saves saves, Forward forward, Term term, Rule rule) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  forward(xv.data(), y.data(), xv.size());

  const std::size_t si = saves == Saves::input ? xi : yi;
  tape.set_backward(yi, [xi, si, term](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const T* s = t.value(si).data();
    const GradPointer<T> dx = t.grad_pointer(xi);
    // dx[x] (+)= term(dy[x], s[x]), s = x or y (same shape)
    if (dx.accumulate)
      backward_loop<true>(dy.data(), s, dx.data, dy.size(), term);
    else
      backward_loop<false>(dy.data(), s, dx.data, dy.size(), term);
  });
  tape.set_grad_rule(yi, rule);
  return tape.var(yi);
}

// A constant (no gradient) on the sink's tape: a mask or a sign.
template <class T, class E>
Var<T> constant(GradSink<T>& g, const E& expr) {
  return g.tape().leaf(xt::xarray<T>(expr), false);
}

// v with NaN lanes replaced by 0 and the rest clamped to [-limit, limit], for
// xsimd functions that convert their argument to an integer (undefined for
// NaN and huge values); select(isnan(v), v, f(...)) puts NaN back.
template <class B>
B tame(const B& v, double limit) {
  const B l = broadcast<B>(limit);
  return xsimd::select(xsimd::isnan(v), broadcast<B>(0), xsimd::min(xsimd::max(v, -l), l));
}

// Calls body(f) with f: x -> x^p computed as torch computes it for this p
// (PowKernel.cpp: sqrt, x * x, x * x * x, rsqrt, 1 / x, 1 / (x * x), and
// std::pow otherwise), so that the special exponents round as torch's do;
// p = 1 is x itself, as std::pow gives it.
template <class T, class Body>
void with_power(T p, Body body) {
  if (p == T(1))  // exact in std::pow too; the backward of x^2 needs it
    body([](T v) { return v; });
  else if (p == T(0.5))
    body([](T v) { return std::sqrt(v); });
  else if (p == T(2))
    body([](T v) { return v * v; });
  else if (p == T(3))
    body([](T v) { return v * v * v; });
  else if (p == T(-0.5))
    body([](T v) { return T(1) / std::sqrt(v); });
  else if (p == T(-1))
    body([](T v) { return T(1) / v; });
  else if (p == T(-2))
    body([](T v) { return T(1) / (v * v); });
  else
    body([p](T v) { return std::pow(v, p); });
}

template <class T>
Var<T> clamp_op(const char* op, const Var<T>& x, T lo, T hi) {
  detail::common_tape<T>(op, {{"x", &x}});
  const detail::Check check(op);
  check.argument(!std::isnan(lo), "min", "is nan, expected a number (or -inf)");
  check.argument(!std::isnan(hi), "max", "is nan, expected a number (or inf)");
  return unary(
      op, x, Saves::input,
      [lo, hi](const T* xs, T* y, std::size_t n) {
        // y = min(max(x, lo), hi): NaN stays NaN, lo > hi gives hi (torch)
        map_plain(xs, y, n, [lo, hi](T v) { return std::min(std::max(v, lo), hi); });
      },
      // dx[x] (+)= dy[x] where lo <= x[x] <= hi, else 0 (torch's clamp_backward mask)
      [lo, hi](T g, T v) { return v >= lo && v <= hi ? g : T(0); },
      [lo, hi](GradSink<T>& g) {  // dx = dy * mask, the mask a constant
        const xt::xarray<T>& xv = g.input(0).value();
        g.add(0, mul(g.grad_output(), constant(g, xt::cast<T>(xv >= lo && xv <= hi))));
      });
}

}  // namespace

template <class T>
Var<T> exp(const Var<T>& x) {
  return unary(
      "exp", x, Saves::output,
      [](const T* xs, T* y, std::size_t n) {
        map_batches(xs, y, n, [](const Batch<T>& v) { return detail::simd_math::exp_no_ub(v); });
      },
      [](T g, T y) { return g * y; },  // dx[x] (+)= dy[x] * y[x]
      [](GradSink<T>& g) { g.add(0, mul(g.grad_output(), g.output())); });
}

template <class T>
Var<T> log(const Var<T>& x) {
  return unary(
      "log", x, Saves::input,
      [](const T* xs, T* y, std::size_t n) {
        map_batches(xs, y, n, [](const Batch<T>& v) { return xsimd::log(v); });
      },
      [](T g, T v) { return g / v; },  // dx[x] (+)= dy[x] / x[x]
      [](GradSink<T>& g) { g.add(0, div(g.grad_output(), g.input(0))); });
}

template <class T>
Var<T> sqrt(const Var<T>& x) {
  return unary(
      "sqrt", x, Saves::output,
      [](const T* xs, T* y, std::size_t n) {
        map_batches(xs, y, n, [](const Batch<T>& v) { return xsimd::sqrt(v); });
      },
      [](T g, T y) { return g / (T(2) * y); },  // dx[x] (+)= dy[x] / (2 y[x])
      [](GradSink<T>& g) { g.add(0, div(g.grad_output(), scale(g.output(), T(2)))); });
}

template <class T>
Var<T> rsqrt(const Var<T>& x) {
  return unary(
      "rsqrt", x, Saves::output,
      [](const T* xs, T* y, std::size_t n) {
        // 1 / sqrt(x), correctly rounded twice (not the approximate rsqrt instruction)
        map_batches(xs, y, n,
                    [](const Batch<T>& v) { return broadcast<Batch<T>>(1) / xsimd::sqrt(v); });
      },
      [](T g, T y) { return T(-0.5) * g * (y * y * y); },  // dx[x] (+)= -0.5 dy[x] y[x]^3
      [](GradSink<T>& g) {
        const Var<T> y = g.output();
        g.add(0, scale(mul(g.grad_output(), mul(mul(y, y), y)), T(-0.5)));
      });
}

template <class T>
Var<T> tanh(const Var<T>& x) {
  // tanh(x) rounds to +-1 in T beyond +-limit: 1 - tanh(x) ~ 2 e^(-2x) is
  // below half an ulp of 1 there, so clamping changes no result.
  constexpr double limit = std::is_same_v<T, float> ? 10 : 20;
  return unary(
      "tanh", x, Saves::output,
      [](const T* xs, T* y, std::size_t n) {
        map_batches(xs, y, n, [](const Batch<T>& v) {
          return xsimd::select(xsimd::isnan(v), v, xsimd::tanh(tame(v, limit)));
        });
      },
      [](T g, T y) { return g * (T(1) - y * y); },  // dx[x] (+)= dy[x] (1 - y[x]^2)
      [](GradSink<T>& g) {
        const Var<T> y = g.output();
        g.add(0, mul(g.grad_output(), rsub(mul(y, y), T(1))));
      });
}

template <class T>
Var<T> sigmoid(const Var<T>& x) {
  return unary(
      "sigmoid", x, Saves::output,
      [](const T* xs, T* y, std::size_t n) {
        // e = e^-|x| in (0, 1] never overflows; r = 1 / (1 + e) is sigmoid(|x|)
        // and e r = sigmoid(-|x|), so x = -inf gives exactly 0 and x = inf exactly 1
        map_batches(xs, y, n, [](const Batch<T>& v) {
          const Batch<T> e = detail::simd_math::exp_no_ub(-xsimd::abs(v));
          const Batch<T> r = broadcast<Batch<T>>(1) / (broadcast<Batch<T>>(1) + e);
          return xsimd::select(v >= broadcast<Batch<T>>(0), r, e * r);
        });
      },
      [](T g, T y) { return g * ((T(1) - y) * y); },  // dx[x] (+)= dy[x] (1 - y[x]) y[x]
      [](GradSink<T>& g) {
        const Var<T> y = g.output();
        g.add(0, mul(g.grad_output(), mul(rsub(y, T(1)), y)));
      });
}

template <class T>
Var<T> abs(const Var<T>& x) {
  return unary(
      "abs", x, Saves::input,
      [](const T* xs, T* y, std::size_t n) {
        map_plain(xs, y, n, [](T v) { return std::abs(v); });
      },
      // dx[x] (+)= dy[x] * sign(x[x]), sign(0) = sign(NaN) = 0
      [](T g, T v) {
        return g * (v > T(0) ? T(1) : v < T(0) ? T(-1) : T(0));
      },
      [](GradSink<T>& g) {  // dx = dy * sign(x), the sign a constant
        g.add(0, mul(g.grad_output(), constant(g, xt::sign(g.input(0).value()))));
      });
}

template <class T>
Var<T> square(const Var<T>& x) {
  return unary(
      "square", x, Saves::input,
      [](const T* xs, T* y, std::size_t n) { map_plain(xs, y, n, [](T v) { return v * v; }); },
      [](T g, T v) { return T(2) * v * g; },  // dx[x] (+)= 2 x[x] dy[x]
      [](GradSink<T>& g) { g.add(0, scale(mul(g.grad_output(), g.input(0)), T(2))); });
}

template <class T>
Var<T> pow(const Var<T>& x, NoDeduce<T> exponent) {
  static constexpr const char* op = "pow";
  const T p = exponent;
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  // y[x] = x[x]^p
  with_power(p, [&](auto power) { map_plain(xv.data(), y.data(), xv.size(), power); });

  tape.set_backward(yi, [xi, p](Tape<T>& t, const xt::xarray<T>& dy) {
    if (!t.requires_grad(xi)) return;
    const GradPointer<T> dx = t.grad_pointer(xi);
    const std::size_t n = dy.size();
    if (p == T(0)) {  // dx[x] (+)= 0, whatever dy holds (torch: zeros_like)
      if (!dx.accumulate) std::fill(dx.data, dx.data + n, T(0));
      return;
    }
    const T* xs = t.value(xi).data();
    // dx[x] (+)= dy[x] * (p * x[x]^(p-1))
    with_power(T(p - T(1)), [&](auto power) {
      const auto term = [p, power](T g, T v) { return g * (p * power(v)); };
      if (dx.accumulate)
        backward_loop<true>(dy.data(), xs, dx.data, n, term);
      else
        backward_loop<false>(dy.data(), xs, dx.data, n, term);
    });
  });
  tape.set_grad_rule(yi, [p](GradSink<T>& g) {
    const Var<T> x = g.input(0);
    if (p == T(0))  // dx = 0 whatever dy holds
      g.add(0, constant(g, xt::zeros<T>(x.shape())));
    else  // dx = dy * (p x^(p-1))
      g.add(0, mul(g.grad_output(), scale(pow(x, T(p - T(1))), p)));
  });
  return tape.var(yi);
}

template <class T>
Var<T> clamp(const Var<T>& x, NoDeduce<T> min, NoDeduce<T> max) {
  return clamp_op<T>("clamp", x, min, max);
}

template <class T>
Var<T> clamp_min(const Var<T>& x, NoDeduce<T> min) {
  return clamp_op<T>("clamp_min", x, min, std::numeric_limits<T>::infinity());
}

template <class T>
Var<T> clamp_max(const Var<T>& x, NoDeduce<T> max) {
  return clamp_op<T>("clamp_max", x, -std::numeric_limits<T>::infinity(), max);
}

#define XTGRAD_MATH_INSTANTIATE(T)             \
  template Var<T> exp(const Var<T>&);          \
  template Var<T> log(const Var<T>&);          \
  template Var<T> sqrt(const Var<T>&);         \
  template Var<T> rsqrt(const Var<T>&);        \
  template Var<T> tanh(const Var<T>&);         \
  template Var<T> sigmoid(const Var<T>&);      \
  template Var<T> abs(const Var<T>&);          \
  template Var<T> square(const Var<T>&);       \
  template Var<T> pow(const Var<T>&, T);       \
  template Var<T> clamp(const Var<T>&, T, T);  \
  template Var<T> clamp_min(const Var<T>&, T); \
  template Var<T> clamp_max(const Var<T>&, T);
XTGRAD_MATH_INSTANTIATE(float)
XTGRAD_MATH_INSTANTIATE(double)
#undef XTGRAD_MATH_INSTANTIATE

}  // namespace xtgrad
