#pragma once
// The training loop of train_gpt: AdamW (betas 0.9 and --beta2, decoupled
// weight decay on the matrices and embeddings only, model.hpp) on batches
// of random windows (batches.hpp), the loss the mean cross-entropy of the
// next character at every position; the gradients' joint 2-norm clipped to
// --grad-clip (optim::clip_grad_norm, torch.nn.utils.clip_grad_norm_); the
// learning rate warmed up linearly from 0 over --warmup-steps, then decayed
// on a cosine to --min-lr-ratio times the peak at the last step
// (optim::WarmupCosineLR, stepped after every optimizer step). Every
// --eval-interval steps and at the last step: the validation loss on a
// subset (batches.hpp), one row of history, a sample of generated text
// (GPT::generate, the KV cache) printed and appended to samples.txt, and,
// with --save, the run state (run_state.cpp). After the last step of this
// call, the validation loss on the whole validation text.
//
// A model with sparse layers (--experts) trains on the cross-entropy plus
// GPT::forward_with_losses's aux_loss (--aux-loss-coef times the summed
// load-balancing losses); the train loss recorded and printed is the
// cross-entropy alone, comparable with a dense model's. Each record also
// counts the tokens routed to each expert of each layer (GPT::router_stats,
// k choices per token, the whole global batch) over the steps since the
// previous record.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <xtgrad/engine/indices.hpp>
#include <xtgrad/modules/gpt.hpp>

#include <xtgrad/training/data_parallel.hpp>
#include <xtgrad/training/training_run.hpp>
#include "../common/report_files.hpp"
#include "corpus.hpp"
#include "model.hpp"

namespace gpt_demo {

// --save writes at every evaluation and at the end; --stop-after is a step.
struct TrainOptions : xtgrad::training::RunOptions {
  double lr = 3e-3;           // the peak, after warmup_steps of the schedule's steps
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  std::size_t steps = 1500;
  std::size_t warmup_steps = 100;
  std::size_t batch_size = 32;
  double weight_decay = 0.1;
  double beta2 = 0.99;
  double grad_clip = 1.0;
  std::uint64_t seed = 0;
  std::size_t eval_interval = 250;
  std::size_t eval_windows = 128;  // windows of the periodic evaluation
  std::size_t sample_chars = 200;  // generated at each evaluation (0: none)
  std::string sample_prompt = "%\n";
  double sample_temperature = 0.8;
  bool expert_parallel = false;  // under mpirun the experts sharded over the ranks
};
// The options that fix a run's numbers in summary.json (the saved identity
// adds eval_interval and eval_windows, run_state.cpp).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TrainOptions, steps, batch_size, lr, min_lr_ratio, warmup_steps,
                                   weight_decay, beta2, grad_clip, seed)

struct HistoryRecord {
  std::size_t step = 0;     // 1-based, the step just done
  double train_loss = 0.0;  // mean over the steps since the previous record
  double val_loss = 0.0;    // the periodic evaluation
  double lr = 0.0;          // after the step
  double seconds = 0.0;     // training time of the run so far (resumed calls included)
};

// history.csv's columns and the saved history's fields (run_state.cpp).
const xtgrad::training::HistoryFields<HistoryRecord>& history_fields();

// The routing of a record's interval: tokens[l * E + e] choices of expert e
// in layer l over the steps since the previous record.
struct ExpertRecord {
  std::size_t step = 0;
  std::vector<std::size_t> tokens;
};

// What a stopped run carries into the next: the steps since the last record.
struct OpenInterval {
  double loss_sum = 0.0;
  std::size_t steps = 0;
  std::vector<std::size_t> expert_tokens;  // as ExpertRecord::tokens (empty: dense)
};

struct TrainData {
  const Vocabulary& vocab;
  const xtgrad::Indices& train;       // [N] ids
  const xtgrad::Indices& validation;  // [M] ids
};

// Where a run is, saved with it: its records (resumed ones included), the
// steps done and the open interval.
struct RunPosition {
  std::vector<HistoryRecord> history;
  std::vector<ExpertRecord> experts;  // one per record of a sparse model
  std::size_t step = 0;
  OpenInterval interval;
};

struct TrainResult : RunPosition {
  double final_val_loss = 0.0;     // on the whole validation text
  double final_train_loss = 0.0;   // the last record's
  double tokens_per_second = 0.0;  // of this call's training steps
  double train_seconds = 0.0;      // this call's
};

// Trains `model` from the start or from the state in options.resume up to
// stop_after (or --steps), printing progress to `out` and the samples to
// `samples` (null: none; rank 0's). Under mpirun each rank computes its
// rows of every batch with the gradients averaged over the job; rank 0
// alone saves; with options.zero 1 or 2 the optimizer is sharded (ZeRO),
// the saved state still the whole one.
TrainResult train(xtgrad::GPT<float>& model, const ModelOptions& model_options,
                  const TrainData& data, const TrainOptions& options, std::FILE* out,
                  std::FILE* samples, xtgrad::training::Parallel& parallel);

// Saving and resuming a run (run_state.cpp): beside the model, AdamW and the
// schedule, the position, the options that fix the run's numbers, the
// model's sizes and the character vocabulary (as code points), so that
// --generate rebuilds the model and its tokenizer from the directory alone.
// The data position is the step: the windows of a step are a function of
// (seed, step, row) (batches.hpp). What a run must share with the run it
// resumes (its numbers depend on them):
struct RunIdentity {
  const ModelOptions& model;
  const TrainOptions& options;
  const Vocabulary& vocab;
  std::size_t train_tokens, validation_tokens;
};

// Collective: `run`'s state and the position saved to `dir`.
void save_run(xtgrad::training::TrainingRun& run, const std::filesystem::path& dir,
              const RunIdentity& identity, const RunPosition& position);

// Collective: loads the run saved in `dir` into `run` (built as for the
// first run) and returns the position. std::invalid_argument naming the
// directory when it is not a saved run or was saved with other options or another corpus.
RunPosition resume_run(xtgrad::training::TrainingRun& run, const std::filesystem::path& dir,
                       const RunIdentity& identity);

}  // namespace gpt_demo
