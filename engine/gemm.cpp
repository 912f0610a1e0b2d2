#include "gemm.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

namespace xtgrad::detail {

template <class T>
void gemm(const char* op, MatrixRef<const T> a, bool transpose_a, MatrixRef<const T> b,
          bool transpose_b, MatrixRef<T> c, bool accumulate) {
  const std::size_t m = transpose_a ? a.cols : a.rows;
  const std::size_t k = transpose_a ? a.rows : a.cols;
  const std::size_t k_b = transpose_b ? b.cols : b.rows;
  const std::size_t n = transpose_b ? b.rows : b.cols;
  if (k != k_b || m != c.rows || n != c.cols)
    throw std::logic_error(std::string("xtgrad::") + op + ": internal GEMM shape mismatch [" +
                           std::to_string(m) + "x" + std::to_string(k) + "] . [" +
                           std::to_string(k_b) + "x" + std::to_string(n) + "] -> [" +
                           std::to_string(c.rows) + "x" + std::to_string(c.cols) + "]");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: c = 0 (or unchanged when accumulating)
    if (!accumulate) std::fill(c.data, c.data + m * n, T(0));
    return;
  }
  using shape2 = std::array<std::size_t, 2>;
  const auto a_view =
      xt::adapt(a.data, a.rows * a.cols, xt::no_ownership(), shape2{a.rows, a.cols});
  const auto b_view =
      xt::adapt(b.data, b.rows * b.cols, xt::no_ownership(), shape2{b.rows, b.cols});
  auto c_view = xt::adapt(c.data, c.rows * c.cols, xt::no_ownership(), shape2{c.rows, c.cols});
  xt::blas::gemm(a_view, b_view, c_view, transpose_a, transpose_b, T(1), accumulate ? T(1) : T(0));
}

template void gemm<float>(const char*, MatrixRef<const float>, bool, MatrixRef<const float>, bool,
                          MatrixRef<float>, bool);
template void gemm<double>(const char*, MatrixRef<const double>, bool, MatrixRef<const double>,
                           bool, MatrixRef<double>, bool);

}  // namespace xtgrad::detail
