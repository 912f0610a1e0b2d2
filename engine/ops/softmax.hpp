#pragma once
// softmax and log_softmax along one axis (torch.softmax(x, dim) and
// torch.log_softmax(x, dim)).
//
//   softmax(x)_j     = y_j = exp(x_j - m) / sum_k exp(x_k - m)       m = max_k x_k
//   log_softmax(x)_j = y_j = (x_j - m) - log sum_k exp(x_k - m)
//   softmax:      dx_j = y_j (dy_j - sum_k dy_k y_k)
//   log_softmax:  dx_j = dy_j - exp(y_j) sum_k dy_k
// with j and k running along axis `dim` (the other axes index independent
// rows). Subtracting the row maximum makes logits of +-1000 safe. Backward
// reads only the saved output y (llm.c's softmax backward), never x.
//
// x: any shape of rank >= 1; dim in [-rank, rank), negative counting from the
// end (std::invalid_argument naming the op, 'dim' and the range otherwise; a
// 0-d x has no axis). The result has x's shape; empty rows give empty
// results. As in torch: an entry of -inf gets probability 0 (log-probability
// -inf); a row whose entries are all -inf, or that holds +inf or NaN, is NaN
// throughout (its maximum leaves inf - inf).
//
// Cost: the last axis is contiguous rows (a max pass, then one exp pass that
// writes y, then one scale pass over y, all while the row is in L1); another
// axis is walked in blocks of up to 64 neighbouring rows at once. Sums
// accumulate with float-rounding accuracy (kernels/softmax_kernels.hpp).

#include <cstdint>

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> softmax(const Var<T>& x, std::int64_t dim = -1);
template <class T>
Var<T> log_softmax(const Var<T>& x, std::int64_t dim = -1);

}  // namespace xtgrad
