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
// Evaluation (training::NextTokenEvaluator over the validation ids,
// train.cpp): the validation text cut into consecutive windows of
// block_size + 1 characters overlapping by one (window w starts at
// w * block_size), the last one shorter, so every validation character but
// the first is predicted exactly once, from the characters before it in
// its window. The validation loss is the mean cross-entropy, in nats, of
// the next character over these windows, computed without recording
// (GPT::infer), the log-sum-exp of each position in double. The periodic
// evaluations during training score an evenly spread subset of the
// full-length windows (--eval-windows of them); the final one scores every
// window, i.e. every validation character but the first, the characters the
// unigram baseline is computed on. Under mpirun each rank scores every P-th
// batch of windows and the sums are added over the job; with the experts
// sharded over the ranks every rank scores every batch, the sparse layers'
// all-to-alls being collective.

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtgrad/data/token_windows.hpp>
#include <xtgrad/engine/indices.hpp>

namespace gpt_demo {

// inputs [rows, T], targets [rows * T] (data/token_windows.hpp)
using TokenBatch = xtgrad::TokenWindows;

// Rows [first, first + count) of step `step` from `text` ([N] ids)
// (xtgrad::random_token_windows).
TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count);

}  // namespace gpt_demo
