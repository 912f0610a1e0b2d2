// The training loop of train.hpp.

#include "train.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/dropout.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/evaluation.hpp>
#include <xtgrad/training/expert_parallel.hpp>
#include <xtgrad/training/progress.hpp>

#include "batches.hpp"
#include "corpus.hpp"
#include "generate.hpp"

namespace gpt_demo {

namespace {

using namespace xtgrad;

constexpr std::size_t k_eval_batch_rows = 32;

std::string format(const char* pattern, double a, double b) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, pattern, a, b);
  return buffer;
}

// One sample of generated text after step `step`, printed and appended to `samples`.
void write_sample(const GPT<float>& model, const Vocabulary& vocab,
                  const std::vector<std::int64_t>& prompt, const TrainOptions& o, std::size_t step,
                  training::Progress& progress, std::FILE* samples) {
  GenerationOptions sampling;
  sampling.max_new_tokens = o.sample_chars;
  sampling.temperature = o.sample_temperature;
  sampling.seed = o.seed + step;
  const std::string text = encode_utf8(vocab.decode(model.generate({prompt}, sampling).front()));
  const std::string block = "--- sample after step " + std::to_string(step) + " ---\n" + text +
                            (text.empty() || text.back() != '\n' ? "\n" : "");
  if (samples == nullptr) return;
  progress.line(block);
  if (std::fputs(block.c_str(), samples) < 0 || std::fflush(samples) != 0)
    throw std::runtime_error("cannot write the samples file");
}

// "experts: layer 0 31% 22% 27% 20% | layer 1 ...": each expert's share of its layer's choices.
std::string expert_shares(const std::vector<std::size_t>& tokens, std::size_t experts) {
  std::string line = "experts:";
  const std::vector<std::vector<std::size_t>> layers =
      training::routed_tokens_by_layer(tokens, experts);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::size_t total = std::accumulate(layers[l].begin(), layers[l].end(), std::size_t{0});
    line += (l == 0 ? " layer " : " | layer ") + std::to_string(l);
    for (const std::size_t n : layers[l])
      line += format(
          " %.0f%%",
          100.0 * static_cast<double>(n) / static_cast<double>(std::max<std::size_t>(total, 1)),
          0.0);
  }
  return line + "\n";
}

// The loss trained on: the cross-entropy of the next character (also set
// into `cross_entropy_loss`), plus the routers' auxiliary loss of a sparse model.
Var<float> training_loss(GPT<float>& model, Tape<float>& tape, const TokenBatch& batch,
                         Var<float>& cross_entropy_loss) {
  if (model.gpt_config().num_experts == 0)
    return cross_entropy_loss = next_token_loss(model.forward(tape, batch.inputs), batch.targets);
  const GPTOutput<float> out = model.forward_with_losses(tape, batch.inputs);
  cross_entropy_loss = next_token_loss(out.logits, batch.targets);
  return add(cross_entropy_loss, out.aux_loss);
}

// --grad-clip over the whole model (every ZeRO shard, every rank's experts);
// a norm that is not finite ends the run.
void clip_gradients(training::TrainingRun& run, double max_norm, std::size_t step) {
  const double norm = run.clip_grad_norm(max_norm);
  if (!std::isfinite(norm))
    throw std::runtime_error("training diverged at step " + std::to_string(step) +
                             ": the gradient norm is " + std::to_string(norm) +
                             "; try a smaller --lr");
}

}  // namespace

