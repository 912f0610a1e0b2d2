#include "softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_kernels.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

// The forward kernel, then the backward kernel that inverts it
// (attention_kernels.hpp describes both).

namespace xtgrad::detail::attention {

namespace {

// Every key tile of every (batch, kv head), packed once for all query tiles:
// K^T [Dh, Bc] (the B operand of S = Q K^T) and V [Bc, Dv padded] (of O += P V).
template <class T>
struct PackedKeys {
  T* data = nullptr;
  std::size_t tiles = 0, kt_size = 0, v_size = 0;
  T* kt(std::size_t head_index, std::size_t tile) const {
    return data + (head_index * tiles + tile) * (kt_size + v_size);
  }
  T* v(std::size_t head_index, std::size_t tile) const { return kt(head_index, tile) + kt_size; }
};

// Key tile `tile` of kv head (b, hk) into packed's slot (slot, tile).
template <class T>
void pack_key_tile(const Problem<T>& p, const Tiles& tiles, const T* k, const T* v,
                   const PackedKeys<T>& packed, std::size_t b, std::size_t hk, std::size_t slot,
                   std::size_t tile) {
  const std::size_t bc = tiles.cols, j0 = tile * bc, count = std::min(bc, p.k_len - j0);
  // kt[Dh, Bc] = k[j0 : j0 + count, Dh]^T, zero columns past count
  pack_transposed(k + p.k.at(b, hk, j0), p.k.row, count, p.qk_dim, packed.kt(slot, tile), bc);
  // v[count, Dv padded] = v[j0 : j0 + count, Dv]
  pack_rows(v + p.v.at(b, hk, j0), p.v.row, count, p.v_dim, packed.v(slot, tile),
            padded<T>(p.v_dim));
}

// Every key tile of every (batch, kv head), slot b * Hkv + hk.
template <class T>
void pack_keys(const Problem<T>& p, const Tiles& tiles, const T* k, const T* v,
               const PackedKeys<T>& packed) {
  const std::size_t n = p.batch * p.kv_heads * packed.tiles;
  const std::size_t elements = tiles.cols * (p.qk_dim + p.v_dim);  // copied per task
  parallel_for_rows(
      n, tasks_per_thread(k_parallel_light, elements), [&](std::size_t t0, std::size_t t1) {
        for (std::size_t task = t0; task < t1; ++task) {
          const std::size_t head_index = task / packed.tiles, tile = task % packed.tiles;
          pack_key_tile(p, tiles, k, v, packed, head_index / p.kv_heads, head_index % p.kv_heads,
                        head_index, tile);
        }
      });
}

// One task: query rows [i0, i0 + rows) of head (b, h).
template <class T>
void forward_tile(const Problem<T>& p, const Tiles& tiles, const PackedKeys<T>& packed, const T* q,
                  T* o, T* lse, std::size_t b, std::size_t h, std::size_t i0,
                  std::size_t head_index) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  const std::size_t br = tiles.rows, bc = tiles.cols, dv_padded = padded<T>(p.v_dim);
  const std::size_t rows = std::min(br, p.q_len - i0);
  T* s = aligned_thread_scratch<T>(ScratchSlot::attention_tiles,
                                   br * bc + br * dv_padded + 2 * br);  // scores, then P
  T* acc = s + br * bc;                                                 // [Br, Dv padded]
  T* m = acc + br * dv_padded;                                          // running row max
  T* l = m + br;                                                        // running row sum
  std::fill(acc, acc + rows * dv_padded, T(0));
  std::fill(m, m + rows, minus_inf);
  std::fill(l, l + rows, T(0));

