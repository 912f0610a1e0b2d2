#pragma once
// next_token_windows: a batch of next-token prediction (nanoGPT's get_batch)
// cut from a token sequence `ids` of `length` tokens: row r is the window of
// T + 1 tokens from starts[r], its first T the inputs and its last T the
// targets, the same tokens shifted by one:
//   inputs[r, t] = ids[starts[r] + t],   targets[r * T + t] = ids[starts[r] + t + 1]
// The targets are flat, as cross_entropy takes them against the logits
// [rows, T, V] reshaped to [rows * T, V]. std::invalid_argument naming
// next_token_windows when T is 0 or a window runs past the end
// (starts[r] + T + 1 > length).
//
// random_token_windows: rows [first, first + count) of step `step`'s batch
// of random windows of T + 1 tokens, nanoGPT's get_batch with a
// counter-based draw: row r starts at counter_key(seed, "window", step, r)
// (data/counter_key.hpp) modulo length - T, a function of (seed, step, r)
// alone. So processes that build their rows of one global batch build
// together the batch one process builds, and a run resumed at a step draws
// the windows the uninterrupted run would. std::invalid_argument naming
// random_token_windows when T is 0 or the sequence is shorter than T + 1.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../engine/indices.hpp"

namespace xtgrad {

struct TokenWindows {
  Indices inputs;   // [rows, T]
  Indices targets;  // [rows * T]
};

TokenWindows next_token_windows(const std::int64_t* ids, std::size_t length,
                                const std::vector<std::size_t>& starts, std::size_t T);

TokenWindows random_token_windows(const std::int64_t* ids, std::size_t length, std::size_t T,
                                  std::uint64_t seed, std::uint64_t step, std::size_t first,
                                  std::size_t count);

}  // namespace xtgrad
