#include "matmul.hpp"

#include <algorithm>
#include <string>

#include "../check.hpp"
#include "../checked_size.hpp"
#include "../errors.hpp"
#include "../kernels/gemm.hpp"
#include "shape.hpp"
#include "sum_to.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_matmul_op = "matmul";

// One matmul seen as batch_count products [m, k] . [k, n]. The batch axes are
// the broadcast leading axes of the result; along each, an operand steps
// a_stride / b_stride matrices (0 where it is repeated, its size being 1).
struct MatmulDims {
  std::size_t m = 1, k = 1, n = 1;
  Shape batch;  // the result's batch axes
  Shape a_stride, b_stride;
  std::size_t batch_count = 1, b_count = 1;  // b_count: matrices in b
  Shape y_shape;
};

// The matrices product `i` of the batch reads, and whether it is the first
// product to read each one. Among the products sharing a matrix of a, the
// first in row-major order is the one at index 0 along every axis a is
// repeated on: it writes that matrix's gradient, the others add to it.
struct BatchSource {
  std::size_t a = 0, b = 0;
  bool a_first = true, b_first = true;
};

BatchSource batch_source(const MatmulDims& d, std::size_t i) {
  BatchSource s;
  for (std::size_t axis = d.batch.size(); axis-- > 0;) {
    const std::size_t j = i % d.batch[axis];
    i /= d.batch[axis];
    s.a += j * d.a_stride[axis];
    s.b += j * d.b_stride[axis];
    if (j != 0 && d.a_stride[axis] == 0) s.a_first = false;
    if (j != 0 && d.b_stride[axis] == 0) s.b_first = false;
  }
  return s;
}

// The size along batch axis `axis` (of `rank`) of an operand whose own
// batch_rank batch axes are right-aligned onto them: 1 where it has none.
std::size_t batch_size_at(const Shape& shape, std::size_t batch_rank, std::size_t rank,
                          std::size_t axis) {
  const std::size_t skip = rank - batch_rank;
  return axis < skip ? 1 : shape[axis - skip];
}

MatmulDims check_matmul_shapes(const Shape& a, const Shape& b) {
  const detail::Check check(k_matmul_op);
  check.shape(!a.empty() && !b.empty(), a.empty() ? "a" : "b", a.empty() ? a : b,
              "at least 1 axis (a 0-d tensor is neither a vector nor a matrix), with argument '",
              a.empty() ? "b" : "a", "' of shape ", a.empty() ? b : a);
  const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  MatmulDims d;
  d.m = a_vector ? 1 : a[a.size() - 2];
  d.k = a.back();
  const std::size_t k_b = b_vector ? b[0] : b[b.size() - 2];
  d.n = b_vector ? 1 : b.back();
  check.shape(k_b == d.k, "b", b, b_vector ? "[" : "[..., ", d.k, b_vector ? "]" : ", N]",
              " to match argument 'a' of shape ", a, " (a[..., M, K] . b[..., K, N])");

  const std::size_t a_rank = a_vector ? 0 : a.size() - 2, b_rank = b_vector ? 0 : b.size() - 2;
  const std::size_t rank = std::max(a_rank, b_rank);
  d.batch = Shape(rank, 1);
  d.a_stride = Shape(rank, 0);
  d.b_stride = Shape(rank, 0);
  for (std::size_t axis = 0; axis < rank; ++axis) {
    const std::size_t na = batch_size_at(a, a_rank, rank, axis);
    const std::size_t nb = batch_size_at(b, b_rank, rank, axis);
    check.shape(na == nb || na == 1 || nb == 1, "b", b,
                "batch axes (all but the last two) that broadcast with those of argument 'a' of "
                "shape ",
                a, " (NumPy rules: aligned from the right, each axis equal or 1; batch axis -",
                rank - axis, " has ", na, " in 'a' and ", nb, " in 'b')");
    d.batch[axis] = std::max(na, nb);
    if (na == 0 || nb == 0) d.batch[axis] = 0;
  }
  // Strides in matrices, innermost batch axis last; 0 along a repeated axis.
  std::size_t a_step = 1, b_step = 1;
  for (std::size_t axis = rank; axis-- > 0;) {
    const std::size_t na = batch_size_at(a, a_rank, rank, axis);
    const std::size_t nb = batch_size_at(b, b_rank, rank, axis);
    d.a_stride[axis] = na == 1 ? 0 : a_step;
    d.b_stride[axis] = nb == 1 ? 0 : b_step;
    a_step *= na;
    b_step *= nb;
    d.batch_count *= d.batch[axis];
  }
  d.b_count = b_step;
  d.y_shape = d.batch;
  if (!a_vector) d.y_shape.push_back(d.m);
  if (!b_vector) d.y_shape.push_back(d.n);
  return d;
}

template <class T>
detail::MatrixRef<const T> matrix(const xt::xarray<T>& x, std::size_t first, std::size_t rows,
                                  std::size_t cols) {
  return {x.data() + first * rows * cols, rows, cols};
}
template <class T>
detail::MatrixRef<T> matrix(xt::xarray<T>& x, std::size_t first, std::size_t rows,
                            std::size_t cols) {
  return {x.data() + first * rows * cols, rows, cols};
}

