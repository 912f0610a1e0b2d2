#pragma once
// Ops that take parts of tensors or join them along an axis (Python's
// x[start:stop:step] on one axis, torch.cat, torch.stack, torch.split,
// torch.chunk).
//
//   slice(x, dim, start, stop, step)  y[.., j, ..] = x[.., start + j * step, ..]
//                                     dx = dy scattered into zeros at those positions
//   concat(xs, dim)                   y = xs[0], xs[1], ... one after another along dim
//                                     dxs[k] = the part of dy that came from xs[k]
//   stack(xs, dim)                    concat of the xs each given a new axis of size 1
//                                     at dim (result [.., len(xs), ..])
//   split(x, split_size, dim)         pieces of split_size along dim, the last smaller
//   split(x, split_sizes, dim)        pieces of the given sizes, which sum to x's size
//   chunk(x, chunks, dim)             split(x, ceil(n / chunks), dim): at most `chunks`
//                                     pieces (fewer when n is not divisible: 6 in 4 chunks
//                                     gives 2, 2, 2), as torch.chunk
//
// slice follows Python's slice rules for step >= 1: a negative start or stop
// counts from the end (n + start), and either is then clamped to [0, n], so
// out-of-range bounds give a shorter or empty result, never an error; pass
// std::numeric_limits<std::int64_t>::max() as stop for "to the end". step <= 0
// is refused (torch has no negative steps). split and chunk return one node
// per piece, each a slice of x, so gradients flow from any subset of pieces
// (positions no used piece covers get 0). split_size 0 is allowed only when
// x's size along dim is 0 (one empty piece); chunk of a size-0 axis gives
// `chunks` empty pieces; both as torch 1.13.
//
// concat: xs is non-empty; every tensor has the rank and sizes of the first,
// except along dim. As in torch 1.13, a 1-d tensor of shape [0] is skipped
// wherever it appears (the legacy empty tensor; it gets no gradient) and a
// 0-d tensor is refused. stack: every tensor has the same shape (0-d
// allowed); dim in [-(rank + 1), rank + 1). The same Var may appear several
// times in xs: its gradient sums every use.
//
// Each op is one pass over the result forward and one over dy backward (plus
// zeroing dx for slice, split and chunk). Dims are torch-style, negative from
// the end; a 0-d x has no axis to slice or split. Errors: std::invalid_argument
// naming the op, the argument, the shapes and the value; Vars of different
// tapes in xs are a std::logic_error naming both entries.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../tape.hpp"

namespace xtgrad {

template <class T>
Var<T> slice(const Var<T>& x, std::int64_t dim, std::int64_t start, std::int64_t stop,
             std::int64_t step = 1);
template <class T>
Var<T> concat(const std::vector<Var<T>>& xs, std::int64_t dim = 0);
template <class T>
Var<T> stack(const std::vector<Var<T>>& xs, std::int64_t dim = 0);
// concat({a, b}, dim) and stack({a, b}, dim): a braced list deduces T, which
// a std::vector parameter cannot.
template <class T>
Var<T> concat(std::initializer_list<Var<T>> xs, std::int64_t dim = 0) {
  return concat(std::vector<Var<T>>(xs), dim);
}
template <class T>
Var<T> stack(std::initializer_list<Var<T>> xs, std::int64_t dim = 0) {
  return stack(std::vector<Var<T>>(xs), dim);
}
template <class T>
std::vector<Var<T>> split(const Var<T>& x, std::int64_t split_size, std::int64_t dim = 0);
template <class T>
std::vector<Var<T>> split(const Var<T>& x, const std::vector<std::int64_t>& split_sizes,
                          std::int64_t dim = 0);
template <class T>
std::vector<Var<T>> chunk(const Var<T>& x, std::int64_t chunks, std::int64_t dim = 0);

}  // namespace xtgrad