  const T* q_rows = q + p.q.at(b, h, i0);
  const std::size_t end = visible_keys(p, i0 + rows);
  for (std::size_t j0 = 0; j0 < end; j0 += bc) {
    const std::size_t tile = j0 / bc, count = std::min(bc, p.k_len - j0);
    // s[rows, Bc] = q[rows, Dh] . kt[Dh, Bc]
    tile_product<T, false>(rows, bc, p.qk_dim, q_rows, p.q.row, 1, packed.kt(head_index, tile), bc,
                           s, bc);
    for (std::size_t r = 0; r < rows; ++r) {
      T* sr = s + r * bc;
      const std::size_t i = i0 + r;
      score_row(p, b, h, i, j0, count, bc, sr);  // s = scale q k^T (+ mask), hidden -inf
      T m_new = std::max(m[r], row_max(sr, bc));
      if (m_new == minus_inf) {
        // A max of -inf: every key of the row so far is hidden, or a score is
        // NaN (the max passes over NaN). Only the first is "no visible key yet"
        // (P = 0); a NaN (in q, k or an additive mask) must stay NaN, as in
        // softmax(q k^T) v: m = NaN makes P, l, the output and L NaN from here on.
        if (std::none_of(sr, sr + count, [](T x) { return std::isnan(x); })) {
          std::fill(sr, sr + bc, T(0));
          continue;
        }
        m_new = std::numeric_limits<T>::quiet_NaN();
      }
      const T alpha = std::exp(m[r] - m_new);
      // P[j] = exp(s[j] - m_new);  l = alpha l + sum_j P[j]  (undropped, as PyTorch)
      l[r] =
          alpha * l[r] + static_cast<T>(exp_minus_scalar<T, true, true>(sr, m_new, T(0), sr, bc));
      m[r] = m_new;
      if (alpha != T(1))  // acc[r, :] *= exp(m_old - m_new)
        for (std::size_t d = 0; d < dv_padded; ++d) acc[r * dv_padded + d] *= alpha;
      if (p.dropout)  // P[j] = P[j] keep[j] / (1 - dropout_p)
        for_dropout_row(p, b, h, i, j0, count, [&](std::size_t j, bool kept) {
          sr[j] = kept ? sr[j] * p.keep_scale : T(0);
        });
    }
    // acc[rows, Dv] += P[rows, count] . v[count, Dv]
    tile_product<T, true>(rows, dv_padded, count, s, bc, 1, packed.v(head_index, tile), dv_padded,
                          acc, dv_padded);
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = i0 + r;
    T* out = o + p.o.at(b, h, i);
    T& row_lse = lse[(b * p.heads + h) * p.q_len + i];
    if (l[r] == T(0)) {  // no visible key: output 0, and P = exp(S - inf) = 0 in backward
      std::fill(out, out + p.v_dim, T(0));
      row_lse = std::numeric_limits<T>::infinity();
      continue;
    }
    const T inverse = T(1) / l[r];
    for (std::size_t d = 0; d < p.v_dim; ++d) out[d] = acc[r * dv_padded + d] * inverse;
    row_lse = m[r] + std::log(l[r]);  // L = m + log l
  }
}

}  // namespace

template <class T>
void forward(const Problem<T>& p, const T* q, const T* k, const T* v, T* o, T* lse) {
  const Tiles tiles = choose_tiles<T>(p.qk_dim, p.v_dim, p.q_len, p.k_len);
  PackedKeys<T> packed;
  packed.tiles = (p.k_len + tiles.cols - 1) / tiles.cols;
  packed.kt_size = p.qk_dim * tiles.cols;
  packed.v_size = tiles.cols * padded<T>(p.v_dim);
  const std::size_t head_size = packed.tiles * (packed.kt_size + packed.v_size);
  const std::size_t q_tiles = (p.q_len + tiles.rows - 1) / tiles.rows;
  const std::size_t kv_heads = p.batch * p.kv_heads;

  if (kv_heads >= k_head_tasks_per_thread * parallel_chunks(kv_heads, 1)) {
    // One task per (batch, kv head): it packs its keys into its thread's
    // scratch and runs every query tile of the group's heads; one pass over
    // the pool, nothing serial, and the same arithmetic as below.
    const std::size_t flops = 2 * p.group() * p.q_len * p.k_len * (p.qk_dim + p.v_dim);
    parallel_for_rows(kv_heads, tasks_per_thread(k_parallel_flops, flops),
                      [&](std::size_t t0, std::size_t t1) {
                        PackedKeys<T> own = packed;
                        own.data = aligned_thread_scratch<T>(ScratchSlot::attention_packed,
                                                             std::max<std::size_t>(head_size, 1));
                        for (std::size_t task = t0; task < t1; ++task) {
                          const std::size_t b = task / p.kv_heads, hk = task % p.kv_heads;
                          for (std::size_t tile = 0; tile < packed.tiles; ++tile)
                            pack_key_tile(p, tiles, k, v, own, b, hk, 0, tile);
                          for (std::size_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h)
                            for (std::size_t qt = 0; qt < q_tiles; ++qt)
                              forward_tile(p, tiles, own, q, o, lse, b, h, qt * tiles.rows, 0);
                        }
                      });
    return;
  }
  // Few heads: every head's keys packed first, then one task per query tile.
  packed.data = aligned_thread_scratch<T>(ScratchSlot::attention_packed,
                                          std::max<std::size_t>(kv_heads * head_size, 1));
  pack_keys(p, tiles, k, v, packed);
  const std::size_t n = p.batch * p.heads * q_tiles;
  const std::size_t flops = 2 * tiles.rows * p.k_len * (p.qk_dim + p.v_dim);  // per task, at most
  parallel_for_rows(n, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t head = task / q_tiles, tile = task % q_tiles;
                        const std::size_t b = head / p.heads, h = head % p.heads;
                        forward_tile(p, tiles, packed, q, o, lse, b, h, tile * tiles.rows,
                                     b * p.kv_heads + h / p.group());
                      }
                    });
}

