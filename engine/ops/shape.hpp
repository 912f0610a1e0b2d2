#pragma once
// Ops that rearrange a tensor without arithmetic (torch.reshape,
// torch.flatten, torch.permute, torch.transpose, torch.Tensor.expand).
//
//   reshape(x, shape)         y = x with another shape, same row-major order
//                             dx = dy reshaped back to x's shape
//   flatten(x, start, end)    reshape merging axes start..end (inclusive)
//   permute(x, dims)          y[i_0, ..., i_(r-1)] = x[j] with j[dims[k]] = i_k,
//                             y.shape[k] = x.shape[dims[k]]
//                             dx = permute(dy, inverse of dims)
//   transpose(x, d0, d1)      permute swapping axes d0 and d1
//   expand(x, shape)          y = x broadcast to `shape` (NumPy rules)
//                             dx = dy summed over the repeated axes
//
// Values are contiguous row-major xt::xarray, and a node owns its value, so
// every op here costs one pass writing its result (reshape and flatten: one
// std::copy of x's bytes, the same as a memcpy) and one pass in backward; a
// view sharing x's buffer would need the Tape to store non-owning values.
//
// reshape: `shape` may hold one -1, inferred from the element count (refused
// when the other sizes multiply to 0, as torch does); the element counts must
// match. flatten: dims in [-rank, rank) with start <= end; a 0-d x gives [1]
// (dims 0 or -1), as in torch. permute: `dims` a permutation of all axes,
// negative ones counting from the end; a 0-d x takes dims = {}. The common
// transpose of the last two axes of [..., M, N] runs in cache blocks; any
// other permutation copies along its longest contiguous run. transpose: both
// dims in [-rank, rank) (a 0-d x is refused, where torch accepts 0 and -1).
// expand: `shape` has at least x's rank; x's axes align with its trailing
// entries, where -1 keeps x's size and only a size-1 axis may take another
// size (0 included); new leading entries must be >= 0 (torch.Tensor.expand).
// Its backward uses detail::sum_to_shape (broadcast.hpp): sums over a
// repeated inner axis accumulate in double, over repeated outer axes in T.
// Errors: std::invalid_argument naming the op, the argument, x's shape and
// the value given.

#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "../tape.hpp"

namespace xtgrad {

// One entry of a shape given to reshape: any integer, signed or unsigned, so
// that sizes read from shape() (std::size_t) and a -1 mix in one braced list
// without a narrowing conversion: reshape(x, {s[0], -1}). An unsigned size
// above INT64_MAX (a wrapped n - 1) is refused by reshape, never read as -1.
struct ShapeEntry {
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  ShapeEntry(I size)  // NOLINT: implicit by design
      : value(static_cast<std::int64_t>(size)),
        too_large(std::is_unsigned_v<I> &&
                  static_cast<std::uint64_t>(size) > static_cast<std::uint64_t>(INT64_MAX)) {}
  std::int64_t value;
  bool too_large;
};

namespace detail {
// The entries as reshape's signed sizes; std::invalid_argument from `op` for
// an unsigned size above INT64_MAX.
std::vector<std::int64_t> signed_shape(const char* op, const std::vector<ShapeEntry>& shape);
}  // namespace detail

// reshape(x, shape): `shape` a std::vector<std::int64_t>, a braced list of
// any integers, a Shape (x.shape()) or a std::vector<std::size_t>; -1 infers.
template <class T>
Var<T> reshape(const Var<T>& x, const std::vector<std::int64_t>& shape);
template <class T>
Var<T> reshape(const Var<T>& x, std::initializer_list<ShapeEntry> shape) {
  return reshape(x, detail::signed_shape("reshape", std::vector<ShapeEntry>(shape)));
}
template <class T>
Var<T> reshape(const Var<T>& x, const Shape& shape) {
  return reshape(x, detail::signed_shape("reshape", {shape.begin(), shape.end()}));
}
template <class T>
Var<T> reshape(const Var<T>& x, const std::vector<std::size_t>& shape) {
  return reshape(x, detail::signed_shape("reshape", {shape.begin(), shape.end()}));
}
template <class T>
Var<T> flatten(const Var<T>& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
template <class T>
Var<T> permute(const Var<T>& x, const std::vector<std::int64_t>& dims);
template <class T>
Var<T> transpose(const Var<T>& x, std::int64_t dim0, std::int64_t dim1);
template <class T>
Var<T> expand(const Var<T>& x, const std::vector<std::int64_t>& shape);

}  // namespace xtgrad
