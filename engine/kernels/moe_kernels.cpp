#include "moe_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "activation_kernels.hpp"
#include "gemm.hpp"
#include "gemm_streaming.hpp"
#include "parallel.hpp"
#include "row_blocks.hpp"
#include "scratch.hpp"

namespace xtgrad::detail {

namespace {

template <class T>
MatrixRef<const T> matrix(const T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}
template <class T>
MatrixRef<T> matrix(T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}

}  // namespace

template <class T>
void moe_gather_rows(const MoeRouting& routing, std::size_t c, const T* x, T* x_rows) {
  const std::size_t k = routing.k;
  // x_rows[r, :] = x[source[r] / k, :]   (the one permutation of the tokens)
  parallel_for_rows(routing.rows(),
                    std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t r = begin; r < end; ++r) {
                        const T* from = x + (routing.source[r] / k) * c;
                        std::copy(from, from + c, x_rows + r * c);
                      }
                    });
}

template <class T>
void moe_combine_rows(const MoeRouting& routing, std::size_t c, const T* weights, const T* o,
                      T* y) {
  const std::size_t k = routing.k;
  // y[t, :] = sum over s of weights[t, s] * o[row_of[t k + s], :]  (kept choices, s in order)
  parallel_for_rows(routing.tokens,
                    std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c * k, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t t = begin; t < end; ++t) {
                        T* yt = y + t * c;
                        std::fill(yt, yt + c, T(0));
                        for (std::size_t s = 0; s < k; ++s) {
                          const std::size_t r = routing.row_of[t * k + s];
                          if (r == MoeRouting::k_dropped) continue;
                          const T wt = weights[t * k + s];
                          const T* orow = o + r * c;
                          for (std::size_t i = 0; i < c; ++i) yt[i] += wt * orow[i];
                        }
                      }
                    });
}

namespace {

// How expert e's rows [r0, r0 + ne) are cut (see k_moe_tile_rows): tiles of
// `tile` rows (all of them in one when untiled); a last tile of m rows
// runs as `padded` rows, m or the whole tile.
struct Cut {
  std::size_t r0, ne, tile;
  bool tiled;

  template <class T>
  Cut(const MoeExpertSet<T>& set, std::size_t e, std::size_t untiled_rows)
      : r0(set.offsets[e]),
        ne(set.offsets[e + 1] - set.offsets[e]),
        tile(k_moe_tile_rows),
        tiled(ne * set.c * set.h <= set.tile_macs) {
    if (!tiled) tile = untiled_rows;
  }
  std::size_t rows(std::size_t t0) const { return std::min(tile, ne - t0); }
  std::size_t padded(std::size_t m) const {
    return tiled && m > k_streaming_rows ? std::max(m, tile) : m;
  }
};

// A last tile's rows in thread scratch, each part [tile, width] with the
// rows past m zero: x [C], g [H], u [H], o (or d_out) [C].
template <class T>
struct PaddedTile {
  T *x, *g, *u, *o;

