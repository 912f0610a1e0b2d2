// finetune: LoRA fine-tuning of a LLaMA-family model directory on a text,
// with generation before and after (finetune.hpp). Exit codes: 0 done, 2 bad
// options or input, 1 anything else (a file that cannot be written, gnuplot failing).

#include "../common/program.hpp"
#include "finetune.hpp"

int main(int argc, char** argv) {
  demos::Program program(argc, argv, "finetune",
                         "Fine-tune a LLaMA-family model with LoRA on a text and compare its "
                         "generations before and after");
  finetune::Options o;
  CLI::App& app = program.app;
  app.add_option("--model", o.model,
                 "model directory (config.json, model.safetensors[, tokenizer.json]); default: "
                 "a tiny random LLaMA written to OUT/tiny_llama")
      ->check(CLI::ExistingDirectory);
  app.add_option("--tokenizer", o.tokenizer,
                 "without --model: a tokenizer directory the tiny LLaMA takes (default: bytes)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--text", o.text, "text file, or directory of text files, to fine-tune on")
      ->capture_default_str()
      ->check(CLI::ExistingPath);
  app.add_option("--targets", o.targets, "layers that get an adapter (PEFT's target_modules)")
      ->capture_default_str();
  app.add_option("--rank", o.rank, "LoRA rank r")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--alpha", o.alpha, "LoRA alpha (scaling alpha / r)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lora-dropout", o.lora_dropout, "dropout on the adapters' input")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--steps", o.steps, "optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--batch-size", o.batch_size, "windows per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--block-size", o.block_size, "tokens per window")
      ->capture_default_str()
      ->check(CLI::Range(2, 65536));
  app.add_option("--lr", o.lr, "AdamW's learning rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-windows", o.eval_windows, "held-out windows scored before and after")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--prompt", o.prompts, "prompts continued before and after (repeat it)")
      ->capture_default_str();
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens added to each prompt")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o.top_k, "sample among the k most likely (0: all)")
      ->capture_default_str();
  app.add_option("--top-p", o.top_p, "nucleus: the most likely tokens of this much probability")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  app.add_option("--seed", o.seed, "seed of the adapters, the windows and the draws")
      ->capture_default_str();
  program.add_threads(o.threads, "threads of OpenBLAS and xtgrad's passes");
  program.add_out(o.out);
  if (const auto code = program.parse(argc, argv)) return *code;
  return program.run([&] { return finetune::run(o); });
}
