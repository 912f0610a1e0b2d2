// The LibTorch side of bench_attention's attention rows: attention composed
// of LibTorch 1.13's ops, its fastest form on CPU (PyTorch 1.13 has no fused
// CPU kernel; its private _scaled_dot_product_attention composes the same
// ops). Two choices make it as fast as that composition gets: q is scaled
// before the product ([T, Dh] elements, not [T, T]), and the causal mask is
// applied in place (masked_fill_, legal on matmul's result, which autograd
// does not keep), so that no second [T, T] tensor is made.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "attention_cases.hpp"
#include "attention_libtorch.hpp"

namespace xtgrad::bench {

torch::Tensor composed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& blocked) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q * scale, k.transpose(-2, -1));  // [.., T, T]
  if (blocked.defined()) scores.masked_fill_(blocked, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

torch::Tensor causal_blocked_mask(std::int64_t tokens) {
  return torch::ones({tokens, tokens}, torch::kBool).triu(1);
}

namespace {

struct AttentionState {
  torch::Tensor q, k, v, d_out, blocked;

  void run() {
    for (torch::Tensor* t : {&q, &k, &v}) t->mutable_grad() = torch::Tensor();  // set_to_none
    composed_attention(q, k, v, blocked).backward(d_out);
  }
};

}  // namespace

Runner libtorch_attention(const AttentionShape& shape) {
  auto state = std::make_shared<AttentionState>();
  const std::vector<std::int64_t> size{
      static_cast<std::int64_t>(shape.batch), static_cast<std::int64_t>(shape.heads),
      static_cast<std::int64_t>(shape.tokens), static_cast<std::int64_t>(shape.head_dim)};
  for (torch::Tensor* t : {&state->q, &state->k, &state->v})
    *t = (torch::rand(size) * 2 - 1).requires_grad_(true);
  state->d_out = torch::rand(size) * 2 - 1;
  // A buffer made once, as nanoGPT's `bias`: true = blocked (key after query).
  if (shape.causal) state->blocked = causal_blocked_mask(static_cast<std::int64_t>(shape.tokens));
  return [state] { state->run(); };
}

}  // namespace xtgrad::bench