  PaddedTile(std::size_t c, std::size_t h) {
    T* b = thread_scratch<T>(ScratchSlot::moe_tile, k_moe_tile_rows * 2 * (c + h));
    x = b;
    g = x + k_moe_tile_rows * c;
    u = g + k_moe_tile_rows * h;
    o = u + k_moe_tile_rows * h;
  }
  // to[0, m) = from[0, m), to[m, padded) = 0; rows of `width` values
  static T* fill(const T* from, T* to, std::size_t m, std::size_t padded, std::size_t width) {
    std::copy(from, from + m * width, to);
    std::fill(to + m * width, to + padded * width, T(0));
    return to;
  }
};

// c (+)= op(a) . op(b) into a gradient target, which then accumulates.
template <class T>
void gemm_into(const char* op, MatrixRef<const T> a, bool ta, MatrixRef<const T> b, bool tb,
               MoeGradTarget<T>& target, std::size_t rows, std::size_t cols) {
  gemm<T>(op, a, ta, b, tb, matrix(target.data, rows, cols), target.accumulate);
  target.accumulate = true;
}

// Expert e's forward over its rows: g, u and o from x_rows.
template <class T>
void expert_forward(const char* op, const MoeExpertSet<T>& set, std::size_t e,
                    const MoeSaved<T>& rows) {
  const std::size_t c = set.c, h = set.h;
  const Cut cut(set, e, set.offsets[e + 1] - set.offsets[e]);
  const MoeExpertWeights<T>& w = set.weights[e];
  const std::size_t block = block_rows<T>(cut.tile, h);
  for (std::size_t t0 = 0; t0 < cut.ne; t0 += cut.tile) {
    const std::size_t m = cut.rows(t0), mp = cut.padded(m), at = cut.r0 + t0;
    const T* xs = rows.x_rows + at * c;
    T *gs = rows.g + at * h, *us = rows.u + at * h, *os = rows.o + at * c;
    if (mp > m) {
      const PaddedTile<T> pad(c, h);
      xs = PaddedTile<T>::fill(xs, pad.x, m, mp, c);
      gs = pad.g, us = pad.u, os = pad.o;
    }
    // g[mp, H] = x_e[mp, C] . W1^T[C, H];  u[mp, H] = x_e . W3^T
    gemm<T>(op, matrix(xs, mp, c), false, matrix(w.w1, h, c), true, matrix(gs, mp, h), false);
    gemm<T>(op, matrix(xs, mp, c), false, matrix(w.w3, h, c), true, matrix(us, mp, h), false);
    T* const a = thread_scratch<T>(ScratchSlot::fused_activation, block * h);
    for (std::size_t b0 = 0; b0 < mp; b0 += block) {
      const std::size_t nb = std::min(block, mp - b0);
      // a[nb, H] = u * f(g)
      gated_forward(set.f, us + b0 * h, gs + b0 * h, a, nb * h);
      // o[nb, C] = a[nb, H] . W2^T[H, C]
      gemm<T>(op, matrix(static_cast<const T*>(a), nb, h), false, matrix(w.w2, c, h), true,
              matrix(os + b0 * c, nb, c), false);
    }
    if (mp > m) {  // the tile's own rows out of the padded ones
      std::copy(gs, gs + m * h, rows.g + at * h);
      std::copy(us, us + m * h, rows.u + at * h);
      std::copy(os, os + m * c, rows.o + at * c);
    }
  }
}

}  // namespace

template <class T>
void moe_expert_rows_forward(const char* op, const MoeExpertSet<T>& experts,
                             const MoeSaved<T>& rows) {
  for (std::size_t e = 0; e < experts.weights.size(); ++e) expert_forward(op, experts, e, rows);
}

template <class T>
void moe_experts_forward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                         const T* x, const T* weights, const MoeSaved<T>& saved, T* y) {
  moe_gather_rows(routing, experts.c, x, saved.x_rows);
  moe_expert_rows_forward(op, experts, saved);
  moe_combine_rows(routing, experts.c, weights, static_cast<const T*>(saved.o), y);
}

