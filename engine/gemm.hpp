#pragma once
// The one way xtgrad calls BLAS. Every GEMM in the engine goes through
// detail::gemm, which checks shapes (xtensor's gemm does not: a wrong shape
// only prints a BLAS warning), skips empty products (BLAS rejects a zero
// leading dimension) and passes transposes as flags, never materialized.

#include <cstddef>

namespace xtgrad::detail {

// A row-major, contiguous [rows, cols] matrix over a flat buffer.
template <class T>
struct MatrixRef {
  T* data;
  std::size_t rows;
  std::size_t cols;
};

// c = op(a) . op(b) when !accumulate (BLAS beta = 0, c's old contents are
// ignored), c += op(a) . op(b) when accumulate (beta = 1). op(m) is m or m^T.
// Throws std::logic_error naming `op` on inconsistent shapes.
template <class T>
void gemm(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
          bool transpose_b, MatrixRef<T> c, bool accumulate);

}  // namespace xtgrad::detail
