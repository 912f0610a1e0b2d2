// finetune: LoRA fine-tuning of a LLaMA-family model directory on a text,
// with generation before and after (finetune.hpp). Exit codes: 0 done, 2 bad
// options or input, 1 anything else (a file that cannot be written, gnuplot failing).

#include <xtgrad/engine/threads.hpp>

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
  program.add("--text", o.text, "text file, or directory of text files, to fine-tune on",
              CLI::ExistingPath);
  program.add("--targets", o.targets, "layers that get an adapter (PEFT's target_modules)");
  program.add("--rank", o.rank, "LoRA rank r", CLI::Range(1, 4096));
  program.add("--alpha", o.alpha, "LoRA alpha (scaling alpha / r)", CLI::PositiveNumber);
  program.add("--lora-dropout", o.lora_dropout, "dropout on the adapters' input",
              CLI::Range(0.0, 0.9));
  program.add("--steps", o.steps, "optimizer steps", CLI::Range(1, 10000000));
  program.add("--batch-size", o.batch_size, "windows per step", CLI::Range(1, 65536));
  program.add("--block-size", o.block_size, "tokens per window", CLI::Range(2, 65536));
  program.add("--lr", o.lr, "AdamW's learning rate", CLI::PositiveNumber);
  program.add("--eval-windows", o.eval_windows, "held-out windows scored before and after",
              CLI::Range(1, 65536));
  program.add("--prompt", o.prompts, "prompts continued before and after (repeat it)");
  program.add("--max-new-tokens", o.max_new_tokens, "tokens added to each prompt",
              CLI::Range(1, 65536));
  program.add("--temperature", o.temperature, "sampling temperature (0: greedy)",
              CLI::Range(0.0, 100.0));
  program.add("--top-k", o.top_k, "sample among the k most likely (0: all)");
  program.add("--top-p", o.top_p, "nucleus: the most likely tokens of this much probability",
              CLI::Range(1e-9, 1.0));
  program.add("--seed", o.seed, "seed of the adapters, the windows and the draws");
  program.add_threads(o.threads, "threads of OpenBLAS and xtgrad's passes");
  program.add_out(o.out);
  if (const auto code = program.parse(argc, argv)) return *code;
  return program.run([&] {
    xtgrad::set_num_threads(o.threads);
    program.start_compute("f32");  // the machine line
    return finetune::run(o);
  });
}