namespace {

// Scratch of one expert's backward, a block of rows at a time; null where
// nothing is wanted.
template <class T>
struct BlockScratch {
  T *da, *a, *dg, *du;
};

// One block of nb rows of one expert backward, from d_out[nb, C] (the
// gradient of the block's rows of o): the weights' gradients, and dx_e[nb, C]
// (the gradient of the block's x rows) when dxe is not null.
template <class T>
void expert_block_backward(const char* op, Activation f, std::size_t c, std::size_t h,
                           const MoeExpertWeights<T>& w, const T* xb, const T* gb, const T* ub,
                           const T* d_out, std::size_t nb, const BlockScratch<T>& s,
                           MoeGradTarget<T>* dw1, MoeGradTarget<T>* dw3, MoeGradTarget<T>* dw2,
                           T* dxe) {
  // in the forward pass: o = a . W2^T, so now da[nb, H] = d_out[nb, C] . W2[C, H]
  if (s.da)
    gemm<T>(op, matrix(d_out, nb, c), false, matrix(w.w2, c, h), false, matrix(s.da, nb, h), false);
  // in the forward pass: a = u * f(g), so now a again (for dW2) and
  // du = da * f(g), dg = da * u * f'(g), in one pass
  gated_value_and_backward(f, ub, gb, static_cast<const T*>(s.da), s.du, false, s.dg, false, s.a,
                           nb * h);
  // dW2[C, H] (+)= d_out^T[C, nb] . a[nb, H]
  if (dw2)
    gemm_into<T>(op, matrix(d_out, nb, c), true, matrix(static_cast<const T*>(s.a), nb, h), false,
                 *dw2, c, h);
  // in the forward pass: g = x_e . W1^T, u = x_e . W3^T, so now
  // dW1[H, C] (+)= dg^T[H, nb] . x_e[nb, C], dW3[H, C] (+)= du^T . x_e
  if (dw1)
    gemm_into<T>(op, matrix(static_cast<const T*>(s.dg), nb, h), true, matrix(xb, nb, c), false,
                 *dw1, h, c);
  if (dw3)
    gemm_into<T>(op, matrix(static_cast<const T*>(s.du), nb, h), true, matrix(xb, nb, c), false,
                 *dw3, h, c);
  if (!dxe) return;
  // dx_e[nb, C] = dg[nb, H] . W1[H, C] + du[nb, H] . W3[H, C]
  gemm<T>(op, matrix(static_cast<const T*>(s.dg), nb, h), false, matrix(w.w1, h, c), false,
          matrix(dxe, nb, c), false);
  gemm<T>(op, matrix(static_cast<const T*>(s.du), nb, h), false, matrix(w.w3, h, c), false,
          matrix(dxe, nb, c), true);
}

template <class T>
BlockScratch<T> block_scratch(std::size_t block, std::size_t h, bool want_g, bool want_u,
                              bool want_a) {
  return {want_g || want_u ? thread_scratch<T>(ScratchSlot::fused_gradient, block * h) : nullptr,
          want_a ? thread_scratch<T>(ScratchSlot::fused_activation, block * h) : nullptr,
          want_g ? thread_scratch<T>(ScratchSlot::moe_gate_grad, block * h) : nullptr,
          want_u ? thread_scratch<T>(ScratchSlot::moe_up_grad, block * h) : nullptr};
}

// An expert without rows (or an empty batch) still owes its weights a gradient: zero.
template <class T>
void settle(const std::vector<MoeGradTarget<T>*>& targets) {
  for (MoeGradTarget<T>* t : targets)
    if (t && !t->accumulate) {
      std::fill(t->data, t->data + t->size, T(0));
      t->accumulate = true;
    }
}

template <class T>
void settle(const MoeWeightGrads<T>& dw) {
  settle(dw.dw1);
  settle(dw.dw3);
  settle(dw.dw2);
}

// Expert e's backward over its rows, tile by tile (or a block of rows at a
// time when untiled): the weight gradients and, when want_dx, the x rows'.
// d_out_rows(at, m, padded) points at the gradient of the rows [at, at + m)
// of o, padded rows of zeros after them; dx_rows(at, m, dxe) takes the x
// rows' gradient (m rows of dxe, null unless want_dx).
template <class T, class DOut, class DxRows>
void expert_backward(const char* op, const MoeExpertSet<T>& set, std::size_t e,
                     const MoeSaved<const T>& rows, const MoeWeightGrads<T>& dw, bool want_dx,
                     DOut d_out_rows, DxRows dx_rows) {
  const std::size_t c = set.c, h = set.h;
  MoeGradTarget<T>*dw1 = dw.dw1[e], *dw3 = dw.dw3[e], *dw2 = dw.dw2[e];
  const bool want_g = want_dx || dw1, want_u = want_dx || dw3;
  const Cut cut(set, e, block_rows<T>(set.offsets.back(), h));
  if (cut.ne == 0 || !(want_g || want_u || dw2)) return;
  const BlockScratch<T> s = block_scratch<T>(cut.tile, h, want_g, want_u, dw2 != nullptr);
  T* const dxe = want_dx ? thread_scratch<T>(ScratchSlot::moe_row_grad, cut.tile * c) : nullptr;
  for (std::size_t t0 = 0; t0 < cut.ne; t0 += cut.tile) {
    const std::size_t m = cut.rows(t0), mp = cut.padded(m), at = cut.r0 + t0;
    const T *xs = rows.x_rows + at * c, *gs = rows.g + at * h, *us = rows.u + at * h;
    if (mp > m) {  // zero rows: g = u = 0 and d_out = 0 give zero gradients
      const PaddedTile<T> pad(c, h);
      xs = PaddedTile<T>::fill(xs, pad.x, m, mp, c);
      gs = PaddedTile<T>::fill(gs, pad.g, m, mp, h);
      us = PaddedTile<T>::fill(us, pad.u, m, mp, h);
    }
    expert_block_backward(op, set.f, c, h, set.weights[e], xs, gs, us, d_out_rows(at, m, mp), mp, s,
                          dw1, dw3, dw2, dxe);
    if (want_dx) dx_rows(at, m, static_cast<const T*>(dxe));
  }
}

}  // namespace

