#pragma once
// clip_grad_norm: rescales gradients so that their joint norm is at most
// max_norm; the rule of torch.nn.utils.clip_grad_norm_. Over every parameter
// with a gradient (has_grad; the others are neither counted nor changed):
//
//   total     = ( sum over all their elements |g|^norm_type )^(1 / norm_type)
//               (norm_type = infinity: total = max |g|)
//   clip_coef = max_norm / (total + 1e-6)
//   if clip_coef < 1:  g <- g * clip_coef      (otherwise nothing changes)
//
// Returns total, computed in double before any scaling; 0 when no parameter
// has a gradient. When total is not finite (an inf or NaN gradient), the
// gradients are left unchanged and total is returned so that the caller can
// skip the step (PyTorch would multiply them by 0 or NaN, or throw with
// error_if_nonfinite).
//
// Throws std::invalid_argument for a null pointer, max_norm < 0 or NaN,
// norm_type <= 0 or NaN, or a gradient whose shape differs from its value's.

#include <limits>
#include <vector>

#include "../engine/parameter.hpp"

namespace xtgrad::optim {

inline constexpr double k_infinity_norm = std::numeric_limits<double>::infinity();

template <class T>
double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm,
                      double norm_type = 2.0);

}  // namespace xtgrad::optim
