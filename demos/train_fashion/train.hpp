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

struct EpochRecord {
  std::size_t epoch = 0;       // 1-based
  double train_loss = 0.0;     // mean over the epoch's batches
  double test_loss = 0.0;      // mean cross-entropy (no smoothing)
  double test_accuracy = 0.0;  // fraction correct
  double lr = 0.0;             // at the end of the epoch
  double seconds = 0.0;        // training, without the evaluation
};

// The saved history's fields (run_state.cpp); history.csv has the epoch first.
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
// stop_after), printing progress to `out`; with observe.graph / profile, the
// training steps of this call are observed (the evaluation is not). The training images move into
// the batcher (data.train.images is left empty). Under mpirun (`parallel`
// active) each rank trains on its slice of every mini-batch
// (distributed::DistributedSampler: the same batches as one process) with
// the gradients averaged, and rank 0 alone saves; with options.zero 1 or 2
// the optimizer is sharded (ZeRO), the saved state still the whole one.
TrainResult train(xtgrad::Module<float>& model, const ModelConfig& config, FashionMnist& data,
                  const TrainOptions& options, std::FILE* out,
                  xtgrad::training::Parallel& parallel);

// Saving and resuming a run (run_state.cpp, demos/common/run_state.hpp):
// beside the model, AdamW and the schedule, the epochs done and their
// history, the step and the options that fix the run's numbers. The data
// order is a function of (seed, epoch).

// What a run must share with the run it resumes (its numbers depend on them).
struct RunIdentity {
  const ModelConfig& config;
  const TrainOptions& options;
  std::size_t train_images;
};

struct RunPosition {
  std::vector<EpochRecord> history;  // the epochs done
  std::size_t step = 0;              // optimizer steps done
};

// Collective: `run`'s state and the position saved to `dir`.
void save_run(xtgrad::training::TrainingRun& run, const std::filesystem::path& dir,
              const RunIdentity& identity, const RunPosition& position);

// Collective: loads the run saved in `dir` into `run` (built as for the
// first run) and returns the position. std::invalid_argument naming the
// directory when it is not a saved run or was saved with other options.
RunPosition resume_run(xtgrad::training::TrainingRun& run, const std::filesystem::path& dir,
                       const RunIdentity& identity);

}  // namespace fashion
