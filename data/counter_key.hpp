#pragma once
// counter_key: the key of a counter-based draw (a training window, an
// image's flip): a 64-bit key of (seed, salt, a, b) through SplitMix64's
// output function (Steele, Lea & Flood 2014), a bijection of 64-bit words
// whose every output bit depends on every input bit. A key depends on nothing drawn before it,
// so a resumed run and every rank of a job draw what one process would.

#include <cstdint>

namespace xtgrad {

inline std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline std::uint64_t counter_key(std::uint64_t seed, std::uint64_t salt, std::uint64_t a,
                                 std::uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed ^ salt) + a) + b);
}

}  // namespace xtgrad
