#pragma once
// train_gpt --generate DIR: the model a run saved to DIR (--save; its
// sizes and vocabulary come from the directory, run_state.cpp) continues
// --prompt by --max-new-chars characters (GPT::generate with the KV cache,
// continued past the model's window from its last block_size characters;
// temperature 0 = greedy, --top-k keeps the k most likely, --seed fixes the
// draws), and the prompt and its continuation are printed to standard output.

#include <cstddef>
#include <filesystem>
#include <string>

#include <xtgrad/modules/gpt.hpp>

#include "corpus.hpp"
#include "model.hpp"

namespace gpt_demo {

// The draws (max_new_tokens: --max-new-chars) and what they continue.
struct GenerateOptions : xtgrad::GenerationOptions {
  GenerateOptions() {
    max_new_tokens = 500;
    temperature = 0.8;
  }
  std::filesystem::path checkpoint;
  std::string prompt = "%\n";
};

// The prompt and its continuation. std::invalid_argument for a directory
// that is not a saved run or a prompt with characters outside the vocabulary.
std::string generate_text(const GenerateOptions& options);

// The model of a saved run, for generation: its sizes and vocabulary, then
// its parameters loaded into a GPT built from them.
struct SavedModel {
  ModelOptions options;
  Vocabulary vocab;
  std::size_t step = 0;
};
SavedModel read_saved_model(const std::filesystem::path& dir);

}  // namespace gpt_demo