// y = a . b, one GEMM when one b serves every batch, else one per batch.
template <class T>
void matmul_forward(const MatmulDims& d, const xt::xarray<T>& av, const xt::xarray<T>& bv,
                    xt::xarray<T>& y) {
  const std::size_t m = d.m, k = d.k, n = d.n;
  if (d.b_count == 1) {
    // One b for every batch: y[batch*M,N] = a[batch*M,K] . b[K,N], one GEMM.
    const std::size_t rows = d.batch_count * m;
    detail::gemm<T>(k_matmul_op, matrix(av, 0, rows, k), false, matrix(bv, 0, k, n), false,
                    matrix(y, 0, rows, n), false);
    return;
  }
  for (std::size_t i = 0; i < d.batch_count; ++i) {
    const BatchSource s = batch_source(d, i);
    // y_i[M,N] = a_s[M,K] . b_s[K,N]
    detail::gemm<T>(k_matmul_op, matrix(av, s.a, m, k), false, matrix(bv, s.b, k, n), false,
                    matrix(y, i, m, n), false);
  }
}

template <class T>
void matmul_backward_a(const MatmulDims& d, const xt::xarray<T>& dy, const xt::xarray<T>& bv,
                       GradSlot<T> da) {
  const std::size_t m = d.m, k = d.k, n = d.n;
  if (d.b_count == 1) {
    const std::size_t rows = d.batch_count * m;
    // da[batch*M,K] (+)= dy[batch*M,N] . b^T[N,K]
    detail::gemm<T>(k_matmul_op, matrix(dy, 0, rows, n), false, matrix(bv, 0, k, n), true,
                    matrix(da.buffer, 0, rows, k), da.accumulate);
    return;
  }
  if (d.batch_count == 0 && !da.accumulate) da.buffer.fill(T(0));
  for (std::size_t i = 0; i < d.batch_count; ++i) {
    const BatchSource s = batch_source(d, i);
    // da_s[M,K] (+)= dy_i[M,N] . b_s^T[N,K]   (summed over the batches sharing a_s)
    detail::gemm<T>(k_matmul_op, matrix(dy, i, m, n), false, matrix(bv, s.b, k, n), true,
                    matrix(da.buffer, s.a, m, k), da.accumulate || !s.a_first);
  }
}

template <class T>
void matmul_backward_b(const MatmulDims& d, const xt::xarray<T>& dy, const xt::xarray<T>& av,
                       GradSlot<T> db) {
  const std::size_t m = d.m, k = d.k, n = d.n;
  if (d.b_count == 1) {
    const std::size_t rows = d.batch_count * m;
    // db[K,N] (+)= a^T[K,batch*M] . dy[batch*M,N]   (every batch in one sum)
    detail::gemm<T>(k_matmul_op, matrix(av, 0, rows, k), true, matrix(dy, 0, rows, n), false,
                    matrix(db.buffer, 0, k, n), db.accumulate);
    return;
  }
  if (d.batch_count == 0 && !db.accumulate) db.buffer.fill(T(0));
  for (std::size_t i = 0; i < d.batch_count; ++i) {
    const BatchSource s = batch_source(d, i);
    // db_s[K,N] (+)= a_s^T[K,M] . dy_i[M,N]   (summed over the batches sharing b_s)
    detail::gemm<T>(k_matmul_op, matrix(av, s.a, m, k), true, matrix(dy, i, m, n), false,
                    matrix(db.buffer, s.b, k, n), db.accumulate || !s.b_first);
  }
}

}  // namespace

template <class T>
Var<T> matmul(const Var<T>& a, const Var<T>& b) {
  Tape<T>& tape = detail::common_tape<T>(k_matmul_op, {{"a", &a}, {"b", &b}});
  const MatmulDims d = check_matmul_shapes(a.shape(), b.shape());
  detail::checked_allocation<T>(k_matmul_op, "arguments 'a' and 'b'", d.y_shape);
  const std::size_t ai = a.index(), bi = b.index();
  const std::size_t yi = tape.record(k_matmul_op, {ai, bi}, a.requires_grad() || b.requires_grad());
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(d.y_shape);
  matmul_forward(d, tape.value(ai), tape.value(bi), y);

  tape.set_backward(yi, [ai, bi, d](Tape<T>& t, const xt::xarray<T>& dy) {
    // Claimed one after the other: for matmul(x, x) the second claim accumulates.
    if (t.requires_grad(ai)) matmul_backward_a(d, dy, t.value(bi), t.grad_slot(ai));
    if (t.requires_grad(bi)) matmul_backward_b(d, dy, t.value(ai), t.grad_slot(bi));
  });
  // Both operands of rank >= 2: da = dy . b^T, db = a^T . dy, each summed back
  // over the batch axes its operand was broadcast along. A vector operand has
  // no rule (create_graph refuses it).
  if (a.dimension() >= 2 && b.dimension() >= 2)
    tape.set_grad_rule(yi, [](GradSink<T>& g) {
      const Var<T> dy = g.grad_output(), a = g.input(0), b = g.input(1);
      if (g.needs_grad(0))  // da[..., M, K] = dy[..., M, N] . b^T[..., N, K]
        g.add(0, detail::sum_to(matmul(dy, transpose(b, -1, -2)), a.shape()));
      if (g.needs_grad(1))  // db[..., K, N] = a^T[..., K, M] . dy[..., M, N]
        g.add(1, detail::sum_to(matmul(transpose(a, -1, -2), dy), b.shape()));
    });
  return tape.var(yi);
}

template Var<float> matmul(const Var<float>&, const Var<float>&);
template Var<double> matmul(const Var<double>&, const Var<double>&);

}  // namespace xtgrad
