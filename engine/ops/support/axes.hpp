#pragma once
// A tensor seen around one axis (internal), for the ops that work along an
// axis (reductions, softmax, norms, concat, slicing): a row-major shape
// [d0, ..., d(k-1), dk, d(k+1), ...] is the 3-d block [outer, extent, inner]
// with outer = d0 * ... * d(k-1), extent = dk, inner = the product of the
// rest; element (o, j, i) is at flat offset (o * extent + j) * inner + i.
// For the last axis inner is 1 and each of the outer rows is contiguous.

#include <cstddef>

#include "../../tape.hpp"

namespace xtgrad::detail {

struct AxisSplit {
  std::size_t outer = 1, extent = 1, inner = 1;
};

// `axis` must be < shape.size() (normalize_dim in indices.hpp checks that).
inline AxisSplit split_at(const Shape& shape, std::size_t axis) {
  AxisSplit s;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis)
      s.extent = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

}  // namespace xtgrad::detail
