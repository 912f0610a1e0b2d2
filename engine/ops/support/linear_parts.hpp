#pragma once
// The GEMMs of a linear layer, shared by the ops built on one (linear,
// low_rank_linear; internal): the forward product with its fused bias, the
// input's and the weight's gradients, and the create_graph rule of the three.
// `op` names the calling op in the GEMM's messages.

#include <cstddef>
#include <optional>

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

// The gradients of a linear layer the tape needs, into their grad slots:
// dx[N,in] (+)= dy . op(W), dW (+)= dy^T . x in W's layout, db[out] (+)= the
// sum of dy's rows (bi: the bias's node, if any). At MatmulPrecision::bf16 dy
// is rounded once for the two products that read it.
template <class T>
void linear_backward(const char* op, const LinearGeometry& d, Tape<T>& t, const xt::xarray<T>& dy,
                     std::size_t xi, std::size_t wi, std::optional<std::size_t> bi);

// create_graph: the same products as ops on inputs 0, 1 and 2 (x, W, b), on
// dy and x seen as [N, out] and [N, in].
template <class T>
void linear_grad_rule(const LinearGeometry& d, bool has_bias, GradSink<T>& g);

}  // namespace xtgrad::detail
