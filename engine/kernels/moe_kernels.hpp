#pragma once
// The kernels of the mixture-of-experts op (ops/moe.hpp), on flat row-major
// buffers; they know arrays and MoeRouting, never the tape.
//
// Routing: the top-k experts of each token, then a counting sort of the
// N * k choices by expert (stable: token order within an expert), cut at
// the capacity. Experts: for each expert e over its n_e rows of the
// permuted layout, x_e[i] = x[t] for row i's token t (gathered a tile at a
// time, never all at once), with W1, W3 [H, C] and W2 [C, H] (nn.Linear's
// [out, in], as Mixtral stores w1, w3, w2):
//   g = x_e . W1^T,  u = x_e . W3^T           [n_e, H]   (saved)
//   o = (u * f(g)) . W2^T                     [n_e, C]   (a block of rows at a time)
//   y[t] = sum over t's kept choices c of w[c] * o[row_of[c]]
// and backward in reverse, with dy_e[i] = dy[t] and w_i = w[c] of row i:
//   dr = dy_e . W2                            [n_e, H]   (the gradient of a per unit w)
//   du' = dr * f(g),  dg' = dr * u * f'(g)    (one pass, as gated_linear's; a again)
//   dw[c] = dy[t] . o[i] = dr[i] . a[i]       (0 for a dropped choice)
//   dW2 += dy_e^T . (w * a),  dW1 += dg'^T . (w * x_e),  dW3 += du'^T . (w * x_e)
//   dx[t] += w_i * (dg' . W1 + du' . W3)[i]
// (the gradient of o[i] is w_i dy[t], so da = w_i dr, du = w_i du', dg =
// w_i dg': the weight moves to the operand it is cheapest on). What is
// stored is g and u of the N * k routed rows (2 H values a kept choice),
// never x's rows, o or [E, N, H]; x_e, a, o and the backward's hidden-wide
// buffers exist a block of rows at a time.
//
// Expert parallelism (ops/moe_parallel.cpp) computes the experts' rows on
// another process than the tokens', from rows received (MoeRows): the same
// per-expert products, with x's rows and the gradient of o as buffers.

#include <cstddef>
#include <vector>

#include "../activation.hpp"
#include "../moe_routing.hpp"

namespace xtgrad::detail {

// torch.topk(p, k) of each of the n rows of p [n, e] on the CPU (torch 1.13,
// aten/src/ATen/native/TopKImpl.h), ties included: (value, index) pairs
// ordered by value only, std::partial_sort when k * 64 <= e, else
// std::nth_element at k - 1 then std::sort of the first k - 1; NaN counts
// as the largest. expert[i * k + s] = the index of row i's s-th element.
template <class T>
void moe_top_k(const T* p, std::size_t n, std::size_t e, std::size_t k, std::size_t* expert);

// The routing tables of `routing` from routing.expert (tokens, k, experts and
// capacity set): the counting sort, the capacity cut, offsets, source, row_of.
void moe_sort(MoeRouting& routing);
// The same with a capacity per expert ([E]; expert parallelism: what the
// ranks before this one left of each expert's capacity).
void moe_sort(MoeRouting& routing, const std::vector<std::size_t>& capacities);

// What the op keeps for backward: g and u of every routed row, in the
// permuted layout, two consecutive parts of one buffer of size(rows, H)
// values (the op keeps it in its node, Tape::save).
template <class T>
struct MoeHidden {
  T* g;  // [rows, H] x_e . W1^T
  T* u;  // [rows, H] x_e . W3^T

