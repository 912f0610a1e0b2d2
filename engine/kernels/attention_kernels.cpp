#include "softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "attention_kernels.hpp"
#include "attention_packing.hpp"
#include "parallel.hpp"

// The forward kernel, then the backward kernel that inverts it
// (attention_kernels.hpp describes both). Each runs its products in float,
// or (Bf16, for float at Problem::bf16) in bfloat16 with float sums on the
// pair words of attention_tiles_bf16.hpp, packed where the float operands are.

namespace xtgrad::detail::attention {

namespace {

// Row r (query i) of the tile's scores s [Br, bc], first `width` keys of the
// key tile at j0 (its first `seen` real): s = scale q k^T (+ mask), the
// running max m and sum l of the row and its acc rescaled to the new max,
// and s turned into P = exp(s - m) (dropped out when dropout is on).
template <class T>
void softmax_row(const Problem<T>& p, const SoftmaxRows<T>& t, std::size_t bc, std::size_t b,
                 std::size_t h, std::size_t i, std::size_t r, std::size_t j0, std::size_t seen,
                 std::size_t width) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  T* sr = t.s + r * bc;
  T m_new = std::max(t.m[r], score_row<T, true>(p, b, h, i, j0, seen, width, sr));  // hidden: -inf
  if (m_new == minus_inf) {
    // A max of -inf: every key of the row so far is hidden, or a score is
    // NaN (the max passes over NaN). Only the first is "no visible key yet"
    // (P = 0); a NaN (in q, k or an additive mask) must stay NaN, as in
    // softmax(q k^T) v: m = NaN makes P, l, the output and L NaN from here on.
    if (std::none_of(sr, sr + seen, [](T x) { return std::isnan(x); })) {
      std::fill(sr, sr + width, T(0));
      return;
    }
    m_new = std::numeric_limits<T>::quiet_NaN();
  }
  // alpha = exp(m_old - m_new): 0 on the row's first visible tile (m_old = -inf)
  const T alpha = t.m[r] == minus_inf ? T(0) : std::exp(t.m[r] - m_new);
  // P[j] = exp(s[j] - m_new);  l = alpha l + sum_j P[j]  (undropped, as PyTorch)
  t.l[r] =
      alpha * t.l[r] + static_cast<T>(exp_minus_scalar<T, true, true>(sr, m_new, T(0), sr, width));
  t.m[r] = m_new;
  T* acc = t.acc + r * t.acc_row;
  if (alpha != T(1))  // acc[r, :] *= exp(m_old - m_new)
    for (std::size_t d = 0; d < t.acc_row; ++d) acc[d] *= alpha;
  if (p.dropout)  // P[j] = P[j] keep[j] / (1 - dropout_p)
    for_dropout_row(p, b, h, i, j0, seen,
                    [&](std::size_t j, bool kept) { sr[j] = kept ? sr[j] * p.keep_scale : T(0); });
}

// O = acc / l and L = m + log l for the tile's rows [i0, i0 + rows).
template <class T>
void write_rows(const Problem<T>& p, const SoftmaxRows<T>& t, T* o, T* lse, std::size_t b,
                std::size_t h, std::size_t i0, std::size_t rows) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = i0 + r;
    T* out = o + p.o.at(b, h, i);
    T& row_lse = lse[(b * p.heads + h) * p.q_len + i];
    if (t.l[r] == T(0)) {  // no visible key: output 0, and P = exp(S - inf) = 0 in backward
      std::fill(out, out + p.v_dim, T(0));
      row_lse = std::numeric_limits<T>::infinity();
      continue;
    }
    const T inverse = T(1) / t.l[r];
    for (std::size_t d = 0; d < p.v_dim; ++d) out[d] = t.acc[r * t.acc_row + d] * inverse;
    row_lse = t.m[r] + std::log(t.l[r]);
  }
}

