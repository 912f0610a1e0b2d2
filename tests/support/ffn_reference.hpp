#pragma once
// Independent references for the FFN tests: the forward and the closed-form
// backward of the two-layer and the gated blocks, written as plain loops over
// [N, features] matrices in double with std::erf / std::tanh / std::exp.
// Nothing here calls the engine.

#include <cmath>
#include <string>

#include <xtensor/xarray.hpp>

#include "support/activation_reference.hpp"

namespace xtgrad::testing {

// f and f' of the activation named `name` (the shared long double reference).
inline double scalar_activation(const std::string& name, double x) {
  return static_cast<double>(reference_value(activation_named(name), x));
}
inline double scalar_derivative(const std::string& name, double x) {
  return static_cast<double>(reference_slope(activation_named(name), x));
}

using Matrix = xt::xarray<double>;

// a[N,K] . b[K,M] (b_transposed: b given as [M,K]); plain triple loop.
inline Matrix matmul(const Matrix& a, const Matrix& b, bool b_transposed = false,
                     bool a_transposed = false) {
  const std::size_t n = a_transposed ? a.shape()[1] : a.shape()[0];
  const std::size_t k = a_transposed ? a.shape()[0] : a.shape()[1];
  const std::size_t m = b_transposed ? b.shape()[0] : b.shape()[1];
  Matrix c = xt::zeros<double>({n, m});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double acc = 0.0;
      for (std::size_t p = 0; p < k; ++p)
        acc += (a_transposed ? a(p, i) : a(i, p)) * (b_transposed ? b(j, p) : b(p, j));
      c(i, j) = acc;
    }
  return c;
}

inline Matrix add_row(Matrix m, const Matrix& row) {
  for (std::size_t i = 0; i < m.shape()[0]; ++i)
    for (std::size_t j = 0; j < m.shape()[1]; ++j) m(i, j) += row(j);
  return m;
}

inline Matrix column_sums(const Matrix& m) {
  Matrix s = xt::zeros<double>({m.shape()[1]});
  for (std::size_t i = 0; i < m.shape()[0]; ++i)
    for (std::size_t j = 0; j < m.shape()[1]; ++j) s(j) += m(i, j);
  return s;
}

inline Matrix apply(const std::string& f, Matrix m, bool derivative = false) {
  for (auto& v : m) v = derivative ? scalar_derivative(f, v) : scalar_activation(f, v);
  return m;
}

// Two-layer block, PyTorch layout: y = f(x W1^T + b1) W2^T + b2, and its
// gradients for upstream dy.
struct TwoLayerReference {
  Matrix y, dx, dw1, db1, dw2, db2;
};

inline TwoLayerReference two_layer_reference(const std::string& f, const Matrix& x,
                                             const Matrix& w1, const Matrix& b1, const Matrix& w2,
                                             const Matrix& b2, const Matrix& dy) {
  const Matrix h = add_row(matmul(x, w1, true), b1);  // [N,H]
  const Matrix a = apply(f, h);                       // [N,H]
  TwoLayerReference r;
  r.y = add_row(matmul(a, w2, true), b2);  // [N,D]
  const Matrix da = matmul(dy, w2);        // [N,H] = dy[N,D] . W2[D,H]
  Matrix dh = da * apply(f, h, true);      // [N,H]
  r.dw2 = matmul(dy, a, false, true);      // [D,H] = dy^T . a
  r.db2 = column_sums(dy);
  r.dw1 = matmul(dh, x, false, true);  // [H,D] = dh^T . x
  r.db1 = column_sums(dh);
  r.dx = matmul(dh, w1);  // [N,D] = dh . W1
  return r;
}

// Gated block, input-channel-first: y = ((x Wu + bu) * f(x Wg + bg)) Wd + bd.
struct GatedReference {
  Matrix y, dx, dw_up, dw_gate, dw_down, db_up, db_gate, db_down;
};

inline GatedReference gated_reference(const std::string& f, const Matrix& x, const Matrix& w_up,
                                      const Matrix& w_gate, const Matrix& w_down,
                                      const Matrix& b_up, const Matrix& b_gate,
                                      const Matrix& b_down, const Matrix& dy) {
  const Matrix u = add_row(matmul(x, w_up), b_up);      // [N,H]
  const Matrix g = add_row(matmul(x, w_gate), b_gate);  // [N,H]
  const Matrix a = u * apply(f, g);                     // [N,H]
  GatedReference r;
  r.y = add_row(matmul(a, w_down), b_down);      // [N,Cout]
  const Matrix da = matmul(dy, w_down, true);    // [N,H] = dy . Wd^T
  const Matrix du = da * apply(f, g);            // [N,H]
  const Matrix dg = da * u * apply(f, g, true);  // [N,H]
  r.dw_down = matmul(a, dy, false, true);        // [H,Cout] = a^T . dy
  r.db_down = column_sums(dy);
  r.dw_up = matmul(x, du, false, true);  // [Cin,H] = x^T . du
  r.dw_gate = matmul(x, dg, false, true);
  r.db_up = column_sums(du);
  r.db_gate = column_sums(dg);
  r.dx = matmul(du, w_up, true) + matmul(dg, w_gate, true);  // [N,Cin]
  return r;
}

}  // namespace xtgrad::testing
