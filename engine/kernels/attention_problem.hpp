#pragma once
// What the fused attention kernels compute on (internal): the sizes, where
// each head's rows live in memory, the mask seen through broadcast strides,
// the scale, causality and dropout, the tile sizes, the bands of a tile that
// causality leaves, and the passes over one row of a score tile that the
// forward and backward kernels share.
//
// Operands are read through strides so that one kernel serves the
// [B, H, T, D] tensors of scaled_dot_product_attention and the packed
// [B, T, 3C] projections of packed_qkv_attention alike: element (b, h, t, d)
// of an operand is at b * batch + h * head + t * row + d.

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../dropout_key.hpp"
#include "attention_tiles.hpp"  // first (through simd.hpp): see simd.hpp
#include "counter_rng.hpp"
#include "parallel.hpp"
#include "softmax_kernels.hpp"

namespace xtgrad::detail::attention {

struct Operand {
  std::ptrdiff_t batch = 0, head = 0, row = 0;
  std::ptrdiff_t at(std::size_t b, std::size_t h, std::size_t t) const {
    return static_cast<std::ptrdiff_t>(b) * batch + static_cast<std::ptrdiff_t>(h) * head +
           static_cast<std::ptrdiff_t>(t) * row;
  }
};

// A mask broadcast to [B, H, Tq, Tk] by strides (0 along a broadcast axis):
// keep (true = may attend) or additive, or neither.
template <class T>
struct MaskView {
  const bool* keep = nullptr;
  const T* additive = nullptr;
  std::ptrdiff_t batch = 0, head = 0, row = 0, col = 0;
};

template <class T>
struct Problem {
  std::size_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, k_len = 0, qk_dim = 0, v_dim = 0;
  Operand q, k, v, o;  // o also places dO; dq, dk, dv are placed as q, k, v
  MaskView<T> mask;
  bool causal = false;
  T scale = T(1);
  bool dropout = false;         // dropout_p > 0
  std::uint32_t threshold = 0;  // keep element when its word >= threshold
  T keep_scale = T(1);          // 1 / (1 - dropout_p)
  DropoutKey key;
  // The products in bfloat16 with float sums (attention_tiles_bf16.hpp): set
  // for float at MatmulPrecision::bf16 where k_bf16_kernel, read per call.
  bool bf16 = false;

