#pragma once
// The tiny LLaMA-family model the module tests share: two layers, four
// query heads over two key/value heads (GQA), 8 channels, a SwiGLU MLP of 12.
#include <xtgrad/modules/pretrained/hf_llama_config.hpp>

namespace xtgrad::testing {

inline LlamaConfig tiny_llama() {
  LlamaConfig c;
  c.vocab_size = 13;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  return c;
}

}  // namespace xtgrad::testing
