#pragma once
// The thread pool of the elementwise passes (internal): parallel_for splits
// [0, n) into one contiguous chunk per thread in use (threads.hpp), runs the
// first chunk on the calling thread and the others on persistent workers,
// and returns when all are done. It never allocates.
//
// Chunk boundaries of parallel_for are multiples of k_parallel_align
// elements, so that a chunk starts on a vector (and a cache line) boundary;
// parallel_for_rows splits at any index (rows, groups of rows). Work below
// `min_per_thread` elements a thread, work inside a worker, and work that
// finds the pool busy with another caller's job run serially on the caller:
// a pass must give the same result either way (independent elements only).
// A body must not throw (on a worker, an exception ends the program): every
// check of the op comes before its parallel_for.

#include <cstddef>
#include <type_traits>

namespace xtgrad::detail {

inline constexpr std::size_t k_parallel_align = 64;

// Elements a thread must have before a second one pays. Measured on a 2-core
// AMD EPYC (float): handing chunks to a worker costs about 7 us; a pass of a
// compare or a multiply-add per element runs at about 0.07 ns an element in
// cache (relu over 128K floats: 7.4 us on one thread, no faster on two), a
// pass of erf or exp (exact GELU) at about 0.75 ns (32K floats: 25 us).
inline constexpr std::size_t k_parallel_light = std::size_t(1) << 18;
inline constexpr std::size_t k_parallel_heavy = std::size_t(1) << 14;

using RangeBody = void (*)(void* context, std::size_t begin, std::size_t end);

// How many chunks parallel_run would use for n elements now (1: serial).
std::size_t parallel_chunks(std::size_t n, std::size_t min_per_thread);

void parallel_run(std::size_t n, std::size_t min_per_thread, std::size_t align, RangeBody body,
                  void* context);

template <class F>
void parallel_run(std::size_t n, std::size_t min_per_thread, std::size_t align, F& body) {
  using Body = std::remove_reference_t<F>;
  parallel_run(
      n, min_per_thread, align,
      [](void* context, std::size_t begin, std::size_t end) {
        (*static_cast<Body*>(context))(begin, end);
      },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// body(begin, end) over chunks covering [0, n) (elements: aligned chunks).
template <class F>
void parallel_for(std::size_t n, std::size_t min_per_thread, F&& body) {
  parallel_run(n, min_per_thread, k_parallel_align, body);
}

// The same over rows: chunks of any size.
template <class F>
void parallel_for_rows(std::size_t n, std::size_t min_per_thread, F&& body) {
  parallel_run(n, min_per_thread, 1, body);
}

}  // namespace xtgrad::detail
