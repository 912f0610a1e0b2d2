#include "elementwise.hpp"

#include <functional>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../kernels/parallel.hpp"
#include "sum_to.hpp"
#include "support/broadcast.hpp"

namespace xtgrad {

namespace {

enum class Arithmetic { add, sub, mul, div };

// db[b] (+)= -(dy * y) / b summed over b's repeated axes, y = a / b. b is
// constant along those axes, so it divides each run's sum once.
template <class T>
void div_divisor_backward(const xt::xarray<T>& dy, const xt::xarray<T>& y, const xt::xarray<T>& b,
                          GradSlot<T> db) {
  T* d = db.buffer.data();
  const T* g = dy.data();
  const T* yv = y.data();
  const T* bv = b.data();
  if (b.shape() == dy.shape()) {  // one pass
    detail::write_or_add(d, db.accumulate, dy.size(),
                         [=](std::size_t i) { return -(g[i] * yv[i]) / bv[i]; });
    return;
  }
  if (!db.accumulate) std::fill(d, d + db.buffer.size(), T(0));  // [0, D] / [D] gives zeros
  const Shape& shape = b.shape();
  const detail::BroadcastPlan plan = detail::make_plan(dy.shape(), {&shape, &shape});
  detail::parallel_sum_runs(
      plan, dy.size(),
      [&](std::size_t o, std::size_t ob, std::size_t, std::size_t n, bool step, bool) {
        if (step)  // db[n] -= dy[n] * y[n] / b[n]: one row
          for (std::size_t j = 0; j < n; ++j) d[ob + j] -= g[o + j] * yv[o + j] / bv[ob + j];
        else  // db[] -= sum(dy[n] * y[n]) / b[]: the run collapses onto one element
          d[ob] -= static_cast<T>(
              detail::sum_of(
                  n, [&](std::size_t j) { return static_cast<double>(g[o + j]) * yv[o + j]; }) /
              bv[ob]);
      });
}

// y = a + b, a - b, a * b or a / b, broadcast.
template <class T>
void arithmetic_forward(Arithmetic kind, const xt::xarray<T>& a, const xt::xarray<T>& b,
                        xt::xarray<T>& y) {
  switch (kind) {
    case Arithmetic::add:
      return detail::broadcast_apply(y, a, b, std::plus<T>());
    case Arithmetic::sub:
      return detail::broadcast_apply(y, a, b, std::minus<T>());
    case Arithmetic::mul:
      return detail::broadcast_apply(y, a, b, std::multiplies<T>());
    case Arithmetic::div:
      return detail::broadcast_apply(y, a, b, std::divides<T>());
  }
}

// add, sub, mul and div share their checks, recording and broadcasting; only the
// kernel and the backward rule differ.
template <class T>
Var<T> binary(const char* op, Arithmetic kind, const Var<T>& a, const Var<T>& b) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"a", &a}, {"b", &b}});
  const Shape y_shape = detail::broadcast_shapes(op, a.shape(), b.shape());
  if (a.shape() != b.shape())  // a result larger than both operands: within memory
    detail::checked_allocation<T>(op, "arguments 'a' and 'b'", y_shape);
  const std::size_t ai = a.index(), bi = b.index();
  const std::size_t yi = tape.record(op, {ai, bi}, a.requires_grad() || b.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  arithmetic_forward(kind, tape.value(ai), tape.value(bi), y);

  tape.set_backward(yi, [ai, bi, yi, kind](Tape<T>& t, const xt::xarray<T>& dy) {
    // When ai == bi (mul(x, x)) the second grad_slot accumulates onto the first.
    const bool linear = kind == Arithmetic::add || kind == Arithmetic::sub;
    if (linear && t.requires_grad(ai) && t.requires_grad(bi)) {
      // da[a] (+)= sum over a's repeated axes of dy[y], db[b] likewise (negated for
      // sub): one pass over dy when neither operand was broadcast
      const GradSlot<T> da = t.grad_slot(ai);
      detail::sum_to_shapes(dy, da, t.grad_slot(bi), kind == Arithmetic::sub ? T(-1) : T(1));
      return;
    }
    if (t.requires_grad(ai)) {
      if (kind == Arithmetic::mul)  // da[a] (+)= sum over a's repeated axes of dy[y] * b[y]
        detail::sum_product_to_shape(dy, t.value(bi), t.grad_slot(ai));
      else if (kind == Arithmetic::div)  // da[a] (+)= sum over a's repeated axes of dy[y] / b[y]
        detail::sum_product_to_shape(dy, t.value(bi), t.grad_slot(ai), std::divides<>());
      else  // da[a] (+)= sum over a's repeated axes of dy[y]
        detail::sum_to_shape(dy, t.grad_slot(ai));
    }
    if (t.requires_grad(bi)) {
      if (kind == Arithmetic::mul)  // db[b] (+)= sum over b's repeated axes of dy[y] * a[y]
        detail::sum_product_to_shape(dy, t.value(ai), t.grad_slot(bi));
      else if (kind == Arithmetic::div)  // db[b] (+)= -sum over b's repeated axes of dy[y] y[y] / b
        div_divisor_backward(dy, t.value(yi), t.value(bi), t.grad_slot(bi));
      else  // db[b] (+)= sum over b's repeated axes of dy[y], negated for sub
        detail::sum_to_shape(dy, t.grad_slot(bi), kind == Arithmetic::sub ? T(-1) : T(1));
    }
  });
  // The same formulas as ops, each summed back to its operand's shape.
  tape.set_grad_rule(yi, [kind](GradSink<T>& g) {
    const Var<T> dy = g.grad_output(), a = g.input(0), b = g.input(1);
    if (g.needs_grad(0)) {
      const Var<T> da = kind == Arithmetic::mul   ? mul(dy, b)
                        : kind == Arithmetic::div ? div(dy, b)
                                                  : dy;
      g.add(0, detail::sum_to(da, a.shape()));
    }
    if (g.needs_grad(1)) {
      const Var<T> db = kind == Arithmetic::mul   ? mul(dy, a)
                        : kind == Arithmetic::div ? scale(div(mul(dy, g.output()), b), T(-1))
                        : kind == Arithmetic::sub ? scale(dy, T(-1))
                                                  : dy;
      g.add(1, detail::sum_to(db, b.shape()));
    }
  });
  return tape.var(yi);
}

