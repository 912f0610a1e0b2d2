// The cost model of Profiler::cost_model: the FLOPs and bytes of one node,
// from shapes alone.
//
// GEMM ops (FLOPs, 2 M N K per GEMM, the count of torch.profiler's
// with_flops; bias adds and fused activations are not counted):
//   linear(x [..., K], W, b), matmul(a [..., K], b), activation_linear(h
//   [..., K], W, b), gated_linear(u [..., K], g, W, b), low_rank_linear(x
//   [..., K], W, b, h, B) (its rank-r product, 2 * y.size() * r, not
//   counted): the forward is one GEMM, 2 * y.size() * K. The backward is one
//   such GEMM per gradient it computes: the input's (da = dy . W, shared by u
//   and g) and the weight's.
// Attention (FLOPs, as torch.utils.flop_counter counts
// scaled_dot_product_attention: sdpa_flop_count and
// sdpa_backward_flop_count of torch/utils/flop_counter.py): with q
// [..., Tq, Dh], k [..., Tk, Dh], v [..., Tk, Dv] and N = B H Tq query rows,
// the forward is the two products S = q k^T and y = P v, 2 N Tk (Dh + Dv)
// (4 B H Tq Tk D when Dh = Dv = D); the backward is twice that, the four
// products dv = P^T dy, dP = dy v^T, dq = dS k, dk = dS^T q (the recomputed
// S is not counted, nor is the causal triangle skipped, as torch). Packed,
// qkv [..., T, 3C] -> y [..., T, C]: N Dh = B T C, so 4 B T T C forward.
// Elementwise ops (bytes, the least memory traffic: every operand read once,
// the result written once): the forward reads its operands and writes y; the
// backward reads dy and the operands (or the saved output, of the same size)
// and writes the gradient of each operand that requires one; the mask ops,
// rotary embedding and the activation derivatives are counted so too.
#include "profiler_cost.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include "tape.hpp"

namespace xtgrad::detail {

namespace {

// The GEMM ops: linear, matmul, activation_linear and low_rank_linear read
// their input at parent 0 and their weight at parent 1; gated_linear reads
// u, g at 0, 1 and the weight at 2.
constexpr std::array<std::string_view, 4> k_gemm_ops{
    {"linear", "matmul", "activation_linear", "low_rank_linear"}};
constexpr std::string_view k_gated_gemm_op = "gated_linear";

// Every op whose forward and backward are one memory-bound pass each.
constexpr std::array<std::string_view, 28> k_elementwise_ops{{
    "add",        "sub",  "mul",       "div",          "scale", "add_scalar", "rsub",
    "div_scalar", "rdiv", "exp",       "log",          "sqrt",  "rsqrt",      "tanh",
    "sigmoid",    "abs",  "square",    "pow",          "clamp", "clamp_min",  "clamp_max",
    "relu",       "gelu", "gelu_tanh", "gelu_sigmoid", "silu",  "gated",      "dropout",
}};

// The same model for the mask ops (ops/mask; the boolean mask is not
// counted), rotary embedding (ops/rotary; its cos and sin tables are not
// counted) and the activation derivatives (ops/activation_derivatives).
constexpr std::array<std::string_view, 16> k_selection_ops{{
    "masked_fill",
    "where",
    "tril",
    "triu",
    "apply_rotary",
    "apply_rotary_inverse",
    "relu_derivative",
    "gelu_derivative",
    "gelu_tanh_derivative",
    "gelu_sigmoid_derivative",
    "silu_derivative",
    "relu_second_derivative",
    "gelu_second_derivative",
    "gelu_tanh_second_derivative",
    "gelu_sigmoid_second_derivative",
    "silu_second_derivative",
}};

// The fused attention ops: q, k, v at parents 0, 1, 2, or qkv packed at 0.
constexpr std::string_view k_attention_op = "scaled_dot_product_attention";
constexpr std::string_view k_packed_attention_op = "packed_qkv_attention";

template <class List>
bool contains(const List& list, std::string_view op) {
  return std::find(list.begin(), list.end(), op) != list.end();
}

}  // namespace

CostClass cost_class(std::string_view op) {
  if (contains(k_gemm_ops, op)) return CostClass::gemm;
  if (op == k_gated_gemm_op) return CostClass::gated_gemm;
  if (contains(k_elementwise_ops, op) || contains(k_selection_ops, op))
    return CostClass::elementwise;
  if (op == k_attention_op || op == k_packed_attention_op) return CostClass::attention;
  return CostClass::none;
}

template <class T>
ProfileCost node_cost(CostClass c, const Tape<T>& tape, std::size_t index, bool backward) {
  const std::size_t parents = tape.node_parent_count(index);
  const double y_size = double(tape.value(index).size());
  if (c == CostClass::gemm || c == CostClass::gated_gemm) {
    const std::size_t inputs = c == CostClass::gemm ? 1 : 2, weight = inputs;
    if (parents <= weight) return {};
    const Shape& left = tape.value(tape.node_parent(index, 0)).shape();
    const double k = left.empty() ? 1.0 : double(left.back());
    const double gemm = 2.0 * y_size * k;  // [M, K] . [K, N]: M N = y.size()
    if (!backward) return {gemm, 0.0};
    bool input_grad = false;  // da = dy . W, one GEMM for u and g together
    for (std::size_t p = 0; p < inputs; ++p)
      input_grad = input_grad || tape.requires_grad(tape.node_parent(index, p));
    const bool weight_grad = tape.requires_grad(tape.node_parent(index, weight));
    return {gemm * (double(input_grad) + double(weight_grad)), 0.0};
  }
  if (c == CostClass::attention) {
    const Shape& first = tape.value(tape.node_parent(index, 0)).shape();
    double forward = 0.0;
    if (parents == 3 && first.size() >= 2) {  // q [..., Tq, Dh], v [..., Tk, Dv]
      const Shape& vs = tape.value(tape.node_parent(index, 2)).shape();
      double rows = 1.0;  // N = B H Tq
      for (std::size_t a = 0; a + 1 < first.size(); ++a) rows *= double(first[a]);
      const double keys = double(vs[vs.size() - 2]);
      forward = 2.0 * rows * keys * (double(first.back()) + double(vs.back()));  // q k^T, P v
    } else if (parents == 1 && first.size() >= 2) {  // qkv [..., T, 3C] -> y [..., T, C]
      forward = 4.0 * y_size * double(first[first.size() - 2]);  // 4 (B T C) T
    }
    return {backward ? 2.0 * forward : forward, 0.0};
  }
  if (c != CostClass::elementwise) return {};
  double elements = y_size;  // y written (forward) or dy read (backward)
  for (std::size_t p = 0; p < parents; ++p) {
    const std::size_t parent = tape.node_parent(index, p);
    const double size = double(tape.value(parent).size());
    elements += size;  // the operand (or the saved output) read
    if (backward && tape.requires_grad(parent)) elements += size;  // its gradient written
  }
  return {0.0, elements * double(sizeof(T))};
}

template ProfileCost node_cost(CostClass, const Tape<float>&, std::size_t, bool);
template ProfileCost node_cost(CostClass, const Tape<double>&, std::size_t, bool);

}  // namespace xtgrad::detail
