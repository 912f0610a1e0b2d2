#include "softmax_kernels.hpp"  // first (through simd.hpp): see simd.hpp

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_kernels.hpp"
#include "parallel.hpp"
#include "scratch.hpp"

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

template <class T>
void pack_keys(const Problem<T>& p, const Tiles& tiles, const T* k, const T* v,
               const PackedKeys<T>& packed) {
  const std::size_t bc = tiles.cols, dv_padded = padded<T>(p.v_dim);
  const std::size_t n = p.batch * p.kv_heads * packed.tiles;
  const std::size_t elements = bc * (p.qk_dim + p.v_dim);  // copied per task
  parallel_for_rows(
      n, tasks_per_thread(k_parallel_light, elements), [&](std::size_t t0, std::size_t t1) {
        for (std::size_t task = t0; task < t1; ++task) {
          const std::size_t head_index = task / packed.tiles, tile = task % packed.tiles;
          const std::size_t b = head_index / p.kv_heads, hk = head_index % p.kv_heads;
          const std::size_t j0 = tile * bc, count = std::min(bc, p.k_len - j0);
          // kt[Dh, Bc] = k[j0 : j0 + count, Dh]^T, zero columns past count
          pack_transposed(k + p.k.at(b, hk, j0), p.k.row, count, p.qk_dim,
                          packed.kt(head_index, tile), bc);
          // v[count, Dv padded] = v[j0 : j0 + count, Dv]
          pack_rows(v + p.v.at(b, hk, j0), p.v.row, count, p.v_dim, packed.v(head_index, tile),
                    dv_padded);
        }
      });
}

// One task: query rows [i0, i0 + rows) of head (b, h).
template <class T>
void forward_tile(const Problem<T>& p, const Tiles& tiles, const PackedKeys<T>& packed, const T* q,
                  T* o, T* lse, std::size_t b, std::size_t h, std::size_t i0) {
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

  const std::size_t head_index = b * p.kv_heads + h / p.group();
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
      const T m_new = std::max(m[r], row_max(sr, bc));
      if (m_new == minus_inf) {  // no visible key yet: P = 0
        std::fill(sr, sr + bc, T(0));
        continue;
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
  const Tiles tiles = choose_tiles<T>(p.qk_dim, p.v_dim);
  PackedKeys<T> packed;
  packed.tiles = (p.k_len + tiles.cols - 1) / tiles.cols;
  packed.kt_size = p.qk_dim * tiles.cols;
  packed.v_size = tiles.cols * padded<T>(p.v_dim);
  packed.data = aligned_thread_scratch<T>(
      ScratchSlot::attention_packed,
      std::max<std::size_t>(p.batch * p.kv_heads * packed.tiles * (packed.kt_size + packed.v_size),
                            1));
  pack_keys(p, tiles, k, v, packed);

  const std::size_t q_tiles = (p.q_len + tiles.rows - 1) / tiles.rows;
  const std::size_t n = p.batch * p.heads * q_tiles;
  const std::size_t flops = 2 * tiles.rows * p.k_len * (p.qk_dim + p.v_dim);  // per task, at most
  parallel_for_rows(n, tasks_per_thread(k_parallel_flops, flops),
                    [&](std::size_t t0, std::size_t t1) {
                      for (std::size_t task = t0; task < t1; ++task) {
                        const std::size_t head = task / q_tiles, tile = task % q_tiles;
                        forward_tile(p, tiles, packed, q, o, lse, head / p.heads, head % p.heads,
                                     tile * tiles.rows);
                      }
                    });
}

template void forward(const Problem<float>&, const float*, const float*, const float*, float*,
                      float*);
template void forward(const Problem<double>&, const double*, const double*, const double*, double*,
                      double*);

}  // namespace xtgrad::detail::attention