template void forward(const Problem<float>&, const float*, const float*, const float*, float*,
                      float*);
template void forward(const Problem<double>&, const double*, const double*, const double*, double*,
                      double*);

// The backward kernel.

namespace {

// Tasks per (batch, kv head) wanted before the key tiles of one head are
// split between tasks. A function of the shape only (not of the thread
// count), so that dq's partial sums, and so its bits, do not depend on it.
constexpr std::size_t k_min_tasks = 8;

// What the tasks read: per (batch, head) the packed query rows [Tq, Dh
// padded] and output-gradient rows [Tq, Dv padded] (B operands of dK and
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

// Packs the rows of head (b * H + h) and computes its D.
template <class T>
void prepare_head(const Problem<T>& p, const T* q, const T* o, const T* d_out, const Shared<T>& sh,
                  std::size_t head) {
  const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
  const std::size_t b = head / p.heads, h = head % p.heads, r0 = sh.row(head, 0, p.q_len);
  pack_rows(q + p.q.at(b, h, 0), p.q.row, p.q_len, p.qk_dim, sh.q_packed + r0 * dh_padded,
            dh_padded);
  pack_rows(d_out + p.o.at(b, h, 0), p.o.row, p.q_len, p.v_dim, sh.d_out_packed + r0 * dv_padded,
            dv_padded);
  for (std::size_t i = 0; i < p.q_len; ++i) {  // D[i] = sum_d dO[i, d] O[i, d]
    const T* go = d_out + p.o.at(b, h, i);
    const T* oo = o + p.o.at(b, h, i);
    T sum = T(0);
    for (std::size_t d = 0; d < p.v_dim; ++d) sum += go[d] * oo[d];
    sh.row_dot[r0 + i] = sum;
  }
}

// Scratch of one task: the key tile packed three ways, its dK and dV
// accumulators, and the P, dropped P and dP / dS tiles of one query tile.
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

// Query rows [i0, i0 + rows) of head h against key tile [j0, j0 + count).
template <class T>
void backward_step(const Problem<T>& p, const Tiles& tiles, const Shared<T>& sh,
                   const TaskTiles<T>& w, const T* q, const T* d_out, const T* lse,
                   std::size_t split, std::size_t b, std::size_t h, std::size_t i0,
                   std::size_t rows, std::size_t j0, std::size_t count) {
  const std::size_t bc = tiles.cols;
  const std::size_t dh_padded = padded<T>(p.qk_dim), dv_padded = padded<T>(p.v_dim);
  const std::size_t head = b * p.heads + h;
  // s[rows, Bc] = q[rows, Dh] . kt[Dh, Bc]
  tile_product<T, false>(rows, bc, p.qk_dim, q + p.q.at(b, h, i0), p.q.row, 1, w.kt, bc, w.s, bc);
  // ds[rows, Bc] = dO[rows, Dv] . vt[Dv, Bc]   (dP, dropped-probability gradient)
  tile_product<T, false>(rows, bc, p.v_dim, d_out + p.o.at(b, h, i0), p.o.row, 1, w.vt, bc, w.ds,
                         bc);
  const T* pd = w.s;  // P itself when there is no dropout
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = i0 + r;
    T* sr = w.s + r * bc;
    T* dsr = w.ds + r * bc;
    score_row(p, b, h, i, j0, count, bc, sr);
    // P[r, :] = exp(s - L[i])  (0 for hidden keys and for rows with L = +inf)
    exp_minus_scalar<T, true, false>(sr, lse[head * p.q_len + i], T(0), sr, bc);
    if (p.dropout) {  // pd = P keep / (1 - p);  dP = dP_dropped keep / (1 - p)
      T* pdr = w.pd + r * bc;
      std::fill(pdr + count, pdr + bc, T(0));
      for_dropout_row(p, b, h, i, j0, count, [&](std::size_t j, bool kept) {
        pdr[j] = kept ? sr[j] * p.keep_scale : T(0);
        dsr[j] = kept ? dsr[j] * p.keep_scale : T(0);
      });
    }
    // dS[r, :] = scale P (dP - D[i])   (the scale of dQ and dK folded in)
    const T d_i = sh.row_dot[sh.row(head, i, p.q_len)];
    for (std::size_t j = 0; j < bc; ++j) dsr[j] = p.scale * sr[j] * (dsr[j] - d_i);
  }
  if (p.dropout) pd = w.pd;
  // dv[count, Dv] += pd^T[count, rows] . dO[rows, Dv]
  tile_product<T, true>(count, dv_padded, rows, pd, 1, static_cast<std::ptrdiff_t>(bc),
                        sh.d_out_packed + sh.row(head, i0, p.q_len) * dv_padded, dv_padded, w.dv,
                        dv_padded);
  // dq[rows, Dh] += dS[rows, count] . k[count, Dh]
  T* dq_rows = sh.dq_row(split, head, i0, p);
  tile_product<T, true>(rows, dh_padded, count, w.ds, bc, 1, w.k, dh_padded, dq_rows, dh_padded);
  // dk[count, Dh] += dS^T[count, rows] . q[rows, Dh]
  tile_product<T, true>(count, dh_padded, rows, w.ds, 1, static_cast<std::ptrdiff_t>(bc),
                        sh.q_packed + sh.row(head, i0, p.q_len) * dh_padded, dh_padded, w.dk,
                        dh_padded);
}

