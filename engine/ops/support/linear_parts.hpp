#pragma once
// The GEMMs of a linear layer, shared by the ops built on one (linear,
// low_rank_linear; internal): the forward product with its fused bias, the
// input's and the weight's gradients, and the create_graph rule of the three.
// `op` names the calling op in the GEMM's messages.

#include <cstddef>

#include "../../grad_rule.hpp"
#include "../../kernels/gemm.hpp"
#include "../../tape.hpp"

namespace xtgrad::detail {

// One linear call's GEMM geometry: x and dy seen as [N, in] and [N, out], and
// W stored [out, in] (out_in) or [in, out].
struct LinearGeometry {
  std::size_t n, in, out;
  bool out_in;
  std::size_t w_rows() const { return out_in ? out : in; }
  std::size_t w_cols() const { return out_in ? in : out; }
};

// y[N,out] = x[N,in] . op(W) + b broadcast over rows   (the bias fused into the GEMM)
template <class T>
void linear_forward(const char* op, const LinearGeometry& d, const xt::xarray<T>& x,
                    const xt::xarray<T>& w, const T* bias, xt::xarray<T>& y, WeightTag tag);

// out_in: dx[N,in] (+)= dy[N,out] . W[out,in];  in_out: dx[N,in] (+)= dy[N,out] . W^T[out,in]
template <class T>
void linear_input_grad(const char* op, const LinearGeometry& d, const xt::xarray<T>& dy,
                       const xt::xarray<T>& w, GradSlot<T> dx, WeightTag tag);

// The weight's gradient, in the weight's layout.
template <class T>
void linear_weight_grad(const char* op, const LinearGeometry& d, const xt::xarray<T>& dy,
                        const xt::xarray<T>& x, GradSlot<T> dw);

// create_graph: the same products as ops on inputs 0, 1 and 2 (x, W, b), on
// dy and x seen as [N, out] and [N, in].
template <class T>
void linear_grad_rule(const LinearGeometry& d, bool has_bias, GradSink<T>& g);

}  // namespace xtgrad::detail
