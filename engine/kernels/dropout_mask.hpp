#pragma once
// The dropout mask (internal), shared by ops/dropout and the hidden dropout
// of ops/fused_linear so that both draw exactly the same mask for the same
// key: element i of a tensor is kept when u_i >= p, u_i = word_i / 2^32, word_i
// the word key.first_element + i of the Philox stream (key.seed, key.step)
// (counter_rng.hpp), and a kept element is scaled by 1 / (1 - p).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../dropout_key.hpp"
#include "counter_rng.hpp"

namespace xtgrad::detail {

// What a dropout of probability p does, computed once per call.
template <class T>
struct DropoutMask {
  bool identity;            // p == 0 (or not training): y = x, no random numbers
  bool all_dropped;         // p == 1: y = 0
  std::uint32_t threshold;  // keep element i when word_i >= threshold
  T scale;                  // 1 / (1 - p), 0 when all_dropped
};

// p must be in [0, 1] (checked by the caller).
template <class T>
DropoutMask<T> dropout_mask(double p, bool training) {
  // u >= p with u = word / 2^32 exactly when word >= ceil(p 2^32) (p 2^32 is
  // exact in double); a threshold of 2^32 keeps nothing, like p == 1.
  const double threshold_real = std::ceil(std::ldexp(p, 32));
  const bool identity = !training || p == 0.0;
  const bool keeps_nothing = threshold_real >= std::ldexp(1.0, 32);
  const bool all_dropped = !identity && keeps_nothing;
  // (2^32 itself does not fit the threshold's type: p == 1 never reaches the mask)
  const auto threshold = keeps_nothing ? 0u : static_cast<std::uint32_t>(threshold_real);
  const T scale = all_dropped ? T(0) : static_cast<T>(1.0 / (1.0 - p));
  return {identity, all_dropped, threshold, scale};
}

// out[i] (+)= m_i * in[i] * scale, m_i = [word_i >= threshold], for the
// words of `key`. out may equal in (element by element, read before written).
template <class T, bool Accumulate>
void masked_scale(const DropoutKey& key, std::uint32_t threshold, T scale, const T* in, T* out,
                  std::size_t n) {
  uniform_words(key.seed, key.step, key.first_element, n,
                [=](std::size_t i0, const std::uint32_t* words, std::size_t count) {
                  const T* a = in + i0;
                  T* b = out + i0;
                  for (std::size_t j = 0; j < count; ++j) {
                    const T kept = words[j] >= threshold ? a[j] * scale : T(0);
                    if constexpr (Accumulate)
                      b[j] += kept;
                    else
                      b[j] = kept;
                  }
                });
}

}  // namespace xtgrad::detail