// One task: key tiles split, split + splits, ... of kv head (b, hk).
template <class T>
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
    pack_rows(k_rows, p.k.row, count, p.qk_dim, w.k, dh_padded);  // k [count, Dh]
    pack_transposed(k_rows, p.k.row, count, p.qk_dim, w.kt, bc);  // k^T [Dh, Bc]
    pack_transposed(v_rows, p.v.row, count, p.v_dim, w.vt, bc);   // v^T [Dv, Bc]
    std::fill(w.dk, w.dk + count * dh_padded, T(0));
    std::fill(w.dv, w.dv + count * dv_padded, T(0));
    // causal: query rows i < j0 see none of these keys
    const std::size_t first = p.causal ? j0 / br * br : 0;
    for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
      for (std::size_t i0 = first; i0 < p.q_len; i0 += br)
        backward_step(p, tiles, sh, w, q, d_out, lse, split, b, h, i0, std::min(br, p.q_len - i0),
                      j0, count);
    for (std::size_t j = 0; j < count; ++j) {  // dk, dv rows of this key tile, written once
      if (dk != nullptr)
        std::copy(w.dk + j * dh_padded, w.dk + j * dh_padded + p.qk_dim,
                  dk + p.k.at(b, hk, j0 + j));
      if (dv != nullptr)
        std::copy(w.dv + j * dv_padded, w.dv + j * dv_padded + p.v_dim, dv + p.v.at(b, hk, j0 + j));
    }
  }
}

// dq[b, h, i, :] = the sum over splits of the partials of row i of head
// (b * H + h), in split order.
template <class T>
void write_dq_row(const Problem<T>& p, const Shared<T>& sh, T* dq, std::size_t head,
                  std::size_t i) {
  T* out = dq + p.q.at(head / p.heads, head % p.heads, i);
  const T* part = sh.dq_row(0, head, i, p);
  std::copy(part, part + p.qk_dim, out);
  for (std::size_t s = 1; s < sh.splits; ++s) {
    const T* more = sh.dq_row(s, head, i, p);
    for (std::size_t d = 0; d < p.qk_dim; ++d) out[d] += more[d];
  }
}

}  // namespace

