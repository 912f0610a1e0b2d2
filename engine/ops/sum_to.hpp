#pragma once
// detail::sum_to: a differentiable sum of a gradient back to an operand's
// shape, the inverse of NumPy broadcasting, for GradRules (grad_rule.hpp) of
// broadcasting ops. Built from sum(x, dims) and reshape, so that its own
// backward (a broadcast) exists too.
//
//   sum_to(g, shape)   g [..., broadcast shape]  ->  [shape]
//   sums g over its leading axes beyond shape's rank and over each axis where
//   shape has 1 and g does not; returns g itself when the shapes are equal.

#include <cstdint>
#include <vector>

#include "../tape.hpp"

namespace xtgrad::detail {

// `shape` must broadcast to g's shape (the caller's operand shape).
template <class T>
Var<T> sum_to(const Var<T>& g, const Shape& shape);

// The reduced axes of a reduction over torch-style `dims` (already checked)
// of a rank-`rank` tensor, as bits (bit d for axis d); empty dims is every axis.
std::uint64_t reduced_axes(const std::vector<std::int64_t>& dims, std::size_t rank);
// The axes of `axes` as a list, for sum(x, dims).
std::vector<std::int64_t> axes_list(std::uint64_t axes, std::size_t rank);

// The inverse of a reduction's shape change, differentiable: g of the
// reduction's result shape (keepdim or not) broadcast back to `shape` over
// the reduced `axes` (reshape to the keepdim shape, then expand).
template <class T>
Var<T> unreduce(const Var<T>& g, const Shape& shape, std::uint64_t axes);

}  // namespace xtgrad::detail