template <class T>
void moe_experts_backward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                          const T* weights, const MoeSaved<const T>& saved, const T* dy,
                          MoeGrads<T>& grads) {
  const std::size_t c = experts.c;
  MoeGradTarget<T>* const dx = grads.dx;
  if (dx && !dx->accumulate) std::fill(dx->data, dx->data + dx->size, T(0));
  if (dx) dx->accumulate = true;  // the experts' rows are added onto it below
  if (grads.dweights) moe_weights_backward(routing, c, saved.o, dy, *grads.dweights);
  const std::size_t tile = std::max(k_moe_tile_rows, block_rows<T>(routing.rows(), experts.h));
  // d_out[at, at + m) = weights[ch] * dy[t], computed a tile at a time
  const auto d_out_rows = [&](std::size_t at, std::size_t m, std::size_t padded) {
    T* const d_out = thread_scratch<T>(ScratchSlot::moe_rows, tile * c);
    moe_out_grad_rows(routing, c, weights, dy, T(1), at, m, d_out);
    std::fill(d_out + m * c, d_out + padded * c, T(0));
    return static_cast<const T*>(d_out);
  };
  const auto scatter = [&](std::size_t at, std::size_t m, const T* dxe) {
    moe_scatter_rows(routing, c, dxe, at, m, dx->data);
  };
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_backward(op, experts, e, saved, grads.experts, dx != nullptr, d_out_rows, scatter);
  settle(grads.experts);
}

template <class T>
void moe_weights_backward(const MoeRouting& routing, std::size_t c, const T* o, const T* dy,
                          MoeGradTarget<T>& dw) {
  const std::size_t k = routing.k;
  // in the forward pass: y[t] += weights[c] * o[r], so now dweights[c] (+)= dy[t] . o[r]
  const bool add = dw.accumulate;
  parallel_for_rows(routing.tokens * k,
                    std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t ch = begin; ch < end; ++ch) {
                        const std::size_t r = routing.row_of[ch];
                        T dot = T(0);
                        if (r != MoeRouting::k_dropped) {
                          const T *dyt = dy + (ch / k) * c, *orow = o + r * c;
                          for (std::size_t i = 0; i < c; ++i) dot += dyt[i] * orow[i];
                        }
                        dw.data[ch] = add ? dw.data[ch] + dot : dot;
                      }
                    });
  dw.accumulate = true;
}