template <class T>
void backward(const Problem<T>& p, const T* q, const T* k, const T* v, const T* o, const T* d_out,
              const T* lse, T* dq, T* dk, T* dv) {
  const Tiles tiles = choose_tiles<T>(p.qk_dim, p.v_dim, p.q_len, p.k_len);
  const std::size_t heads = p.batch * p.heads, kv_heads = p.batch * p.kv_heads;
  const std::size_t key_tiles = (p.k_len + tiles.cols - 1) / tiles.cols, group = p.group();
  const std::size_t splits =
      kv_heads >= k_min_tasks
          ? 1
          : std::max<std::size_t>(1, std::min(key_tiles, (k_min_tasks + kv_heads - 1) /
                                                             std::max<std::size_t>(kv_heads, 1)));
  // per task, at most: 5 products of 2 Tq (Tk / splits) D flops for each query head
  const std::size_t flops = group * p.q_len * (p.k_len / splits + 1) * (6 * p.qk_dim + 4 * p.v_dim);

  if (splits == 1 && kv_heads >= k_head_tasks_per_thread * parallel_chunks(kv_heads, 1)) {
    // One task per (batch, kv head) does all of its work in its thread's
    // scratch: its heads' packed rows and D, dK and dV, then dq; one pass over
    // the pool, nothing serial, and the same arithmetic as below.
    parallel_for_rows(kv_heads, tasks_per_thread(k_parallel_flops, flops),
                      [&](std::size_t t0, std::size_t t1) {
                        Shared<T> own;
                        own.count = group;
                        own.place(p, aligned_thread_scratch<T>(ScratchSlot::attention_rows,
                                                               Shared<T>::size(p, group, 1)));
                        for (std::size_t task = t0; task < t1; ++task) {
                          const std::size_t b = task / p.kv_heads, hk = task % p.kv_heads;
                          own.first = b * p.heads + hk * group;
                          for (std::size_t head = own.first; head < own.first + group; ++head)
                            prepare_head(p, q, o, d_out, own, head);
                          backward_task(p, tiles, own, q, k, v, d_out, lse, dk, dv, b, hk, 0);
                          if (dq == nullptr) continue;
                          for (std::size_t head = own.first; head < own.first + group; ++head)
                            for (std::size_t i = 0; i < p.q_len; ++i)
                              write_dq_row(p, own, dq, head, i);
                        }
                      });
    return;
  }
  // Few heads: the rows of every head packed first, then tasks over shares
  // of each head's key tiles, then dq summed over the shares.
  Shared<T> sh;
  sh.splits = splits;
  sh.count = heads;
  sh.place(
      p, aligned_thread_scratch<T>(ScratchSlot::attention_rows, Shared<T>::size(p, heads, splits)));
  const std::size_t elements = 3 * p.q_len * (p.qk_dim + p.v_dim);  // read and written per head
  parallel_for_rows(heads, tasks_per_thread(k_parallel_light, elements),
                    [&](std::size_t h0, std::size_t h1) {
                      for (std::size_t head = h0; head < h1; ++head)
                        prepare_head(p, q, o, d_out, sh, head);
                    });
  parallel_for_rows(kv_heads * splits, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t head = task / splits, split = task % splits;
                        backward_task(p, tiles, sh, q, k, v, d_out, lse, dk, dv, head / p.kv_heads,
                                      head % p.kv_heads, split);
                      }
                    });
  if (dq == nullptr) return;
  parallel_for_rows(heads * p.q_len, tasks_per_thread(k_parallel_light, p.qk_dim * splits),
                    [&](std::size_t r0, std::size_t r1) {
                      for (std::size_t row = r0; row < r1; ++row)
                        write_dq_row(p, sh, dq, row / p.q_len, row % p.q_len);
                    });
}

template void backward(const Problem<float>&, const float*, const float*, const float*,
                       const float*, const float*, const float*, float*, float*, float*);
template void backward(const Problem<double>&, const double*, const double*, const double*,
                       const double*, const double*, const double*, double*, double*, double*);

}  // namespace xtgrad::detail::attention
