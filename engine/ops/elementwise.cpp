#include "elementwise.hpp"

#include <functional>

#include "../check.hpp"
#include "../kernels/broadcast.hpp"

namespace xtgrad {

namespace {

enum class Arithmetic { add, sub, mul };

// add, sub and mul share their checks, recording and broadcasting; only the
// kernel and the backward rule differ.
template <class T>
Var<T> binary(const char* op, Arithmetic kind, const Var<T>& a, const Var<T>& b) {
  Tape<T>& tape = detail::common_tape<T>(op, {{"a", &a}, {"b", &b}});
  const Shape y_shape = detail::broadcast_shapes(op, a.shape(), b.shape());
  const std::size_t ai = a.index(), bi = b.index();
  const std::size_t yi = tape.record(op, {ai, bi}, a.requires_grad() || b.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(y_shape);
  const xt::xarray<T>& av = tape.value(ai);
  const xt::xarray<T>& bv = tape.value(bi);
  switch (kind) {
    case Arithmetic::add:
      detail::broadcast_apply(y, av, bv, std::plus<T>());
      break;
    case Arithmetic::sub:
      detail::broadcast_apply(y, av, bv, std::minus<T>());
      break;
    case Arithmetic::mul:
      detail::broadcast_apply(y, av, bv, std::multiplies<T>());
      break;
  }

  tape.set_backward(yi, [ai, bi, kind](Tape<T>& t, const xt::xarray<T>& dy) {
    // When ai == bi (mul(x, x)) the second grad_slot accumulates onto the first.
    if (t.requires_grad(ai)) {
      if (kind == Arithmetic::mul)  // da[a] (+)= sum over a's repeated axes of dy[y] * b[y]
        detail::sum_product_to_shape(dy, t.value(bi), t.grad_slot(ai));
      else  // da[a] (+)= sum over a's repeated axes of dy[y]
        detail::sum_to_shape(dy, t.grad_slot(ai));
    }
    if (t.requires_grad(bi)) {
      if (kind == Arithmetic::mul)  // db[b] (+)= sum over b's repeated axes of dy[y] * a[y]
        detail::sum_product_to_shape(dy, t.value(ai), t.grad_slot(bi));
      else  // db[b] (+)= sum over b's repeated axes of dy[y], negated for sub
        detail::sum_to_shape(dy, t.grad_slot(bi), kind == Arithmetic::sub ? T(-1) : T(1));
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
Var<T> scale(const Var<T>& a, NoDeduce<T> s) {
  static constexpr const char* op = "scale";
  Tape<T>& tape = detail::common_tape<T>(op, {{"a", &a}});
  const std::size_t ai = a.index();
  const std::size_t yi = tape.record(op, {ai}, a.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  const xt::xarray<T>& av = tape.value(ai);
  y.resize(av.shape());
  // y = a * s   (one pass over the data pointers)
  detail::binary_run(y.data(), av.data(), true, &s, false, y.size(), std::multiplies<T>());

  tape.set_backward(yi, [ai, s](Tape<T>& t, const xt::xarray<T>& dy) {
    // da[a] (+)= s * dy[a]
    if (t.requires_grad(ai)) detail::sum_to_shape(dy, t.grad_slot(ai), s);
  });
  return tape.var(yi);
}

template Var<float> add(const Var<float>&, const Var<float>&);
template Var<float> sub(const Var<float>&, const Var<float>&);
template Var<float> mul(const Var<float>&, const Var<float>&);
template Var<float> scale(const Var<float>&, float);
template Var<double> add(const Var<double>&, const Var<double>&);
template Var<double> sub(const Var<double>&, const Var<double>&);
template Var<double> mul(const Var<double>&, const Var<double>&);
template Var<double> scale(const Var<double>&, double);

}  // namespace xtgrad
