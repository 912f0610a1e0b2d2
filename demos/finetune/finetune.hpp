#pragma once
// finetune: LoRA fine-tuning of a pretrained LLaMA-family model
// (modules/pretrained/hf_llama.hpp, modules/lora.hpp) on a text.
//
// The model directory is Hugging Face's layout (config.json,
// model.safetensors; load_llama). Without --model the demo writes a tiny
// random LLaMA of its own (export_llama) and fine-tunes that, so it runs
// without downloads. The text is tokenized by the directory's byte-level BPE
// (data/bpe_tokenizer.hpp) when it holds one, else byte by byte (token id =
// byte value, which needs a vocabulary of at least 256).
//
// Steps: continue the prompts (GPT::generate over the batch), apply LoRA to
// --targets (everything else frozen), train the adapters with AdamW on random
// windows of the text, save the adapter (PEFT's adapter_model.safetensors and
// adapter_config.json), continue the prompts again with the same seed.
// Writes to --out: adapter/, samples.txt (before and after), history.csv,
// summary.json and loss.png (gnuplot), and tiny_llama/ when it made the model.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xtgrad/data/bpe_tokenizer.hpp>

namespace finetune {

struct Options {
  std::string model;      // a model directory; empty: a tiny random LLaMA
  std::string tokenizer;  // with no --model: a tokenizer directory the tiny model uses
  std::string text = "/usr/share/games/fortunes";  // a file, or a directory of text files
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  std::size_t rank = 8;
  double alpha = 16.0;
  double lora_dropout = 0.05;
  std::size_t steps = 200, batch_size = 8, block_size = 64;
  double lr = 3e-3;
  std::size_t eval_windows = 32;  // held-out windows scored before and after
  std::vector<std::string> prompts = {"The ", "A man ", "Life is ", "%\n"};
  std::size_t max_new_tokens = 48;
  double temperature = 0.8;
  std::size_t top_k = 40;
  double top_p = 0.95;
  std::uint64_t seed = 1;
  int threads = 2;
  std::string out = "finetune_out";
};

// The text of `path`: the file, or every regular file of the directory
// without an extension (the fortunes' text files, not their .dat indexes)
// in name order. std::invalid_argument when there is none or it is empty.
std::string read_text(const std::filesystem::path& path);

// Text to ids and back: the directory's BPE, or bytes.
class Tokenizer {
 public:
  // The BPE of `dir` when it holds tokenizer.json or vocab.json + merges.txt, else bytes.
  static Tokenizer for_model(const std::filesystem::path& dir);
  std::vector<std::int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::size_t vocab_size() const;  // 256 for bytes
  std::string describe() const;

 private:
  std::vector<xtgrad::BpeTokenizer> bpe_;  // empty: bytes
};

// The model directory to load: --model, or a tiny random LLaMA written into
// out/tiny_llama (with --tokenizer's files, the vocabulary sized to them).
std::filesystem::path model_directory(const Options& o);

// The whole run after xtgrad::set_num_threads(o.threads); returns the exit code.
int run(const Options& o);

}  // namespace finetune
