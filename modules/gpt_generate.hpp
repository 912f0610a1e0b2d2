#pragma once
// GenerationOptions: how GPT::generate(prompts, options) continues a batch of
// prompts (gpt.hpp declares both generates; gpt_generate.cpp defines them).
//
// The prompts may differ in length: they are left-padded into one batch whose
// KvCache marks each row's padding (KvCache::set_start), so that attention
// never reads it and learned positions count from each prompt's first token.
// Each step draws one token per unfinished row from the last row of its
// logits, as sampling.hpp describes (temperature, top_k, top_p), row b with
// its own Generator seeded seed + b * k_row_seed_step, so that row 0 draws
// as the single-prompt generate(prompt, n, temperature, top_k, seed) does
// and a batch of one equals it token for token (up to the rounding of the
// last-row-only head). A row that draws one of stop_tokens keeps it and
// stops; the others go on, without it: its keys and values leave the cache
// (KvCache::keep_rows), so that each step computes the running rows only. A sequence longer than block_size is continued
// from its last block_size tokens (nanoGPT's idx[:, -block_size:]): when the
// cache is full, every row's window is encoded afresh (positions from 0),
// which costs a forward of block_size tokens per new token from then on.
// Everything runs under no-grad, eval semantics (no dropout) whatever the mode.
//
// Returns, per prompt, the prompt followed by its new tokens (at most
// max_new_tokens, fewer when it stopped).
//
// Errors (std::invalid_argument naming GPT::generate and the argument, before
// anything runs): no prompt, an empty prompt, a token id or stop token outside
// the vocabulary, a negative or non-finite temperature, top_k 0, top_p outside
// (0, 1].

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace xtgrad {

struct GenerationOptions {
  std::size_t max_new_tokens = 16;
  double temperature = 1.0;  // 0: greedy
  std::optional<std::size_t> top_k;
  double top_p = 1.0;                     // 1: no nucleus cut
  std::vector<std::int64_t> stop_tokens;  // a row stops after drawing one of them
  std::uint64_t seed = 0;
};

// The distance between the seeds of consecutive rows (2^64 / golden ratio).
constexpr std::uint64_t k_row_seed_step = 0x9E3779B97F4A7C15ULL;

}  // namespace xtgrad
