#include "moe_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "activation_kernels.hpp"
#include "gemm.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

namespace xtgrad::detail {

namespace {

// A block of the hidden-wide buffers is about k_block_bytes, at least
// k_min_block_rows rows: the sizes ops/fused_linear blocks its rows by, for
// the same reason (the block is still in cache when the next GEMM reads it,
// and the GEMMs stay as fast as one big call).
constexpr std::size_t k_block_bytes = std::size_t(2) << 20;
constexpr std::size_t k_min_block_rows = 64;

template <class T>
std::size_t block_rows(std::size_t n, std::size_t h) {
  const std::size_t fit = k_block_bytes / (sizeof(T) * std::max<std::size_t>(h, 1));
  return std::max<std::size_t>(std::min(std::max(fit, k_min_block_rows), n), 1);
}

template <class T>
MatrixRef<const T> matrix(const T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}
template <class T>
MatrixRef<T> matrix(T* data, std::size_t rows, std::size_t cols) {
  return {data, rows, cols};
}

// c (+)= op(a) . op(b) into a gradient target, which then accumulates.
template <class T>
void gemm_into(const char* op, MatrixRef<const T> a, bool ta, MatrixRef<const T> b, bool tb,
               MoeGradTarget<T>& target, std::size_t rows, std::size_t cols) {
  gemm<T>(op, a, ta, b, tb, matrix(target.data, rows, cols), target.accumulate);
  target.accumulate = true;
}

}  // namespace

template <class T>
void moe_top_k(const T* p, std::size_t n, std::size_t e, std::size_t k, std::size_t* expert) {
  // torch's elem_t is (accscalar_t, int64_t); for float and double on the CPU
  // accscalar_t is double, which orders float values exactly as float does.
  using Elem = std::pair<double, std::int64_t>;
  const auto larger = [](const Elem& a, const Elem& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  const bool use_partial_sort = k * 64 <= e;
  parallel_for_rows(
      n, std::max<std::size_t>(1, k_parallel_heavy / std::max<std::size_t>(e, 1)),
      [&](std::size_t begin, std::size_t end) {
        std::vector<Elem> queue(e);
        for (std::size_t i = begin; i < end; ++i) {
          for (std::size_t j = 0; j < e; ++j)
            queue[j] = {static_cast<double>(p[i * e + j]), static_cast<std::int64_t>(j)};
          const auto first = queue.begin();
          const auto kth = first + static_cast<std::ptrdiff_t>(k);
          if (use_partial_sort) {
            std::partial_sort(first, kth, queue.end(), larger);
          } else {
            std::nth_element(first, kth - 1, queue.end(), larger);
            std::sort(first, kth - 1, larger);
          }
          for (std::size_t s = 0; s < k; ++s)
            expert[i * k + s] = static_cast<std::size_t>(queue[s].second);
        }
      });
}

void moe_sort(MoeRouting& r, const std::vector<std::size_t>& capacities) {
  const std::size_t choices = r.tokens * r.k, e_count = r.experts;
  r.routed.assign(e_count, 0);
  for (std::size_t c = 0; c < choices; ++c) ++r.routed[r.expert[c]];
  r.counts.resize(e_count);
  r.offsets.assign(e_count + 1, 0);
  for (std::size_t e = 0; e < e_count; ++e) {
    r.counts[e] = std::min(r.routed[e], capacities[e]);
    r.offsets[e + 1] = r.offsets[e] + r.counts[e];
  }
  // Stable: choices in increasing c, so in token order within an expert (a
  // token chooses an expert at most once); past counts[e] they are dropped.
  std::vector<std::size_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.source.resize(r.rows());
  r.row_of.assign(choices, MoeRouting::k_dropped);
  for (std::size_t c = 0; c < choices; ++c) {
    const std::size_t e = r.expert[c];
    if (next[e] == r.offsets[e + 1]) continue;
    r.source[next[e]] = c;
    r.row_of[c] = next[e]++;
  }
}

void moe_sort(MoeRouting& r) {
  moe_sort(r, std::vector<std::size_t>(r.experts, r.capacity));
}

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

template <class T>
void moe_expert_rows_forward(const char* op, Activation f, std::size_t c, std::size_t h,
                             const std::vector<std::size_t>& offsets,
                             const std::vector<MoeExpertWeights<T>>& experts, const T* x_rows, T* g,
                             T* u, T* o) {
  const std::size_t block = block_rows<T>(offsets.back(), h);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::size_t r0 = offsets[e], ne = offsets[e + 1] - offsets[e];
    if (ne == 0) continue;
    const MoeExpertWeights<T>& w = experts[e];
    // g[ne, H] = x_e[ne, C] . W1^T[C, H];  u[ne, H] = x_e . W3^T
    gemm<T>(op, matrix(x_rows + r0 * c, ne, c), false, matrix(w.w1, h, c), true,
            matrix(g + r0 * h, ne, h), false);
    gemm<T>(op, matrix(x_rows + r0 * c, ne, c), false, matrix(w.w3, h, c), true,
            matrix(u + r0 * h, ne, h), false);
    T* const a = thread_scratch<T>(ScratchSlot::fused_activation, block * h);
    for (std::size_t b0 = 0; b0 < ne; b0 += block) {
      const std::size_t nb = std::min(block, ne - b0), at = r0 + b0;
      // a[nb, H] = u * f(g)
      gated_forward(f, u + at * h, g + at * h, a, nb * h);
      // o[nb, C] = a[nb, H] . W2^T[H, C]
      gemm<T>(op, matrix(static_cast<const T*>(a), nb, h), false, matrix(w.w2, c, h), true,
              matrix(o + at * c, nb, c), false);
    }
  }
}

template <class T>
void moe_experts_forward(const char* op, const MoeRouting& routing, Activation f, std::size_t c,
                         std::size_t h, const T* x, const T* weights,
                         const std::vector<MoeExpertWeights<T>>& experts, const MoeSaved<T>& saved,
                         T* y) {
  moe_gather_rows(routing, c, x, saved.x_rows);
  moe_expert_rows_forward(op, f, c, h, routing.offsets, experts,
                          static_cast<const T*>(saved.x_rows), saved.g, saved.u, saved.o);
  moe_combine_rows(routing, c, weights, static_cast<const T*>(saved.o), y);
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

}  // namespace

template <class T>
void moe_experts_backward(const char* op, const MoeRouting& routing, Activation f, std::size_t c,
                          std::size_t h, const T* weights,
                          const std::vector<MoeExpertWeights<T>>& experts,
                          const MoeSaved<const T>& saved, const T* dy, MoeGrads<T>& grads) {
  const T *xr = saved.x_rows, *g = saved.g, *u = saved.u;
  MoeGradTarget<T>* const dx = grads.dx;
  if (dx && !dx->accumulate) std::fill(dx->data, dx->data + dx->size, T(0));
  if (dx) dx->accumulate = true;  // the experts' rows are added onto it below
  if (grads.dweights) moe_weights_backward(routing, c, saved.o, dy, *grads.dweights);
  const std::size_t block = block_rows<T>(routing.rows(), h);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::size_t r0 = routing.offsets[e], ne = routing.counts[e];
    MoeGradTarget<T>*dw1 = grads.dw1[e], *dw3 = grads.dw3[e], *dw2 = grads.dw2[e];
    const bool want_g = dx || dw1, want_u = dx || dw3;
    if (ne == 0 || !(want_g || want_u || dw2)) continue;
    T* const d_out = thread_scratch<T>(ScratchSlot::moe_rows, block * c);
    const BlockScratch<T> s = block_scratch<T>(block, h, want_g, want_u, dw2 != nullptr);
    T* const dxe = dx ? thread_scratch<T>(ScratchSlot::moe_row_grad, block * c) : nullptr;
    for (std::size_t b0 = 0; b0 < ne; b0 += block) {
      const std::size_t nb = std::min(block, ne - b0), at = r0 + b0;
      moe_out_grad_rows(routing, c, weights, dy, T(1), at, nb, d_out);
      expert_block_backward(op, f, c, h, experts[e], xr + at * c, g + at * h, u + at * h,
                            static_cast<const T*>(d_out), nb, s, dw1, dw3, dw2, dxe);
      if (dx) moe_scatter_rows(routing, c, static_cast<const T*>(dxe), at, nb, dx->data);
    }
  }
  settle(grads.dw1);
  settle(grads.dw3);
  settle(grads.dw2);
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
void moe_expert_rows_backward(const char* op, Activation f, std::size_t c, std::size_t h,
                              const std::vector<std::size_t>& offsets,
                              const std::vector<MoeExpertWeights<T>>& experts, const T* x_rows,
                              const T* g, const T* u, const T* d_out,
                              const std::vector<MoeGradTarget<T>*>& dw1,
                              const std::vector<MoeGradTarget<T>*>& dw3,
                              const std::vector<MoeGradTarget<T>*>& dw2, T* dx_rows) {
  const std::size_t block = block_rows<T>(offsets.back(), h);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::size_t r0 = offsets[e], ne = offsets[e + 1] - offsets[e];
    const bool want_g = dx_rows || dw1[e], want_u = dx_rows || dw3[e];
    if (ne == 0 || !(want_g || want_u || dw2[e])) continue;
    const BlockScratch<T> s = block_scratch<T>(block, h, want_g, want_u, dw2[e] != nullptr);
    for (std::size_t b0 = 0; b0 < ne; b0 += block) {
      const std::size_t nb = std::min(block, ne - b0), at = r0 + b0;
      expert_block_backward(op, f, c, h, experts[e], x_rows + at * c, g + at * h, u + at * h,
                            d_out + at * c, nb, s, dw1[e], dw3[e], dw2[e],
                            dx_rows ? dx_rows + at * c : nullptr);
    }
  }
  settle(dw1);
  settle(dw3);
  settle(dw2);
}

