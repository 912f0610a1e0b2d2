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

// embedding_dense_backward: embedding's gradient with respect to the table as
// an op of its own (torch.ops.aten.embedding_dense_backward, without
// scale_grad_by_freq), the scatter-add that the rules of backward with
// create_graph use, so that the gradient of an embedding can be
// differentiated again:
//   y[v, :] = sum over the positions p with indices[p] == v of grad_output[p, :]
//   grad_output [indices.shape..., D], y [num_weights, D]; the padding row is 0.
// Its own derivative is the lookup: dgrad_output[p, :] = dy[indices[p], :]
// (0 at positions holding padding_idx). Sums of repeated rows in double.
// Throws std::invalid_argument naming the op and the argument: grad_output's
// shape not indices.shape + [D], an index outside [0, num_weights),
// padding_idx outside [-num_weights, num_weights).
template <class T>
Var<T> embedding_dense_backward(const Var<T>& grad_output, const Indices& indices,
                                std::size_t num_weights,
                                std::optional<std::int64_t> padding_idx = std::nullopt);

}  // namespace xtgrad
