// --generate (generate.hpp).

#include "generate.hpp"

#include <algorithm>
#include <stdexcept>

#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/training/training_state.hpp>

#include "corpus.hpp"
#include "model.hpp"

namespace gpt_demo {

std::vector<std::int64_t> generate_tokens(const xtgrad::GPT<float>& model,
                                          const std::vector<std::int64_t>& prompt,
                                          std::size_t new_tokens, double temperature,
                                          std::optional<std::size_t> top_k, std::uint64_t seed) {
  if (prompt.empty())
    throw std::invalid_argument("--prompt is empty, expected at least one character");
  const std::size_t block = model.gpt_config().block_size;
  const std::size_t keep = std::max<std::size_t>(1, block / 2);
  std::vector<std::int64_t> text = prompt;
  std::size_t done = 0;
  for (std::uint64_t chunk = 0; done < new_tokens; ++chunk) {
    const std::size_t context =
        chunk == 0 && text.size() < block ? text.size() : std::min(keep, text.size());
    const std::vector<std::int64_t> start(text.end() - static_cast<std::ptrdiff_t>(context),
                                          text.end());
    const std::size_t count = std::min(new_tokens - done, block - context);
    const std::vector<std::int64_t> out =
        model.generate(start, count, temperature, top_k, seed + chunk * 0x9e3779b97f4a7c15ULL);
    if (out.size() != context + count)
      throw std::logic_error("GPT::generate returned " + std::to_string(out.size()) +
                             " tokens, expected " + std::to_string(context + count));
    text.insert(text.end(), out.begin() + static_cast<std::ptrdiff_t>(context), out.end());
    done += count;
  }
  return text;
}

std::string generate_text(const GenerateOptions& o) {
  const SavedModel saved = read_saved_model(o.checkpoint);
  xtgrad::GPT<float> model(gpt_config(saved.options, saved.vocab.size()));
  try {
    xtgrad::load_model_from_training_state(o.checkpoint, model);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--generate '" + o.checkpoint.string() + "': " + e.what());
  }
  model.eval();
  const std::vector<std::int64_t> prompt =
      saved.vocab.encode(decode_utf8(o.prompt, "--prompt"), "--prompt");
  const std::vector<std::int64_t> ids =
      generate_tokens(model, prompt, o.max_new_chars, o.temperature, o.top_k, o.seed);
  return encode_utf8(saved.vocab.decode(ids));
}

}  // namespace gpt_demo