template <class T>
void moe_out_grad_rows(const MoeRouting& routing, std::size_t c, const T* weights, const T* dy,
                       T scale, std::size_t first, std::size_t rows, T* d_out) {
  const std::size_t k = routing.k;
  // in the forward pass: y[t] += weights[ch] * o[r], so now d_out[r] = weights[ch] * dy[t]
  // (times `scale`, 1 in one process)
  parallel_for_rows(rows, std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t i = begin; i < end; ++i) {
                        const std::size_t ch = routing.source[first + i];
                        const T wt = scale == T(1) ? weights[ch] : weights[ch] * scale;
                        const T* dyt = dy + (ch / k) * c;
                        for (std::size_t j = 0; j < c; ++j) d_out[i * c + j] = wt * dyt[j];
                      }
                    });
}

template <class T>
void moe_scatter_rows(const MoeRouting& routing, std::size_t c, const T* dx_rows, std::size_t first,
                      std::size_t rows, T* dx) {
  const std::size_t k = routing.k;
  // in the forward pass: x_rows[r] = x[t], so now dx[t] += dx_rows[r] (an
  // expert's rows are distinct tokens: no two rows of one expert meet)
  parallel_for_rows(rows, std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t i = begin; i < end; ++i) {
                        T* dxt = dx + (routing.source[first + i] / k) * c;
                        const T* from = dx_rows + i * c;
                        for (std::size_t j = 0; j < c; ++j) dxt[j] += from[j];
                      }
                    });
}

template <class T>
void moe_expert_rows_backward(const char* op, const MoeExpertSet<T>& experts,
                              const MoeSaved<const T>& rows, const T* d_out,
                              const MoeWeightGrads<T>& dw, T* dx_rows) {
  const std::size_t c = experts.c;
  const auto d_out_rows = [&](std::size_t at, std::size_t m, std::size_t padded) {
    const T* const own = d_out + at * c;
    return padded > m ? static_cast<const T*>(
                            PaddedTile<T>::fill(own, PaddedTile<T>(c, experts.h).o, m, padded, c))
                      : own;
  };
  const auto store = [&](std::size_t at, std::size_t m, const T* dxe) {
    std::copy(dxe, dxe + m * c, dx_rows + at * c);
  };
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_backward(op, experts, e, rows, dw, dx_rows != nullptr, d_out_rows, store);
  settle(dw);
}

#define XTGRAD_INSTANTIATE_MOE_KERNELS(T)                                                         \
  template void moe_experts_forward(const char*, const MoeRouting&, const MoeExpertSet<T>&,       \
                                    const T*, const T*, const MoeSaved<T>&, T*);                  \
  template void moe_experts_backward(const char*, const MoeRouting&, const MoeExpertSet<T>&,      \
                                     const T*, const MoeSaved<const T>&, const T*, MoeGrads<T>&); \
  template void moe_gather_rows(const MoeRouting&, std::size_t, const T*, T*);                    \
  template void moe_combine_rows(const MoeRouting&, std::size_t, const T*, const T*, T*);         \
  template void moe_expert_rows_forward(const char*, const MoeExpertSet<T>&, const MoeSaved<T>&); \
  template void moe_weights_backward(const MoeRouting&, std::size_t, const T*, const T*,          \
                                     MoeGradTarget<T>&);                                          \
  template void moe_out_grad_rows(const MoeRouting&, std::size_t, const T*, const T*, T,          \
                                  std::size_t, std::size_t, T*);                                  \
  template void moe_scatter_rows(const MoeRouting&, std::size_t, const T*, std::size_t,           \
                                 std::size_t, T*);                                                \
  template void moe_expert_rows_backward(const char*, const MoeExpertSet<T>&,                     \
                                         const MoeSaved<const T>&, const T*,                      \
                                         const MoeWeightGrads<T>&, T*);
XTGRAD_INSTANTIATE_MOE_KERNELS(float)
XTGRAD_INSTANTIATE_MOE_KERNELS(double)
#undef XTGRAD_INSTANTIATE_MOE_KERNELS

}  // namespace xtgrad::detail
