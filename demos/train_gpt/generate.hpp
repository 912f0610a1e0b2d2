#pragma once
// train_gpt --generate DIR: the model a run saved to DIR (--save; its
// sizes and vocabulary come from the directory, run_state.hpp) continues
// --prompt by --max-new-chars characters (sampling.hpp: GPT::generate with
// the KV cache, in chunks of the model's window; temperature 0 = greedy,
// --top-k keeps the k most likely, --seed fixes the draws), and the prompt
// and its continuation are printed to standard output.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace gpt_demo {

struct GenerateOptions {
  std::filesystem::path checkpoint;
  std::string prompt = "%\n";
  std::size_t max_new_chars = 500;
  double temperature = 0.8;
  std::optional<std::size_t> top_k;
  std::uint64_t seed = 0;
};

// The prompt and its continuation. std::invalid_argument for a directory
// that is not a saved run or a prompt with characters outside the vocabulary.
std::string generate_text(const GenerateOptions& options);

}  // namespace gpt_demo
