#pragma once
// Float GEMMs through oneDNN's matmul primitive (the large-product path of
// detail::gemm when the backend is oneDNN; gemm_backend.hpp).
//
// One primitive per (shape, leading dimensions, transposes, accumulate,
// precision, thread count), kept in a small per-thread LRU: a primitive's
// creation (its kernel is generated at run time) costs far more than a
// product of the shapes that reach here, and threads never share one, so two
// tapes in two threads run their GEMMs concurrently without a lock.
// Transposes are strides of the memory descriptors (nothing is copied);
// accumulation (beta = 1) is the sum post-op. Each thread's scratchpad is
// its own buffer (scratchpad_mode::user).
//
// oneDNN runs on OpenMP, always with one OpenMP thread: a team's workers
// keep spinning after each call (libgomp's OMP_WAIT_POLICY, active by
// default, read only at load) and take the core xtgrad's pool needs next. A
// product of at least 2 * k_onednn_parallel_macs multiply-adds is split
// instead over xtgrad's pool (parallel.hpp, threads.hpp) into blocks of C's
// rows (M >= N) or columns, each a single-threaded primitive: one part per
// k_onednn_parallel_macs, at most k_onednn_max_parts, whatever the thread
// count (so every count gives the same bits), run serially on one thread
// and inside a job of the pool.
//
// A b operand that is a Parameter's value (a WeightTag, gemm.hpp) is read
// from a copy packed in oneDNN's preferred layout, kept per weight version
// (onednn_packed_weights.hpp), wherever that gives the bits of the unpacked
// primitive; every other operand is read in the user's layout as strides.
// The packed primitive is another entry of the thread's LRU (the packed flag
// of its key).
//
// At MatmulPrecision::bf16 (matmul_precision.hpp) the stored blocks of a and
// b are first rounded to bfloat16 by xtgrad's own pass (bf16.hpp) into the
// calling thread's scratch (ScratchSlot::gemm_bf16_a / _b, grown, never
// shrunk: no allocation per call once warm), contiguous, unless the caller
// hands one already rounded (RoundedOperands); the primitive reads
// them with the same transposes as strides, accumulates in float and writes
// float c (the sum post-op adds onto float c). The precision is another
// field of a primitive's key and another data type of its source and
// weights descriptors. The conversion is done once per call, before the
// split, so every part reads the same rounded operands; it costs one pass
// over a and b, (m * k + k * n) elements, against m * n * k multiply-adds.

#include "../matmul_precision.hpp"
#include "gemm.hpp"  // WeightTag

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtgrad::detail {

inline constexpr std::size_t k_onednn_parallel_macs = std::size_t(1) << 23;
// Rows or columns of C between part boundaries (a vector of floats).
inline constexpr std::size_t k_onednn_split_align = 16;
// Parts of a split product at most (divisible by 1 to 4 threads).
inline constexpr std::size_t k_onednn_max_parts = 12;
// Lines of C a part has at least (but see run_parts): a fused FFN's row
// block, [256, 2048] . [2048, 512] at N 4096, split into 12 parts of 32-48
// columns ran its forward at 1.27-1.29x the GEMM floor (relu, one thread,
// Zen 5), in 4 parts of 128 at 1.06-1.07x.
inline constexpr std::size_t k_onednn_min_part_lines = 128;

// True when xtgrad was built with oneDNN.
bool onednn_compiled();

// c[m, n] (+)= op(a)[m, k] . op(b)[k, n], row-major with leading dimensions
// lda, ldb, ldc (elements between rows as stored: a is [k, lda] when
// transposed). m, n, k > 0. std::logic_error when not built with oneDNN.
// A bias (float [n], not with accumulate) is the primitive's bias argument:
// c = op(a) . op(b) + bias on every row, with the bits of writing the bias
// into c and accumulating through the sum post-op (test_gemm_backend checks
// both precisions, split and unsplit products).
// weight: which Parameter value b is (packed once per version), none by default.
// rounded: a's or b's stored block already rounded to bfloat16 by the caller
// (MatrixRef::bf16), used at bf16 instead of rounding it here.
struct RoundedOperands {
  const std::uint16_t* a = nullptr;
  const std::uint16_t* b = nullptr;
};
void onednn_gemm(const float* a, std::size_t lda, bool transpose_a, const float* b, std::size_t ldb,
                 bool transpose_b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                 std::size_t k, bool accumulate,
                 MatmulPrecision precision = MatmulPrecision::highest, const float* bias = nullptr,
                 WeightTag weight = {}, RoundedOperands rounded = {});

// "oneDNN 2.6.3 (brg:avx512_core)": the version and the implementation
// oneDNN picks for a representative product at `precision` on this CPU
// ("brg:avx512_core_bf16" for bf16 on Zen 4 and 5), "none" in the
// parentheses when oneDNN has no implementation.
std::string onednn_info(MatmulPrecision precision = MatmulPrecision::highest);

// The implementation oneDNN picks for a representative bf16 product on this
// CPU ("brg:avx512_core_bf16", an AMX kernel), empty when it has none or
// xtgrad is built without oneDNN. Asked once, then remembered.
const std::string& onednn_bf16_kernel();

// Whether `kernel` (an impl_info_str) computes in bf16 natively: an AMX or
// an AVX512-BF16 kernel. oneDNN's other bf16 kernels (its gemm on plain
// AVX-512, its reference code) emulate bf16 at below float speed.
bool native_bf16_kernel(const std::string& kernel);

// Primitives in the calling thread's cache (for tests).
std::size_t onednn_cached_primitives();

// The packed-weight cache (onednn_packed_weights.hpp), process-wide: pieces
// noted or packed, how many are packed, and their bytes (for tests and benches).
struct PackedWeightStats {
  std::size_t entries, packed, bytes;
};
PackedWeightStats packed_weight_stats();

// Drops every packed copy (for tests and benches; not while a GEMM runs).
void clear_packed_weights();

// Whether tagged weights are read packed (default false: the public switch
// and its contract are in engine/weight_packing.hpp); false reads every b
// unpacked, the path the reference tests and benches compare against.
// Process-wide; set it between GEMMs.
void set_weight_packing(bool on);
bool weight_packing();

}  // namespace xtgrad::detail
