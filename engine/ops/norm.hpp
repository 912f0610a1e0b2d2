#pragma once
// Normalization over the last axis: layer_norm and rms_norm. x is [..., D]
// (any number of leading axes, N = their product rows, 0 rows allowed); each
// row of D elements is normalized on its own.
//
// layer_norm (Ba, Kiros & Hinton 2016; torch.nn.functional.layer_norm with
// normalized_shape = [D], biased variance as torch):
//   mean = sum_j x_j / D,  var = sum_j (x_j - mean)^2 / D,  rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) * rstd,   y = xhat * w + b
// Backward (as llm.c's layernorm_backward), with dxhat = dy * w:
//   dx = rstd * (dxhat - mean_j(dxhat) - xhat * mean_j(dxhat * xhat))
//   dw = sum over rows of dy * xhat,   db = sum over rows of dy
//
// rms_norm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization";
// LLaMA's RMSNorm, whose eps 1e-6 is the default here; torch 1.13 has none):
//   rstd = 1 / sqrt(sum_j x_j^2 / D + eps),   xhat = x * rstd,   y = xhat * w
// Backward, with dxhat = dy * w:
//   dx = rstd * (dxhat - xhat * mean_j(dxhat * xhat)),   dw = sum over rows of dy * xhat
//
// Shapes: x, y, dy, dx [..., D]; weight, bias, dw, db [D], each optional (an
// absent weight is 1, an absent bias 0). Row statistics are computed in double
// (two passes: the mean, then the squared deviations), so rows such as
// 1000 + 1e-2 * noise keep float accuracy; a constant row has var 0 and gives
// y = b with finite gradients (for eps > 0). Backward keeps only the input and
// one mean and one rstd per row (layer_norm) or one rstd per row (rms_norm).
// Zero rows give an empty y and zero dw, db.
//
// Throws std::invalid_argument for a 0-d x, a weight or bias that is not [D]
// (naming the argument and both shapes), and an eps that is negative, NaN or
// infinite. eps = 0 is allowed: then a constant row (layer_norm) or an all-zero
// row (rms_norm) gives NaN, as torch does.

#include <optional>

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> layer_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight = {},
                  const std::optional<Var<NoDeduce<T>>>& bias = {}, double eps = 1e-5);

template <class T>
Var<T> rms_norm(const Var<T>& x, const std::optional<Var<NoDeduce<T>>>& weight = {},
                double eps = 1e-6);

}  // namespace xtgrad
