#pragma once
// Where the tasks of the fused attention kernels keep their operands
// (internal): the packed key tiles of the forward, the running softmax of
// one query tile, the packed rows, row sums and partial dq sums the backward
// tasks share, and the tiles of one backward task. All of it lives in the
// thread's scratch slots (scratch.hpp); attention_kernels.cpp says who fills
// and who reads each buffer. At bfloat16 (Problem::bf16) the operands of the
// products are pair words (attention_tiles_bf16.hpp), in the Word buffers of
// the same slots; the float ones of the products are then left unused.

#include <algorithm>
#include <cstddef>
#include <limits>

#include "attention_problem.hpp"  // first (through simd.hpp): see simd.hpp
#include "attention_tiles_bf16.hpp"
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

  // At bf16: K^T as pair rows [pairs_of(Dh), Bc], V as pair rows [Bc / 2,
  // Dv padded], in `words` (v_rows unused).
  Word* words = nullptr;
  std::size_t kt_words = 0, v_words = 0;
  Word* kt_pairs(std::size_t head_index, std::size_t tile) const {
    return words + (head_index * tiles + tile) * (kt_words + v_words);
  }
  Word* v_pairs(std::size_t head_index, std::size_t tile) const {
    return kt_pairs(head_index, tile) + kt_words;
  }

  // The tiles of `heads` (batch, kv head) pairs in this thread's scratch.
  void allocate(const Problem<T>& p, const Tiles& t, std::size_t heads) {
    if (p.bf16) {
      kt_words = pairs_of(p.qk_dim) * t.cols;
      v_words = t.cols / 2 * padded_words(p.v_dim);
      words = aligned_thread_scratch<Word>(
          ScratchSlot::attention_packed,
          std::max<std::size_t>(heads * tiles * (kt_words + v_words), 1));
    } else {
      data = aligned_thread_scratch<T>(ScratchSlot::attention_packed,
                                       std::max<std::size_t>(heads * head_size(), 1));
    }
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
  // At bf16: the tile's q rows [Br, pairs_of(Dh)] and a band's P rows [Br, Bc / 2] as words.
  Word *q_words = nullptr, *p_words = nullptr;

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
    if (p.bf16) {
      q_words = aligned_thread_scratch<Word>(ScratchSlot::attention_tiles,
                                             br * (pairs_of(p.qk_dim) + t.cols / 2));
      p_words = q_words + br * pairs_of(p.qk_dim);
    }
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
  // At bf16, per head: q and dO rows as words (A of S and dP) [Tq, pairs_of(D)],
  // and as pair rows (B of dK and dV) [pairs_of(Tq), D padded].
  Word *q_words = nullptr, *d_out_words = nullptr, *q_pairs = nullptr, *d_out_pairs = nullptr;

  // Points into `data`, sized by size(), for `count` heads from `first`.
  void place(const Problem<T>& p, T* data) {
    const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
    q_packed = data;
    d_out_packed = q_packed + count * p.q_len * dh_padded;
    row_dot = d_out_packed + count * p.q_len * dv_padded;
    dq_partial = row_dot + padded<T>(count * p.q_len);
  }
  void place_words(const Problem<T>& p) {
    if (!p.bf16) return;
    const std::size_t rows = count * p.q_len, pair_rows = count * pairs_of(p.q_len);
    const std::size_t dh_words = pairs_of(p.qk_dim), dv_words = pairs_of(p.v_dim);
    q_words = aligned_thread_scratch<Word>(
        ScratchSlot::attention_rows,
        rows * (dh_words + dv_words) + pair_rows * (padded<T>(p.qk_dim) + padded<T>(p.v_dim)) + 1);
    d_out_words = q_words + rows * dh_words;
    q_pairs = d_out_words + rows * dv_words;
    d_out_pairs = q_pairs + pair_rows * padded<T>(p.qk_dim);
  }
  // Pair row of rows i, i + 1 (i even) of head (b * H + h).
  std::size_t pair_row(std::size_t head, std::size_t i, std::size_t q_len) const {
    return (head - first) * pairs_of(q_len) + i / 2;
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
    if (p.bf16) {  // (then k, kt and vt are unused)
      const std::size_t pair_tile = pairs_of(t.rows) * t.cols;
      k_pairs = aligned_thread_scratch<Word>(ScratchSlot::attention_tiles,
                                             t.cols / 2 * dh_padded +
                                                 (pairs_of(p.qk_dim) + pairs_of(p.v_dim)) * t.cols +
                                                 t.rows * t.cols / 2 + 2 * pair_tile);
      kt_pairs = k_pairs + t.cols / 2 * dh_padded;
      vt_pairs = kt_pairs + pairs_of(p.qk_dim) * t.cols;
      ds_words = vt_pairs + pairs_of(p.v_dim) * t.cols;
      pd_pairs = ds_words + t.rows * t.cols / 2;
      ds_pairs = pd_pairs + pair_tile;
    }
  }
  // At bf16: the key tile as pair rows K [Bc / 2, Dh padded], K^T [pairs_of(Dh),
  // Bc], V^T [pairs_of(Dv), Bc]; a band's dS rows as words [Br, Bc / 2]; a key
  // band's P (dropped) and dS as pair rows [pairs_of(Br), Bc], A = their transposes.
  Word *k_pairs = nullptr, *kt_pairs = nullptr, *vt_pairs = nullptr, *ds_words = nullptr,
       *pd_pairs = nullptr, *ds_pairs = nullptr;
};

}  // namespace xtgrad::detail::attention
