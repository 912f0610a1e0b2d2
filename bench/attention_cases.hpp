#pragma once
// What bench_attention measures, each as a factory that allocates and
// initializes everything (inputs, model, optimizer, output buffers) and
// returns a Runner doing one iteration, as cases.hpp's.
//
// Attention, float32: q, k, v [B, H, T, Dh] -> softmax(q k^T / sqrt(Dh)
// (+ causal mask)) v, forward and backward to q, k and v from a fixed
// upstream gradient dO [B, H, T, Dh]:
//   xtgrad    scaled_dot_product_attention (engine/ops/attention.hpp)
//   LibTorch  composed: matmul(q * scale, k^T), masked_fill_ with a [T, T]
//             bool mask (causal), softmax, matmul(p, v), backward through
//             autograd; LibTorch 1.13 has no fused attention on CPU
//   floor     per head, the 2 forward and 5 backward [T, T] x Dh products
//             through cblas_sgemm on preallocated buffers (attention_floor.cpp)
//
// GPT training step, float32: forward, cross_entropy (mean over B * T),
// backward, AdamW step, gradients reset; GPT-2 style (learned positions,
// LayerNorm, gelu_tanh FFN of 4C, biases, lm_head tied to wte, no dropout).

#include <cstddef>
#include <functional>
#include <string>

#include "harness.hpp"

namespace xtgrad::bench {

struct AttentionShape {
  std::size_t batch = 1;
  std::size_t heads = 8;
  std::size_t tokens = 256;
  std::size_t head_dim = 64;
  bool causal = false;
};

// Multiply-adds of one forward + backward (2 + 5 products of T x T x Dh per
// head; the causal triangle of each at T (T + 1) / 2 rows x keys), times two.
double attention_flops(const AttentionShape& shape);

struct GptShape {
  std::string name;  // the row's label
  std::size_t vocab_size = 0, block_size = 0, n_layer = 0, n_head = 0, n_embd = 0;
  std::size_t batch = 0, tokens = 0;  // tokens <= block_size
};

// The GPT training steps both sides run with.
inline constexpr double k_gpt_lr = 3e-4;
inline constexpr double k_gpt_weight_decay = 0.1;

// One GPT training step in two parts over one model, for a caller that
// measures them apart (bench_checkpoint): a full step is forward_backward
// then optimizer_step.
struct GptStepParts {
  Runner forward_backward;  // forward, cross_entropy, backward
  Runner optimizer_step;    // AdamW step, gradients reset
  // xtgrad: the bytes of the values the tape held after the last forward
  // (what backward reads); empty for LibTorch.
  std::function<double()> kept_bytes;
};

// ---- xtgrad (attention_xtgrad.cpp, gpt_xtgrad.cpp) ----

Runner xtgrad_attention(const AttentionShape& shape);
// modules/gpt.hpp's GPT<float> with optim::AdamW over all its parameters;
// checkpoint_every: GPT::set_recompute_every (0: off).
Runner xtgrad_gpt_step(const GptShape& shape);
GptStepParts xtgrad_gpt_step_parts(const GptShape& shape, std::size_t checkpoint_every);
// The per-op profile (engine/profiler.hpp) of `steps` training steps after
// `warmup` untimed ones, as Profiler::table() prints it.
std::string xtgrad_gpt_profile(const GptShape& shape, int warmup, int steps);

// ---- the floor (attention_floor.cpp) ----

// Per head h, with Q, K, V, dO [T, Dh] and S, dS [T, T]:
//   forward  S = Q K^T, O = S V
//   backward S = Q K^T (recomputed, as a fused kernel does), dS = dO V^T,
//            dV = S^T dO, dQ = dS K, dK = dS^T Q
// (the softmax and its gradient, passes over S and dS, are not counted).
// Causal: the same products on blocks of query rows, each against the keys
// up to its last row only (the triangle plus half a block per row block).
// OpenBLAS threads inside each product (xtgrad::set_num_threads sets them).
Runner attention_floor(const AttentionShape& shape);

// ---- LibTorch (attention_libtorch.cpp, gpt_libtorch.cpp; XTGRAD_BENCH_LIBTORCH) ----

#ifdef XTGRAD_BENCH_LIBTORCH
Runner libtorch_attention(const AttentionShape& shape);
// The same GPT in torch::nn (Embedding, LayerNorm, Linear, composed causal
// attention as libtorch_attention's, gelu tanh), torch::optim::AdamW.
Runner libtorch_gpt_step(const GptShape& shape);
GptStepParts libtorch_gpt_step_parts(const GptShape& shape);
#endif

}  // namespace xtgrad::bench
