#pragma once
// Maxima and minima along axes (torch.amax, torch.amin, torch.max(x, dim),
// torch.min(x, dim)).
//
//   amax(x, dims)     y = max_r x_r      dx_r = dy [x_r == y] / #{r : x_r == y}
//   amin(x, dims)     y = min_r x_r      (the same with min)
//   max(x, dim)       values = max_j x_j, indices = argmax_j x_j
//                     dx_j = dy [j == index]
//   min(x, dim)       (the same with min)
//
// Ties, the two conventions (both torch 1.13's on CPU):
//   amax / amin spread the gradient evenly over every element equal to the
//   result (a row [1, 3, 3, 0] gives [0, 0.5, 0.5, 0]);
//   max / min return the index of the first extreme element and send the
//   whole gradient there (the same row gives index 1 and [0, 1, 0, 0]).
//
// NaN, as torch: a NaN in a row is that row's result (NaN is the max and the
// min); max / min return the index of the first NaN (its gradient goes
// there), amax / amin give a NaN gradient to the whole row (torch's
// dy * mask / count with count = 0).
//
// dims / dim and keepdim as in reduce.hpp: torch-style axes, negative from the
// end; amax and amin take several (each at most once; empty = every axis, as
// torch 1.13's amax with dim=[]); max and min take one. A 0-d x takes axis 0
// or -1 and gives a 0-d result (index 0). Result shapes: the reduced axes
// removed, or kept with extent 1 when keepdim; `indices` has the shape of
// `values`. There is no identity for a maximum: reducing an axis of extent 0
// throws std::invalid_argument naming the op, the axis and the shape, as
// torch raises ("Expected reduction dim 1 to have non-zero size"); an empty
// x reduced along a non-empty axis gives an empty result.

#include <cstdint>
#include <vector>

#include "../indices.hpp"
#include "../tape.hpp"
#include "reduce.hpp"  // detail::IfAxis

namespace xtgrad {

// What torch.max(x, dim) returns: the extreme values (a Var) and their
// positions along dim (no gradient).
template <class T>
struct ValuesIndices {
  Var<T> values;
  Indices indices;
};

template <class T>
Var<T> amax(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
template <class T>
Var<T> amin(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
template <class T>
ValuesIndices<T> max(const Var<T>& x, std::int64_t dim, bool keepdim = false);
template <class T>
ValuesIndices<T> min(const Var<T>& x, std::int64_t dim, bool keepdim = false);

template <class T, class I, detail::IfAxis<I> = 0>
Var<T> amax(const Var<T>& x, I dim, bool keepdim = false) {
  return amax(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, keepdim);
}
template <class T, class I, detail::IfAxis<I> = 0>
Var<T> amin(const Var<T>& x, I dim, bool keepdim = false) {
  return amin(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, keepdim);
}

}  // namespace xtgrad
