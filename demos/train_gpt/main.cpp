// train_gpt: a character-level GPT (modules/gpt.hpp) trained on the English
// fortunes of Debian's `fortunes` package (corpus.hpp), with AdamW, warm-up
// and cosine decay and gradient clipping (train.hpp); the validation loss
// beside the unigram baseline; --save / --resume continue a run bit for
// bit; data-parallel under mpirun, the optimizer sharded with --zero 1|2
// (ZeRO); --experts E --experts-per-token k makes every FFN a sparse
// mixture of experts (model.hpp). Writes summary.json, history.csv,
// samples.txt and loss.png (and experts.csv, experts.png) to --out
// (report.hpp). --generate DIR instead continues --prompt with the model a run saved (generate.hpp). Exit codes:
// 0 done, 2 bad options, data or checkpoint, 1 anything else (a file that
// cannot be written, gnuplot failing).

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <xtgrad/modules/parameter_count.hpp>
#include <xtgrad/training/evaluation.hpp>
#include <xtgrad/training/expert_parallel.hpp>

#include "../common/program.hpp"
#include "corpus.hpp"
#include "generate.hpp"
#include "model.hpp"
#include "report.hpp"
#include "train.hpp"

namespace {

using namespace gpt_demo;
namespace fs = std::filesystem;

struct Options {
  ModelOptions model;
  TrainOptions train;
  GenerateOptions generate;
  demos::AppOptions app{2, "f32", "gpt_out", k_default_data_dir};
  std::size_t top_k = 0;
};

nlohmann::json summary_of(const Options& o, const Corpus& corpus, const Vocabulary& vocab,
                          std::size_t parameters, std::size_t active_parameters,
                          const TrainResult& r, double unigram, int processes, double data_seconds,
                          double total_seconds) {
  const ModelOptions& m = o.model;
  nlohmann::json model = o.model;  // its sizes
  model.update({{"kind", "gpt2"}, {"vocab_size", vocab.size()}, {"parameters", parameters}});
  nlohmann::json summary = o.train;  // the options that fix the run's numbers
  summary.update(
      {{"model", model},
       {"data",
        {{"dir", o.app.data_dir},
         {"files", corpus.files.size()},
         {"train_records", corpus.train_records},
         {"validation_records", corpus.validation_records},
         {"train_chars", corpus.train.size()},
         {"validation_chars", corpus.validation.size()},
         {"split", "record i (from 0, files in name order) is held out when i % 10 == 9"}}},
       {"step", r.step},
       {"threads", o.app.threads},
       {"processes", processes},
       {"final_train_loss", r.final_train_loss},
       {"final_val_loss", r.final_val_loss},
       {"unigram_baseline", unigram},
       {"tokens_per_second", r.tokens_per_second},
       {"data_seconds", data_seconds},
       {"train_seconds", r.train_seconds},
       {"total_seconds", total_seconds}});
  if (m.experts > 0) {
    nlohmann::json& model = summary["model"];
    model["experts"] = m.experts;
    model["experts_per_token"] = m.experts_per_token;
    model["expert_hidden"] = m.expert_hidden > 0 ? m.expert_hidden : 4 * m.n_embd;
    model["aux_loss_coef"] = m.aux_loss_coef;
    model["active_parameters"] = active_parameters;
    // The last record's tokens per expert, layer by layer.
    summary["tokens_per_expert"] = xtgrad::training::routed_tokens_by_layer(
        r.experts.empty() ? std::vector<std::size_t>{} : r.experts.back().tokens, m.experts);
  }
  return summary;
}

int run_training(const Options& o, demos::Program& program) {
  xtgrad::training::Parallel& parallel = program.parallel;
  program.start(o.app);
  const Corpus corpus = load_corpus(o.app.data_dir);
  const Vocabulary vocab = Vocabulary::of({&corpus.train, &corpus.validation});
  const xtgrad::Indices train_ids = vocab.encode_indices(corpus.train, "the training text");
  const xtgrad::Indices validation_ids =
      vocab.encode_indices(corpus.validation, "the validation text");
  const double unigram =
      xtgrad::training::unigram_cross_entropy(train_ids, validation_ids, vocab.size());
  const double data_seconds = program.seconds();

  xtgrad::Generator generator(o.train.seed);
  xtgrad::GPT<float> model(gpt_config(o.model, vocab.size()), generator);
  const std::size_t parameters = xtgrad::parameter_count(model);
  const std::size_t active_parameters = active_parameter_count(model);
  const bool quiet = parallel.quiet();  // under mpirun rank 0 alone prints and writes
  const fs::path out(o.app.out);
  std::FILE* samples = nullptr;
  if (!quiet) {
    std::printf(
        "train_gpt: %zu fortune files, %zu training records (%zu characters), %zu validation "
        "records (%zu characters, every 10th record); %zu distinct characters (%.1f s)\n",
        corpus.files.size(), corpus.train_records, corpus.train.size(), corpus.validation_records,
        corpus.validation.size(), vocab.size(), data_seconds);
    std::printf(
        "train_gpt: GPT of %zu layers, %zu heads, %zu channels, block %zu: %zu parameters\n",
        o.model.n_layer, o.model.n_head, o.model.n_embd, o.model.block_size, parameters);
    if (o.model.experts > 0)
      std::printf(
          "train_gpt: every FFN a mixture of %zu experts of %zu channels, %zu per token: %zu "
          "parameters active per token; aux loss coefficient %g\n",
          o.model.experts, *model.gpt_config().moe_intermediate_size, o.model.experts_per_token,
          active_parameters, o.model.aux_loss_coef);
    std::printf(
        "train_gpt: unigram baseline (training character frequencies on the validation "
        "text) %.4f nats\n",
        unigram);
    program.print_processes(o.train.batch_size, "windows", o.train.zero);
    std::fflush(stdout);
    fs::create_directories(out);
    // A resumed run appends to the samples of the run it continues.
    samples =
        std::fopen((out / "samples.txt").string().c_str(), o.train.resume.empty() ? "w" : "a");
    if (samples == nullptr)
      throw std::runtime_error("cannot write '" + (out / "samples.txt").string() + "'");
  }
  const TrainResult result = train(model, o.model, {vocab, train_ids, validation_ids}, o.train,
                                   parallel.out(), samples, parallel);
  if (quiet) return 0;
  if (std::fclose(samples) != 0)
    throw std::runtime_error("cannot write '" + (out / "samples.txt").string() + "'");
  const double total_seconds = program.seconds();
  return write_report(out, result, o.model, unigram, total_seconds,
                      summary_of(o, corpus, vocab, parameters, active_parameters, result, unigram,
                                 parallel.size(), data_seconds, total_seconds));
}

// Continues --prompt with the model saved in --generate.
int run_generation(Options o, xtgrad::training::Parallel& parallel) {
  xtgrad::set_num_threads(o.app.threads);
  o.generate.seed = o.train.seed;
  if (o.top_k > 0) o.generate.top_k = o.top_k;
  const std::string text = generate_text(o.generate);
  if (!parallel.quiet()) std::cout << text << (text.empty() || text.back() != '\n' ? "\n" : "");
  return 0;
}

// The options of both modes; --generate's and training's exclude each other.
void add_options(demos::Program& program, Options& o) {
  CLI::App& app = program.app;
  program.add("--n-layer", o.model.n_layer, "Transformer blocks", CLI::Range(1, 64));
  program.add("--n-head", o.model.n_head, "attention heads (divides --n-embd)", CLI::Range(1, 64));
  program.add("--n-embd", o.model.n_embd, "channels", CLI::Range(1, 4096));
  program.add("--block-size", o.model.block_size, "context: characters per training window",
              CLI::Range(2, 4096));
  program.add("--dropout", o.model.dropout, "dropout of the embeddings, attention and residuals",
              CLI::Range(0.0, 0.9));
  program.add("--experts", o.model.experts,
              "experts of every FFN (0: dense); a sparse mixture of experts, Mixtral's",
              CLI::Range(0, 256));
  program.add("--experts-per-token", o.model.experts_per_token,
              "--experts: the experts each token is routed to (top-k of the router)",
              CLI::Range(1, 256));
  program.add("--expert-hidden", o.model.expert_hidden,
              "--experts: channels of each expert's gated FFN (0: 4 n-embd)", CLI::Range(0, 65536));
  program.add("--aux-loss-coef", o.model.aux_loss_coef,
              "--experts: the load-balancing loss's weight in the training loss",
              CLI::Range(0.0, 100.0));
  program.add("--steps", o.train.steps, "optimizer steps", CLI::Range(1, 10000000));
  program.add("--batch-size", o.train.batch_size, "windows per step (all processes together)",
              CLI::Range(1, 65536));
  program.add("--lr", o.train.lr, "peak learning rate of AdamW", CLI::PositiveNumber);
  program.add("--min-lr-ratio", o.train.min_lr_ratio,
              "the cosine decays the learning rate to this fraction of --lr at the last step",
              CLI::Range(0.0, 1.0));
  program.add("--warmup-steps", o.train.warmup_steps,
              "steps of linear warm-up from 0 (at most half the run)", CLI::NonNegativeNumber);
  program.add("--weight-decay", o.train.weight_decay,
              "AdamW's decoupled weight decay, on the matrices and embeddings only",
              CLI::NonNegativeNumber);
  program.add("--beta2", o.train.beta2, "AdamW's beta2 (beta1 is 0.9)", CLI::Range(0.0, 0.999999));
  program.add("--grad-clip", o.train.grad_clip, "clip the joint 2-norm of the gradients to this",
              CLI::PositiveNumber);
  program.add("--eval-interval", o.train.eval_interval,
              "evaluate, sample and save every this many steps (and at the last step)",
              CLI::Range(1, 10000000));
  program.add("--eval-windows", o.train.eval_windows,
              "windows of block-size characters scored by the periodic validation loss (0: "
              "all; the final one scores the whole validation text)",
              CLI::NonNegativeNumber);
  program.add("--sample-chars", o.train.sample_chars,
              "characters generated at each evaluation (0: none)", CLI::Range(0, 100000));
  program.add("--seed", o.train.seed,
              "seed of the initialization, the windows and the samples (with --generate: of "
              "the draws)",
              CLI::NonNegativeNumber);
  program.add_app(o.app,
                  "threads of OpenBLAS and xtgrad's passes (xtgrad::set_num_threads; 1 per "
                  "process under mpirun unless given)",
                  "directory of the fortune files");
  program.add_save_resume(o.train.save, o.train.resume,
                          "save the run (model, vocabulary, optimizer, schedule, step) to DIR at "
                          "every evaluation and at the end");
  program.add_stop_after(o.train.stop_after, "step", "steps", 10000000);
  app.add_flag("--expert-parallel", o.train.expert_parallel,
               "under mpirun, shard the experts of every --experts layer over the processes "
               "(--experts a multiple of their count), the rest data-parallel; --save "
               "writes each process's own state to DIR/rank<r>, --resume reads it with as many");
  program.add_zero(o.train.zero,
                   "0 each process a full AdamW (data-parallel); 1 AdamW's state sharded across "
                   "the processes; 2 the gradients too; clipping by the norm over all shards. The "
                   "same numbers (to rounding) and --save writes the whole state, as in one "
                   "process.");
  app.add_option("--generate", o.generate.checkpoint,
                 "generate instead of training: continue --prompt with the model saved in DIR")
      ->check(CLI::ExistingDirectory);
  app.add_option("--prompt", o.generate.prompt,
                 "text to continue (also of the samples during training); the default is the "
                 "fortunes' record separator, so a new fortune begins")
      ->default_str("'%' and a line break");
  program.add("--max-new-chars", o.generate.max_new_tokens, "--generate: characters to add",
              CLI::Range(1, 1000000));
  program.add("--temperature", o.generate.temperature,
              "sampling temperature (0: greedy), also of the samples during training",
              CLI::Range(0.0, 100.0));
  program.add("--top-k", o.top_k, "--generate: sample among the k most likely (0: all)",
              CLI::NonNegativeNumber);
}

void check_modes(const CLI::App& app, const Options& o) {
  // Training options make no sense with --generate, nor generation's without it.
  if (!o.generate.checkpoint.empty())
    for (const char* name : {"--save", "--resume", "--stop-after", "--steps", "--out",
                             "--precision", "--expert-parallel"})
      if (app.count(name) > 0)
        throw CLI::ValidationError(name, std::string("is a training option; --generate takes "
                                                     "--prompt, --max-new-chars, --temperature, "
                                                     "--top-k, --seed and --threads"));
  if (o.generate.checkpoint.empty())
    for (const char* name : {"--max-new-chars", "--top-k"})
      if (app.count(name) > 0) throw CLI::ValidationError(name, "applies to --generate only");
  if (o.generate.checkpoint.empty() && o.model.experts == 0)
    for (const char* name :
         {"--experts-per-token", "--expert-hidden", "--aux-loss-coef", "--expert-parallel"})
      if (app.count(name) > 0)
        throw CLI::ValidationError(name,
                                   "applies to a mixture of experts only (--experts 2 or more)");
}

}  // namespace

int main(int argc, char** argv) {
  demos::Program program(argc, argv, "train_gpt",
                         "Train a character-level GPT on the fortunes of Debian's fortunes "
                         "package, or (--generate) continue a prompt with a saved one");
  Options o;
  add_options(program, o);
  if (const auto code = program.parse(argc, argv, [&] { check_modes(program.app, o); }))
    return *code;
  o.train.sample_prompt = o.generate.prompt;
  o.train.sample_temperature = o.generate.temperature;
  return program.run([&] {
    return o.generate.checkpoint.empty() ? run_training(o, program)
                                         : run_generation(o, program.parallel);
  });
}