// One task: query rows [i0, i0 + rows) of head (b, h), band by band over the
// key tiles they may see: S = scale Q K^T (+ mask), the online softmax, acc
// += P V; then the rows of O and L.
template <class T, bool Bf16>
void forward_tile(const Problem<T>& p, const Tiles& tiles, const PackedKeys<T>& packed, const T* q,
                  T* o, T* lse, std::size_t b, std::size_t h, std::size_t i0,
                  std::size_t head_index) {
  const std::size_t bc = tiles.cols, rows = std::min(tiles.rows, p.q_len - i0);
  const std::size_t dh_words = pairs_of(p.qk_dim);
  const SoftmaxRows<T> t(p, tiles, rows);
  if constexpr (Bf16)  // the tile's q rows as words, once for all key tiles
    convert_rows(q + p.q.at(b, h, i0), p.q.row, rows, p.qk_dim, t.q_words, dh_words);
  for (std::size_t j0 = 0; j0 < visible_keys(p, i0 + rows); j0 += bc) {
    const std::size_t tile = j0 / bc, count = std::min(bc, p.k_len - j0);
    for_each_band(p, i0, rows, j0, count, bc, [&](const Band& band) {
      const std::size_t n = band.r1 - band.r0;
      T* s = t.s + band.r0 * bc;
      // s[n, width] = q[n, Dh] . kt[Dh, width]
      if constexpr (Bf16)
        bf16_tile_product<false>(n, band.width, p.qk_dim, t.q_words + band.r0 * dh_words, dh_words,
                                 1, packed.kt_pairs(head_index, tile), bc, s, bc);
      else
        tile_product<T, false>(n, band.width, p.qk_dim, q + p.q.at(b, h, i0 + band.r0), p.q.row, 1,
                               packed.kt(head_index, tile), bc, s, bc);
      for (std::size_t r = band.r0; r < band.r1; ++r)
        softmax_row(p, t, bc, b, h, i0 + r, r, j0, std::min(count, band.width), band.width);
      // acc[n, Dv] += P[n, cols] . v[cols, Dv]
      T* acc = t.acc + band.r0 * t.acc_row;
      if constexpr (Bf16) {
        convert_rows(s, bc, n, band.cols, t.p_words, bc / 2);
        bf16_tile_product<true>(n, t.acc_row, band.cols, t.p_words, bc / 2, 1,
                                packed.v_pairs(head_index, tile), t.acc_row, acc, t.acc_row);
      } else {
        tile_product<T, true>(n, t.acc_row, band.cols, s, bc, 1, packed.v_tile(head_index, tile),
                              t.acc_row, acc, t.acc_row);
      }
    });
  }
  write_rows(p, t, o, lse, b, h, i0, rows);
}

// One task per (batch, kv head): it packs its keys into its thread's scratch
// and runs every query tile of the group's heads; one pass over the pool.
template <class T, bool Bf16>
void forward_per_head(const Problem<T>& p, const Tiles& tiles, const T* q, const T* k, const T* v,
                      T* o, T* lse) {
  const std::size_t q_tiles = (p.q_len + tiles.rows - 1) / tiles.rows;
  const std::size_t flops = 2 * p.group() * p.q_len * p.k_len * (p.qk_dim + p.v_dim);
  // v's rows are already a V tile's (a KV cache's, or [B, H, T, Dv] with Dv
  // a whole number of vectors): read in place (PackedKeys::v_rows)
  const bool v_in_place =
      !Bf16 && p.v_dim % k_lanes<T> == 0 && p.v.row == static_cast<std::ptrdiff_t>(p.v_dim);
  parallel_for_rows(p.batch * p.kv_heads, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      PackedKeys<T> own(p, tiles);
                      own.allocate(p, tiles, 1);
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t b = task / p.kv_heads, hk = task % p.kv_heads;
                        own.v_rows = v_in_place ? v + p.v.at(b, hk, 0) : nullptr;
                        for (std::size_t tile = 0; tile < own.tiles; ++tile)
                          pack_key_tile<T, Bf16>(p, tiles, k, v, own, b, hk, 0, tile);
                        for (std::size_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
                          for (std::size_t qt = 0; qt < q_tiles; ++qt)
                            forward_tile<T, Bf16>(p, tiles, own, q, o, lse, b, h, qt * tiles.rows,
                                                  0);
                      }
                    });
}

