// Training windows and evaluation windows (batches.hpp).

#include "batches.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpt_demo {

namespace {

// SplitMix64's output function (Steele, Lea & Flood 2014): a bijection of
// 64-bit words whose every output bit depends on every input bit.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Copies text[start, start + T + 1) into row `row` of the batch.
void fill_row(const xtgrad::Indices& text, std::size_t start, std::size_t T, std::size_t row,
              TokenBatch& batch) {
  const std::int64_t* source = text.data() + start;
  std::int64_t* input = batch.inputs.data() + row * T;
  std::int64_t* target = batch.targets.data() + row * T;
  for (std::size_t t = 0; t < T; ++t) {
    input[t] = source[t];
    target[t] = source[t + 1];
  }
}

}  // namespace

std::size_t window_start(std::uint64_t seed, std::uint64_t step, std::uint64_t row,
                         std::size_t length, std::size_t block_size) {
  if (length < block_size + 2)
    throw std::invalid_argument("the training text has " + std::to_string(length) +
                                " characters, too few for windows of --block-size " +
                                std::to_string(block_size) + " + 1");
  const std::uint64_t key = mix(mix(mix(seed ^ 0x77696e646f77ULL) + step) + row);  // "window"
  return static_cast<std::size_t>(key % (length - block_size));
}

TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count) {
  TokenBatch batch;
  batch.inputs = xtgrad::Indices::from_shape({count, block_size});
  batch.targets = xtgrad::Indices::from_shape({count * block_size});
  for (std::size_t r = 0; r < count; ++r)
    fill_row(text, window_start(seed, step, first + r, text.size(), block_size), block_size, r,
             batch);
  return batch;
}

std::vector<std::pair<std::size_t, std::size_t>> evaluation_windows(std::size_t length,
                                                                    std::size_t block_size) {
  std::vector<std::pair<std::size_t, std::size_t>> windows;
  for (std::size_t start = 0; start + 1 < length; start += block_size)
    windows.emplace_back(start, std::min(block_size, length - 1 - start));
  return windows;
}

TokenBatch window_batch(const xtgrad::Indices& text,
                        const std::vector<std::pair<std::size_t, std::size_t>>& windows,
                        const std::vector<std::size_t>& which) {
  const std::size_t T = windows.at(which.at(0)).second;
  TokenBatch batch;
  batch.inputs = xtgrad::Indices::from_shape({which.size(), T});
  batch.targets = xtgrad::Indices::from_shape({which.size() * T});
  for (std::size_t r = 0; r < which.size(); ++r) {
    const auto [start, length] = windows.at(which[r]);
    if (length != T) throw std::logic_error("window_batch: windows of different lengths");
    fill_row(text, start, T, r, batch);
  }
  return batch;
}

}  // namespace gpt_demo
