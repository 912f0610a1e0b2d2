// The training windows (batches.hpp).

#include "batches.hpp"

#include <stdexcept>
#include <string>

#include <xtgrad/data/counter_key.hpp>

namespace gpt_demo {

std::size_t window_start(std::uint64_t seed, std::uint64_t step, std::uint64_t row,
                         std::size_t length, std::size_t block_size) {
  if (length < block_size + 2)
    throw std::invalid_argument("the training text has " + std::to_string(length) +
                                " characters, too few for windows of --block-size " +
                                std::to_string(block_size) + " + 1");
  const std::uint64_t key = xtgrad::counter_key(seed, 0x77696e646f77ULL, step, row);  // "window"
  return static_cast<std::size_t>(key % (length - block_size));
}

TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count) {
  std::vector<std::size_t> starts;
  for (std::size_t r = first; r < first + count; ++r)
    starts.push_back(window_start(seed, step, r, text.size(), block_size));
  return xtgrad::next_token_windows(text.data(), text.size(), starts, block_size);
}

}  // namespace gpt_demo
