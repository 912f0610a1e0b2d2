#pragma once
// LibTorch's composed attention, shared by bench_attention's attention rows
// and its LibTorch GPT (LibTorch headers: only for XTGRAD_BENCH_LIBTORCH
// translation units).

#include <torch/torch.h>

#include <cstdint>

namespace xtgrad::bench {

// softmax(q k^T / sqrt(Dh), masked) v over the last two axes, q, k, v
// [..., T, Dh]; `blocked` [T, T] (true = may not attend), or undefined for no mask.
torch::Tensor composed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& blocked);

// [T, T], true strictly above the diagonal: the keys a causal query may not see.
torch::Tensor causal_blocked_mask(std::int64_t tokens);

}  // namespace xtgrad::bench
