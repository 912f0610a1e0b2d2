#pragma once
// Contiguous copies for the shape and indexing ops (internal): the gradient
// write of an op whose backward moves elements without arithmetic obeys the
// write-or-accumulate rule of Tape::grad_slot through these.

#include <algorithm>
#include <cstddef>

#include "../../tape.hpp"

namespace xtgrad::detail {

// dst[n] = src[n] (accumulate false) or dst[n] += src[n] (true). The branch is
// taken once, outside the loops, so each loop vectorizes.
template <class T>
void copy_or_add(T* dst, const T* src, std::size_t n, bool accumulate) {
  if (accumulate)
    for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
  else
    std::copy(src, src + n, dst);
}

// dst[r * dst_step + i] (+)= src[r * src_step + i] for r < rows, i < n: the
// rows of a slice, a concat piece or a split piece. Rows of one element (an
// op along the last axis) get their own strided loop instead of one short
// copy each.
template <class T>
void copy_rows(T* dst, std::size_t dst_step, const T* src, std::size_t src_step, std::size_t rows,
               std::size_t n, bool accumulate) {
  if (n == 0) return;  // no elements, however many rows (a [2^62, 0] tensor)
  if (n == 1 && accumulate) {
    for (std::size_t r = 0; r < rows; ++r) dst[r * dst_step] += src[r * src_step];
  } else if (n == 1) {
    for (std::size_t r = 0; r < rows; ++r) dst[r * dst_step] = src[r * src_step];
  } else {
    for (std::size_t r = 0; r < rows; ++r)
      copy_or_add(dst + r * dst_step, src + r * src_step, n, accumulate);
  }
}

// The start of a scatter-style backward (slice, split, index_select,
// gather), which adds dy into some positions of dx: a first write zeroes the
// whole slot, so that the positions no element came from hold 0, and every
// later step adds.
template <class T>
T* zeroed_unless_accumulating(GradSlot<T> slot) {
  T* d = slot.buffer.data();
  if (!slot.accumulate) std::fill(d, d + slot.buffer.size(), T(0));
  return d;
}

}  // namespace xtgrad::detail
