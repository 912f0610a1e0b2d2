#pragma once
// Selecting by a boolean mask (torch.Tensor.masked_fill, torch.where,
// torch.triu, torch.tril) and the two masks attention is built from.
//
//   masked_fill(x, mask, value)  y = mask ? value : x     dx = mask ? 0 : dy
//   where(cond, a, b)            y = cond ? a : b         da = sum(cond ? dy : 0)
//                                                         db = sum(cond ? 0 : dy)
//   tril(x, diagonal)            y[.., i, j] = j - i <= diagonal ? x[.., i, j] : 0
//   triu(x, diagonal)            y[.., i, j] = j - i >= diagonal ? x[.., i, j] : 0
//                                dx = the same selection of dy (tril and triu)
//
// Masks are xt::xarray<bool> and carry no gradient (like Indices). Broadcasting
// follows NumPy (engine/ops/support/broadcast.hpp):
// - masked_fill: y has the broadcast shape of x and mask, as torch's
//   out-of-place masked_fill (mask [T, T] on x [B, H, T, T], or x [T] under a
//   mask [B, T]); dx is summed back over the axes x was repeated along, so it
//   has x's shape. value may be +-inf (the -inf of attention scores) or NaN, both
//   filled as given, as torch does; a finite value outside T's range (1e300
//   for float) is refused, as torch refuses it ("cannot be converted without
//   overflow"). A filled element gets gradient exactly 0, also when x is NaN.
// - where: y has the broadcast shape of cond, a and b (any of them may be 0-d);
//   da and db are summed back over the axes their operand was repeated along
//   (detail::sum_to_shape), so they have a's and b's shapes. where(c, x, x)
//   gives x the gradient dy. Call it qualified, xtgrad::where(cond, a, b):
//   cond is an xt::xarray, so an unqualified call also finds xt::where by
//   argument-dependent lookup, and xtensor's forwarding template wins.
// - tril / triu act on the last two axes [R, C] of a tensor of rank >= 2, the
//   leading axes being a batch; diagonal 0 is the main diagonal, > 0 above it,
//   < 0 below it, and any int64 is accepted (torch's convention).
//
// Mask builders (plain arrays, no tape):
//   causal_mask(rows, cols, diagonal)  [rows, cols], true iff j - i <= diagonal
//                                      (torch.ones(rows, cols).tril(diagonal) != 0);
//                                      diagonal 0 is the top-left causal mask
//                                      "query i sees keys j <= i"
//   length_mask(lengths, max_length)   [B, max_length], true iff t < lengths[b];
//                                      lengths [B] in [0, max_length]
// A mask whose element count overflows std::size_t or whose bytes exceed the
// machine's memory is refused (engine/checked_size.hpp).
//
// Each op is one pass over the result forward and one over dy backward (where
// with a broadcast cond also expands cond once each way). Errors are
// std::invalid_argument naming the function, the argument, the shapes or the
// value; nothing is recorded by a call that throws.

#include <cstdint>

#include <xtensor/xarray.hpp>

#include "../indices.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> masked_fill(const Var<T>& x, const xt::xarray<bool>& mask, double value);

template <class T>
Var<T> where(const xt::xarray<bool>& cond, const Var<T>& a, const Var<T>& b);

template <class T>
Var<T> triu(const Var<T>& x, std::int64_t diagonal = 0);
template <class T>
Var<T> tril(const Var<T>& x, std::int64_t diagonal = 0);

xt::xarray<bool> causal_mask(std::size_t rows, std::size_t cols, std::int64_t diagonal = 0);
xt::xarray<bool> length_mask(const Indices& lengths, std::size_t max_length);

}  // namespace xtgrad
