#pragma once
// What the few-row GEMM kernels (gemm_streaming.cpp) share (internal).

#include "vector_math.hpp"  // first (through simd.hpp): see simd.hpp

#include <cstddef>

#include "scratch.hpp"  // k_line_bytes

namespace xtgrad::detail::streaming {

// simd_math's own alias, not a second one: a file that sees both names (a
// using-directive, or a unity batch) finds one entity.
using simd_math::Batch;

// Asks for the cache line at address to be brought into a level of cache:
// 3 = all levels down to L1, 2 = L2 (prefetcht0 and prefetcht1 on x86). A
// hint only: it never faults, whatever the address.
template <int locality>
inline void prefetch(const void* address) {
#if defined(__GNUC__)
  __builtin_prefetch(address, 0, locality);
#else
  (void)address;
#endif
}
inline void prefetch_line(const void* address) {
  prefetch<3>(address);
}
inline void prefetch_line_to_l2(const void* address) {
  prefetch<2>(address);
}

}  // namespace xtgrad::detail::streaming