TrainResult train(GPT<float>& model, const ModelOptions& model_options, const TrainData& data,
                  const TrainOptions& o, std::FILE* out, std::FILE* samples,
                  training::Parallel& parallel) {
  const auto [first_row, rows] = parallel.slice(o.batch_size, "--batch-size");
  const bool sharded = o.expert_parallel && training::shard_experts(parallel, model);
  const std::size_t T = model_options.block_size;
  const auto total = static_cast<std::int64_t>(o.steps);
  const auto warmup = std::min<std::int64_t>(static_cast<std::int64_t>(o.warmup_steps), total / 2);
  training::TrainingRun run(
      parallel, model,
      training::decay_groups(
          model, optim::AdamWOptions(o.lr).betas({0.9, o.beta2}).weight_decay(o.weight_decay)),
      o.zero, training::warmup_cosine(warmup, total, o.lr * o.min_lr_ratio));
  run.per_rank = sharded;
  if (sharded && !parallel.quiet())
    std::fprintf(out, "train_gpt: experts sharded, %zu of each layer's %zu per process\n",
                 model_options.experts / static_cast<std::size_t>(parallel.size()),
                 model_options.experts);
  const RunIdentity identity{model_options, o, data.vocab, data.train.size(),
                             data.validation.size()};
  RunPosition position;
  if (!o.resume.empty()) position = resume_run(run, o.resume, identity);
  const std::size_t last = o.last(position.step, o.steps, "steps", "up to step");
  // The samples' prompt is checked before training, not at the first evaluation.
  const std::vector<std::int64_t> prompt =
      data.vocab.encode(decode_utf8(o.sample_prompt, "--prompt"), "--prompt");
  if (o.sample_chars > 0 && prompt.empty())
    throw std::invalid_argument("--prompt is empty, expected at least one character");
  const training::NextTokenEvaluator evaluator(data.validation, T, o.eval_windows,
                                               k_eval_batch_rows, sharded);
  const double seconds_before = position.history.empty() ? 0.0 : position.history.back().seconds;
  const bool sparse = model.gpt_config().num_experts > 0;

  // Under mpirun this rank's rows start at first_row of the global batch: its
  // dropout masks (keyed by row) are those one process would draw for them.
  for (auto& [name, module] : model.named_modules())
    if (auto* dropout = dynamic_cast<Dropout<float>*>(module)) dropout->set_row_offset(first_row);
  model.train();
  training::Progress progress(position.step, last, o.steps, out, "tok/s");
  for (std::size_t step = position.step; step < last; ++step) {
    const TokenBatch batch = training_batch(data.train, T, o.seed, step, first_row, rows);
    run.tape.clear();
    Var<float> cross_entropy_loss;
    run.tape.backward(training_loss(model, run.tape, batch, cross_entropy_loss));
    run.optimizer.finish();
    clip_gradients(run, o.grad_clip, step + 1);
    run.step();
    // the global batch's mean cross-entropy
    const double value = parallel.mean(cross_entropy_loss.value()());
    if (sparse)
      training::add_routed_tokens(position.interval.expert_tokens, model, parallel, sharded);
    position.interval.loss_sum += value;
    ++position.interval.steps;
    position.step = step + 1;
    progress.update(position.step, o.batch_size * T, value);

    const bool record = position.step % o.eval_interval == 0 || position.step == o.steps;
    if (record) {
      model.eval();
      HistoryRecord r;
      r.step = position.step;
      r.train_loss = position.interval.loss_sum / static_cast<double>(position.interval.steps);
      r.val_loss = evaluator.periodic(model, parallel);
      r.lr = run.schedule->last_lr();
      r.seconds = seconds_before + progress.train_seconds();
      position.history.push_back(r);
      if (sparse) position.experts.push_back({r.step, position.interval.expert_tokens});
      position.interval = {};
      if (!parallel.quiet()) {
        progress.line("step " + std::to_string(r.step) +
                      format(": train loss %.4f  val loss %.4f", r.train_loss, r.val_loss) +
                      format("  lr %.2e  (%.0f s)\n", r.lr, r.seconds));
        if (sparse)
          progress.line(
              expert_shares(position.experts.back().tokens, model.gpt_config().num_experts));
      }
      if (o.sample_chars > 0 && (samples != nullptr || sharded))  // sharded: every rank draws
        write_sample(model, data.vocab, prompt, o, position.step, progress, samples);
      model.train();
    }
    if (!o.save.empty() && (record || position.step == last))
      save_run(run, o.save, identity, position);  // collective
    if (record) progress.skip_time();
  }
  progress.finish();
  model.eval();
  const double final_train = position.history.empty() ? 0.0 : position.history.back().train_loss;
  return {std::move(position), evaluator.full(model, parallel), final_train,
          progress.items_per_second(), progress.train_seconds()};
}

}  // namespace gpt_demo