// Few heads: every head's keys packed first, then one task per query tile.
template <class T, bool Bf16>
void forward_per_tile(const Problem<T>& p, const Tiles& tiles, const T* q, const T* k, const T* v,
                      T* o, T* lse) {
  PackedKeys<T> packed(p, tiles);
  packed.allocate(p, tiles, p.batch * p.kv_heads);
  pack_keys<T, Bf16>(p, tiles, k, v, packed);
  const std::size_t q_tiles = (p.q_len + tiles.rows - 1) / tiles.rows;
  const std::size_t flops = 2 * tiles.rows * p.k_len * (p.qk_dim + p.v_dim);  // per task, at most
  parallel_for_rows(p.batch * p.heads * q_tiles, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t head = task / q_tiles, tile = task % q_tiles;
                        const std::size_t b = head / p.heads, h = head % p.heads;
                        forward_tile<T, Bf16>(p, tiles, packed, q, o, lse, b, h, tile * tiles.rows,
                                              b * p.kv_heads + h / p.group());
                      }
                    });
}

template <class T, bool Bf16>
void forward_in(const Problem<T>& p, const T* q, const T* k, const T* v, T* o, T* lse) {
  const Tiles tiles = choose_tiles<T>(p.qk_dim, p.v_dim, p.q_len, p.k_len);
  const std::size_t kv_heads = p.batch * p.kv_heads;
  if (kv_heads >= k_head_tasks_per_thread * parallel_chunks(kv_heads, 1))
    forward_per_head<T, Bf16>(p, tiles, q, k, v, o, lse);
  else
    forward_per_tile<T, Bf16>(p, tiles, q, k, v, o, lse);
}

}  // namespace

template <class T>
void forward(const Problem<T>& p, const T* q, const T* k, const T* v, T* o, T* lse) {
  if constexpr (std::is_same_v<T, float> && k_bf16_kernel)
    if (p.bf16) return forward_in<T, true>(p, q, k, v, o, lse);
  forward_in<T, false>(p, q, k, v, o, lse);
}

template void forward(const Problem<float>&, const float*, const float*, const float*, float*,
                      float*);
template void forward(const Problem<double>&, const double*, const double*, const double*, double*,
                      double*);

// The backward kernel.

