#pragma once
// The one way xtgrad calls BLAS. Every GEMM in the engine goes through
// detail::gemm, which checks shapes (xtensor's gemm does not: a wrong shape
// only prints a BLAS warning), skips empty products (BLAS rejects a zero
// leading dimension) and passes transposes as flags, never materialized.
// Beside it, the two row loops every linear layer needs around its GEMMs
// (the bias broadcast before, the bias gradient after).

#include <cstddef>
#include <cstdint>

namespace xtgrad::detail {

// A row-major, contiguous [rows, cols] matrix over a flat buffer.
template <class T>
struct MatrixRef {
  T* data;
  std::size_t rows;
  std::size_t cols;
  // The same matrix already rounded to bfloat16 (bf16.hpp's to_bf16_matrix,
  // contiguous), or null. An operand that two products read at
  // MatmulPrecision::bf16 is rounded once by its owner (a linear layer's dy,
  // read by dx = dy . W and dW = dy^T . x) instead of once per product. Read
  // only by a product that runs in bf16 (gemm_runs_bf16), ignored otherwise.
  const std::uint16_t* bf16 = nullptr;
};

// Which value b is when it is a Parameter's (Parameter::id and ::version,
// parameter.hpp; id 0: none): on oneDNN's float matmul such a b is read from
// a packed copy kept per weight version (onednn_packed_weights.hpp), with
// the bits of reading it unpacked. The ops that multiply by a weight pass it
// (weight_tag(tape.node_param(index))); kernels never see the tape.
struct WeightTag {
  std::uint64_t id = 0;
  std::uint64_t version = 0;
};

// The tag of a Parameter p, none for null.
template <class P>
WeightTag weight_tag(const P* p) {
  return p ? WeightTag{p->id(), p->version()} : WeightTag{};
}

// c = op(a) . op(b) when !accumulate (BLAS beta = 0, c's old contents are
// ignored), c += op(a) . op(b) when accumulate (beta = 1). op(m) is m or m^T.
// Throws std::logic_error naming `op` on inconsistent shapes.
// Products of at most k_small_gemm_macs multiply-adds (the toy model's layers)
// run in a plain vectorized loop here: handing them to OpenBLAS (argument
// checks, a lock, packing both operands) costs more than computing them.
// Larger products with at most k_streaming_rows rows of c take the
// weight-streaming path of gemm_streaming.hpp. (A few terms k, dW = dy^T x
// over a few rows, stay with OpenBLAS: at [2048, 512], k = 2 to 8, its sgemm
// beat a one-pass kernel over dW by 1.5x and k calls of cblas_sger by 1.3-2.8x;
// at k = 1 sger was faster, but it cannot overwrite, and zeroing dW first
// costs more than the difference.)
// The other float products go to the backend of gemm_backend.hpp (oneDNN's
// matmul, onednn_gemm.hpp, or OpenBLAS), or to oneDNN's bf16 matmul at
// MatmulPrecision::bf16 (matmul_precision.hpp, read once per call; the small
// and few-row products above stay float), double ones to OpenBLAS.
// Both loops stay ahead of oneDNN too (one thread, Zen 5, medians of
// interleaved rounds; oneDNN's call costs about 1 us): the toy model's
// [6, 8] . [8, 16]^T and [16, 6]^T . [6, 8] took 0.15-0.24 of oneDNN's time,
// [64, 16] . [16, 16] 0.83-0.87; one row through a [2048, 512] weight took
// 0.37-0.43, eight rows 0.23-0.68 (one noisy run 2.3). Sixteen rows tie
// (0.98-1.05). Only narrow small products lose: [128, 16] . [16, 8] took
// 3.6x oneDNN's time (the loop's column and dot forms).
template <class T>
void gemm(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
          bool transpose_b, MatrixRef<T> c, bool accumulate, WeightTag weight = {});

// Whether gemm<T> runs an [m, k] . [k, n] product on oneDNN's bf16 matmul
// at the precision in force now: float, MatmulPrecision::bf16, neither small
// nor few rows (the paths above). Where an operand read by two such products
// is worth rounding once (MatrixRef::bf16).
template <class T>
bool gemm_runs_bf16(std::size_t m, std::size_t n, std::size_t k);

enum class ScratchSlot : std::size_t;  // scratch.hpp

// a with its bf16 rounding attached (MatrixRef::bf16), made in this thread's
// scratch `slot`: for an operand that several products read where they run
// in bf16 (gemm_runs_bf16), rounded once by its owner instead of once in
// each product, with the same bits. T = double: a as it is.
template <class T>
MatrixRef<const T> with_bf16_rounding(MatrixRef<const T> a, ScratchSlot slot);

// Whether gemm<T> runs an [m, k] . [k, n] product on xtgrad's own threads
// (oneDNN's parts in the pool, or xtgrad's loops), not on OpenBLAS's: then
// several such products may run at once, one per thread of a pool job, each
// computing the same bits as when it has the pool to itself.
template <class T>
bool gemm_on_pool_threads(std::size_t m, std::size_t n, std::size_t k);

// c = op(a) . op(b) + bias on every row of c (bias [n]), for a linear layer's
// forward. On oneDNN's float (or bf16) matmul the bias is the primitive's
// bias argument: no pass of its own, and c is not read; the bits are those
// of the sum post-op onto a broadcast bias (test_gemm_backend). On the other
// paths broadcast_rows writes the bias into c before a product that
// accumulates onto it (beta = 1).
template <class T>
void gemm_bias(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
               bool transpose_b, MatrixRef<T> c, const T* bias, WeightTag weight = {});

// The OpenBLAS product of gemm, for any shape gemm accepts with m, n, k > 0
// (unchecked), whatever the backend: the reference the oneDNN path is tested
// and measured against.
template <class T>
void blas_gemm(MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b, bool transpose_b,
               MatrixRef<T> c, bool accumulate);

inline constexpr std::size_t k_small_gemm_macs = 16384;

// y[r, :] = b for each of the n rows of y [n, cols]: a bias written before a
// GEMM that adds onto it (beta = 1), where the GEMM cannot take the bias.
template <class T>
void broadcast_rows(const T* b, T* y, std::size_t n, std::size_t cols);

// db[cols] = (or +=, when accumulate) the sum of the n rows of dy [n, cols]:
// the gradient of a bias.
template <class T>
void sum_rows(const T* dy, std::size_t n, std::size_t cols, T* db, bool accumulate);

}  // namespace xtgrad::detail
