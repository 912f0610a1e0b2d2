#pragma once
// The create_graph rules of scaled_dot_product_attention and
// packed_qkv_attention (internal; ops/attention.cpp sets them, and
// ops/attention_rule.cpp composes them): the fused backward written again
// with differentiable ops, so that its result can be differentiated again.
//
// With S the scores, P = softmax(S), P' = dropout(P) and dy the upstream
// gradient (attention.hpp states the forward):
//   S  = scale q k^T, then + A (additive mask) and -inf where hidden   [.., Tq, Tk]
//   P  = softmax(S), 0 on a row that sees no key                         [.., Tq, Tk]
//   dv = P'^T dy,  dP = dropout(dy v^T),  dS = P (dP - rowsum(dP P))
//   dq = scale dS k,  dk = scale dS^T q
// dropout(.) is ops/dropout's op on the [B, H, Tq, Tk] probabilities with the
// attention's key: the same mask and scaling as the fused kernels. With GQA, k
// and v are expanded to the query heads, and dk, dv summed back over each group.

#include <array>
#include <cstddef>
#include <memory>

#include "../../kernels/attention_problem.hpp"  // first (through simd.hpp): see simd.hpp
#include "../attention.hpp"

namespace xtgrad::detail {

// What a rule keeps of its node: the problem's sizes and scalars, and the
// mask the user gave (null: none), whose strides the problem holds.
template <class T>
struct AttentionRule {
  attention::Problem<T> problem;
  std::shared_ptr<const AttentionMask<T>> mask;
  double dropout_p = 0.0;
};

// dq, dk, dv of scaled_dot_product_attention(q, k, v) for dy, as Vars.
template <class T>
std::array<Var<T>, 3> attention_gradients(const AttentionRule<T>& rule, const Var<T>& q,
                                          const Var<T>& k, const Var<T>& v, const Var<T>& dy);

// dqkv [.., T, 3C] of packed_qkv_attention(qkv, n_heads) for dy [.., T, C].
template <class T>
Var<T> packed_attention_gradient(const AttentionRule<T>& rule, const Var<T>& qkv, const Var<T>& dy);

}  // namespace xtgrad::detail
