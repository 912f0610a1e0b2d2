#pragma once
// bench_moe's LibTorch side (its own translation unit: LibTorch headers are
// slow to compile and not warning-clean under -Wpedantic).

#include <cstddef>
#include <functional>
#include <vector>

namespace xtgrad::bench {

struct MoeBenchShape {
  std::size_t tokens, c, experts, k, hidden;
  bool gelu_tanh;  // the experts' gate activation: tanh GELU, else SiLU (SwiGLU)
};

// One forward + backward of Hugging Face's MixtralSparseMoeBlock, written as
// transformers writes it (router Linear, softmax, topk, renormalization,
// one_hot expert mask, then per expert torch.where, index the tokens, the
// expert w2(act(w1(x)) * w3(x)) times its routing weight, index_add_), on
// x [tokens, C] requiring its gradient, then backward from dy [tokens, C];
// the gradients are set to none before each call (zero_grad's default).
// Call i uses inputs[i % inputs.size()] ([tokens, C] each).
std::function<void()> libtorch_moe_step(const MoeBenchShape& shape,
                                        const std::vector<std::vector<float>>& inputs,
                                        const std::vector<float>& dy);

}  // namespace xtgrad::bench
