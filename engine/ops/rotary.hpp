#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer"), in the rotate_half
// convention of Hugging Face LLaMA (transformers/models/llama/modeling_llama.py:
// LlamaRotaryEmbedding, rotate_half, apply_rotary_pos_emb): the two halves of
// the head dimension, not neighbouring pairs, are rotated together.
//
//   x, y: [..., T, Dh], rank >= 2, Dh even, h = Dh / 2; the leading axes are a
//   batch (heads, batch), row t of axis -2 is at position p = position_offset + t.
//   inv_freq[i] = 1 / theta^(2i / Dh),  angle[p, i] = p * inv_freq[i],  i < h
//   cos[p] = cat(cos(angle[p]), cos(angle[p])),  sin[p] likewise      [Dh]
//   rotate_half(x) = cat(-x[..., h:], x[..., :h])
//   y = x * cos + rotate_half(x) * sin, that is, for i < h:
//     y[i]     = x[i] cos - x[i + h] sin,   y[i + h] = x[i + h] cos + x[i] sin
//   dx = dy * cos + rotate_half^T(dy * sin),  rotate_half^T(g) = cat(g[h:], -g[:h]):
//     dx[i]    = dy[i] cos + dy[i + h] sin, dx[i + h] = dy[i + h] cos - dy[i] sin
//   (the transpose, that is the inverse, rotation).
//
// inv_freq, the angles and their cos and sin are computed in double and then
// rounded to T; Hugging Face computes them in float32, so float results agree
// with it within float rounding of the angle (which grows with the position),
// double results with Hugging Face's formula evaluated in float64.
//
// Used on queries and keys [B, H, T, Dh] before attention; with a KV cache,
// position_offset is the number of positions already cached. One pass over x
// forward and one over dy backward, over rows in parallel when large; the
// [T, h] cos and sin tables are kept in the node for backward, and the last
// call's tables are reused by the next call on the same thread with the same
// T, Dh, position_offset and theta (the queries and keys of every layer).
//
// Frequency scaling (Hugging Face's rope_scaling, transformers/modeling_rope_utils.py),
// applied to inv_freq before the angles; RopeScaling{} leaves it as above:
//   linear  inv_freq[i] / factor (positions interpolated by 1 / factor)
//   llama3  (_compute_llama3_parameters) with wavelen = 2 pi / inv_freq[i],
//           low = original_max_position_embeddings / low_freq_factor,
//           high = original_max_position_embeddings / high_freq_factor:
//             wavelen > low            inv_freq[i] / factor
//             high <= wavelen <= low   (1 - s) inv_freq[i] / factor + s inv_freq[i],
//                                      s = (original_max_position_embeddings / wavelen
//                                           - low_freq_factor) / (high_freq_factor - low_freq_factor)
//             wavelen < high           inv_freq[i]
//
// Errors (std::invalid_argument naming apply_rotary and the argument): rank
// < 2, odd Dh, theta not finite or <= 0, a position_offset whose last
// position offset + T - 1 overflows std::size_t; a scaling factor not finite or <= 0,
// llama3 factors with 0 < low_freq_factor < high_freq_factor not holding or
// original_max_position_embeddings not finite or <= 0.

#include <cstddef>

#include "../tape.hpp"

namespace xtgrad {

struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double original_max_position_embeddings = 8192.0;      // llama3
};

template <class T>
Var<T> apply_rotary(const Var<T>& x, std::size_t position_offset = 0, double theta = 10000.0);
template <class T>
Var<T> apply_rotary(const Var<T>& x, std::size_t position_offset, double theta,
                    const RopeScaling& scaling);

namespace detail {
// The scaling's checks of apply_rotary, naming `function` and the argument
// `arg` (a module checks its options with it before anything is built).
void check_rope_scaling(const char* function, const char* arg, const RopeScaling& scaling);
}  // namespace detail

}  // namespace xtgrad