  static std::size_t size(std::size_t rows, std::size_t h) { return rows * 2 * h; }
  static MoeHidden in(T* buffer, std::size_t rows, std::size_t h) {
    return {buffer, buffer + rows * h};
  }
};

// The experts' rows as buffers (expert parallelism: rows received from
// every rank, expert by expert).
template <class T>
struct MoeRows {
  T* x_rows;  // [rows, C] x's rows
  T* g;       // [rows, H] x_rows . W1^T
  T* u;       // [rows, H] x_rows . W3^T
  T* o;       // [rows, C] each row's expert output, before its weight
};

// One expert's weights: w1, w3 [H, C], w2 [C, H].
template <class T>
struct MoeExpertWeights {
  const T* w1;
  const T* w3;
  const T* w2;
};

// A gradient buffer written by the first write of a backward (accumulate
// false: overwrite, BLAS beta = 0) and added to by every later one; several
// roles that are one tape node share one target, so that a weight passed
// twice sums both shares. Null data: no gradient wanted.
template <class T>
struct MoeGradTarget {
  T* data = nullptr;
  std::size_t size = 0;
  bool accumulate = false;
};

// The gradients of the experts' weights, one target (or null) per expert and role.
template <class T>
struct MoeWeightGrads {
  std::vector<MoeGradTarget<T>*> dw1, dw3, dw2;  // [E] each
};

// The gradients backward writes, one target (or null) per role.
template <class T>
struct MoeGrads {
  MoeGradTarget<T>* dx = nullptr;        // [N, C]
  MoeGradTarget<T>* dweights = nullptr;  // [N, k]
  MoeWeightGrads<T> experts;
};

// How the experts' GEMMs are cut. An expert's row count changes with the
// routing at every step, and oneDNN's matmul is generated for one shape
// (kernels/onednn_gemm.hpp: a new row count costs a primitive's creation,
// about a millisecond, more than the product itself at a small model's
// sizes). An expert with at most k_moe_tile_macs multiply-adds per product
// therefore runs in tiles of exactly k_moe_tile_rows rows, its last tile
// padded with zero rows (which add exact zeros to the weight gradients);
// a last tile of at most k_streaming_rows rows goes as it is to the few-rows
// GEMM, which generates nothing. Larger experts run as one product per GEMM
// (a creation is then a small part of it). The cut depends on the shapes
// only, so every thread count gives the same bits.
inline constexpr std::size_t k_moe_tile_rows = 64;
inline constexpr std::size_t k_moe_tile_macs = std::size_t(1) << 25;

// The experts of this process and the layout of their rows: expert e
// (weights[e]) computes the rows [offsets[e], offsets[e + 1]) of the
// permuted layout (E + 1 offsets); tiled when its products have at most
// tile_macs multiply-adds (tests choose it to reach both cuts).
template <class T>
struct MoeExpertSet {
  Activation f;
  std::size_t c, h;
  const std::vector<std::size_t>& offsets;
  const std::vector<MoeExpertWeights<T>>& weights;
  std::size_t tile_macs = k_moe_tile_macs;
};

// y [N, C] from x [N, C] and the gate weights w [N, k]; fills `saved`.
template <class T>
void moe_experts_forward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                         const T* x, const T* weights, const MoeHidden<T>& saved, T* y);

// The gradients of `grads` from dy [N, C] (x and weights as forward had
// them); a target no row reaches (an expert with no rows) is zeroed when
// nothing wrote it before.
template <class T>
void moe_experts_backward(const char* op, const MoeRouting& routing, const MoeExpertSet<T>& experts,
                          const T* x, const T* weights, const MoeHidden<const T>& saved,
                          const T* dy, MoeGrads<T>& grads);

// The row passes (kernels/moe_row_kernels.cpp), and the experts over rows
// as buffers for expert parallelism (ops/moe_parallel.cpp), where the
// expert rows are computed on another process than the tokens':
//
// to[i] = s_i * from[source[first + i] / k] for i < rows, s_i =
// weights[source[first + i]] (1 when weights is null); rows of C values.
template <class T>
void moe_gather_rows(const MoeRouting& routing, std::size_t c, const T* from, const T* weights,
                     std::size_t first, std::size_t rows, T* to);
// into[source[first + i] / k] += s_i * from[i] for i < rows (s_i as above;
// an expert's rows are distinct tokens, so one expert's rows never meet).
template <class T>
void moe_scatter_rows(const MoeRouting& routing, std::size_t c, const T* from, const T* weights,
                      std::size_t first, std::size_t rows, T* into);
// rows.g, rows.u [rows, H] and rows.o [rows, C] (unweighted) of the
// experts' rows from rows.x_rows.
template <class T>
void moe_expert_rows_forward(const char* op, const MoeExpertSet<T>& experts,
                             const MoeRows<T>& rows);
// The experts' backward over their rows (rows.x_rows, g, u as forward left
// them; rows.o unused), whose o rows count weights[i] times [rows] in y,
// from d_out [rows, C], the gradient of the o rows divided by their
// weights: the weight gradients (targets null where not wanted; zeroed
// when no row reaches them) and, each unless null, dx_rows [rows, C] (the
// gradient of the x rows divided by their weights) and dweights [rows]
// (the weights' gradient, d_out . o), both written, not added to.
template <class T>
void moe_expert_rows_backward(const char* op, const MoeExpertSet<T>& experts,
                              const MoeRows<const T>& rows, const T* d_out, const T* weights,
                              const MoeWeightGrads<T>& dw, T* dx_rows, T* dweights);

}  // namespace xtgrad::detail
