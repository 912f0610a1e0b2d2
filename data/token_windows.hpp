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

}  // namespace xtgrad
