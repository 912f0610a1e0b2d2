#pragma once
// gated: the gating product of the GLU family (Shazeer 2020, "GLU Variants
// Improve Transformer"): SwiGLU with silu, GeGLU with gelu, ReGLU with relu.
//
//   y = u * f(g)                 u, g, y: the same shape (any, [0, D] included)
//   du = dy * f(g)
//   dg = dy * u * f'(g)
//
// f and f' as in activation.hpp. One fused vectorized pass forward and one
// backward (du and dg together); nothing is saved but the node indices of u
// and g. Throws std::invalid_argument naming 'gated', the argument 'g' and
// both shapes when the shapes differ, and for an Activation value outside the
// enumeration.

#include "../activation.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> gated(const Var<T>& u, const Var<T>& g, Activation a);

}  // namespace xtgrad
