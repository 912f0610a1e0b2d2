#pragma once
// The mini-batches of train_gpt: random contiguous windows of block_size + 1
// characters of the training text; a window's first block_size characters
// are the input, its last block_size the targets (the next character at
// every position).
//
// The start of row r of step s is a counter-based draw, a SplitMix64 hash of
// (seed, s, r) reduced to [0, N - block_size - 1] (N the training text's
// length), so it depends neither on the rank nor on what was drawn before:
// the data position of a run is its step, a resumed run draws the windows the
// uninterrupted one would, and under mpirun rank k of P builds rows
// [k B / P, (k + 1) B / P) of the global batch of B rows, which together are
// exactly the batch one process builds.
//
// Evaluation: the validation text cut into consecutive windows of
// block_size + 1 characters overlapping by one (window w starts at
// w * block_size), the last one shorter, so every validation character but
// the first is predicted exactly once, from the characters before it in
// its window.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <xtgrad/engine/indices.hpp>

namespace gpt_demo {

struct TokenBatch {
  xtgrad::Indices inputs;   // [rows, T]
  xtgrad::Indices targets;  // [rows * T], the inputs shifted by one, flat for cross_entropy
};

// Start of row `row` of step `step` in a text of `length` tokens.
std::size_t window_start(std::uint64_t seed, std::uint64_t step, std::uint64_t row,
                         std::size_t length, std::size_t block_size);

// Rows [first, first + count) of step `step` from `text` ([N] ids).
TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count);

// The evaluation windows of a text of `length` tokens: (start, T), T <= block_size.
std::vector<std::pair<std::size_t, std::size_t>> evaluation_windows(std::size_t length,
                                                                    std::size_t block_size);

// The windows `windows[i]` for i in `which` (all of one length T) as a batch.
TokenBatch window_batch(const xtgrad::Indices& text,
                        const std::vector<std::pair<std::size_t, std::size_t>>& windows,
                        const std::vector<std::size_t>& which);

}  // namespace gpt_demo
