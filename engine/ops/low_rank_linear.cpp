#include "low_rank_linear.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/gemm.hpp"
#include "elementwise.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "shape.hpp"
#include "support/broadcast.hpp"
#include "support/linear_parts.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_low_rank_op = "low_rank_linear";

template <class T>
detail::MatrixRef<const T> low_rank_matrix(const xt::xarray<T>& a, std::size_t rows,
                                           std::size_t cols) {
  return {a.data(), rows, cols};
}
template <class T>
detail::MatrixRef<T> low_rank_matrix(xt::xarray<T>& a, std::size_t rows, std::size_t cols) {
  return {a.data(), rows, cols};
}

// The op's sizes: the base layer's (x [N, in], W, dy [N, out]), h [N, r],
// B [out, r], and the adapter's scale s.
template <class T>
struct LowRankGeometry {
  detail::LinearGeometry base;
  std::size_t r;
  T scaling;
  Shape y_shape;  // x's shape with the last axis set to out
};

// The checks: linear's on x, W and b, then h [..., r] with x's leading axes
// and B [out, r].
template <class T>
LowRankGeometry<T> check_low_rank(const Var<T>& x, const Var<T>& weight,
                                  const std::optional<Var<T>>& bias, WeightLayout layout,
                                  const Var<T>& h, const Var<T>& b_low_rank, T scaling) {
  const detail::Check check(k_low_rank_op);
  const Shape bias_shape = bias ? bias->shape() : Shape{};
  const detail::LinearDims dims = detail::check_linear_shapes(
      k_low_rank_op, "x", x.shape(), weight.shape(), bias ? &bias_shape : nullptr, layout);
  const Shape& hs = h.shape();
  const bool h_ok = hs.size() == x.shape().size() &&
                    std::equal(hs.begin(), hs.end() - 1, x.shape().begin()) && hs.back() > 0;
  check.shape(h_ok, "h", hs, "x's leading axes and a rank >= 1, x has shape ", x.shape());
  const std::size_t r = hs.back();
  check.shape(b_low_rank.shape() == Shape{dims.out, r}, "b_low_rank", b_low_rank.shape(),
              Shape{dims.out, r});
  return {{dims.rows, dims.in, dims.out, layout == WeightLayout::out_in}, r, scaling, dims.y_shape};
}

// y[N,out] = x[N,in] . op(W) + b, as linear computes it; then
// d[N,out] = h[N,r] . B^T[r,out];  y += d * s  (scale, then add: the composition's bits)
template <class T>
void low_rank_forward(const LowRankGeometry<T>& d, const xt::xarray<T>& x, const xt::xarray<T>& w,
                      const T* bias, const xt::xarray<T>& h, const xt::xarray<T>& b_low_rank,
                      xt::xarray<T>& y, detail::WeightTag tag) {
  const std::size_t n = d.base.n, out = d.base.out;
  detail::linear_forward(k_low_rank_op, d.base, x, w, bias, y, tag);
  xt::xarray<T> update = xt::empty<T>(std::vector<std::size_t>{n, out});
  detail::gemm<T>(k_low_rank_op, low_rank_matrix(h, n, d.r), false,
                  low_rank_matrix(b_low_rank, out, d.r), true, low_rank_matrix(update, n, out),
                  false);
  detail::binary_run(update.data(), update.data(), true, &d.scaling, false, update.size(),
                     std::multiplies<T>());
  detail::binary_run(y.data(), y.data(), true, update.data(), true, y.size(), std::plus<T>());
}

// The adapter's gradients, through g[N,out] = s * dy (the forward added s * (h . B^T)).
template <class T>
void adapter_backward(const LowRankGeometry<T>& d, Tape<T>& t, const xt::xarray<T>& dy,
                      std::size_t hi, std::size_t li) {
  if (!t.requires_grad(hi) && !t.requires_grad(li)) return;
  const std::size_t n = d.base.n, out = d.base.out;
  xt::xarray<T> g_buffer = xt::empty<T>(std::vector<std::size_t>{n, out});
  detail::binary_run(g_buffer.data(), &d.scaling, false, dy.data(), true, g_buffer.size(),
                     std::multiplies<T>());
  const xt::xarray<T>& g = g_buffer;
  if (t.requires_grad(hi)) {
    GradSlot<T> dh = t.grad_slot(hi);
    // dh[N,r] (+)= g[N,out] . B[out,r]
    detail::gemm<T>(k_low_rank_op, low_rank_matrix(g, n, out), false,
                    low_rank_matrix(t.value(li), out, d.r), false,
                    low_rank_matrix(dh.buffer, n, d.r), dh.accumulate);
  }
  if (t.requires_grad(li)) {
    GradSlot<T> db = t.grad_slot(li);
    // dB[out,r] (+)= g^T[out,N] . h[N,r]
    detail::gemm<T>(k_low_rank_op, low_rank_matrix(g, n, out), true,
                    low_rank_matrix(t.value(hi), n, d.r), false,
                    low_rank_matrix(db.buffer, out, d.r), db.accumulate);
  }
}

