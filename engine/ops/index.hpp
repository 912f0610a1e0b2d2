#pragma once
// Ops that read a tensor through integer indices (torch.index_select,
// torch.gather). The indices are Indices (engine/indices.hpp), int64 arrays
// that carry no gradient.
//
//   index_select(x, dim, index)   y[.., j, ..] = x[.., index[j], ..]
//                                 y.shape = x.shape with dim's size = len(index)
//                                 dx[.., k, ..] = sum over j with index[j] = k of dy[.., j, ..]
//   gather(x, dim, index)         y[i] = x[i with its dim-th coordinate replaced by index[i]]
//                                 y.shape = index.shape
//                                 dx = zeros, then dx[.., index[i], ..] += dy[i] for every i
//   index_add(x, dim, index, source)     torch.index_add (alpha 1), out of place:
//                                 y = x; y[.., index[j], ..] += source[.., j, ..]
//                                 source.shape = x.shape with dim's size = len(index)
//                                 dx = dy; dsource = index_select(dy, dim, index)
//   scatter_add(x, dim, index, source)   torch.scatter_add, out of place:
//                                 y = x; y[i with its dim-th coordinate replaced by index[i]] += source[i]
//                                 source.shape = index.shape (torch also takes a larger
//                                 source and reads its leading part; refused here)
//                                 dx = dy; dsource = gather(dy, dim, index)
//
// Each pair is the other's gradient (index_select and index_add, gather and
// scatter_add), so all four are differentiable any number of times
// (create_graph): a gradient penalty through an embedding-like lookup works.
//
// index_select, index_add: index is 1-d [K] (a 0-d index counts as [1], as in torch);
// repeats are allowed and their gradients (and index_add's sources) add up.
// gather, scatter_add: index has x's rank
// and, along every axis but dim, a size <= x's (torch.gather); its elements
// index x's axis dim. Every index is checked to lie in [0, size of dim)
// before any element is read through it: negative indices are refused, as
// torch 1.13 refuses them in both ops (std::invalid_argument naming the op,
// 'index', the flat position and the value). A 0-d x has no axis and is
// refused (torch treats it as [1]). An empty index gives an empty result and
// a zero gradient. Backward adds repeated positions in T, as torch does.
// Errors: std::invalid_argument naming the op, the argument, both shapes or
// the value.

#include <cstdint>

#include "../indices.hpp"
#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> index_select(const Var<T>& x, std::int64_t dim, const Indices& index);
template <class T>
Var<T> gather(const Var<T>& x, std::int64_t dim, const Indices& index);
template <class T>
Var<T> index_add(const Var<T>& x, std::int64_t dim, const Indices& index, const Var<T>& source);
template <class T>
Var<T> scatter_add(const Var<T>& x, std::int64_t dim, const Indices& index, const Var<T>& source);

}  // namespace xtgrad
