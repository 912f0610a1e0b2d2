#pragma once
// MoeRouting: which expert each token's top-k choices go to, and the
// permuted layout the mixture-of-experts op computes in (ops/moe.hpp). Plain
// data, no gradient: the choice of experts is discrete, as torch.topk's
// indices are. The permutation and the counts are explicit so that the rows
// of each expert can be handed to another process as they are (an
// all-to-all exchanges `counts[e]` rows per expert, in the order `source`
// lists them).
//
// For N tokens and k choices each, choice c = t * k + s is token t's s-th
// best expert (s = 0 the most probable). The permuted layout holds the kept
// choices grouped by expert, expert 0 first, and within an expert in token
// order: rows [offsets[e], offsets[e + 1]) are expert e's, row r holds
// choice source[r] (token source[r] / k), and row_of[c] is the row of choice
// c, or k_dropped when its expert was already full (token dropping with a
// capacity: the first `capacity` choices of an expert in token order are
// kept, the rest contribute nothing).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <xtensor/xarray.hpp>

namespace xtgrad {

struct MoeRouting {
  static constexpr std::size_t k_dropped = std::numeric_limits<std::size_t>::max();

  std::size_t tokens = 0;            // N
  std::size_t k = 0;                 // choices per token
  std::size_t experts = 0;           // E
  std::size_t capacity = 0;          // rows an expert keeps at most (N * k: dropless)
  std::vector<std::size_t> expert;   // [N * k] the expert of choice c
  std::vector<std::size_t> routed;   // [E] choices of each expert, before the capacity
  std::vector<std::size_t> counts;   // [E] rows kept by each expert
  std::vector<std::size_t> offsets;  // [E + 1] first row of each expert; offsets[E] = rows()
  std::vector<std::size_t> source;   // [rows()] the choice row r holds
  std::vector<std::size_t> row_of;   // [N * k] the row of choice c, or k_dropped
  // The global batch: in one process N, routed and counts again; with expert
  // parallelism (moe_route with a MoeExchange, ops/moe.hpp) the sums over
  // every rank's tokens, with capacity the global batch's.
  std::size_t global_tokens = 0;           // N over all ranks
  std::vector<std::size_t> global_routed;  // [E] choices of each expert, all ranks
  std::vector<std::size_t> global_counts;  // [E] rows each expert keeps, all ranks

  // Rows of the permuted layout: the kept choices.
  std::size_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
  // Choices dropped for want of capacity.
  std::size_t dropped() const { return tokens * k - rows(); }
  // The chosen experts as an [N, k] index tensor (for gather).
  xt::xarray<std::int64_t> indices() const {
    auto out = xt::xarray<std::int64_t>::from_shape({tokens, k});
    for (std::size_t c = 0; c < expert.size(); ++c)
      out.data()[c] = static_cast<std::int64_t>(expert[c]);
    return out;
  }
};

}  // namespace xtgrad
