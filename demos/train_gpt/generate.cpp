// --generate (generate.hpp).

#include "generate.hpp"

#include <stdexcept>

#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/training/training_state.hpp>

#include "corpus.hpp"
#include "model.hpp"

namespace gpt_demo {

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
  if (prompt.empty())
    throw std::invalid_argument("--prompt is empty, expected at least one character");
  return encode_utf8(saved.vocab.decode(model.generate({prompt}, o).front()));
}

}  // namespace gpt_demo
