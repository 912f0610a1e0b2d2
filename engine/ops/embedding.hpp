#pragma once
// embedding: a table lookup, torch.nn.functional.embedding(indices, weight,
// padding_idx) (without max_norm, scale_grad_by_freq or sparse).
//
//   y[i..., :] = weight[indices[i...], :]      weight [V, D]: V rows of size D
//
// indices: int64 of any shape (0-d included); y has shape indices.shape + [D].
// Derivative: a scatter-add of the rows of dy,
//   dweight[v, :] = sum over the positions p with indices[p] == v of dy[p, :]
// so a row used several times gets the sum of its rows of dy (summed in
// double for float too) and an unused row gets zero. indices carries no
// gradient.
//
// padding_idx (optional, in [-V, V); a negative one counts from the end, as
// in torch): that row gets no gradient (it stays zero, or unchanged when
// accumulating); its forward value is whatever weight holds there.
//
// Every index is checked to be in [0, V) before any row is read. Empty
// indices give an empty result ([0] -> [0, D]). Throws std::invalid_argument
// naming the op and the argument: 'weight' not 2-D, an index outside
// [0, V) (its flat position and value), 'padding_idx' outside [-V, V).

#include <cstdint>
#include <optional>

#include "../indices.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> embedding(const Indices& indices, const Var<T>& weight,
                 std::optional<std::int64_t> padding_idx = std::nullopt);

}  // namespace xtgrad