#define XTGRAD_INSTANTIATE_MOE_KERNELS(T)                                                         \
  template void moe_top_k(const T*, std::size_t, std::size_t, std::size_t, std::size_t*);         \
  template void moe_experts_forward(                                                              \
      const char*, const MoeRouting&, Activation, std::size_t, std::size_t, const T*, const T*,   \
      const std::vector<MoeExpertWeights<T>>&, const MoeSaved<T>&, T*);                           \
  template void moe_experts_backward(                                                             \
      const char*, const MoeRouting&, Activation, std::size_t, std::size_t, const T*,             \
      const std::vector<MoeExpertWeights<T>>&, const MoeSaved<const T>&, const T*, MoeGrads<T>&); \
  template void moe_gather_rows(const MoeRouting&, std::size_t, const T*, T*);                    \
  template void moe_combine_rows(const MoeRouting&, std::size_t, const T*, const T*, T*);         \
  template void moe_expert_rows_forward(                                                          \
      const char*, Activation, std::size_t, std::size_t, const std::vector<std::size_t>&,         \
      const std::vector<MoeExpertWeights<T>>&, const T*, T*, T*, T*);                             \
  template void moe_weights_backward(const MoeRouting&, std::size_t, const T*, const T*,          \
                                     MoeGradTarget<T>&);                                          \
  template void moe_out_grad_rows(const MoeRouting&, std::size_t, const T*, const T*, T,          \
                                  std::size_t, std::size_t, T*);                                  \
  template void moe_scatter_rows(const MoeRouting&, std::size_t, const T*, std::size_t,           \
                                 std::size_t, T*);                                                \
  template void moe_expert_rows_backward(                                                         \
      const char*, Activation, std::size_t, std::size_t, const std::vector<std::size_t>&,         \
      const std::vector<MoeExpertWeights<T>>&, const T*, const T*, const T*, const T*,            \
      const std::vector<MoeGradTarget<T>*>&, const std::vector<MoeGradTarget<T>*>&,               \
      const std::vector<MoeGradTarget<T>*>&, T*);
XTGRAD_INSTANTIATE_MOE_KERNELS(float)
XTGRAD_INSTANTIATE_MOE_KERNELS(double)
#undef XTGRAD_INSTANTIATE_MOE_KERNELS

}  // namespace xtgrad::detail