enum class WithScalar { add, rsub, div, rdiv };

// y = x + s, s - x, x / s or s / x, elementwise over n values.
template <class T>
void with_scalar_forward(WithScalar kind, const T* xd, T s, T* yd, std::size_t n) {
  switch (kind) {
    case WithScalar::add:  // y = x + s
      for (std::size_t i = 0; i < n; ++i) yd[i] = xd[i] + s;
      break;
    case WithScalar::rsub:  // y = s - x
      for (std::size_t i = 0; i < n; ++i) yd[i] = s - xd[i];
      break;
    case WithScalar::div:  // y = x / s
      for (std::size_t i = 0; i < n; ++i) yd[i] = xd[i] / s;
      break;
    case WithScalar::rdiv:  // y = (1 / x) * s, as torch's s / x (reciprocal, then mul)
      for (std::size_t i = 0; i < n; ++i) yd[i] = (T(1) / xd[i]) * s;
      break;
  }
}

template <class T>
void with_scalar_backward(WithScalar kind, const xt::xarray<T>& x, T s, const xt::xarray<T>& dy,
                          GradSlot<T> dx) {
  const T* g = dy.data();
  switch (kind) {
    case WithScalar::add:  // dx[x] (+)= dy[x]
      detail::sum_to_shape(dy, dx);
      break;
    case WithScalar::rsub:  // dx[x] (+)= -dy[x]
      detail::sum_to_shape(dy, dx, T(-1));
      break;
    case WithScalar::div:  // dx[x] (+)= dy[x] / s
      detail::write_or_add(dx.buffer.data(), dx.accumulate, dx.buffer.size(),
                           [g, s](std::size_t i) { return g[i] / s; });
      break;
    case WithScalar::rdiv: {  // dx[x] (+)= -(dy[x] s) r[x]^2, r = 1 / x (torch's reciprocal')
      const T* xd = x.data();
      detail::write_or_add(dx.buffer.data(), dx.accumulate, dx.buffer.size(),
                           [g, s, xd](std::size_t i) {
                             const T r = T(1) / xd[i];
                             return -(g[i] * s) * (r * r);
                           });
      break;
    }
  }
}

