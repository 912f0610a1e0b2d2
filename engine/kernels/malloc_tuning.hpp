#pragma once
// How xtgrad sets glibc's malloc once, when a program that links it starts
// (internal; docs/performance.md, "Memory and allocation", says so to users).
//
// A step's large arrays (activations, gradients, a no-grad forward's values)
// are freed at the end of the step and allocated again, at the same sizes,
// by the next one. With glibc's defaults a freed block past the heap's trim
// threshold is handed back to the kernel (sbrk or munmap) and the next step
// takes a page fault on every 4 KiB of it again: in a training run of the
// char GPT, whose validation forward allocates about 100 MiB a batch, a
// quarter of the CPU time went to the kernel. So xtgrad raises
// M_MMAP_THRESHOLD to k_mmap_threshold (glibc's ceiling on 64-bit) and
// M_TRIM_THRESHOLD to k_trim_threshold: blocks below 32 MiB come from the
// heap, and up to 1 GiB of freed memory stays mapped for reuse
// (`malloc_trim(0)` returns it). It leaves malloc alone when the environment
// already sets it (GLIBC_TUNABLES naming a glibc.malloc tunable, or one of
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_), when
// XTGRAD_MALLOC_DEFAULTS is set to anything, and without glibc.

#include <cstddef>

namespace xtgrad::detail {

inline constexpr std::size_t k_mmap_threshold = std::size_t(32) << 20;
inline constexpr std::size_t k_trim_threshold = std::size_t(1) << 30;

// Applies the settings above unless the environment says otherwise; true
// when it did. Called once, by a static initializer of the thread pool's
// translation unit (engine/kernels/parallel.cpp), which every op links.
bool tune_malloc();

}  // namespace xtgrad::detail
