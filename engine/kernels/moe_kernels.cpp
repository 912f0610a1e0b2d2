#include "moe_kernels.hpp"

#include <algorithm>
#include <cstddef>

#include "activation_kernels.hpp"
#include "gemm.hpp"
#include "gemm_streaming.hpp"
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

// Where an expert's rows come from and where their results go, for the
// rows [at, at + m) of the permuted layout, padded with zero rows to
// `padded` (Cut::padded). Each row i carries a routing weight w_i (its o
// row counts w_i times in y):
//   x_rows(at, m, padded)      x's rows (backward: times w)
//   take_o(at, m, o)           forward: o's rows
//   d_out(at, m, padded)       backward: the gradient of o's rows over w
//   row_weights(at, m, padded) backward: w, then room for its gradient ([2 padded])
//   take_dx(at, m, dxe)        the gradient of x's rows over w
//   take_dw(at, m, dw)         the gradient of w
// RoutedRows: the tokens' rows read and written through the routing (the
// op in one process); BufferRows: the rows as buffers (expert parallelism).
template <class T>
struct RoutedRows {
  const MoeRouting& routing;
  std::size_t c;
  const T* x;
  const T* weights;
  T* y = nullptr;         // forward
  const T* dy = nullptr;  // backward
  T* dx = nullptr;        // backward, null: not wanted
  T* dweights = nullptr;  // backward, null: not wanted

  // from's rows of the permuted layout [at, at + m) into `slot`, zero rows after
  const T* gather(ScratchSlot slot, const T* from, const T* w, std::size_t at, std::size_t m,
                  std::size_t padded) const {
    T* const to = thread_scratch<T>(slot, padded * c);
    moe_gather_rows(routing, c, from, w, at, m, to);
    std::fill(to + m * c, to + padded * c, T(0));
    return to;
  }
  const T* x_rows(std::size_t at, std::size_t m, std::size_t padded) const {
    return gather(ScratchSlot::moe_x_rows, x, dy ? weights : nullptr, at, m, padded);
  }
  void take_o(std::size_t at, std::size_t m, const T* o) const {
    moe_scatter_rows(routing, c, o, weights, at, m, y);  // y[t] += w o[i]
  }
  const T* d_out(std::size_t at, std::size_t m, std::size_t padded) const {
    return gather(ScratchSlot::moe_rows, dy, static_cast<const T*>(nullptr), at, m, padded);
  }
  T* row_weights(std::size_t at, std::size_t m, std::size_t padded) const {
    T* const w = thread_scratch<T>(ScratchSlot::moe_row_weights, 2 * padded);
    for (std::size_t i = 0; i < m; ++i) w[i] = weights[routing.source[at + i]];
    std::fill(w + m, w + padded, T(0));
    return w;
  }
  bool want_dx() const { return dx != nullptr; }
  bool want_dw() const { return dweights != nullptr; }
  void take_dx(std::size_t at, std::size_t m, const T* dxe) const {
    moe_scatter_rows(routing, c, dxe, weights, at, m, dx);  // dx[t] += w dx_e[i]
  }
  void take_dw(std::size_t at, std::size_t m, const T* dw) const {
    for (std::size_t i = 0; i < m; ++i) dweights[routing.source[at + i]] += dw[i];
  }
};

template <class T>
struct BufferRows {
  std::size_t c, h;
  const T* x;
  T* o = nullptr;         // forward
  const T* d = nullptr;   // backward
  const T* w = nullptr;   // backward
  T* dx = nullptr;        // backward, null: not wanted
  T* dweights = nullptr;  // backward, null: not wanted

  const T* x_rows(std::size_t at, std::size_t m, std::size_t padded) const {
    if (!d)
      return padded > m ? PaddedTile<T>::fill(x + at * c, PaddedTile<T>(c, h).x, m, padded, c)
                        : x + at * c;
    T* const to = thread_scratch<T>(ScratchSlot::moe_x_rows, padded * c);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < c; ++j) to[i * c + j] = w[at + i] * x[(at + i) * c + j];
    std::fill(to + m * c, to + padded * c, T(0));
    return to;
  }
  void take_o(std::size_t at, std::size_t m, const T* rows) const {
    std::copy(rows, rows + m * c, o + at * c);
  }
  const T* d_out(std::size_t at, std::size_t m, std::size_t padded) const {
    return padded > m ? PaddedTile<T>::fill(d + at * c, PaddedTile<T>(c, h).o, m, padded, c)
                      : d + at * c;
  }
  T* row_weights(std::size_t at, std::size_t m, std::size_t padded) const {
    return PaddedTile<T>::fill(w + at, thread_scratch<T>(ScratchSlot::moe_row_weights, 2 * padded),
                               m, padded, 1);
  }
  bool want_dx() const { return dx != nullptr; }
  bool want_dw() const { return dweights != nullptr; }
  void take_dx(std::size_t at, std::size_t m, const T* dxe) const {
    std::copy(dxe, dxe + m * c, dx + at * c);
  }
  void take_dw(std::size_t at, std::size_t m, const T* dw) const {
    std::copy(dw, dw + m, dweights + at);
  }
};