namespace {

// Row r (query i) of the tile's s = scores and ds = dP [Br, bc], first
// `width` keys of the key tile at j0 (its first `seen` real). In the forward
// this was P = exp(S - m) / l, and O = P_dropped V; so now P = exp(S - L)
// with L = m + log l, dP_dropped = dO V^T dropped as P was (pd = P_dropped),
// and dS = scale P (dP - D[i]) (the scale of dQ and dK folded in).
template <class T>
void gradient_row(const Problem<T>& p, const Shared<T>& sh, const TaskTiles<T>& w, const T* lse,
                  std::size_t bc, std::size_t b, std::size_t h, std::size_t i, std::size_t r,
                  std::size_t j0, std::size_t seen, std::size_t width) {
  const std::size_t head = b * p.heads + h;
  T* sr = w.s + r * bc;
  T* dsr = w.ds + r * bc;
  score_row(p, b, h, i, j0, seen, width, sr);
  const T l_i = lse[head * p.q_len + i], d_i = sh.row_dot[sh.row(head, i, p.q_len)];
  if (!p.dropout && width % k_lanes<T> == 0) {  // P and dS in one pass over the row
    using B = Batch<T>;
    const B lb(l_i), db(d_i), scale(p.scale);
    for (std::size_t j = 0; j < width; j += k_lanes<T>) {
      const B prob = simd_math::exp_no_ub(B::load_unaligned(sr + j) - lb);
      prob.store_unaligned(sr + j);
      (scale * prob * (B::load_unaligned(dsr + j) - db)).store_unaligned(dsr + j);
    }
    return;
  }
  // P[r, :] = exp(s - L[i])  (0 for hidden keys and for rows with L = +inf)
  exp_minus_scalar<T, true, false>(sr, l_i, T(0), sr, width);
  if (p.dropout) {  // pd = P keep / (1 - p);  dP = dP_dropped keep / (1 - p)
    T* pdr = w.pd + r * bc;
    std::fill(pdr + seen, pdr + width, T(0));
    for_dropout_row(p, b, h, i, j0, seen, [&](std::size_t j, bool kept) {
      pdr[j] = kept ? sr[j] * p.keep_scale : T(0);
      dsr[j] = kept ? dsr[j] * p.keep_scale : T(0);
    });
  }
  for (std::size_t j = 0; j < width; ++j) dsr[j] = p.scale * sr[j] * (dsr[j] - d_i);
}

// Query rows [i0, i0 + rows) of head h against key tile [j0, j0 + count):
// band by band P, dS and dq; then key band by key band dK and dV.
template <class T, bool Bf16>
void backward_step(const Problem<T>& p, const Tiles& tiles, const Shared<T>& sh,
                   const TaskTiles<T>& w, const T* q, const T* d_out, const T* lse,
                   std::size_t split, std::size_t b, std::size_t h, std::size_t i0,
                   std::size_t rows, std::size_t j0, std::size_t count) {
  const std::size_t bc = tiles.cols, head = b * p.heads + h;
  const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
  for_each_band(p, i0, rows, j0, count, bc, [&](const Band& band) {
    const std::size_t n = band.r1 - band.r0, i = i0 + band.r0;
    T* s = w.s + band.r0 * bc;
    T* ds = w.ds + band.r0 * bc;
    // s[n, width] = q[n, Dh] . kt[Dh, width]
    // ds[n, width] = dO[n, Dv] . vt[Dv, width]   (dP, dropped-probability gradient)
    if constexpr (Bf16) {
      const std::size_t dh_words = pairs_of(p.qk_dim), dv_words = pairs_of(p.v_dim);
      const std::size_t row = sh.row(head, i, p.q_len);
      bf16_tile_product<false>(n, band.width, p.qk_dim, sh.q_words + row * dh_words, dh_words, 1,
                               w.kt_pairs, bc, s, bc);
      bf16_tile_product<false>(n, band.width, p.v_dim, sh.d_out_words + row * dv_words, dv_words, 1,
                               w.vt_pairs, bc, ds, bc);
    } else {
      tile_product<T, false>(n, band.width, p.qk_dim, q + p.q.at(b, h, i), p.q.row, 1, w.kt, bc, s,
                             bc);
      tile_product<T, false>(n, band.width, p.v_dim, d_out + p.o.at(b, h, i), p.o.row, 1, w.vt, bc,
                             ds, bc);
    }
    for (std::size_t r = band.r0; r < band.r1; ++r)
      gradient_row(p, sh, w, lse, bc, b, h, i0 + r, r, j0, std::min(count, band.width), band.width);
    // dq[n, Dh] += dS[n, cols] . k[cols, Dh]
    T* dq = sh.dq_row(split, head, i, p);
    if constexpr (Bf16) {
      convert_rows(ds, bc, n, band.cols, w.ds_words, bc / 2);
      bf16_tile_product<true>(n, dh_padded, band.cols, w.ds_words, bc / 2, 1, w.k_pairs, dh_padded,
                              dq, dh_padded);
    } else {
      tile_product<T, true>(n, dh_padded, band.cols, ds, bc, 1, w.k, dh_padded, dq, dh_padded);
    }
  });
  const T* pd = p.dropout ? w.pd : w.s;  // P as the output saw it
  for_each_key_band(p, i0, rows, j0, count, [&](const KeyBand& band) {
    const std::size_t m = band.c1 - band.c0, n = rows - band.r0;
    const std::size_t at = band.r0 * bc + band.c0, row = sh.row(head, i0 + band.r0, p.q_len);
    const auto stride = static_cast<std::ptrdiff_t>(bc);
    // dv[m, Dv] += pd^T[m, n] . dO[n, Dv]
    // dk[m, Dh] += dS^T[m, n] . q[n, Dh]
    T* dv_rows = w.dv + band.c0 * dv_padded;
    T* dk_rows = w.dk + band.c0 * dh_padded;
    if constexpr (Bf16) {  // A = the transposes of the pair rows of pd and dS
      const std::size_t pair_row = sh.pair_row(head, i0 + band.r0, p.q_len);
      const std::size_t ld = padded_words(m);
      pack_pair_rows(pd + at, stride, n, m, w.pd_pairs, ld);
      pack_pair_rows(w.ds + at, stride, n, m, w.ds_pairs, ld);
      bf16_tile_product<true>(m, dv_padded, n, w.pd_pairs, 1, ld,
                              sh.d_out_pairs + pair_row * dv_padded, dv_padded, dv_rows, dv_padded);
      bf16_tile_product<true>(m, dh_padded, n, w.ds_pairs, 1, ld, sh.q_pairs + pair_row * dh_padded,
                              dh_padded, dk_rows, dh_padded);
    } else {
      tile_product<T, true>(m, dv_padded, n, pd + at, 1, stride, sh.d_out_packed + row * dv_padded,
                            dv_padded, dv_rows, dv_padded);
      tile_product<T, true>(m, dh_padded, n, w.ds + at, 1, stride, sh.q_packed + row * dh_padded,
                            dh_padded, dk_rows, dh_padded);
    }
  });
}

// One task: key tiles split, split + splits, ... of kv head (b, hk).
template <class T, bool Bf16>
void backward_task(const Problem<T>& p, const Tiles& tiles, const Shared<T>& sh, const T* q,
                   const T* k, const T* v, const T* d_out, const T* lse, T* dk, T* dv,
                   std::size_t b, std::size_t hk, std::size_t split) {
  const std::size_t br = tiles.rows, bc = tiles.cols, group = p.group();
  const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
  const TaskTiles<T> w(p, tiles);
  for (std::size_t h = hk * group; h < (hk + 1) * group; ++h) {  // this task's partial dq = 0
    T* dq_head = sh.dq_row(split, b * p.heads + h, 0, p);
    std::fill(dq_head, dq_head + p.q_len * dh_padded, T(0));
  }
  const std::size_t key_tiles = (p.k_len + bc - 1) / bc;
  for (std::size_t tile = split; tile < key_tiles; tile += sh.splits) {
    const std::size_t j0 = tile * bc, count = std::min(bc, p.k_len - j0);
    const T* k_rows = k + p.k.at(b, hk, j0);
    const T* v_rows = v + p.v.at(b, hk, j0);
    if constexpr (Bf16) {  // the same as pair rows
      pack_pair_rows(k_rows, p.k.row, count, p.qk_dim, w.k_pairs, dh_padded);
      pack_pair_columns(k_rows, p.k.row, count, p.qk_dim, w.kt_pairs, bc);
      pack_pair_columns(v_rows, p.v.row, count, p.v_dim, w.vt_pairs, bc);
    } else {
      pack_rows(k_rows, p.k.row, count, p.qk_dim, w.k, dh_padded);  // k [count, Dh]
      pack_transposed(k_rows, p.k.row, count, p.qk_dim, w.kt, bc);  // k^T [Dh, Bc]
      pack_transposed(v_rows, p.v.row, count, p.v_dim, w.vt, bc);   // v^T [Dv, Bc]
    }
    std::fill(w.dk, w.dk + count * dh_padded, T(0));
    std::fill(w.dv, w.dv + count * dv_padded, T(0));
    // causal: query rows i < j0 see none of these keys
    const std::size_t first = p.causal ? j0 / br * br : 0;
    for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
      for (std::size_t i0 = first; i0 < p.q_len; i0 += br)
        backward_step<T, Bf16>(p, tiles, sh, w, q, d_out, lse, split, b, h, i0,
                               std::min(br, p.q_len - i0), j0, count);
    for (std::size_t j = 0; j < count; ++j) {  // dk, dv rows of this key tile, written once
      if (dk != nullptr) copy_row(w.dk + j * dh_padded, p.qk_dim, dk + p.k.at(b, hk, j0 + j));
      if (dv != nullptr) copy_row(w.dv + j * dv_padded, p.v_dim, dv + p.v.at(b, hk, j0 + j));
    }
  }
}

// One task per (batch, kv head) does all of its work in its thread's
// scratch: its heads' packed rows and D, dK and dV, then dq; one pass over
// the pool.
template <class T, bool Bf16>
void backward_per_head(const Problem<T>& p, const Tiles& tiles, const T* q, const T* k, const T* v,
                       const T* o, const T* d_out, const T* lse, T* dq, T* dk, T* dv) {
  const std::size_t group = p.group();
  // per task, at most: 5 products of 2 Tq Tk D flops for each query head
  const std::size_t flops = group * p.q_len * (p.k_len + 1) * (6 * p.qk_dim + 4 * p.v_dim);
  parallel_for_rows(p.batch * p.kv_heads, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      Shared<T> own;
                      own.count = group;
                      own.place(p, aligned_thread_scratch<T>(ScratchSlot::attention_rows,
                                                             Shared<T>::size(p, group, 1)));
                      own.place_words(p);
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t b = task / p.kv_heads, hk = task % p.kv_heads;
                        own.first = b * p.heads + hk * group;
                        for (std::size_t head = own.first; head < own.first + group; ++head)
                          prepare_head<T, Bf16>(p, q, o, d_out, own, head);
                        backward_task<T, Bf16>(p, tiles, own, q, k, v, d_out, lse, dk, dv, b, hk,
                                               0);
                        if (dq == nullptr) continue;
                        for (std::size_t head = own.first; head < own.first + group; ++head)
                          write_dq_rows(p, own, dq, head, 0, p.q_len);
                      }
                    });
}

