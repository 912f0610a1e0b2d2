#pragma once
// Reductions of a whole tensor to a scalar (torch.sum and torch.mean without
// a dim argument).
//
//   sum(x)  = sum_i x_i          d/dx_i = dy
//   mean(x) = sum_i x_i / n      d/dx_i = dy / n      (n = number of elements)
//
// x may have any shape, 0-d and empty included. The result has shape []
// (0-d, one element), as in PyTorch, so tape.backward(y) applies directly and
// y broadcasts against any tensor in add/sub/mul. The sum of an empty tensor
// is 0; the mean of an empty tensor is NaN (0 / 0), as torch.mean returns.
// Sums accumulate in double, for float inputs too, and are rounded to T once.

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> sum(const Var<T>& x);
template <class T>
Var<T> mean(const Var<T>& x);

}  // namespace xtgrad
