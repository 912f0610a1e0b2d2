#pragma once
// The attention modules: MultiheadAttention (multihead_attention.hpp,
// torch.nn.MultiheadAttention) and CausalSelfAttention
// (causal_self_attention.hpp, the attention of GPT-2 and LLaMA decoders).
// Both compose engine ops (ops/attention.hpp: scaled_dot_product_attention,
// packed_qkv_attention; ops/rotary.hpp; ops/linear.hpp, shape, slice); the
// derivatives are those ops'. Head h of a projection of width H * Dh is
// columns h*Dh .. (h+1)*Dh - 1; heads are laid out [B, H, T, Dh] between the
// projections, and the attention is softmax(q k^T / sqrt(Dh) + mask) v.
//
// This header includes both.

#include "causal_self_attention.hpp"
#include "multihead_attention.hpp"