// Few heads: the rows of every head packed first, then tasks over shares
// of each head's key tiles, then dq summed over the shares.
template <class T, bool Bf16>
void backward_in_shares(const Problem<T>& p, const Tiles& tiles, std::size_t splits, const T* q,
                        const T* k, const T* v, const T* o, const T* d_out, const T* lse, T* dq,
                        T* dk, T* dv) {
  const std::size_t heads = p.batch * p.heads;
  Shared<T> sh;
  sh.splits = splits;
  sh.count = heads;
  sh.place(
      p, aligned_thread_scratch<T>(ScratchSlot::attention_rows, Shared<T>::size(p, heads, splits)));
  sh.place_words(p);
  const std::size_t elements = 3 * p.q_len * (p.qk_dim + p.v_dim);  // read and written per head
  parallel_for_rows(heads, tasks_per_thread(k_parallel_light, elements),
                    [&](std::size_t h0, std::size_t h1) {
                      for (std::size_t head = h0; head < h1; ++head)
                        prepare_head<T, Bf16>(p, q, o, d_out, sh, head);
                    });
  // per task, at most: 5 products of 2 Tq (Tk / splits) D flops for each query head
  const std::size_t flops =
      p.group() * p.q_len * (p.k_len / splits + 1) * (6 * p.qk_dim + 4 * p.v_dim);
  parallel_for_rows(p.batch * p.kv_heads * splits, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t head = task / splits, split = task % splits;
                        backward_task<T, Bf16>(p, tiles, sh, q, k, v, d_out, lse, dk, dv,
                                               head / p.kv_heads, head % p.kv_heads, split);
                      }
                    });
  if (dq == nullptr) return;
  parallel_for_rows(heads * p.q_len, tasks_per_thread(k_parallel_light, p.qk_dim * splits),
                    [&](std::size_t r0, std::size_t r1) {
                      for (std::size_t row = r0; row < r1;) {  // head by head
                        const std::size_t head = row / p.q_len, i = row % p.q_len;
                        const std::size_t end = std::min(p.q_len, i + (r1 - row));
                        write_dq_rows(p, sh, dq, head, i, end);
                        row += end - i;
                      }
                    });
}

