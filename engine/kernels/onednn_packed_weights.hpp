#pragma once
// Packed weights for oneDNN's float matmul (internal; onednn_gemm.cpp).
//
// A GEMM whose b operand is a Parameter's value (linear and the FFN ops,
// forward and their dx = dy . W) reads b in oneDNN's preferred blocked layout
// (memory::format_tag::any, reordered once) instead of the user's strided
// one, which oneDNN's brgemm kernel would otherwise copy into its blocked
// layout on every call (and in every part of a split product). The copies are
// kept here, process-wide and shared between threads, keyed by the weight
// (Parameter::id and ::version, parameter.hpp, and the address of its first
// element as stored), the piece of it a part reads (k, n, leading dimension,
// transposition), the precision and the packed layout. A copy is never
// served for another version: a write through Parameter's documented API
// bumps the version, and a Parameter's older versions are dropped as soon as
// a newer one is seen.
//
// When a piece is packed: on its first use when the product has at least
// k_pack_first_use_rows rows (one use already pays for the reorder: on Zen 5
// a [2048, 512] weight reorders in 0.1-0.5 ms and saves 3-8% of a
// [4096, 512] . [512, 2048] product), else on its second use of the same
// version (inference, and the row blocks of the fused FFN ops, reuse it).
// The first sighting of a piece only notes it.
//
// Bounded memory: at most k_packed_weight_bytes of packed copies and
// k_packed_weight_entries pieces (packed or noted) live at once; the least
// recently used go first; a piece larger than the byte bound is never
// packed. A training step keeps at most two packed forms of
// each weight (W^T read by the forward, W by dx), each about the weight's
// size (the pieces of a split product add up to it).
//
// Packing never changes a result: onednn_gemm packs only where the packed
// primitive is the same oneDNN implementation as the unpacked one (brgemm,
// which then runs the same kernel on the same blocked copy; a product for
// which oneDNN picks another kernel, such as gemm:jit for some narrow
// products, stays unpacked), so the bits are those of the unpacked path
// (test_packed_weights.cpp), whichever call packed first and at any thread
// count.

#include "onednn_gemm.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

namespace xtgrad::detail {

inline constexpr std::size_t k_pack_first_use_rows = 2048;
inline constexpr std::size_t k_packed_weight_bytes = std::size_t(512) << 20;
inline constexpr std::size_t k_packed_weight_entries = 1024;

// One piece of one weight's value, as a part of a product reads it.
struct PackedWeightKey {
  std::uint64_t id, version;
  const void* data;    // the user's array
  std::size_t offset;  // the piece's first element in the operand read
  std::size_t k, n, ldb;
  bool transpose_b;
  MatmulPrecision precision;
  dnnl::memory::desc layout;  // the packed layout the primitive reads
};

// A packed copy: claimed by one thread, which allocates `memory`, reorders
// into it and then sets ready; other threads read the weight unpacked until
// then. Shared: an entry evicted while a thread uses it lives until it is done.
struct PackedWeight {
  dnnl::memory memory;
  std::atomic<bool> ready{false};
};

// The packed copy of `key` when it is ready or the caller is to pack it now
// (then `pack` is true: allocate `memory` with key.layout, reorder into it,
// then set ready), null when the caller reads the weight unpacked (a
// first sighting that only notes the piece, or another thread packing it).
// first_use: pack even on a first sighting.
std::shared_ptr<PackedWeight> find_packed_weight(const PackedWeightKey& key, bool first_use,
                                                 bool& pack);

// packed_weight_stats and clear_packed_weights: onednn_gemm.hpp.

}  // namespace xtgrad::detail
