#include "moe_libtorch.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace xtgrad::bench {

std::function<void()> libtorch_moe_step(const MoeBenchShape& shape,
                                        const std::vector<std::vector<float>>& inputs,
                                        const std::vector<float>& dy) {
  struct State {
    MoeBenchShape shape;
    torch::nn::Linear gate{nullptr};
    std::vector<torch::nn::Linear> w1, w3, w2;
    std::vector<torch::Tensor> x;
    torch::Tensor dy;
    std::size_t call = 0;
  };
  auto s = std::make_shared<State>();
  s->shape = shape;
  const auto n = static_cast<std::int64_t>(shape.tokens);
  const auto c = static_cast<std::int64_t>(shape.c), h = static_cast<std::int64_t>(shape.hidden);
  const auto e_count = static_cast<std::int64_t>(shape.experts);
  const auto linear = [](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  s->gate = linear(c, e_count);
  for (std::int64_t e = 0; e < e_count; ++e) {
    s->w1.push_back(linear(c, h));
    s->w3.push_back(linear(c, h));
    s->w2.push_back(linear(h, c));
  }
  for (const std::vector<float>& x : inputs)
    s->x.push_back(torch::from_blob(const_cast<float*>(x.data()), {n, c}, torch::kFloat32)
                       .clone()
                       .requires_grad_(true));
  s->dy = torch::from_blob(const_cast<float*>(dy.data()), {n, c}, torch::kFloat32).clone();
  return [s] {
    const torch::Tensor hidden_states = s->x[s->call++ % s->x.size()];
    const auto k = static_cast<std::int64_t>(s->shape.k);
    const auto e_count = static_cast<std::int64_t>(s->shape.experts);
    // MixtralSparseMoeBlock.forward
    const torch::Tensor router_logits = s->gate(hidden_states);
    torch::Tensor routing_weights = torch::softmax(router_logits, 1, torch::kFloat);
    auto [top_weights, selected_experts] = torch::topk(routing_weights, k, -1);
    top_weights = top_weights / top_weights.sum(-1, true);
    torch::Tensor final_hidden_states = torch::zeros_like(hidden_states);
    const torch::Tensor expert_mask = torch::one_hot(selected_experts, e_count).permute({2, 1, 0});
    for (std::int64_t e = 0; e < e_count; ++e) {
      const std::vector<torch::Tensor> where = torch::where(expert_mask[e]);
      const torch::Tensor& idx = where[0];
      const torch::Tensor& top_x = where[1];
      const torch::Tensor current_state = hidden_states.index_select(0, top_x);
      const torch::Tensor g = s->w1[e](current_state);
      const torch::Tensor act = s->shape.gelu_tanh ? torch::gelu(g, "tanh") : torch::silu(g);
      const torch::Tensor current_hidden_states =
          s->w2[e](act * s->w3[e](current_state)) * top_weights.index({top_x, idx}).unsqueeze(1);
      final_hidden_states.index_add_(0, top_x, current_hidden_states);
    }
    final_hidden_states.backward(s->dy);
    // zero_grad(set_to_none = true) before the next step
    hidden_states.mutable_grad() = torch::Tensor();
    for (auto* list : {&s->w1, &s->w3, &s->w2})
      for (torch::nn::Linear& l : *list) l->weight.mutable_grad() = torch::Tensor();
    s->gate->weight.mutable_grad() = torch::Tensor();
  };
}

}  // namespace xtgrad::bench