// add_scalar, rsub, div_scalar and rdiv: one node of x and a constant s.
template <class T>
Var<T> with_scalar(const char* op, WithScalar kind, const Var<T>& x, T s) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"x", &x}});
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  const T* xd = xv.data();
  T* yd = y.data();
  detail::parallel_for(xv.size(), detail::k_parallel_light, [&](std::size_t i0, std::size_t i1) {
    with_scalar_forward(kind, xd + i0, s, yd + i0, i1 - i0);
  });

  tape.set_backward(yi, [xi, s, kind](Tape<T>& t, const xt::xarray<T>& dy) {
    if (t.requires_grad(xi)) with_scalar_backward(kind, t.value(xi), s, dy, t.grad_slot(xi));
  });
  tape.set_grad_rule(yi, [s, kind](GradSink<T>& g) {
    const Var<T> dy = g.grad_output();
    switch (kind) {
      case WithScalar::add:  // dx = dy
        g.add(0, dy);
        break;
      case WithScalar::rsub:  // dx = -dy
        g.add(0, scale(dy, T(-1)));
        break;
      case WithScalar::div:  // dx = dy / s
        g.add(0, div_scalar(dy, s));
        break;
      case WithScalar::rdiv:  // dx = -(dy s) / x^2 = -(dy y) / x, y = s / x
        g.add(0, scale(div(mul(dy, g.output()), g.input(0)), T(-1)));
        break;
    }
  });
  return tape.var(yi);
}

}  // namespace

template <class T>
Var<T> add(const Var<T>& a, const Var<T>& b) {
  return binary("add", Arithmetic::add, a, b);
}

template <class T>
Var<T> sub(const Var<T>& a, const Var<T>& b) {
  return binary("sub", Arithmetic::sub, a, b);
}

template <class T>
Var<T> mul(const Var<T>& a, const Var<T>& b) {
  return binary("mul", Arithmetic::mul, a, b);
}

template <class T>
Var<T> div(const Var<T>& a, const Var<T>& b) {
  return binary("div", Arithmetic::div, a, b);
}

template <class T>
Var<T> scale(const Var<T>& a, NoDeduce<T> s) {
  static constexpr const char* op = "scale";
  Tape<T>& tape = detail::common_tape<T>(op, {{"a", &a}});
  const std::size_t ai = a.index();
  const std::size_t yi = tape.record(op, {ai}, a.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  const xt::xarray<T>& av = tape.value(ai);
  y.resize(av.shape());
  // y = a * s   (one pass over the data pointers)
  detail::parallel_binary_run(y.data(), av.data(), true, &s, false, y.size(), std::multiplies<T>());

  tape.set_backward(yi, [ai, s](Tape<T>& t, const xt::xarray<T>& dy) {
    // da[a] (+)= s * dy[a]
    if (t.requires_grad(ai)) detail::sum_to_shape(dy, t.grad_slot(ai), s);
  });
  tape.set_grad_rule(yi, [s](GradSink<T>& g) { g.add(0, scale(g.grad_output(), s)); });
  return tape.var(yi);
}

template <class T>
Var<T> add_scalar(const Var<T>& x, NoDeduce<T> s) {
  return with_scalar<T>("add_scalar", WithScalar::add, x, s);
}

template <class T>
Var<T> rsub(const Var<T>& x, NoDeduce<T> s) {
  return with_scalar<T>("rsub", WithScalar::rsub, x, s);
}

template <class T>
Var<T> div_scalar(const Var<T>& x, NoDeduce<T> s) {
  return with_scalar<T>("div_scalar", WithScalar::div, x, s);
}

template <class T>
Var<T> rdiv(const Var<T>& x, NoDeduce<T> s) {
  return with_scalar<T>("rdiv", WithScalar::rdiv, x, s);
}

#define XTGRAD_ELEMENTWISE_INSTANTIATE(T)            \
  template Var<T> add(const Var<T>&, const Var<T>&); \
  template Var<T> sub(const Var<T>&, const Var<T>&); \
  template Var<T> mul(const Var<T>&, const Var<T>&); \
  template Var<T> div(const Var<T>&, const Var<T>&); \
  template Var<T> scale(const Var<T>&, T);           \
  template Var<T> add_scalar(const Var<T>&, T);      \
  template Var<T> rsub(const Var<T>&, T);            \
  template Var<T> div_scalar(const Var<T>&, T);      \
  template Var<T> rdiv(const Var<T>&, T);
XTGRAD_ELEMENTWISE_INSTANTIATE(float)
XTGRAD_ELEMENTWISE_INSTANTIATE(double)
#undef XTGRAD_ELEMENTWISE_INSTANTIATE

}  // namespace xtgrad