// c (+)= op(a) . op(b) into a gradient target, which then accumulates.
template <class T>
void gemm_into(const char* op, MatrixRef<const T> a, bool ta, MatrixRef<const T> b, bool tb,
               MoeGradTarget<T>& target, std::size_t rows, std::size_t cols) {
  gemm<T>(op, a, ta, b, tb, matrix(target.data, rows, cols), target.accumulate);
  target.accumulate = true;
}

// Expert e's forward over its rows: g and u (into the layout's g, u [rows,
// H]) and o, a block of rows at a time, to rows.take_o.
template <class T, class Rows>
void expert_forward(const char* op, const MoeExpertSet<T>& set, std::size_t e, T* g, T* u,
                    const Rows& rows) {
  const std::size_t c = set.c, h = set.h;
  const Cut cut(set, e, set.offsets[e + 1] - set.offsets[e]);
  const MoeExpertWeights<T>& w = set.weights[e];
  // blocks as long as the backward's (row_blocks.hpp)
  const std::size_t block = block_rows<T>(cut.tile, h, k_backward_buffers);
  T* const a = thread_scratch<T>(ScratchSlot::fused_activation, block * h);
  T* const o = thread_scratch<T>(ScratchSlot::moe_rows, block * c);
  for (std::size_t t0 = 0; t0 < cut.ne; t0 += cut.tile) {
    const std::size_t m = cut.rows(t0), mp = cut.padded(m), at = cut.r0 + t0;
    const T* const xs = rows.x_rows(at, m, mp);
    T *gs = g + at * h, *us = u + at * h;
    if (mp > m) {
      const PaddedTile<T> pad(c, h);
      gs = pad.g, us = pad.u;
    }
    // g[mp, H] = x_e[mp, C] . W1^T[C, H];  u[mp, H] = x_e . W3^T
    gemm<T>(op, matrix(xs, mp, c), false, matrix(w.w1, h, c), true, matrix(gs, mp, h), false);
    gemm<T>(op, matrix(xs, mp, c), false, matrix(w.w3, h, c), true, matrix(us, mp, h), false);
    for (std::size_t b0 = 0; b0 < m; b0 += block) {
      const std::size_t nb = std::min(block, mp - b0);
      // a[nb, H] = u * f(g)
      gated_forward(set.f, us + b0 * h, gs + b0 * h, a, nb * h);
      // o[nb, C] = a[nb, H] . W2^T[H, C]
      gemm<T>(op, matrix(static_cast<const T*>(a), nb, h), false, matrix(w.w2, c, h), true,
              matrix(o, nb, c), false);
      rows.take_o(at + b0, std::min(nb, m - b0), static_cast<const T*>(o));
    }
    if (mp > m) {  // the tile's own rows out of the padded ones
      std::copy(gs, gs + m * h, g + at * h);
      std::copy(us, us + m * h, u + at * h);
    }
  }
}

// a . b over n values: eight partial sums (a vector's lanes), then their sum.
template <class T>
T row_dot(const T* a, const T* b, std::size_t n) {
  T part[8] = {};
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (std::size_t l = 0; l < 8; ++l) part[l] += a[j + l] * b[j + l];
  T dot = T(0);
  for (const T p : part) dot += p;
  for (; j < n; ++j) dot += a[j] * b[j];
  return dot;
}

// One block of nb rows of one expert's backward: the rows of x times their
// weights w, g, u, and d_out, the gradient of o's rows divided by w.
template <class T>
struct BlockRows {
  const T *x, *g, *u, *d_out;
  T* w;
};

// Scratch of one expert's backward, a block of rows at a time; null where
// nothing is wanted.
template <class T>
struct BlockScratch {
  T *da, *a, *dg, *du;
};

