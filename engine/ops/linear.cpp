#include "linear.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/gemm.hpp"
#include "../kernels/scratch.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "shape.hpp"
#include "support/linear_parts.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_linear_op = "linear";

template <class T>
detail::MatrixRef<const T> matrix(const xt::xarray<T>& a, std::size_t rows, std::size_t cols) {
  return {a.data(), rows, cols};
}
template <class T>
detail::MatrixRef<T> matrix(xt::xarray<T>& a, std::size_t rows, std::size_t cols) {
  return {a.data(), rows, cols};
}

}  // namespace

namespace detail {

// y[N,out] = x[N,in] . op(W) + b broadcast over rows   (the bias fused into the GEMM)
template <class T>
void linear_forward(const char* op, const LinearGeometry& d, const xt::xarray<T>& x,
                    const xt::xarray<T>& w, const T* bias, xt::xarray<T>& y, WeightTag tag) {
  if (bias)
    gemm_bias<T>(op, matrix(x, d.n, d.in), false, matrix(w, d.w_rows(), d.w_cols()), d.out_in,
                 matrix(y, d.n, d.out), bias, tag);
  else
    gemm<T>(op, matrix(x, d.n, d.in), false, matrix(w, d.w_rows(), d.w_cols()), d.out_in,
            matrix(y, d.n, d.out), false, tag);
}

template <class T>
void linear_backward(const char* op, const LinearGeometry& d, Tape<T>& t, const xt::xarray<T>& dy,
                     std::size_t xi, std::size_t wi, std::optional<std::size_t> bi) {
  const bool dx_needed = t.requires_grad(xi), dw_needed = t.requires_grad(wi);
  MatrixRef<const T> dy_rows = matrix(dy, d.n, d.out);
  // dW's product: out_in: dW[out,in] = dy^T[out,N] . x[N,in]; in_out: dW[in,out] = x^T . dy
  const std::size_t dw_rows = d.out_in ? d.out : d.in, dw_cols = d.out_in ? d.in : d.out;
  if (dx_needed && dw_needed && gemm_runs_bf16<T>(d.n, d.in, d.out) &&
      gemm_runs_bf16<T>(dw_rows, dw_cols, d.n)) {
    // Both products read dy's bf16 rounding: made once here (gemm would round it in each).
    dy_rows = with_bf16_rounding(dy_rows, ScratchSlot::linear_dy_bf16);
  }
  if (dx_needed) {  // out_in: dx[N,in] (+)= dy[N,out] . W[out,in];  in_out: . W^T
    GradSlot<T> dx = t.grad_slot(xi);
    gemm<T>(op, dy_rows, false, matrix(t.value(wi), d.w_rows(), d.w_cols()), !d.out_in,
            matrix(dx.buffer, d.n, d.in), dx.accumulate, weight_tag(t.node_param(wi)));
  }
  if (dw_needed) {
    GradSlot<T> dw = t.grad_slot(wi);
    const MatrixRef<const T> x_rows = matrix(t.value(xi), d.n, d.in);
    if (d.out_in)
      gemm<T>(op, dy_rows, true, x_rows, false, matrix(dw.buffer, d.out, d.in), dw.accumulate);
    else
      gemm<T>(op, x_rows, true, dy_rows, false, matrix(dw.buffer, d.in, d.out), dw.accumulate);
  }
  if (bi && t.requires_grad(*bi)) {
    GradSlot<T> db = t.grad_slot(*bi);
    // db[out] (+)= sum_r dy[r, out]
    sum_rows(dy.data(), d.n, d.out, db.buffer.data(), db.accumulate);
  }
}

template <class T>
void linear_grad_rule(const LinearGeometry& d, bool has_bias, GradSink<T>& g) {
  const auto rows = static_cast<std::int64_t>(d.n);
  const Var<T> dy = g.grad_output(), x = g.input(0), w = g.input(1);
  const Var<T> dy2 = xtgrad::reshape(dy, {rows, static_cast<std::int64_t>(d.out)});
  if (g.needs_grad(0)) {  // dx[N,in] = dy[N,out] . W[out,in]  (in_out: . W^T)
    const Var<T> dx = xtgrad::matmul(dy2, d.out_in ? w : xtgrad::transpose(w, 0, 1));
    g.add(0, xtgrad::reshape(dx, std::vector<std::int64_t>(x.shape().begin(), x.shape().end())));
  }
  if (g.needs_grad(1)) {
    const Var<T> x2 = xtgrad::reshape(x, {rows, static_cast<std::int64_t>(d.in)});
    if (d.out_in)  // dW[out,in] = dy^T[out,N] . x[N,in]
      g.add(1, xtgrad::matmul(xtgrad::transpose(dy2, 0, 1), x2));
    else  // dW[in,out] = x^T[in,N] . dy[N,out]
      g.add(1, xtgrad::matmul(xtgrad::transpose(x2, 0, 1), dy2));
  }
  if (has_bias && g.needs_grad(2))  // db[out] = sum over the N rows of dy
    g.add(2, xtgrad::sum(dy2, 0));
}

#define XTGRAD_LINEAR_PARTS(T)                                                             \
  template void linear_forward(const char*, const LinearGeometry&, const xt::xarray<T>&,   \
                               const xt::xarray<T>&, const T*, xt::xarray<T>&, WeightTag); \
  template void linear_backward(const char*, const LinearGeometry&, Tape<T>&,              \
                                const xt::xarray<T>&, std::size_t, std::size_t,            \
                                std::optional<std::size_t>);                               \
  template void linear_grad_rule(const LinearGeometry&, bool, GradSink<T>&);
XTGRAD_LINEAR_PARTS(float)
XTGRAD_LINEAR_PARTS(double)
#undef XTGRAD_LINEAR_PARTS

void check_layout(const char* op, WeightLayout layout) {
  if (layout != WeightLayout::out_in && layout != WeightLayout::in_out)
    fail_argument(op, "layout",
                  "is WeightLayout(" + std::to_string(static_cast<int>(layout)) +
                      "), expected WeightLayout::out_in or WeightLayout::in_out");
}

LinearDims check_linear_shapes(const char* op, const char* x_name, const Shape& x_shape,
                               const Shape& w_shape, const Shape* bias_shape, WeightLayout layout) {
  check_layout(op, layout);
  const bool out_in = layout == WeightLayout::out_in;
  if (w_shape.size() != 2) fail_shape(op, "weight", w_shape, out_in ? "[out, in]" : "[in, out]");
  const std::size_t in = out_in ? w_shape[1] : w_shape[0];
  const std::size_t out = out_in ? w_shape[0] : w_shape[1];
  if (x_shape.empty() || x_shape.back() != in)
    fail_shape(op, x_name, x_shape,
               "[..., " + std::to_string(in) + "] to match weight " + shape_str(w_shape));
  if (bias_shape && (bias_shape->size() != 1 || (*bias_shape)[0] != out))
    fail_shape(op, "bias", *bias_shape,
               "[" + std::to_string(out) + "] to match weight " + shape_str(w_shape));
  Shape y_shape = x_shape;
  y_shape.back() = out;
  return {in, out, leading_rows(x_shape), y_shape};
}

std::size_t leading_rows(const Shape& shape) {
  std::size_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

}  // namespace detail

template <class T>
Var<T> linear(const Var<T>& x, const Var<T>& weight, const std::optional<Var<NoDeduce<T>>>& bias,
              WeightLayout layout) {
  detail::common_tape<T>(k_linear_op,
                         {{"x", &x}, {"weight", &weight}, {"bias", bias ? &*bias : nullptr}});
  const Shape bias_shape = bias ? bias->shape() : Shape{};
  const detail::LinearDims dims = detail::check_linear_shapes(
      k_linear_op, "x", x.shape(), weight.shape(), bias ? &bias_shape : nullptr, layout);
  return detail::record_linear(dims, x, weight, bias, layout);
}

template <class T>
Var<T> detail::record_linear(const LinearDims& dims, const Var<T>& x, const Var<T>& weight,
                             const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout) {
  Tape<T>& tape = x.tape();
  const detail::LinearGeometry geo{dims.rows, dims.in, dims.out, layout == WeightLayout::out_in};
  const std::size_t xi = x.index(), wi = weight.index();
  const std::optional<std::size_t> bi = bias ? std::optional(bias->index()) : std::nullopt;
  const bool needs_grad =
      tape.requires_grad(xi) || tape.requires_grad(wi) || (bi && tape.requires_grad(*bi));

  const std::size_t yi = tape.record(k_linear_op, {xi, wi, bi.value_or(xi)}, needs_grad);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(dims.y_shape);
  // A Parameter's weight is read packed (kernels/onednn_packed_weights.hpp).
  detail::linear_forward(k_linear_op, geo, tape.value(xi), tape.value(wi),
                         bi ? tape.value(*bi).data() : nullptr, y,
                         detail::weight_tag(tape.node_param(wi)));

  tape.set_backward(yi, [xi, wi, bi, geo](Tape<T>& t, const xt::xarray<T>& dy) {
    detail::linear_backward(k_linear_op, geo, t, dy, xi, wi, bi);
  });
  tape.set_grad_rule(yi, [geo, has_bias = bi.has_value()](GradSink<T>& g) {
    detail::linear_grad_rule(geo, has_bias, g);
  });
  return tape.var(yi);
}

#define XTGRAD_INSTANTIATE_LINEAR(T)                                                     \
  template Var<T> linear(const Var<T>&, const Var<T>&, const std::optional<Var<T>>&,     \
                         WeightLayout);                                                  \
  template Var<T> detail::record_linear(const LinearDims&, const Var<T>&, const Var<T>&, \
                                        const std::optional<Var<T>>&, WeightLayout);
XTGRAD_INSTANTIATE_LINEAR(float)
XTGRAD_INSTANTIATE_LINEAR(double)
#undef XTGRAD_INSTANTIATE_LINEAR

}  // namespace xtgrad
