#pragma once
// Drawing the next token from one row of logits, as GPT::generate does
// (nanoGPT's generate): divide by temperature, keep the top_k largest (ties
// at the k-th value kept, as torch.topk's threshold in nanoGPT), softmax in
// double and draw by inverse CDF with u = the top 53 bits of one draw of a
// Generator (init.hpp) / 2^53, so the same seed gives the same tokens.
// temperature 0 is greedy (the first argmax). top_p < 1 (nucleus sampling,
// Holtzman et al. 2020, as transformers' TopPLogitsWarper) keeps, after
// top_k, the fewest most probable tokens whose probabilities sum to at least
// top_p (ties in probability taken in token order, at least one token);
// top_p = 1 keeps them all and draws exactly as without it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "../engine/errors.hpp"
#include "init.hpp"

namespace xtgrad {

// std::invalid_argument from `check` unless temperature is finite and >= 0
// and top_k, when given, is at least 1.
void check_sampling(const detail::Check& check, double temperature,
                    std::optional<std::size_t> top_k);
// std::invalid_argument from `check` unless 0 < top_p <= 1.
void check_top_p(const detail::Check& check, double top_p);

// The index of the token drawn from `logits` (one value per token id).
std::int64_t sample_token(std::vector<double> logits, double temperature,
                          std::optional<std::size_t> top_k, Generator& rng);
std::int64_t sample_token(std::vector<double> logits, double temperature,
                          std::optional<std::size_t> top_k, double top_p, Generator& rng);

}  // namespace xtgrad
