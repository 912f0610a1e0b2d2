#pragma once
// The create_graph rules (grad_rule.hpp) of cross_entropy and nll_loss
// (internal): their backward, as written in cross_entropy.hpp, with
// differentiable ops, so that the gradient of a loss can be differentiated
// again (a gradient penalty, a Hessian-vector product). With g_n the upstream
// gradient of row n times its weight (dy_n, dy or dy / count as the reduction
// says) and p = softmax(x) recomputed as an op:
//   class targets:        dx = g * (p - q),  q_nc = (1 - eps) [c == t_n] + eps / C
//   probability targets:  dx = g * (p * sum_c q' - q'),  q' = (1 - eps) q + eps / C
//                         dq = -g * (1 - eps) * log_softmax(x)
//   nll_loss:             dz = g * (-[c == t_n])
// Rows whose target is ignore_index get 0 (their g is multiplied by a 0/1
// mask). q and the one-hot are constants (no gradient): the targets are data.

#include "../indices.hpp"
#include "../tape.hpp"
#include "cross_entropy.hpp"

namespace xtgrad::detail {

// `target` as the op saw it ([N], or 0-d for a single row [C]).
template <class T>
void cross_entropy_class_rule(GradSink<T>& s, const Indices& target,
                              const CrossEntropyOptions& options);
template <class T>
void cross_entropy_probs_rule(GradSink<T>& s, const CrossEntropyOptions& options);
template <class T>
void nll_loss_rule(GradSink<T>& s, const Indices& target, const NllLossOptions& options);

}  // namespace xtgrad::detail
