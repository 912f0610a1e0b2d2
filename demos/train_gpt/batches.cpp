// The training windows (batches.hpp).

#include "batches.hpp"

#include <stdexcept>
#include <string>

namespace gpt_demo {

TokenBatch training_batch(const xtgrad::Indices& text, std::size_t block_size, std::uint64_t seed,
                          std::uint64_t step, std::size_t first, std::size_t count) {
  if (text.size() < block_size + 2)
    throw std::invalid_argument("the training text has " + std::to_string(text.size()) +
                                " characters, too few for windows of --block-size " +
                                std::to_string(block_size) + " + 1");
  return xtgrad::random_token_windows(text.data(), text.size(), block_size, seed, step, first,
                                      count);
}

}  // namespace gpt_demo