  std::size_t group() const { return heads / kv_heads; }  // query heads per kv head
  // The dropout counter of element (b, h, i, j) of the [B, H, Tq, Tk] probabilities.
  std::uint64_t counter(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return key.first_element + ((static_cast<std::uint64_t>(b) * heads + h) * q_len + i) * k_len +
           j;
  }
};

// Query rows (Br) and key rows (Bc) of a tile. At most: the packed K^T and V
// tiles of one key tile fill about half of L1, within 4 and 16 vector widths
// (4: at least one full register block of the micro-kernel per row of S); Br
// the same. Then each is evened out over its sequence: as many tiles as that
// bound needs, each as long as a multiple of the vector width allows, so
// that the last tile is not mostly padding (T = 128 at a bound of 96 is two
// tiles of 64, not 96 + 32; with is_causal, smaller tiles also skip more of
// the hidden triangle). Measured at Dh = 32 in float (AVX-512, 48 KiB L1, B H
// = 128, T = 128): 64 against 96 saves 15 % (causal) to 20 % (full) of
// forward + backward; at Dh = 64 and T = 1024, Br, Bc from 32 to 128 are all
// within the run-to-run noise of each other.
struct Tiles {
  std::size_t rows = 0, cols = 0;
};

template <class T>
std::size_t even_tile(std::size_t length, std::size_t bound) {
  constexpr std::size_t W = k_lanes<T>;
  if (length == 0) return bound;
  const std::size_t tiles = (length + bound - 1) / bound;
  const std::size_t even = ((length + tiles - 1) / tiles + W - 1) / W * W;
  return std::clamp(even, 4 * W, bound);
}

template <class T>
Tiles choose_tiles(std::size_t qk_dim, std::size_t v_dim, std::size_t q_len, std::size_t k_len) {
  constexpr std::size_t W = k_lanes<T>;
  static const long reported = ::sysconf(_SC_LEVEL1_DCACHE_SIZE);
  const std::size_t l1 = reported > 0 ? static_cast<std::size_t>(reported) : 32 * 1024;
  const std::size_t per_key = (padded<T>(qk_dim) + padded<T>(v_dim)) * sizeof(T);
  std::size_t bound = (l1 / 2) / std::max<std::size_t>(per_key, 1) / W * W;
  bound = std::clamp(bound, 4 * W, 16 * W);
  return {even_tile<T>(q_len, bound), even_tile<T>(k_len, bound)};
}

// Work a thread must have before a second one pays: handing a chunk to a
// worker costs about 7 us (parallel.hpp), some 2^19 flops of the tiles.
inline constexpr std::size_t k_parallel_flops = std::size_t(1) << 19;

// (Batch, kv head) pairs per thread in use from which each pair is one task
// that does all of its own work (packing, row sums, dq) in the one pass over
// the pool: no serial pass, no pass per phase, and enough tasks that a worker
// that starts late still takes its share. Below it, the phases are passes of
// their own over finer tasks.
inline constexpr std::size_t k_head_tasks_per_thread = 4;

// Tasks per (batch, kv head) wanted before the key tiles of one head are
// split between tasks. A function of the shape only (not of the thread
// count), so that dq's partial sums, and so its bits, do not depend on it.
inline constexpr std::size_t k_min_tasks = 8;

// How many shares the backward deals the key tiles of each (batch, kv head) to.
template <class T>
std::size_t share_count(const Problem<T>& p, const Tiles& tiles) {
  const std::size_t kv_heads = p.batch * p.kv_heads;
  if (kv_heads >= k_min_tasks) return 1;
  const std::size_t key_tiles = (p.k_len + tiles.cols - 1) / tiles.cols;
  const std::size_t wanted = (k_min_tasks + kv_heads - 1) / std::max<std::size_t>(kv_heads, 1);
  return std::max<std::size_t>(1, std::min(key_tiles, wanted));
}

// The min_per_thread of parallel_for_rows for tasks of `work` flops (or
// elements, against k_parallel_light) each.
inline std::size_t tasks_per_thread(std::size_t threshold, std::size_t work) {
  return std::max<std::size_t>(1, threshold / std::max<std::size_t>(work, 1));
}

// Score row i of a tile, in place: s[j] = scale * s[j] (+ additive mask), or
// -inf where the boolean mask or causality hides key j0 + j, for j < count;
// -inf for the padding count <= j < width. Returns the row's largest score
// (row_max) when Max. Without a mask, the scaling and the max run in one pass
// over the visible keys: the max of the scores still in registers, where a
// second pass reloaded the row just stored.
template <class T, bool Max = false>
T score_row(const Problem<T>& p, std::size_t b, std::size_t h, std::size_t i, std::size_t j0,
            std::size_t count, std::size_t width, T* s) {
  using B = Batch<T>;
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  const T scale = p.scale;
  const MaskView<T>& m = p.mask;
  // keys j0 + j > i are hidden under causality
  const std::size_t visible = p.causal ? std::min(count, i + 1 > j0 ? i + 1 - j0 : 0) : count;
  if (m.additive == nullptr && m.keep == nullptr) {
    B top(minus_inf);
    std::size_t j = 0;
    for (; j + k_lanes<T> <= visible; j += k_lanes<T>) {
      const B v = B::load_unaligned(s + j) * B(scale);
      v.store_unaligned(s + j);
      if constexpr (Max) top = xsimd::max(top, v);
    }
    T largest = Max ? simd_math::horizontal_max(top) : minus_inf;
    for (; j < visible; ++j) {
      s[j] *= scale;
      if constexpr (Max) largest = std::max(largest, s[j]);
    }
    std::fill(s + visible, s + width, minus_inf);
    return largest;
  }
  for (std::size_t j = 0; j < count; ++j) s[j] *= scale;
  const std::ptrdiff_t base =
      static_cast<std::ptrdiff_t>(b) * m.batch + static_cast<std::ptrdiff_t>(h) * m.head +
      static_cast<std::ptrdiff_t>(i) * m.row + static_cast<std::ptrdiff_t>(j0) * m.col;
  if (m.additive != nullptr) {
    const T* add = m.additive + base;
    for (std::size_t j = 0; j < count; ++j) s[j] += add[static_cast<std::ptrdiff_t>(j) * m.col];
  } else {
    const bool* keep = m.keep + base;
    for (std::size_t j = 0; j < count; ++j)
      if (!keep[static_cast<std::ptrdiff_t>(j) * m.col]) s[j] = minus_inf;
  }
  std::fill(s + visible, s + width, minus_inf);
  return Max ? row_max(s, width) : minus_inf;
}

// The dropout of one tile row: f(j, kept) for j < count, kept = the mask of
// element (b, h, i, j0 + j) (dropout_mask.hpp's rule on the same counters).
template <class T, class F>
void for_dropout_row(const Problem<T>& p, std::size_t b, std::size_t h, std::size_t i,
                     std::size_t j0, std::size_t count, F&& f) {
  const std::uint32_t threshold = p.threshold;
  uniform_words(p.key.seed, p.key.step, p.counter(b, h, i, j0), count,
                [&](std::size_t at, const std::uint32_t* words, std::size_t n) {
                  for (std::size_t j = 0; j < n; ++j) f(at + j, words[j] >= threshold);
                });
}

// The keys [0, end) that query rows below i1 may see (causal: keys j <= i1 - 1).
template <class T>
std::size_t visible_keys(const Problem<T>& p, std::size_t i1) {
  return p.causal ? std::min(p.k_len, i1) : p.k_len;
}

// A band of a tile of query rows against a key tile: the tile's rows
// [r0, r1), which see at most its keys [0, cols); the band's products run
// over its first `width` keys (cols rounded up to the vector width, at most
// Bc). Keys past cols are hidden from the band's rows, so their P and dS are
// 0 and every product that skips them sums the same terms in the same order:
// the bits are those of the whole tile (for finite q, k, v).
struct Band {
  std::size_t r0 = 0, r1 = 0, cols = 0, width = 0;
};

// Whether causality hides some key of the tile [j0, j0 + count) from the
// first query row i0 of a tile (then it is cut into bands).
template <class T>
bool on_diagonal(const Problem<T>& p, std::size_t i0, std::size_t j0, std::size_t count) {
  return p.causal && i0 + 1 < j0 + count;  // key j0 + count - 1 is hidden from row i0
}

// f(band) over the bands of query rows [i0, i0 + rows) against the key tile
// [j0, j0 + count) of width bc: one band of every row and key when no key of
// the tile is hidden from the first row by causality; otherwise (a tile
// on_diagonal) bands of one vector width of rows, each over the keys its
// last row sees, so that the hidden triangle above the diagonal is mostly
// skipped; a band that sees no key is left out.
template <class T, class F>
void for_each_band(const Problem<T>& p, std::size_t i0, std::size_t rows, std::size_t j0,
                   std::size_t count, std::size_t bc, F&& f) {
  const std::size_t height = on_diagonal(p, i0, j0, count) ? k_lanes<T> : rows;
  for (std::size_t r0 = 0; r0 < rows; r0 += height) {
    const std::size_t r1 = std::min(rows, r0 + height);
    const std::size_t cols = p.causal ? std::min(count, i0 + r1 > j0 ? i0 + r1 - j0 : 0) : count;
    if (cols > 0) f(Band{r0, r1, cols, std::min(bc, padded<T>(cols))});
  }
}

// The transposed bands, for the products whose rows are keys (dV, dK): the
// key tile's keys [c0, c1) and the query rows [r0, rows) of the tile that
// may see them (under causality, rows before key c0's diagonal see none).
struct KeyBand {
  std::size_t c0 = 0, c1 = 0, r0 = 0;
};

template <class T, class F>
void for_each_key_band(const Problem<T>& p, std::size_t i0, std::size_t rows, std::size_t j0,
                       std::size_t count, F&& f) {
  const std::size_t height = on_diagonal(p, i0, j0, count) ? k_lanes<T> : count;
  for (std::size_t c0 = 0; c0 < count; c0 += height) {
    const std::size_t r0 = p.causal && j0 + c0 > i0 ? j0 + c0 - i0 : 0;
    if (r0 < rows) f(KeyBand{c0, std::min(count, c0 + height), r0});
  }
}

}  // namespace xtgrad::detail::attention