template <class T, bool Bf16>
void backward_in(const Problem<T>& p, const T* q, const T* k, const T* v, const T* o,
                 const T* d_out, const T* lse, T* dq, T* dk, T* dv) {
  const Tiles tiles = choose_tiles<T>(p.qk_dim, p.v_dim, p.q_len, p.k_len);
  const std::size_t kv_heads = p.batch * p.kv_heads, splits = share_count(p, tiles);
  if (splits == 1 && kv_heads >= k_head_tasks_per_thread * parallel_chunks(kv_heads, 1))
    backward_per_head<T, Bf16>(p, tiles, q, k, v, o, d_out, lse, dq, dk, dv);
  else
    backward_in_shares<T, Bf16>(p, tiles, splits, q, k, v, o, d_out, lse, dq, dk, dv);
}

}  // namespace

template <class T>
void backward(const Problem<T>& p, const T* q, const T* k, const T* v, const T* o, const T* d_out,
              const T* lse, T* dq, T* dk, T* dv) {
  if constexpr (std::is_same_v<T, float> && k_bf16_kernel)
    if (p.bf16) return backward_in<T, true>(p, q, k, v, o, d_out, lse, dq, dk, dv);
  backward_in<T, false>(p, q, k, v, o, d_out, lse, dq, dk, dv);
}

template void backward(const Problem<float>&, const float*, const float*, const float*,
                       const float*, const float*, const float*, float*, float*, float*);
template void backward(const Problem<double>&, const double*, const double*, const double*,
                       const double*, const double*, const double*, double*, double*, double*);

}  // namespace xtgrad::detail::attention
