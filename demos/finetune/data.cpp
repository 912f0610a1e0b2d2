// The text, the tokenizer and the tiny model of the demo (finetune.hpp).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <xtgrad/modules/pretrained/hf_llama.hpp>

#include "finetune.hpp"

namespace fs = std::filesystem;

namespace finetune {

namespace {
constexpr float k_tiny_head_scale = 5.0f;  // std 0.1
}  // namespace

std::string read_text(const fs::path& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path))
      if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension())
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::invalid_argument("cannot read the text '" + file.string() + "'");
    std::ostringstream bytes;
    bytes << in.rdbuf();
    text += bytes.str();
  }
  if (text.empty())
    throw std::invalid_argument("no text in '" + path.string() +
                                "' (a file, or a directory of text files without an extension)");
  return text;
}

Tokenizer Tokenizer::for_model(const fs::path& dir) {
  Tokenizer t;
  if (fs::exists(dir / "tokenizer.json") ||
      (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")))
    t.bpe_.push_back(xtgrad::BpeTokenizer::from_pretrained(dir));
  return t;
}

std::vector<std::int64_t> Tokenizer::encode(const std::string& text) const {
  if (!bpe_.empty()) return bpe_[0].encode(text, xtgrad::SpecialTokens::as_text);
  std::vector<std::int64_t> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(),
                 [](char c) { return std::int64_t(static_cast<unsigned char>(c)); });
  return ids;
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  if (!bpe_.empty()) return bpe_[0].decode(ids);
  std::string text;
  for (const std::int64_t id : ids) text += id < 256 ? char(id) : '?';
  return text;
}

std::size_t Tokenizer::vocab_size() const {
  return bpe_.empty() ? 256 : bpe_[0].vocab_size();
}

std::string Tokenizer::describe() const {
  return bpe_.empty() ? "bytes (no tokenizer in the model directory)"
                      : "byte-level BPE of " + std::to_string(bpe_[0].vocab_size()) + " tokens";
}

fs::path model_directory(const Options& o) {
  if (!o.model.empty()) return o.model;
  const fs::path dir = fs::path(o.out) / "tiny_llama";
  fs::create_directories(dir);
  std::size_t vocab = 256;
  if (!o.tokenizer.empty()) {
    for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt"})
      if (fs::exists(fs::path(o.tokenizer) / name))
        fs::copy_file(fs::path(o.tokenizer) / name, dir / name,
                      fs::copy_options::overwrite_existing);
    vocab = std::max(vocab, Tokenizer::for_model(dir).vocab_size());
  }
  xtgrad::LlamaConfig c;  // a small LLaMA: 4 layers of 128 channels, grouped-query attention
  c.vocab_size = vocab;
  c.hidden_size = 128;
  c.intermediate_size = 344;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = std::max<std::size_t>(256, o.block_size);
  c.tie_word_embeddings = false;
  // The head drawn wider than the 0.02 of initialization, so that the frozen
  // head can express confident predictions: with 0.02 the logits of any
  // hidden state stay within a fraction of a nat of uniform.
  xtgrad::LlamaForCausalLM<float> model(c);
  model.gpt.lm_head->weight.value *= k_tiny_head_scale;
  xtgrad::export_llama(model, dir);
  return dir;
}

}  // namespace finetune
