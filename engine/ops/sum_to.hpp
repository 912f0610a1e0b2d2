#pragma once
// detail::sum_to: a differentiable sum of a gradient back to an operand's
// shape, the inverse of NumPy broadcasting, for GradRules (grad_rule.hpp) of
// broadcasting ops. Built from sum(x, dims) and reshape, so that its own
// backward (a broadcast) exists too.
//
//   sum_to(g, shape)   g [..., broadcast shape]  ->  [shape]
//   sums g over its leading axes beyond shape's rank and over each axis where
//   shape has 1 and g does not; returns g itself when the shapes are equal.

#include "../tape.hpp"

namespace xtgrad::detail {

// `shape` must broadcast to g's shape (the caller's operand shape).
template <class T>
Var<T> sum_to(const Var<T>& g, const Shape& shape);

}  // namespace xtgrad::detail
