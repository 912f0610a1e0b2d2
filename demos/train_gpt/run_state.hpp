#pragma once
// Saving and resuming a train_gpt run (demos/common/run_state.hpp): beside
// the model, AdamW and the schedule, the step, the history, the open
// interval's loss sum, the options that fix the run's numbers, the model's
// sizes and the character vocabulary (as code points), so that --generate
// rebuilds the model and its tokenizer from the directory alone. The data
// position is the step: the windows of a step are a function of (seed,
// step, row) (batches.hpp).

#include <cstddef>
#include <filesystem>
#include <vector>

#include <xtgrad/modules/gpt.hpp>

#include "../common/training_run.hpp"
#include "model.hpp"
#include "tokenizer.hpp"
#include "train.hpp"

namespace gpt_demo {

// What a run must share with the run it resumes (its numbers depend on them).
struct RunIdentity {
  const ModelOptions& model;
  const TrainOptions& options;
  const Vocabulary& vocab;
  std::size_t train_tokens, validation_tokens;
};

struct RunPosition {
  std::vector<HistoryRecord> history;
  std::vector<ExpertRecord> experts;  // a sparse model's
  std::size_t step = 0;
  OpenInterval interval;
};

// Collective: `run`'s state and the position saved to `dir`.
void save_run(demos::TrainingRun& run, const std::filesystem::path& dir,
              const RunIdentity& identity, const RunPosition& position);

// Collective: loads the run saved in `dir` into `run` (built as for the
// first run) and returns the position. std::invalid_argument naming the
// directory when it is not a saved run or was saved with other options or another corpus.
RunPosition resume_run(demos::TrainingRun& run, const std::filesystem::path& dir,
                       const RunIdentity& identity);

// The model of a saved run, for generation: its sizes and vocabulary, then
// its parameters loaded into a GPT built from them.
struct SavedModel {
  ModelOptions options;
  Vocabulary vocab;
  std::size_t step = 0;
};
SavedModel read_saved_model(const std::filesystem::path& dir);

}  // namespace gpt_demo
