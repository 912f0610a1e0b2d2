#pragma once
// How the fused attention kernels fill the operand buffers of
// attention_buffers.hpp (internal): the key tiles of the forward, and the
// rows and row sums D of each head for the backward; in float, or (Bf16) as
// the pair words of attention_tiles_bf16.hpp; and how the backward's
// partial dq sums are written out. attention_kernels.hpp says when each
// runs.

#include <algorithm>
#include <cstddef>

#include "attention_buffers.hpp"  // first (through simd.hpp): see simd.hpp
#include "parallel.hpp"

namespace xtgrad::detail::attention {

// Key tile `tile` of kv head (b, hk) into packed's slot (slot, tile).
template <class T, bool Bf16>
void pack_key_tile(const Problem<T>& p, const Tiles& tiles, const T* k, const T* v,
                   const PackedKeys<T>& packed, std::size_t b, std::size_t hk, std::size_t slot,
                   std::size_t tile) {
  const std::size_t bc = tiles.cols, j0 = tile * bc, count = std::min(bc, p.k_len - j0);
  if constexpr (Bf16) {  // K^T and V as pair rows
    pack_pair_columns(k + p.k.at(b, hk, j0), p.k.row, count, p.qk_dim, packed.kt_pairs(slot, tile),
                      bc);
    pack_pair_rows(v + p.v.at(b, hk, j0), p.v.row, count, p.v_dim, packed.v_pairs(slot, tile),
                   padded_words(p.v_dim));
    return;
  }
  // kt[Dh, Bc] = k[j0 : j0 + count, Dh]^T, zero columns past count
  pack_transposed(k + p.k.at(b, hk, j0), p.k.row, count, p.qk_dim, packed.kt(slot, tile), bc);
  // v[count, Dv padded] = v[j0 : j0 + count, Dv], unless read in place
  if (packed.v_rows == nullptr)
    pack_rows(v + p.v.at(b, hk, j0), p.v.row, count, p.v_dim, packed.v(slot, tile),
              padded<T>(p.v_dim));
}

// Every key tile of every (batch, kv head), slot b * Hkv + hk.
template <class T, bool Bf16>
void pack_keys(const Problem<T>& p, const Tiles& tiles, const T* k, const T* v,
               const PackedKeys<T>& packed) {
  const std::size_t n = p.batch * p.kv_heads * packed.tiles;
  const std::size_t elements = tiles.cols * (p.qk_dim + p.v_dim);  // copied per task
  parallel_for_rows(
      n, tasks_per_thread(k_parallel_light, elements), [&](std::size_t t0, std::size_t t1) {
        for (std::size_t task = t0; task < t1; ++task) {
          const std::size_t head_index = task / packed.tiles, tile = task % packed.tiles;
          pack_key_tile<T, Bf16>(p, tiles, k, v, packed, head_index / p.kv_heads,
                                 head_index % p.kv_heads, head_index, tile);
        }
      });
}

// out[i] = sum_d x[i, d] y[i, d] for i < rows, d < cols, summed in the order
// of d (a plain loop's bits), eight rows at a time: their chains of
// dependent adds overlap, where one row's chain alone left the latency of
// every add exposed (Dh = 32: a chain of 32 adds a row).
template <class T>
void row_dots(const T* x, const T* y, std::ptrdiff_t row_stride, std::size_t rows, std::size_t cols,
              T* out) {
  constexpr std::size_t R = 8;
  std::size_t i = 0;
  for (; i + R <= rows; i += R) {
    const T* xs = x + static_cast<std::ptrdiff_t>(i) * row_stride;
    const T* ys = y + static_cast<std::ptrdiff_t>(i) * row_stride;
    T sum[R] = {};
    for (std::size_t d = 0; d < cols; ++d)
      for (std::size_t r = 0; r < R; ++r) {
        const std::ptrdiff_t at =
            static_cast<std::ptrdiff_t>(r) * row_stride + static_cast<std::ptrdiff_t>(d);
        sum[r] += xs[at] * ys[at];
      }
    std::copy(sum, sum + R, out + i);
  }
  for (; i < rows; ++i) {
    const T* xs = x + static_cast<std::ptrdiff_t>(i) * row_stride;
    const T* ys = y + static_cast<std::ptrdiff_t>(i) * row_stride;
    T sum = T(0);
    for (std::size_t d = 0; d < cols; ++d) sum += xs[d] * ys[d];
    out[i] = sum;
  }
}

// Packs the rows of head (b * H + h) and computes its D.
template <class T, bool Bf16>
void prepare_head(const Problem<T>& p, const T* q, const T* o, const T* d_out, const Shared<T>& sh,
                  std::size_t head) {
  const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
  const std::size_t b = head / p.heads, h = head % p.heads, r0 = sh.row(head, 0, p.q_len);
  const T* q_rows = q + p.q.at(b, h, 0);
  const T* d_out_rows = d_out + p.o.at(b, h, 0);
  if constexpr (Bf16) {  // as words (A of S and dP) and pair rows (B of dK and dV)
    const std::size_t dh_words = pairs_of(p.qk_dim), dv_words = pairs_of(p.v_dim);
    const std::size_t pair_row = sh.pair_row(head, 0, p.q_len);
    convert_rows(q_rows, p.q.row, p.q_len, p.qk_dim, sh.q_words + r0 * dh_words, dh_words);
    convert_rows(d_out_rows, p.o.row, p.q_len, p.v_dim, sh.d_out_words + r0 * dv_words, dv_words);
    pack_pair_rows(q_rows, p.q.row, p.q_len, p.qk_dim, sh.q_pairs + pair_row * dh_padded,
                   dh_padded);
    pack_pair_rows(d_out_rows, p.o.row, p.q_len, p.v_dim, sh.d_out_pairs + pair_row * dv_padded,
                   dv_padded);
  } else {
    pack_rows(q_rows, p.q.row, p.q_len, p.qk_dim, sh.q_packed + r0 * dh_padded, dh_padded);
    pack_rows(d_out_rows, p.o.row, p.q_len, p.v_dim, sh.d_out_packed + r0 * dv_padded, dv_padded);
  }
  row_dots(d_out_rows, o + p.o.at(b, h, 0), p.o.row, p.q_len, p.v_dim, sh.row_dot + r0);
}

// dq[b, h, i, :] for rows [i0, i1) of head (b * H + h): the sum over splits
// of their partials, in split order. A range at a time: per row, a call and
// the head's index arithmetic cost as much as the copy of Dh = 32 floats.
template <class T>
void write_dq_rows(const Problem<T>& p, const Shared<T>& sh, T* dq, std::size_t head,
                   std::size_t i0, std::size_t i1) {
  const std::size_t b = head / p.heads, h = head % p.heads;
  for (std::size_t i = i0; i < i1; ++i) {
    T* out = dq + p.q.at(b, h, i);
    copy_row(sh.dq_row(0, head, i, p), p.qk_dim, out);
    for (std::size_t s = 1; s < sh.splits; ++s) {
      const T* more = sh.dq_row(s, head, i, p);
      for (std::size_t d = 0; d < p.qk_dim; ++d) out[d] += more[d];
    }
  }
}

}  // namespace xtgrad::detail::attention
