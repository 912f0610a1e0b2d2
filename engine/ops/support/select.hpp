#pragma once
// Selections by a boolean mask for masked_fill and where (internal): the
// forward select and the gradient of a selection, each loop written so that
// it vectorizes.

#include <algorithm>
#include <cstddef>

namespace xtgrad::detail {

// d[j] (+)= (m[j * step] == keep) ? g[j] : 0 for j < n: the gradient of a
// selection, passing dy where the mask equals `keep` and 0 elsewhere.
template <bool add, class T>
void select_grad(T* d, const T* g, const bool* m, bool step, bool keep, std::size_t n) {
  if (step) {
    for (std::size_t j = 0; j < n; ++j) {
      const T v = m[j] == keep ? g[j] : T(0);
      if constexpr (add)
        d[j] += v;
      else
        d[j] = v;
    }
  } else if (*m == keep) {
    if constexpr (add)
      for (std::size_t j = 0; j < n; ++j) d[j] += g[j];
    else
      std::copy(g, g + n, d);
  } else if constexpr (!add) {
    std::fill(d, d + n, T(0));
  }
}

// The bytes of a mask (0 or 1 each): GCC 12 vectorizes a select on
// `c[j] != 0` over unsigned char, not the same select over bool.
inline const unsigned char* mask_bytes(const bool* m) {
  return reinterpret_cast<const unsigned char*>(m);
}

// y[j] = c[j] ? a[j * step_a] : b[j * step_b] for j < n; one loop per step
// pattern, as detail::binary_run. Both operands are loaded unconditionally, so
// that the select vectorizes (a blend) instead of branching per element.
template <class T>
void select_run(T* y, const bool* cond, const T* a, bool step_a, const T* b, bool step_b,
                std::size_t n) {
  const unsigned char* c = mask_bytes(cond);
  if (step_a && step_b) {
    for (std::size_t j = 0; j < n; ++j) {
      const T av = a[j], bv = b[j];
      y[j] = c[j] != 0 ? av : bv;
    }
  } else if (step_a) {
    const T b0 = *b;
    for (std::size_t j = 0; j < n; ++j) {
      const T av = a[j];
      y[j] = c[j] != 0 ? av : b0;
    }
  } else if (step_b) {
    const T a0 = *a;
    for (std::size_t j = 0; j < n; ++j) {
      const T bv = b[j];
      y[j] = c[j] != 0 ? a0 : bv;
    }
  } else {
    const T a0 = *a, b0 = *b;
    for (std::size_t j = 0; j < n; ++j) y[j] = c[j] != 0 ? a0 : b0;
  }
}

}  // namespace xtgrad::detail