// create_graph: linear's rule on x, W and b, then the adapter's products as
// ops, on dy and h seen as [N, out] and [N, r].
template <class T>
void low_rank_grad_rule(const LowRankGeometry<T>& d, bool has_bias, GradSink<T>& g) {
  detail::linear_grad_rule(d.base, has_bias, g);
  if (!g.needs_grad(3) && !g.needs_grad(4)) return;
  const auto rows = static_cast<std::int64_t>(d.base.n);
  const Var<T> dy2 = reshape(g.grad_output(), {rows, static_cast<std::int64_t>(d.base.out)});
  const Var<T> g2 = scale(dy2, d.scaling);  // g[N,out] = s * dy
  const Var<T> h = g.input(3), b = g.input(4);
  if (g.needs_grad(3))  // dh[N,r] = g[N,out] . B[out,r]
    g.add(3, reshape(matmul(g2, b), std::vector<std::int64_t>(h.shape().begin(), h.shape().end())));
  if (g.needs_grad(4))  // dB[out,r] = g^T[out,N] . h[N,r]
    g.add(4, matmul(transpose(g2, 0, 1), reshape(h, {rows, static_cast<std::int64_t>(d.r)})));
}

}  // namespace

template <class T>
Var<T> low_rank_linear(const Var<T>& x, const Var<T>& weight,
                       const std::optional<Var<NoDeduce<T>>>& bias, WeightLayout layout,
                       const Var<NoDeduce<T>>& h, const Var<NoDeduce<T>>& b_low_rank,
                       NoDeduce<T> scaling) {
  Tape<T>& tape = detail::common_tape<T>(k_low_rank_op, {{"x", &x},
                                                         {"weight", &weight},
                                                         {"bias", bias ? &*bias : nullptr},
                                                         {"h", &h},
                                                         {"b_low_rank", &b_low_rank}});
  const LowRankGeometry<T> d = check_low_rank<T>(x, weight, bias, layout, h, b_low_rank, scaling);
  const std::size_t xi = x.index(), wi = weight.index(), hi = h.index(), li = b_low_rank.index();
  const std::optional<std::size_t> bi = bias ? std::optional(bias->index()) : std::nullopt;
  const bool needs_grad = tape.requires_grad(xi) || tape.requires_grad(wi) ||
                          (bi && tape.requires_grad(*bi)) || tape.requires_grad(hi) ||
                          tape.requires_grad(li);

  const std::size_t yi = tape.record(k_low_rank_op, {xi, wi, bi.value_or(xi), hi, li}, needs_grad);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(d.y_shape);
  low_rank_forward(d, tape.value(xi), tape.value(wi), bi ? tape.value(*bi).data() : nullptr,
                   tape.value(hi), tape.value(li), y, detail::weight_tag(tape.node_param(wi)));
  tape.set_backward(yi, [d, xi, wi, bi, hi, li](Tape<T>& t, const xt::xarray<T>& dy) {
    detail::linear_backward(k_low_rank_op, d.base, t, dy, xi, wi, bi);
    adapter_backward(d, t, dy, hi, li);
  });
  tape.set_grad_rule(
      yi, [d, has_bias = bi.has_value()](GradSink<T>& g) { low_rank_grad_rule(d, has_bias, g); });
  return tape.var(yi);
}

#define XTGRAD_LOW_RANK_LINEAR(T)                                                             \
  template Var<T> low_rank_linear(const Var<T>&, const Var<T>&, const std::optional<Var<T>>&, \
                                  WeightLayout, const Var<T>&, const Var<T>&, T);
XTGRAD_LOW_RANK_LINEAR(float)
XTGRAD_LOW_RANK_LINEAR(double)
#undef XTGRAD_LOW_RANK_LINEAR

}  // namespace xtgrad
