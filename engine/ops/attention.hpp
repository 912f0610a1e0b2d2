#pragma once
// Scaled dot-product attention, fused (torch.nn.functional.
// scaled_dot_product_attention of PyTorch 2; the kernels are FlashAttention-2,
// Dao 2023, on the CPU: kernels/attention_kernels.hpp; the backward closure
// is in attention.cpp).
//
// Per batch b and query head h, with kv head g = h / (H / Hkv):
//   S = scale * q[b, h] . k[b, g]^T + A        [Tq, Tk]   (A: additive mask, or
//       -inf where a boolean mask is false or is_causal hides key j > i)
//   P = softmax(S) along keys                   [Tq, Tk]
//   P' = P * m / (1 - dropout_p)                [Tq, Tk]   (m: the dropout mask; P' = P at p = 0)
//   y[b, h] = P' . v[b, g]                      [Tq, Dv]
// Derivatives, with dy [Tq, Dv] the upstream gradient and D_i = sum_d dy_id y_id:
//   dv[b, g] += P'^T . dy                        [Tk, Dv]   (summed over the heads of g)
//   dP' = dy . v^T,  dP = dP' * m / (1 - p)      [Tq, Tk]
//   dS = P * (dP - D)                            [Tq, Tk]   (softmax rule: sum_j P_ij dP_ij = D_i)
//   dq[b, h] = scale * dS . k                    [Tq, Dh]
//   dk[b, g] += scale * dS^T . q                 [Tk, Dh]   (summed over the heads of g)
// No [Tq, Tk] matrix is ever stored: the forward keeps per query row the
// log-sum-exp L_i of S (the undropped softmax's, as PyTorch) and backward
// recomputes P = exp(S - L) tile by tile. Memory: O(B H T D).
//
// Shapes: q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] ->
// y [B, H, Tq, Dv]; or all three unbatched, [H, T, D] or [T, D]. Hkv == H
// unless enable_gqa, then Hkv must divide H (grouped-query attention,
// PyTorch 2.5). Dv may differ from Dh. scale defaults to 1 / sqrt(Dh).
//
// Masks: an AttentionMask is empty, boolean (true = may attend) or additive
// (added to the scaled scores; -inf blocks). It broadcasts with NumPy rules
// to [B, H, Tq, Tk] (or [H, Tq, Tk], [Tq, Tk] for unbatched inputs): e.g.
// [Tq, Tk], [B, 1, Tq, Tk], [1, H, 1, Tk]; it is read through broadcast
// strides, never expanded. is_causal hides key j from query i when j > i
// (top-left aligned, also for Tq != Tk); it may be combined with a mask (both
// apply). A query row that sees no key (fully masked) gets output 0 and
// passes gradient 0 to q, k and v (PyTorch >= 2.5 gives 0 too; the plain
// softmax would give NaN).
//
// Dropout: with dropout_p > 0 the probabilities are dropped and scaled by
// 1 / (1 - dropout_p); element [b, h, i, j] is kept by exactly the mask that
// dropout(x [B, H, Tq, Tk], dropout_p, true, dropout_key) (ops/dropout.hpp)
// draws at that element: counter dropout_key.first_element + ((b * H + h) *
// Tq + i) * Tk + j. Backward regenerates it; nothing is stored.
//
// Errors (std::invalid_argument naming the function and the argument; tape
// misuse std::logic_error): ranks other than 2, 3, 4 or unequal; B, Dh, Tk or
// the kv heads of k and v that disagree; H not a multiple of Hkv, or Hkv != H
// without enable_gqa; a mask that does not broadcast; dropout_p outside
// [0, 1) or NaN; a scale that is not finite and > 0.
//
// Second derivatives (create_graph): the backward is also written as
// differentiable ops (matmul, softmax, masked_fill, dropout with the same
// mask; ops/support/attention_rule.hpp), equal to the fused kernel's to
// rounding; that pass stores the [B, H, Tq, Tk] probabilities, as composed
// attention does.
//
// Precision: at MatmulPrecision::bf16 (matmul_precision.hpp) float attention
// runs its block products (S, P V; dP, dV, dQ, dK) on bfloat16 operands with
// float sums where the build targets AVX512-BF16
// (kernels/attention_tiles_bf16.hpp); softmax, masks, dropout and every
// stored value stay float. The forward and the backward each read the
// precision when they run. attention_over_rows and double stay float.
//
// Cost: forward 2 B H Tq Tk (Dh + Dv) flops (2 products), backward about
// 2.5 times that (5 products, S recomputed), less with is_causal (key tiles
// a query tile cannot see are skipped), in the kernels' own register-blocked
// tiles (no BLAS), over the threads of threads.hpp; the result does not
// depend on the thread count. Measured at B H = 8, T = 1024, Dh = 64, float,
// one thread (AVX-512): forward and backward within 1.2 times the time of
// the same seven products per head through OpenBLAS's SkylakeX sgemm.

