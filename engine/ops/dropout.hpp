#pragma once
// dropout (Srivastava et al. 2014; torch.nn.functional.dropout, inverted
// scaling): in training, each element of x is kept with probability 1 - p and
// scaled by 1 / (1 - p), or dropped (set to exactly 0, also when it is NaN or
// Inf: torch multiplies by the mask, where NaN * 0 stays NaN).
//
//   y = x * m / (1 - p),   dx = dy * m / (1 - p),   m_i = [u_i >= p]
//   x, y, dy, dx: any shape (0-d and empty included)
//
// The mask is never stored. u_i is a uniform in [0, 1) (a 32-bit word / 2^32)
// from the counter-based generator Philox4x32-10 (kernels/counter_rng.hpp)
// with key `seed`, stream `step`, and counter key.first_element + i, i being
// the flat row-major index of the element within x. Backward recomputes the
// mask from the key; the same key gives bit-identical output; and data-
// parallel processes that set first_element = (global index of their first
// sample) * (elements per sample) together draw exactly the mask of one
// process running the whole batch. Use a new step (or seed) for every
// training step, or the mask repeats.
//
// Identity (y = x, dx = dy, no random numbers) when !training or p == 0;
// all zeros (and a zero gradient) when p == 1. Throws std::invalid_argument
// naming 'p' for p outside [0, 1] or NaN.

#include "../dropout_key.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> dropout(const Var<T>& x, double p, bool training, const DropoutKey& key);

}  // namespace xtgrad
