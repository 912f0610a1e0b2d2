#pragma once
// BackwardFn<T>: the backward rule of one tape node, a move-only callable
// `void(Tape<T>& tape, const xt::xarray<T>& grad_output)` that keeps its
// capture inline (detail::InlineFunction, inline_function.hpp), so that a
// warm tape records its rules without allocating.

#include <cstddef>

#include <xtensor/xarray.hpp>

#include "inline_function.hpp"

namespace xtgrad {

template <class T>
class Tape;

// 96 bytes: enough for the captures of the engine's rules (indices, shapes,
// options); a reduction plan over several axes goes to the heap block.
template <class T>
using BackwardFn = detail::InlineFunction<void(Tape<T>&, const xt::xarray<T>&), 96>;

}  // namespace xtgrad
