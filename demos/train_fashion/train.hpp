#pragma once
// The training loop of train_fashion: AdamW (decoupled weight decay) on
// mini-batches of the shuffled training set, in two parameter groups: weight
// decay on the weight matrices only, none on the biases and the LayerNorm
// weights (the 1-D parameters), as usual for Transformer-like models; the learning rate warmed up
// linearly from 0 over the first steps and then decayed to 0 on a cosine
// (optim::WarmupCosineLR, stepped after every optimizer step), the loss
// cross-entropy with optional label smoothing; after every epoch the test
// set is evaluated without recording (Module::infer, dropout off).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtgrad/training/data_parallel.hpp>
#include <xtgrad/training/step_observer.hpp>
#include <xtgrad/training/training_run.hpp>
#include "../common/report_files.hpp"
#include "data.hpp"
#include "zoo/fashion/models.hpp"

namespace fashion {

// --save writes after every epoch; --stop-after is an epoch.
struct TrainOptions : xtgrad::training::RunOptions {
  std::size_t epochs = 10;
  std::size_t batch_size = 128;
  double lr = 1e-3;
  double weight_decay = 1e-2;
  double warmup_epochs = 1.0;  // at most half of all steps
  double label_smoothing = 0.1;
  bool flip = false;  // random horizontal flips of the training images (random_flip)
  std::uint64_t seed = 0;
  xtgrad::training::StepObserverOptions observe;  // --graph, --profile
};

// The options that fix a run's numbers (summary.json, the saved identity).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TrainOptions, epochs, batch_size, lr, weight_decay,
                                   warmup_epochs, label_smoothing, seed)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelConfig, hidden, dropout, patch, width, blocks, token_hidden,
                                   channel_hidden)

struct EpochRecord {
  std::size_t epoch = 0;       // 1-based
  double train_loss = 0.0;     // mean over the epoch's batches
  double test_loss = 0.0;      // mean cross-entropy (no smoothing)
  double test_accuracy = 0.0;  // fraction correct
  double lr = 0.0;             // at the end of the epoch
  double seconds = 0.0;        // training, without the evaluation
};

// The saved history's fields (train.cpp); history.csv has the epoch first.
const xtgrad::training::HistoryFields<EpochRecord>& epoch_fields();

struct Evaluation {
  double loss = 0.0, accuracy = 0.0;
  std::vector<std::size_t> predictions;  // one per test image
};

// Loss and accuracy of `model` on a split, in batches (Module::infer: dropout off).
Evaluation evaluate(xtgrad::Module<float>& model, const Split& split);

struct TrainResult {
  std::vector<EpochRecord> history;  // resumed epochs included
  Evaluation final_test;
  std::size_t steps = 0;
};

// Trains `model` for the epochs of `options` left after a resume (up to
// stop_after), printing progress to `out`; with --save, saves the run after
// every epoch: beside the model, AdamW and the schedule, the epochs done and
// their history, the step and the options that fix the run's numbers (the
// data order is a function of (seed, epoch)), which --resume checks; with observe.graph / profile, the
// training steps of this call are observed (the evaluation is not). The training images move into
// the batcher (data.train.images is left empty). Under mpirun (`parallel`
// active) each rank trains on its slice of every mini-batch
// (distributed::DistributedSampler: the same batches as one process) with
// the gradients averaged, and rank 0 alone saves; with options.zero 1 or 2
// the optimizer is sharded (ZeRO), the saved state still the whole one.
TrainResult train(xtgrad::Module<float>& model, const ModelConfig& config, FashionMnist& data,
                  const TrainOptions& options, std::FILE* out,
                  xtgrad::training::Parallel& parallel);

}  // namespace fashion
