#pragma once
// Saving and resuming a train_fashion run (demos/common/run_state.hpp):
// beside the model, AdamW and the schedule, the epochs done and their
// history, the step and the options that fix the run's numbers. The data
// order is a function of (seed, epoch).

#include <cstdint>
#include <filesystem>
#include <vector>

#include "../common/training_run.hpp"
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

// Collective: `run`'s state and the position saved to `dir`.
void save_run(demos::TrainingRun& run, const std::filesystem::path& dir,
              const RunIdentity& identity, const RunPosition& position);

// Collective: loads the run saved in `dir` into `run` (built as for the
// first run) and returns the position. std::invalid_argument naming the
// directory when it is not a saved run or was saved with other options.
RunPosition resume_run(demos::TrainingRun& run, const std::filesystem::path& dir,
                       const RunIdentity& identity);

}  // namespace fashion
