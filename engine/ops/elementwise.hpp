#pragma once
// Elementwise arithmetic with NumPy broadcasting (torch.add, torch.sub,
// torch.mul, torch.div; the result shape is numpy.broadcast_shapes(a, b)).
//
//   add(a, b)   = a + b     d/da = dy         d/db = dy
//   sub(a, b)   = a - b     d/da = dy         d/db = -dy
//   mul(a, b)   = a * b     d/da = dy * b     d/db = dy * a
//   div(a, b)   = a / b     d/da = dy / b     d/db = -dy * a / b^2 = -(dy * y) / b
//   scale(a, s) = a * s     d/da = dy * s     (s is a constant: no gradient)
//
// With a scalar constant s (no gradient; one node each, never a constant
// leaf plus a broadcast):
//   add_scalar(x, s) = x + s       dx = dy             torch.add(x, s)
//   rsub(x, s)       = s - x       dx = -dy            torch.rsub(x, s)
//   div_scalar(x, s) = x / s       dx = dy / s         torch.div(x, s)
//   rdiv(x, s)       = s * (1/x)   dx = -(dy s) r^2    torch: s / x, which is
//                                  with r = 1/x        x.reciprocal() * s
// div by 0 gives +-inf or NaN as IEEE says (torch true division), in the
// value and in the gradients.
//
// Broadcasting: shapes are aligned from the right; along each axis the sizes
// are equal, or one of them is 1 or missing and is repeated. The result has
// the broadcast shape, and each gradient is summed back over the axes its
// operand was repeated along, so it has that operand's shape (a bias [D]
// added to [N, D] gets the sum of the N rows of dy). A 0-d ([]) or [1]
// operand acts as a scalar. Empty results are fine ([0, D] + [D] is [0, D],
// and the bias gets a zero gradient). Shapes that do not broadcast throw
// std::invalid_argument naming the op, 'a' and 'b' and both shapes.
//
// The same Var may be passed twice: mul(x, x) has gradient 2 x dy, add(x, x)
// has 2 dy, sub(x, x) and div(x, x) have 0.

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> add(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> sub(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> mul(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> div(const Var<T>& a, const Var<T>& b);
template <class T>
Var<T> scale(const Var<T>& a, NoDeduce<T> s);
template <class T>
Var<T> add_scalar(const Var<T>& x, NoDeduce<T> s);
template <class T>
Var<T> rsub(const Var<T>& x, NoDeduce<T> s);
template <class T>
Var<T> div_scalar(const Var<T>& x, NoDeduce<T> s);
template <class T>
Var<T> rdiv(const Var<T>& x, NoDeduce<T> s);

// Operator spellings of the functions above, thin wrappers: a + b, a - b,
// a * b, a / b, a * s and s * a (scale), -a (scale by -1), x + s and s + x
// (add_scalar), x - s (add_scalar of -s: x + (-s) is x - s exactly in IEEE
// arithmetic), s - x (rsub), x / s (div_scalar), s / x (rdiv). The scalar is
// NoDeduce<T>, so x + 1.0 works for a Var<float>.
template <class T>
Var<T> operator+(const Var<T>& a, const Var<T>& b) {
  return add(a, b);
}
template <class T>
Var<T> operator-(const Var<T>& a, const Var<T>& b) {
  return sub(a, b);
}
template <class T>
Var<T> operator*(const Var<T>& a, const Var<T>& b) {
  return mul(a, b);
}
template <class T>
Var<T> operator*(const Var<T>& a, NoDeduce<T> s) {
  return scale(a, s);
}
template <class T>
Var<T> operator*(NoDeduce<T> s, const Var<T>& a) {
  return scale(a, s);
}
template <class T>
Var<T> operator/(const Var<T>& a, const Var<T>& b) {
  return div(a, b);
}
template <class T>
Var<T> operator-(const Var<T>& a) {
  return scale(a, T(-1));
}
template <class T>
Var<T> operator+(const Var<T>& x, NoDeduce<T> s) {
  return add_scalar(x, s);
}
template <class T>
Var<T> operator+(NoDeduce<T> s, const Var<T>& x) {
  return add_scalar(x, s);
}
template <class T>
Var<T> operator-(const Var<T>& x, NoDeduce<T> s) {
  return add_scalar(x, -s);
}
template <class T>
Var<T> operator-(NoDeduce<T> s, const Var<T>& x) {
  return rsub(x, s);
}
template <class T>
Var<T> operator/(const Var<T>& x, NoDeduce<T> s) {
  return div_scalar(x, s);
}
template <class T>
Var<T> operator/(NoDeduce<T> s, const Var<T>& x) {
  return rdiv(x, s);
}

}  // namespace xtgrad
