#pragma once
// The peak resident memory of the test process, to bound what a refused
// file costs (sparse files declaring gigabytes that must never be allocated).

#include <sys/resource.h>

#include <doctest/doctest.h>

#include <cstddef>

namespace xtgrad::testing {

// Peak resident memory of this process so far, in bytes.
inline std::size_t peak_rss_bytes() {
  ::rusage usage{};
  REQUIRE(::getrusage(RUSAGE_SELF, &usage) == 0);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace xtgrad::testing