// The block's weight gradients, dxe[nb, C] (the gradient of its x rows,
// divided by w) when not null, and dwe[nb] (the gradient of w) when not null.
template <class T>
void expert_block_backward(const char* op, Activation f, std::size_t c, std::size_t h,
                           const MoeExpertWeights<T>& w, const BlockRows<T>& b, std::size_t nb,
                           const BlockScratch<T>& s, MoeGradTarget<T>* dw1, MoeGradTarget<T>* dw3,
                           MoeGradTarget<T>* dw2, T* dxe, T* dwe) {
  // in the forward pass: o = a . W2^T, so now da[nb, H] = d_out[nb, C] . W2[C, H]
  if (s.da)
    gemm<T>(op, matrix(b.d_out, nb, c), false, matrix(w.w2, c, h), false, matrix(s.da, nb, h),
            false);
  // in the forward pass: a = u * f(g), so now a again (for dW2 and dw) and
  // du = da * f(g), dg = da * u * f'(g), in one pass
  gated_value_and_backward(f, b.u, b.g, static_cast<const T*>(s.da), s.du, false, s.dg, false, s.a,
                           nb * h);
  // in the forward pass: y[t] += w o, so now dw[i] = dy[t] . o[i] = da[i] . a[i]
  for (std::size_t i = 0; dwe && i < nb; ++i) dwe[i] = row_dot(s.da + i * h, s.a + i * h, h);
  // dW2[C, H] (+)= (w d_out)^T[C, nb] . a[nb, H] = d_out^T . (w a)
  if (dw2) {
    for (std::size_t i = 0; i < nb; ++i)
      for (std::size_t j = 0; j < h; ++j) s.a[i * h + j] *= b.w[i];
    gemm_into<T>(op, matrix(b.d_out, nb, c), true, matrix(static_cast<const T*>(s.a), nb, h), false,
                 *dw2, c, h);
  }
  // in the forward pass: g = x_e . W1^T, u = x_e . W3^T, so now (the w of
  // dg and du on x's rows) dW1[H, C] (+)= dg^T[H, nb] . x_e[nb, C], dW3[H, C] (+)= du^T . x_e
  if (dw1)
    gemm_into<T>(op, matrix(static_cast<const T*>(s.dg), nb, h), true, matrix(b.x, nb, c), false,
                 *dw1, h, c);
  if (dw3)
    gemm_into<T>(op, matrix(static_cast<const T*>(s.du), nb, h), true, matrix(b.x, nb, c), false,
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
                              bool want_da, bool want_a) {
  return {want_da ? thread_scratch<T>(ScratchSlot::fused_gradient, block * h) : nullptr,
          want_a ? thread_scratch<T>(ScratchSlot::fused_activation, block * h) : nullptr,
          want_g ? thread_scratch<T>(ScratchSlot::moe_gate_grad, block * h) : nullptr,
          want_u ? thread_scratch<T>(ScratchSlot::moe_up_grad, block * h) : nullptr};
}

// A target still unwritten (an expert without rows, an empty batch) owes a gradient: zero.
template <class T>
void settle(MoeGradTarget<T>* t) {
  if (t && !t->accumulate) std::fill(t->data, t->data + t->size, T(0));
  if (t) t->accumulate = true;
}

template <class T>
void settle(const MoeWeightGrads<T>& dw) {
  for (const auto* role : {&dw.dw1, &dw.dw3, &dw.dw2})
    for (MoeGradTarget<T>* t : *role) settle(t);
}

// Expert e's backward over its rows (g and u: the layout's [rows, H]), tile
// by tile (or a block of rows at a time when untiled): the weight gradients
// and what `rows` wants of x's rows and the weights.
template <class T, class Rows>
void expert_backward(const char* op, const MoeExpertSet<T>& set, std::size_t e, const T* g,
                     const T* u, const MoeWeightGrads<T>& dw, const Rows& rows) {
  const std::size_t c = set.c, h = set.h;
  MoeGradTarget<T>*dw1 = dw.dw1[e], *dw3 = dw.dw3[e], *dw2 = dw.dw2[e];
  const bool want_dx = rows.want_dx(), want_dw = rows.want_dw();
  const bool want_g = want_dx || dw1, want_u = want_dx || dw3;
  const Cut cut(set, e, block_rows<T>(set.offsets.back(), h, k_backward_buffers));
  if (cut.ne == 0 || !(want_g || want_u || dw2 || want_dw)) return;
  const BlockScratch<T> s =
      block_scratch<T>(cut.tile, h, want_g, want_u, want_g || want_u || want_dw, dw2 || want_dw);
  T* const dxe = want_dx ? thread_scratch<T>(ScratchSlot::moe_row_grad, cut.tile * c) : nullptr;
  for (std::size_t t0 = 0; t0 < cut.ne; t0 += cut.tile) {
    const std::size_t m = cut.rows(t0), mp = cut.padded(m), at = cut.r0 + t0;
    BlockRows<T> b{dw1 || dw3 ? rows.x_rows(at, m, mp) : nullptr, g + at * h, u + at * h,
                   rows.d_out(at, m, mp), rows.row_weights(at, m, mp)};
    if (mp > m) {  // zero rows: g = u = 0 and d_out = 0 give zero gradients
      const PaddedTile<T> pad(c, h);
      b.g = PaddedTile<T>::fill(b.g, pad.g, m, mp, h);
      b.u = PaddedTile<T>::fill(b.u, pad.u, m, mp, h);
    }
    T* const dwe = want_dw ? b.w + mp : nullptr;  // row_weights' second half
    expert_block_backward(op, set.f, c, h, set.weights[e], b, mp, s, dw1, dw3, dw2, dxe, dwe);
    if (want_dx) rows.take_dx(at, m, static_cast<const T*>(dxe));
    if (want_dw) rows.take_dw(at, m, static_cast<const T*>(dwe));
  }
}

}  // namespace

