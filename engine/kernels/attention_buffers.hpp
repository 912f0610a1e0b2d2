#pragma once
// Where the tasks of the fused attention kernels keep their operands
// (internal): the packed key tiles of the forward, the running softmax of
// one query tile, the packed rows, row sums and partial dq sums the backward
// tasks share, and the tiles of one backward task. All of it lives in the
// thread's scratch slots (scratch.hpp); attention_kernels.cpp says who fills
// and who reads each buffer.

#include <algorithm>
#include <cstddef>
#include <limits>

#include "attention_problem.hpp"  // first (through simd.hpp): see simd.hpp
#include "scratch.hpp"

namespace xtgrad::detail::attention {

// Every key tile of every (batch, kv head), packed once for all query tiles:
// K^T [Dh, Bc] (the B operand of S = Q K^T) and V [Bc, Dv padded] (of O += P V).
template <class T>
struct PackedKeys {
  T* data = nullptr;
  std::size_t tiles = 0, kt_size = 0, v_size = 0;

  PackedKeys(const Problem<T>& p, const Tiles& t)
      : tiles((p.k_len + t.cols - 1) / t.cols),
        kt_size(p.qk_dim * t.cols),
        v_size(t.cols * padded<T>(p.v_dim)) {}
  // Elements of the tiles of one (batch, kv head).
  std::size_t head_size() const { return tiles * (kt_size + v_size); }
  T* kt(std::size_t head_index, std::size_t tile) const {
    return data + (head_index * tiles + tile) * (kt_size + v_size);
  }
  T* v(std::size_t head_index, std::size_t tile) const { return kt(head_index, tile) + kt_size; }

  // Set (by forward_per_head, for one (batch, kv head) at a time) when v's
  // rows already are a packed V tile's (contiguous, Dv a whole number of
  // vectors): its tile t is then read in place at v_rows + t * v_size, and
  // not packed (the products read the same values, so the same bits).
  const T* v_rows = nullptr;
  const T* v_tile(std::size_t head_index, std::size_t tile) const {
    return v_rows != nullptr ? v_rows + tile * v_size : v(head_index, tile);
  }
};

// The online softmax of one query tile (FlashAttention-2's O~, m and l), in
// the thread's scratch: the score tile s [Br, Bc] (then P), the output
// accumulator acc [Br, Dv padded], the running row maxima m and row sums l;
// acc and l start at 0, m at -inf.
template <class T>
struct SoftmaxRows {
  T *s, *acc, *m, *l;
  std::size_t acc_row;  // Dv padded

  SoftmaxRows(const Problem<T>& p, const Tiles& t, std::size_t rows) : acc_row(padded<T>(p.v_dim)) {
    const std::size_t br = t.rows;
    s = aligned_thread_scratch<T>(ScratchSlot::attention_tiles,
                                  br * t.cols + br * acc_row + 2 * br);
    acc = s + br * t.cols;
    m = acc + br * acc_row;
    l = m + br;
    std::fill(acc, acc + rows * acc_row, T(0));
    std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
    std::fill(l, l + rows, T(0));
  }
};

// What the backward tasks read: per (batch, head) the packed query rows [Tq,
// Dh padded] and output-gradient rows [Tq, Dv padded] (B operands of dK and
// dV), D = rowsum(dO o O) [Tq], and the partial dq sums; for the heads
// [first, first + count) (all of them, or one task's group).
template <class T>
struct Shared {
  T* q_packed = nullptr;
  T* d_out_packed = nullptr;
  T* row_dot = nullptr;     // D [heads, Tq]
  T* dq_partial = nullptr;  // [splits, heads, Tq, Dh padded]
  std::size_t splits = 1, first = 0, count = 0;

  // Points into `data`, sized by size(), for `count` heads from `first`.
  void place(const Problem<T>& p, T* data) {
    const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
    q_packed = data;
    d_out_packed = q_packed + count * p.q_len * dh_padded;
    row_dot = d_out_packed + count * p.q_len * dv_padded;
    dq_partial = row_dot + padded<T>(count * p.q_len);
  }
  static std::size_t size(const Problem<T>& p, std::size_t count, std::size_t splits) {
    const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
    return count * p.q_len * (dh_padded + dv_padded) + padded<T>(count * p.q_len) +
           splits * count * p.q_len * dh_padded + 1;
  }
  // Row i of head (b * H + h) in the buffers.
  std::size_t row(std::size_t head, std::size_t i, std::size_t q_len) const {
    return (head - first) * q_len + i;
  }
  T* dq_row(std::size_t split, std::size_t head, std::size_t i, const Problem<T>& p) const {
    return dq_partial + (split * count * p.q_len + row(head, i, p.q_len)) * padded<T>(p.qk_dim);
  }
};

// Scratch of one backward task: the key tile packed three ways, its dK and
// dV accumulators, and the P, dropped P and dP / dS tiles of one query tile.
template <class T>
struct TaskTiles {
  T *k, *kt, *vt, *dk, *dv, *s, *pd, *ds;
  TaskTiles(const Problem<T>& p, const Tiles& t) {
    const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
    const std::size_t tile = t.rows * t.cols;
    k = aligned_thread_scratch<T>(
        ScratchSlot::attention_tiles,
        t.cols * (2 * dh_padded + 2 * dv_padded) + (p.qk_dim + p.v_dim) * t.cols + 3 * tile);
    dk = k + t.cols * dh_padded;
    dv = dk + t.cols * dh_padded;
    kt = dv + t.cols * dv_padded;
    vt = kt + p.qk_dim * t.cols;
    s = vt + p.v_dim * t.cols;
    pd = s + tile;
    ds = pd + tile;
  }
};

}  // namespace xtgrad::detail::attention
