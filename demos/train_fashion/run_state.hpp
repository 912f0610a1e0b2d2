#pragma once
// Saving and resuming a train_fashion run: one training-state directory
// (training/training_state.hpp, written atomically: a failed save leaves the
// previous one whole) with the model's parameters, AdamW's moments and step
// counts, the schedule's position and the loop's scalars: the epochs done and
// their history, the step, every Dropout module's step (by its name in
// named_modules) and the options that fix the run's numbers. The data order
// is a function of (seed, epoch). So a run resumed after epoch k continues
// bit for bit as the uninterrupted run would have.
// Under mpirun with --zero 1|2 the optimizer given is the consolidated one
// (training/training_optimizer.hpp): the directory is the same as without.

#include <cstdint>
#include <filesystem>
#include <vector>

#include <xtgrad/optim/optim.hpp>

#include "train.hpp"
#include "zoo/fashion/models.hpp"

namespace fashion {

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

void save_run(const std::filesystem::path& dir, xtgrad::Module<float>& model,
              const xtgrad::optim::Optimizer<float>& optimizer,
              const xtgrad::optim::LRScheduler<float>& schedule, const RunIdentity& identity,
              const RunPosition& position);

// Loads the saved state into `model`, `optimizer` and `schedule` (built as
// for the first run) and returns the position. std::invalid_argument naming
// the directory when it is not a saved run or was saved with other options.
RunPosition resume_run(const std::filesystem::path& dir, xtgrad::Module<float>& model,
                       xtgrad::optim::Optimizer<float>& optimizer,
                       xtgrad::optim::LRScheduler<float>& schedule, const RunIdentity& identity);

}  // namespace fashion
