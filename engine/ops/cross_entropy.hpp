#pragma once
// Classification losses: torch.nn.functional.cross_entropy (class and
// probability targets) and torch.nn.functional.nll_loss, for logits
// [N, C] with targets [N], or one row [C] with a 0-d target.
//
// cross_entropy with class targets t_n in [0, C) (llm.c's fused softmax and
// cross-entropy: forward keeps one log-sum-exp per row, not the probabilities):
//   lse_n = log sum_c exp(x_nc)      p_nc = exp(x_nc - lse_n)
//   l_n   = (1 - eps) (lse_n - x_n,t_n) + eps (lse_n - (1/C) sum_c x_nc)
//   dx_nc = g_n (p_nc - (1 - eps) [c == t_n] - eps / C)
// eps = label_smoothing in [0, 1]. A target equal to ignore_index gives
// l_n = 0 and no gradient (also with smoothing, as torch). g_n is the
// upstream gradient of row n times its weight: 1 (sum), 1 / (number of
// rows not ignored) (mean), dy_n (none, result [N]). With every target
// ignored, mean is NaN (0 / 0) with a zero gradient, sum is 0, as torch 1.13.
//
// cross_entropy with probability targets q [N, C] (q's shape; ignore_index
// does not apply), smoothed as q' = (1 - eps) q + eps / C:
//   l_n = -sum_c q'_nc log p_nc = lse_n sum_c q'_nc - sum_c q'_nc x_nc
//   dx_nc = g_n (p_nc sum_k q'_nk - q'_nc)    dq_nc = g_n (1 - eps) (lse_n - x_nc)
// and mean divides by N, as torch. q gets a gradient only when it requires one.
//
// nll_loss on log-probabilities z [N, C]:  l_n = -z_n,t_n,  dz_n,t_n = -g_n,
// with ignore_index and the reductions as above.
//
// Shapes: logits [N, C] with target [N], or [C] with a 0-d target (then
// every reduction gives a 0-d result); N = 0 gives NaN (mean), 0 (sum) or
// [0] (none). The K-dimensional form ([N, C, d1, ...]) is not supported
// (std::invalid_argument): move the class axis last and flatten to [N, C].
// Targets outside [0, C) other than ignore_index throw std::invalid_argument
// naming the flat position and the value, before anything is read; so do
// label_smoothing outside [0, 1] and a Reduction outside the enumeration.
// Sums accumulate in double. Non-finite logits propagate as IEEE says.

#include <cstdint>

#include "../indices.hpp"
#include "../tape.hpp"
#include "loss.hpp"

namespace xtgrad {

struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
};

struct NllLossOptions {
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};

template <class T>
Var<T> cross_entropy(const Var<T>& logits, const Indices& target, CrossEntropyOptions options = {});
template <class T>
Var<T> cross_entropy(const Var<T>& logits, const Var<T>& target_probs,
                     CrossEntropyOptions options = {});
template <class T>
Var<T> nll_loss(const Var<T>& log_probs, const Indices& target, NllLossOptions options = {});

}  // namespace xtgrad
