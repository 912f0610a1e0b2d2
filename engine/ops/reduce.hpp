#pragma once
// Sums, means, variances and log-sum-exp, of a whole tensor or along axes
// (torch.sum, torch.mean, torch.var, torch.logsumexp).
//
// Whole tensor, to a 0-d result (torch.sum(x), torch.mean(x)):
//   sum(x)  = sum_i x_i          d/dx_i = dy
//   mean(x) = sum_i x_i / n      d/dx_i = dy / n      (n = number of elements)
// x may have any shape, 0-d and empty included. The result has shape []
// (0-d, one element), as in PyTorch, so tape.backward(y) applies directly and
// y broadcasts against any tensor in add/sub/mul. The sum of an empty tensor
// is 0; the mean of an empty tensor is NaN (0 / 0), as torch.mean returns.
//
// Along axes, with n = the number of elements reduced into each output:
//   sum(x, dims)    y = sum_r x_r                    dx_r = dy
//   mean(x, dims)   y = sum_r x_r / n                dx_r = dy / n
//   var(x, dims, c) y = sum_r (x_r - m)^2 / max(0, n - c),  m = mean
//                                                    dx_r = dy 2 (x_r - m) / (n - c)
//   logsumexp(x, dims)  y = log sum_r exp(x_r)       dx_r = dy exp(x_r - y)
//                                                         (softmax along dims)
// `dims`: torch-style axes in [-rank, rank), each at most once (a repeated
// axis is std::invalid_argument, as torch raises). An empty `dims` reduces
// every axis, as torch 1.13 does for sum, mean and var with dim=[] (torch
// 1.13's logsumexp raises for dim=[]; here it reduces every axis too). A 0-d
// x takes dims 0 and -1, as in torch, and gives a 0-d result. Shapes: the
// reduced axes are removed, or kept with extent 1 when keepdim; an input
// [2, 3, 4] over dims {0, 2} gives [3], or [1, 3, 1].
//
// var: `correction` as torch.var's (1 = unbiased, Bessel; 0 = biased). The
// forward divides by max(0, n - correction) and the derivative uses
// n - correction itself, as torch 1.13 does, so n <= correction gives NaN
// (0 / 0, a constant row) or inf, and the gradient NaN, +-inf or -0 as
// torch's. Two passes (mean, then squared deviations), both in double.
//
// logsumexp: stable for large |x| (shifted by the row maximum, as
// torch.logsumexp). A row that is all -inf (or empty) gives -inf and a zero
// gradient (torch gives the same value but a NaN gradient); a +inf entry
// gives +inf; a NaN entry gives NaN.
//
// Zero-size reductions, as torch: sum 0, mean NaN, var NaN, logsumexp -inf.
// Sums accumulate in double, for float inputs too, and are rounded to T once.
//
// The single-axis overloads take any integer type for `dim` (a template, so
// that sum(x, {}) and sum(x, {0, 1}) pick the `dims` version; bool is no axis).

#include <cstdint>
#include <type_traits>
#include <vector>

#include "../tape.hpp"

namespace xtgrad {

namespace detail {
// An integer axis type for the single-axis overloads (bool is not an axis).
template <class I>
using IfAxis = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int>;
}  // namespace detail

template <class T>
Var<T> sum(const Var<T>& x);
template <class T>
Var<T> mean(const Var<T>& x);

template <class T>
Var<T> sum(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
template <class T>
Var<T> mean(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
template <class T>
Var<T> var(const Var<T>& x, const std::vector<std::int64_t>& dims, std::int64_t correction = 1,
           bool keepdim = false);
template <class T>
Var<T> logsumexp(const Var<T>& x, const std::vector<std::int64_t>& dims, bool keepdim = false);

template <class T, class I, detail::IfAxis<I> = 0>
Var<T> sum(const Var<T>& x, I dim, bool keepdim = false) {
  return sum(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, keepdim);
}
template <class T, class I, detail::IfAxis<I> = 0>
Var<T> mean(const Var<T>& x, I dim, bool keepdim = false) {
  return mean(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, keepdim);
}
template <class T, class I, detail::IfAxis<I> = 0>
Var<T> var(const Var<T>& x, I dim, std::int64_t correction = 1, bool keepdim = false) {
  return var(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, correction, keepdim);
}
template <class T, class I, detail::IfAxis<I> = 0>
Var<T> logsumexp(const Var<T>& x, I dim, bool keepdim = false) {
  return logsumexp(x, std::vector<std::int64_t>{static_cast<std::int64_t>(dim)}, keepdim);
}

}  // namespace xtgrad
