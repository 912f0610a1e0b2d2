#pragma once
// Losses. Results have shape [] (0-d, one element), ready for tape.backward(y),
// unless a reduction of Reduction::none asks for one loss per row.
//
// mse: mean squared error, torch.nn.functional.mse_loss(prediction, target)
// with reduction='mean':
//   mse(p, t) = sum_i (p_i - t_i)^2 / n
//   d/dp_i = 2 (p_i - t_i) dy / n      d/dt_i = -2 (p_i - t_i) dy / n
// p and t must have exactly the same shape, any shape: unlike PyTorch, which
// broadcasts them with only a warning (usually a bug such as [N] against
// [N, 1]), a mismatch throws std::invalid_argument naming 'mse', 'target' and
// both shapes. Empty tensors give NaN (0 / 0), as in PyTorch. The target is
// usually data recorded with requires_grad = false: it then gets no gradient
// and costs no work. The sum accumulates in double, for float too.

#include "../tape.hpp"

namespace xtgrad {

// How a loss over rows is reduced (torch's `reduction` argument): none keeps
// one loss per row, mean averages them (over the rows that count: see each
// loss), sum adds them. The class-target losses are in cross_entropy.hpp.
enum class Reduction { none, mean, sum };

template <class T>
Var<T> mse(const Var<T>& prediction, const Var<T>& target);

}  // namespace xtgrad
