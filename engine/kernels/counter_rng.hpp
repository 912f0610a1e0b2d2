#pragma once
// Philox4x32-10, a counter-based random generator (internal): Salmon, Moraes,
// Dror & Shaw 2011, "Parallel random numbers: as easy as 1, 2, 3" (the
// generator of cuRAND and of PyTorch's CUDA dropout). A 128-bit counter and a
// 64-bit key map through ten rounds of multiply-and-xor to four 32-bit words;
// every counter gives an independent block, so any element's random number
// can be recomputed on its own, in any order, by any process. The test checks
// Random123's published known-answer vectors.
//
// uniform_words lays the words of one stream out as a sequence: word g is
// lane g % 4 of the block with counter (g / 4, stream), key `seed`.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace xtgrad::detail {

inline constexpr std::uint32_t k_philox_m0 = 0xD2511F53u;  // round multipliers
inline constexpr std::uint32_t k_philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t k_philox_w0 = 0x9E3779B9u;  // key schedule (Weyl) increments
inline constexpr std::uint32_t k_philox_w1 = 0xBB67AE85u;
inline constexpr int k_philox_rounds = 10;

using PhiloxBlock = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// One block: Philox4x32-10(counter, key).
inline PhiloxBlock philox4x32_10(PhiloxBlock c, PhiloxKey k) {
  for (int round = 0; round < k_philox_rounds; ++round) {
    const std::uint64_t p0 = std::uint64_t{k_philox_m0} * c[0];
    const std::uint64_t p1 = std::uint64_t{k_philox_m1} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += k_philox_w0;
    k[1] += k_philox_w1;
  }
  return c;
}

// Blocks per batch: the rounds run over this many counters at once, one
// array per counter word, so that the compiler vectorizes them (32x32->64
// multiplies as vpmuludq).
inline constexpr std::size_t k_philox_batch = 16;

// out[4 b + lane] = lane of philox4x32_10({block0 + b, stream}, key), b < k_philox_batch.
inline void philox4x32_10_batch(std::uint64_t block0, std::uint64_t stream, PhiloxKey key,
                                std::uint32_t* out) {
  constexpr std::size_t n = k_philox_batch;
  std::uint32_t c0[n], c1[n], c2[n], c3[n];
  for (std::size_t b = 0; b < n; ++b) {
    c0[b] = static_cast<std::uint32_t>(block0 + b);
    c1[b] = static_cast<std::uint32_t>((block0 + b) >> 32);
    c2[b] = static_cast<std::uint32_t>(stream);
    c3[b] = static_cast<std::uint32_t>(stream >> 32);
  }
  std::uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < k_philox_rounds; ++round) {
    for (std::size_t b = 0; b < n; ++b) {
      const std::uint64_t p0 = std::uint64_t{k_philox_m0} * c0[b];
      const std::uint64_t p1 = std::uint64_t{k_philox_m1} * c2[b];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[b] ^ k0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = static_cast<std::uint32_t>(p1);
      c3[b] = static_cast<std::uint32_t>(p0);
      c0[b] = n0;
      c2[b] = n2;
    }
    k0 += k_philox_w0;
    k1 += k_philox_w1;
  }
  for (std::size_t b = 0; b < n; ++b) {
    out[4 * b] = c0[b];
    out[4 * b + 1] = c1[b];
    out[4 * b + 2] = c2[b];
    out[4 * b + 3] = c3[b];
  }
}

// Calls f(i, words, count) with words[0, count) = words first + i ... of the
// stream (seed, stream), in chunks, until n words were handed over.
// first + n must not pass 2^64.
template <class F>
void uniform_words(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, std::size_t n,
                   F&& f) {
  constexpr std::size_t chunk = 4 * k_philox_batch;
  const PhiloxKey key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  std::uint32_t words[chunk];
  std::uint64_t block = first / 4;
  std::size_t skip = static_cast<std::size_t>(first % 4);
  for (std::size_t i = 0; i < n;) {
    philox4x32_10_batch(block, stream, key, words);
    const std::size_t count = std::min(chunk - skip, n - i);
    f(i, words + skip, count);
    i += count;
    block += k_philox_batch;
    skip = 0;
  }
}

}  // namespace xtgrad::detail
