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

void moe_sort(MoeRouting& r) {
  const std::size_t choices = r.tokens * r.k, e_count = r.experts;
  r.routed.assign(e_count, 0);
  for (std::size_t c = 0; c < choices; ++c) ++r.routed[r.expert[c]];
  r.counts.resize(e_count);
  r.offsets.assign(e_count + 1, 0);
  for (std::size_t e = 0; e < e_count; ++e) {
    r.counts[e] = std::min(r.routed[e], r.capacity);
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

template <class T>
void moe_experts_forward(const char* op, const MoeRouting& routing, Activation f, std::size_t c,
                         std::size_t h, const T* x, const T* weights,
                         const std::vector<MoeExpertWeights<T>>& experts, const MoeSaved<T>& saved,
                         T* y) {
  const std::size_t rows = routing.rows(), k = routing.k, n = routing.tokens;
  T *xr = saved.x_rows, *g = saved.g, *u = saved.u, *o = saved.o;
  // x_rows[r, :] = x[source[r] / k, :]   (the one permutation of the tokens)
  parallel_for_rows(rows, std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                    [&](std::size_t begin, std::size_t end) {
                      for (std::size_t r = begin; r < end; ++r) {
                        const T* from = x + (routing.source[r] / k) * c;
                        std::copy(from, from + c, xr + r * c);
                      }
                    });
  const std::size_t block = block_rows<T>(rows, h);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::size_t r0 = routing.offsets[e], ne = routing.counts[e];
    if (ne == 0) continue;
    const MoeExpertWeights<T>& w = experts[e];
    // g[ne, H] = x_e[ne, C] . W1^T[C, H];  u[ne, H] = x_e . W3^T
    gemm<T>(op, matrix(static_cast<const T*>(xr + r0 * c), ne, c), false, matrix(w.w1, h, c), true,
            matrix(g + r0 * h, ne, h), false);
    gemm<T>(op, matrix(static_cast<const T*>(xr + r0 * c), ne, c), false, matrix(w.w3, h, c), true,
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
  // y[t, :] = sum over s of weights[t, s] * o[row_of[t k + s], :]  (kept choices, s in order)
  parallel_for_rows(n, std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c * k, 1)),
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
void moe_experts_backward(const char* op, const MoeRouting& routing, Activation f, std::size_t c,
                          std::size_t h, const T* weights,
                          const std::vector<MoeExpertWeights<T>>& experts,
                          const MoeSaved<const T>& saved, const T* dy, MoeGrads<T>& grads) {
  const std::size_t k = routing.k, n = routing.tokens;
  const T *xr = saved.x_rows, *g = saved.g, *u = saved.u, *o = saved.o;
  MoeGradTarget<T>* const dx = grads.dx;
  if (dx && !dx->accumulate) std::fill(dx->data, dx->data + dx->size, T(0));
  if (dx) dx->accumulate = true;  // the experts' rows are added onto it below
  if (MoeGradTarget<T>* dw = grads.dweights) {
    // in the forward pass: y[t] += weights[c] * o[r], so now dweights[c] (+)= dy[t] . o[r]
    const bool add = dw->accumulate;
    parallel_for_rows(n * k,
                      std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1)),
                      [&](std::size_t begin, std::size_t end) {
                        for (std::size_t ch = begin; ch < end; ++ch) {
                          const std::size_t r = routing.row_of[ch];
                          T dot = T(0);
                          if (r != MoeRouting::k_dropped) {
                            const T *dyt = dy + (ch / k) * c, *orow = o + r * c;
                            for (std::size_t i = 0; i < c; ++i) dot += dyt[i] * orow[i];
                          }
                          dw->data[ch] = add ? dw->data[ch] + dot : dot;
                        }
                      });
    dw->accumulate = true;
  }
  const std::size_t block = block_rows<T>(routing.rows(), h);
  const std::size_t light_rows =
      std::max<std::size_t>(1, k_parallel_light / std::max<std::size_t>(c, 1));
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::size_t r0 = routing.offsets[e], ne = routing.counts[e];
    MoeGradTarget<T>*dw1 = grads.dw1[e], *dw3 = grads.dw3[e], *dw2 = grads.dw2[e];
    const bool want_g = dx || dw1, want_u = dx || dw3;
    if (ne == 0 || !(want_g || want_u || dw2)) continue;
    const MoeExpertWeights<T>& w = experts[e];
    T* const d_out = thread_scratch<T>(ScratchSlot::moe_rows, block * c);
    T* const da =
        want_g || want_u ? thread_scratch<T>(ScratchSlot::fused_gradient, block * h) : nullptr;
    T* const a = dw2 ? thread_scratch<T>(ScratchSlot::fused_activation, block * h) : nullptr;
    T* const dg = want_g ? thread_scratch<T>(ScratchSlot::moe_gate_grad, block * h) : nullptr;
    T* const du = want_u ? thread_scratch<T>(ScratchSlot::moe_up_grad, block * h) : nullptr;
    T* const dxe = dx ? thread_scratch<T>(ScratchSlot::moe_row_grad, block * c) : nullptr;
    for (std::size_t b0 = 0; b0 < ne; b0 += block) {
      const std::size_t nb = std::min(block, ne - b0), at = r0 + b0;
      const T* xb = xr + at * c;
      // in the forward pass: y[t] += weights[ch] * o[r], so now d_out[r] = weights[ch] * dy[t]
      parallel_for_rows(nb, light_rows, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          const std::size_t ch = routing.source[at + i];
          const T wt = weights[ch];
          const T* dyt = dy + (ch / k) * c;
          for (std::size_t j = 0; j < c; ++j) d_out[i * c + j] = wt * dyt[j];
        }
      });
      // in the forward pass: o = a . W2^T, so now da[nb, H] = d_out[nb, C] . W2[C, H]
      if (da)
        gemm<T>(op, matrix(static_cast<const T*>(d_out), nb, c), false, matrix(w.w2, c, h), false,
                matrix(da, nb, h), false);
      // in the forward pass: a = u * f(g), so now a again (for dW2) and
      // du = da * f(g), dg = da * u * f'(g), in one pass
      gated_value_and_backward(f, u + at * h, g + at * h, static_cast<const T*>(da), du, false, dg,
                               false, a, nb * h);
      // dW2[C, H] (+)= d_out^T[C, nb] . a[nb, H]
      if (dw2)
        gemm_into<T>(op, matrix(static_cast<const T*>(d_out), nb, c), true,
                     matrix(static_cast<const T*>(a), nb, h), false, *dw2, c, h);
      // in the forward pass: g = x_e . W1^T, u = x_e . W3^T, so now
      // dW1[H, C] (+)= dg^T[H, nb] . x_e[nb, C], dW3[H, C] (+)= du^T . x_e
      if (dw1)
        gemm_into<T>(op, matrix(static_cast<const T*>(dg), nb, h), true, matrix(xb, nb, c), false,
                     *dw1, h, c);
      if (dw3)
        gemm_into<T>(op, matrix(static_cast<const T*>(du), nb, h), true, matrix(xb, nb, c), false,
                     *dw3, h, c);
      if (!dx) continue;
      // dx_e[nb, C] = dg[nb, H] . W1[H, C] + du[nb, H] . W3[H, C]
      gemm<T>(op, matrix(static_cast<const T*>(dg), nb, h), false, matrix(w.w1, h, c), false,
              matrix(dxe, nb, c), false);
      gemm<T>(op, matrix(static_cast<const T*>(du), nb, h), false, matrix(w.w3, h, c), false,
              matrix(dxe, nb, c), true);
      // in the forward pass: x_rows[r] = x[t], so now dx[t] += dx_e[r] (an
      // expert's rows are distinct tokens: no two rows of a block meet)
      parallel_for_rows(nb, light_rows, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          T* dxt = dx->data + (routing.source[at + i] / k) * c;
          for (std::size_t j = 0; j < c; ++j) dxt[j] += dxe[i * c + j];
        }
      });
    }
  }
  // An expert without rows (or an empty batch) still owes its weights a gradient: zero.
  const auto settle = [](MoeGradTarget<T>* t) {
    if (t && !t->accumulate) {
      std::fill(t->data, t->data + t->size, T(0));
      t->accumulate = true;
    }
  };
  for (std::size_t e = 0; e < experts.size(); ++e) {
    settle(grads.dw1[e]);
    settle(grads.dw3[e]);
    settle(grads.dw2[e]);
  }
}

#define XTGRAD_INSTANTIATE_MOE_KERNELS(T)                                                       \
  template void moe_top_k(const T*, std::size_t, std::size_t, std::size_t, std::size_t*);       \
  template void moe_experts_forward(                                                            \
      const char*, const MoeRouting&, Activation, std::size_t, std::size_t, const T*, const T*, \
      const std::vector<MoeExpertWeights<T>>&, const MoeSaved<T>&, T*);                         \
  template void moe_experts_backward(                                                           \
      const char*, const MoeRouting&, Activation, std::size_t, std::size_t, const T*,           \
      const std::vector<MoeExpertWeights<T>>&, const MoeSaved<const T>&, const T*, MoeGrads<T>&);
XTGRAD_INSTANTIATE_MOE_KERNELS(float)
XTGRAD_INSTANTIATE_MOE_KERNELS(double)
#undef XTGRAD_INSTANTIATE_MOE_KERNELS

}  // namespace xtgrad::detail