#include <cstddef>
#include <optional>
#include <utility>

#include <xtensor/xarray.hpp>

#include "../tape.hpp"
#include "dropout.hpp"

namespace xtgrad {

// One of: no mask; a boolean mask (true = may attend); an additive mask
// (added to the scaled scores; -inf blocks). Broadcastable to [B, H, Tq, Tk].
template <class T>
class AttentionMask {
 public:
  AttentionMask() = default;
  AttentionMask(xt::xarray<bool> keep)  // implicit on purpose
      : keep_(std::move(keep)), kind_(Kind::boolean) {}
  AttentionMask(xt::xarray<T> additive)  // implicit on purpose
      : additive_(std::move(additive)), kind_(Kind::additive) {}

  bool empty() const { return kind_ == Kind::none; }
  bool is_boolean() const { return kind_ == Kind::boolean; }
  bool is_additive() const { return kind_ == Kind::additive; }
  const xt::xarray<bool>& keep() const { return keep_; }
  const xt::xarray<T>& additive() const { return additive_; }

 private:
  enum class Kind { none, boolean, additive };
  xt::xarray<bool> keep_;
  xt::xarray<T> additive_;
  Kind kind_ = Kind::none;
};

template <class T>
Var<T> scaled_dot_product_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                    const AttentionMask<NoDeduce<T>>& mask = {},
                                    bool is_causal = false, double dropout_p = 0.0,
                                    std::optional<double> scale = std::nullopt,
                                    const DropoutKey& dropout_key = {}, bool enable_gqa = false);

// The fused-QKV fast path: qkv [B, T, 3C] (the output of one Linear(C, 3C):
// q = columns [0, C), k = [C, 2C), v = [2C, 3C), head h at columns
// h * Dh .. (h + 1) * Dh of each, Dh = C / n_heads) -> attention over n_heads
// heads -> [B, T, C] (heads merged back, head h at columns h * Dh ..). Equal
// to splitting, permuting to [B, H, T, Dh], scaled_dot_product_attention and
// permuting back, but q, k, v are read in place and the merged layout is
// written directly; backward writes dqkv [B, T, 3C] the same way. Also
// [T, 3C] -> [T, C]. Same mask (broadcast to [B, H, T, T], or [H, T, T]),
// causal and dropout semantics (dropout over the [B, H, T, T] probabilities).
// n_heads must be positive and divide C (std::invalid_argument naming 'n_heads').
template <class T>
Var<T> packed_qkv_attention(const Var<T>& qkv, std::size_t n_heads,
                            const AttentionMask<NoDeduce<T>>& mask = {}, bool is_causal = false,
                            double dropout_p = 0.0, std::optional<double> scale = std::nullopt,
                            const DropoutKey& dropout_key = {});

// Keys and values that live outside the tape (the KV cache of incremental
// decoding, whose buffers hold more rows than are filled), read where they
// are: row t of kv head g of batch b is at k + b * batch_stride + g *
// head_stride + t * head_dim (v alike), for t < length.
template <class T>
struct KeyValueRows {
  const T* k = nullptr;
  const T* v = nullptr;
  std::size_t batch = 0, kv_heads = 0, length = 0, head_dim = 0;
  std::size_t batch_stride = 0, head_stride = 0;  // in elements
};

// scaled_dot_product_attention(q, k, v, mask) with the default scale, no
// dropout and grouped-query heads allowed, k and v [B, Hkv, length, Dh] read
// in place from `kv`: the same kernel over the same values, so the same bits,
// without copying them into the tape. Inference only: on a tape that records,
// std::logic_error; the node's one parent is q and it has no backward.
// q [B, H, Tq, Dh] -> [B, H, Tq, Dh]; std::invalid_argument for a q of another
// rank, batch or head size than kv's, H not a multiple of Hkv, or a mask that
// does not broadcast to [B, H, Tq, length].
template <class T>
Var<T> attention_over_rows(const Var<T>& q, const KeyValueRows<NoDeduce<T>>& kv,
                           const AttentionMask<NoDeduce<T>>& mask = {});

}  // namespace xtgrad
