// Profiler::cost_model: the FLOPs and bytes of one node, from shapes alone.
//
// GEMM ops (FLOPs, 2 M N K per GEMM, the count of torch.profiler's
// with_flops; bias adds and fused activations are not counted):
//   linear(x [..., K], W, b), matmul(a [..., K], b), activation_linear(h
//   [..., K], W, b), gated_linear(u [..., K], g, W, b): the forward is one
//   GEMM, 2 * y.size() * K. The backward is one such GEMM per gradient it
//   computes: the input's (da = dy . W, shared by u and g) and the weight's.
// Elementwise ops (bytes, the least memory traffic: every operand read once,
// the result written once): the forward reads its operands and writes y; the
// backward reads dy and the operands (or the saved output, of the same size)
// and writes the gradient of each operand that requires one.
#include <algorithm>
#include <array>
#include <string_view>

#include "profiler.hpp"
#include "tape.hpp"

namespace xtgrad {

namespace {

// The GEMM ops, each with the parent positions of its input(s) and weight.
struct GemmOp {
  std::string_view name;
  std::size_t inputs;  // parents [0, inputs) are the GEMM's left operand (u and g for gated)
  std::size_t weight;  // the parent that is the GEMM's right operand
};
constexpr std::array<GemmOp, 4> k_gemm_ops{{
    {"linear", 1, 1},
    {"matmul", 1, 1},
    {"activation_linear", 1, 1},
    {"gated_linear", 2, 2},
}};

// Every op whose forward and backward are one memory-bound pass each.
constexpr std::array<std::string_view, 28> k_elementwise_ops{{
    "add",        "sub",  "mul",       "div",          "scale", "add_scalar", "rsub",
    "div_scalar", "rdiv", "exp",       "log",          "sqrt",  "rsqrt",      "tanh",
    "sigmoid",    "abs",  "square",    "pow",          "clamp", "clamp_min",  "clamp_max",
    "relu",       "gelu", "gelu_tanh", "gelu_sigmoid", "silu",  "gated",      "dropout",
}};

}  // namespace

template <class T>
Profiler::Cost Profiler::cost_model(const Tape<T>& tape, std::size_t index, bool backward) {
  const std::string_view op = tape.node_op(index);
  const std::size_t parents = tape.node_parent_count(index);
  const double y_size = double(tape.value(index).size());

  for (const GemmOp& g : k_gemm_ops) {
    if (op != g.name || parents <= g.weight) continue;
    const Shape& left = tape.value(tape.node_parent(index, 0)).shape();
    const double k = left.empty() ? 1.0 : double(left.back());
    const double gemm = 2.0 * y_size * k;
    if (!backward) return {gemm, 0.0};
    bool input_grad = false;
    for (std::size_t p = 0; p < g.inputs; ++p)
      input_grad = input_grad || tape.requires_grad(tape.node_parent(index, p));
    const bool weight_grad = tape.requires_grad(tape.node_parent(index, g.weight));
    return {gemm * (double(input_grad) + double(weight_grad)), 0.0};
  }

  if (std::find(k_elementwise_ops.begin(), k_elementwise_ops.end(), op) == k_elementwise_ops.end())
    return {};
  double elements = y_size;  // y written (forward) or dy read (backward)
  for (std::size_t p = 0; p < parents; ++p) {
    const std::size_t parent = tape.node_parent(index, p);
    const double size = double(tape.value(parent).size());
    elements += size;  // the operand (or the saved output) read
    if (backward && tape.requires_grad(parent)) elements += size;  // its gradient written
  }
  return {0.0, elements * double(sizeof(T))};
}

template Profiler::Cost Profiler::cost_model(const Tape<float>&, std::size_t, bool);
template Profiler::Cost Profiler::cost_model(const Tape<double>&, std::size_t, bool);

}  // namespace xtgrad