template <class T>
void moe_experts_forward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                         const T* x, const T* weights, const MoeHidden<T>& saved, T* y) {
  std::fill(y, y + routing.tokens * experts.c, T(0));
  RoutedRows<T> rows{routing, experts.c, x, weights};
  rows.y = y;
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_forward(op, experts, e, saved.g, saved.u, rows);
}

template <class T>
void moe_experts_backward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                          const T* x, const T* weights, const MoeHidden<const T>& saved,
                          const T* dy, MoeGrads<T>& grads) {
  // dx and dweights: the experts' rows add onto them (a dropped choice's weight keeps 0)
  settle(grads.dx);
  settle(grads.dweights);
  RoutedRows<T> rows{routing, experts.c, x, weights};
  rows.dy = dy;
  rows.dx = grads.dx ? grads.dx->data : nullptr;
  rows.dweights = grads.dweights ? grads.dweights->data : nullptr;
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_backward(op, experts, e, saved.g, saved.u, grads.experts, rows);
  settle(grads.experts);
}

template <class T>
void moe_expert_rows_forward(const char* op, const MoeExpertSet<T>& experts,
                             const MoeRows<T>& rows) {
  BufferRows<T> buffers{experts.c, experts.h, rows.x_rows};
  buffers.o = rows.o;
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_forward(op, experts, e, rows.g, rows.u, buffers);
}

template <class T>
void moe_expert_rows_backward(const char* op, const MoeExpertSet<T>& experts,
                              const MoeRows<const T>& rows, const T* d_out, const T* weights,
                              const MoeWeightGrads<T>& dw, T* dx_rows, T* dweights) {
  BufferRows<T> buffers{experts.c, experts.h, rows.x_rows};
  buffers.d = d_out;
  buffers.w = weights;
  buffers.dx = dx_rows;
  buffers.dweights = dweights;
  for (std::size_t e = 0; e < experts.weights.size(); ++e)
    expert_backward(op, experts, e, rows.g, rows.u, dw, buffers);
  settle(dw);
}

#define XTGRAD_INSTANTIATE_MOE_KERNELS(T)                                                        \
  template void moe_experts_forward(const char*, const MoeRouting&, const MoeExpertSet<T>&,      \
                                    const T*, const T*, const MoeHidden<T>&, T*);                \
  template void moe_experts_backward(const char*, const MoeRouting&, const MoeExpertSet<T>&,     \
                                     const T*, const T*, const MoeHidden<const T>&, const T*,    \
                                     MoeGrads<T>&);                                              \
  template void moe_expert_rows_forward(const char*, const MoeExpertSet<T>&, const MoeRows<T>&); \
  template void moe_expert_rows_backward(const char*, const MoeExpertSet<T>&,                    \
                                         const MoeRows<const T>&, const T*, const T*,            \
                                         const MoeWeightGrads<T>&, T*, T*);
XTGRAD_INSTANTIATE_MOE_KERNELS(float)
XTGRAD_INSTANTIATE_MOE_KERNELS(double)
#undef XTGRAD_INSTANTIATE_MOE_KERNELS

}  // namespace xtgrad::detail
