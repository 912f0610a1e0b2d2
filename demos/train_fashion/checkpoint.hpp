#pragma once
// Saving and resuming a train_fashion run. A directory holds
//   model/       the model's Parameters (Module::save: an xtgrad checkpoint)
//   state.json   the model configuration, the seed, the epochs done and
//                their history
// Both are written atomically; a failed save leaves the previous one whole.
// The optimizer's moments are not saved: a resumed run restarts them from
// zero at the epoch it resumes (the schedule and the data order continue
// exactly), so it is close to, not bit-identical with, an uninterrupted run.

#include <cstdint>
#include <filesystem>
#include <vector>

#include "models.hpp"
#include "train.hpp"

namespace fashion {

struct RunState {
  ModelConfig config;
  std::uint64_t seed = 0;
  std::vector<EpochRecord> history;  // the epochs done
};

void save_run(const std::filesystem::path& dir, const Classifier& model, const RunState& state);

// Loads the Parameters into `model` and returns the state. std::invalid_argument
// when the saved configuration or seed differ from `config` / `seed`.
RunState resume_run(const std::filesystem::path& dir, Classifier& model, const ModelConfig& config,
                    std::uint64_t seed);

}  // namespace fashion
