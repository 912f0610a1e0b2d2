#pragma once
// The fused attention kernels (internal), FlashAttention-2 on the CPU (Dao
// 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", Algorithms 1 and 2). ops/attention states the formulas;
// attention_problem.hpp the layouts. Neither kernel ever holds a [Tq, Tk]
// score matrix: only tiles of Br x Bc.
//
// Forward: per (batch, head, tile of Br queries), over the key tiles
// the queries may see, S = scale Q K^T (+ mask), the online softmax (running
// row maximum m and sum l, rescaling the output accumulator when m grows),
// O += P V with P dropped out when dropout is on; then O /= l and the row's
// log-sum-exp L = m + log l is written (+inf for a row that sees no key, so
// that backward's P = exp(S - L) is 0 there and so is its output).
//
// Backward: per (batch, kv head, share of its key tiles), for each key
// tile and each query head of its group and each query tile: P = exp(S - L),
// dV += P_dropped^T dO, dP = dO V^T (dropped as P), dS = P (dP - D) with
// D = rowsum(dO o O), dQ += scale dS K, dK += scale dS^T Q. A task owns its
// key tiles' dK and dV. When there are fewer than 8 (batch, kv head) pairs,
// each pair's key tiles are dealt round-robin to up to 8 shares; dQ then gets
// a partial sum per share, added in share order in a last pass. How many
// shares depends only on the shape, so the result is the same at any thread
// count.
//
// Causal: a query tile sees only the key tiles up to its last row, and a
// tile on the diagonal runs in bands of one vector width of rows, each band's
// products over the keys its last row sees (for_each_band,
// attention_problem.hpp), so that the hidden triangle is mostly skipped with
// the same bits as the whole tile.
//
// Tasks: with at least k_head_tasks_per_thread (batch, kv head) pairs per
// thread (and one share each), each pair is one task of one pass over the
// pool that does all of its own work (forward: packs its keys, then every
// query tile of its heads; backward: packs its query and output-gradient
// rows, D, then dK, dV and dq), so that nothing runs serially between
// passes. With fewer pairs, the forward packs every key tile first and its
// tasks are single query tiles, and the backward packs every head's rows
// first and sums dq last, in passes of their own. The arithmetic of a tile
// is the same either way, so the result does not depend on the choice.
//
// Precision: with p.bf16 (float at MatmulPrecision::bf16, on a build with
// AVX512-BF16) the products read bfloat16 operands, packed once per tile,
// and sum in float (attention_tiles_bf16.hpp); the tiles, tasks and every
// other pass are the float kernel's.

#include <cstddef>

#include "attention_problem.hpp"  // first (through simd.hpp): see simd.hpp

namespace xtgrad::detail::attention {

// o [B, H, Tq, Dv] as placed by p.o; lse [B, H, Tq] contiguous.
template <class T>
void forward(const Problem<T>& p, const T* q, const T* k, const T* v, T* o, T* lse);

// dq, dk, dv placed as q, k, v and overwritten (each element written once);
// a null pointer skips that gradient's writes (the work is shared anyway).
// d_out placed as o.
template <class T>
void backward(const Problem<T>& p, const T* q, const T* k, const T* v, const T* o, const T* d_out,
              const T* lse, T* dq, T* dk, T* dv);

}  // namespace xtgrad::detail::attention
