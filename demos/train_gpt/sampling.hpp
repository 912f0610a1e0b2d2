#pragma once
// Text longer than the model's window: GPT::generate (no-grad, the KV cache)
// in chunks. The first chunk continues the prompt (its last block_size / 2
// characters when it is longer than block_size - 1); each next chunk starts
// a fresh generate call from the last block_size / 2 characters so far and
// adds up to block_size minus that many. Chunk c draws with seed
// seed + c * 0x9e3779b97f4a7c15 (wrapping), so the text is a function of
// (model, prompt, length, temperature, top_k, seed).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <xtgrad/modules/gpt.hpp>

namespace gpt_demo {

// The prompt followed by `new_tokens` generated ids.
std::vector<std::int64_t> generate_tokens(const xtgrad::GPT<float>& model,
                                          const std::vector<std::int64_t>& prompt,
                                          std::size_t new_tokens, double temperature,
                                          std::optional<std::size_t> top_k, std::uint64_t seed);

}  // namespace gpt_demo
