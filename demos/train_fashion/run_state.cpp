// save_run and resume_run (train.hpp).

#include "train.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include <xtgrad/training/training_state.hpp>

#include <xtgrad/training/run_state.hpp>

namespace fashion {

namespace {

using namespace xtgrad;
using training::as_integer;
using training::option_mismatch;
namespace fs = std::filesystem;

constexpr const char* k_program = "train_fashion";
constexpr const char* k_flip_key = "option.flip";  // --augment: 1 for flip, 0 for none

// The options a resumed run must repeat, as saved extras.
TrainingExtras identity_extras(const RunIdentity& id) {
  const ModelConfig& c = id.config;
  const TrainOptions& o = id.options;
  TrainingExtras e;
  e.integers = {{"option.model_is_mixer", c.kind == "mixer"},
                {"option.hidden", as_integer(c.hidden)},
                {"option.patch", as_integer(c.patch)},
                {"option.width", as_integer(c.width)},
                {"option.blocks", as_integer(c.blocks)},
                {"option.token_hidden", as_integer(c.token_hidden)},
                {"option.channel_hidden", as_integer(c.channel_hidden)},
                {"option.epochs", as_integer(o.epochs)},
                {"option.batch_size", as_integer(o.batch_size)},
                {"option.seed", training::seed_bits(o.seed)},
                {k_flip_key, o.flip},
                {"option.train_images", as_integer(id.train_images)}};
  e.reals = {{"option.dropout", c.dropout},
             {"option.lr", o.lr},
             {"option.weight_decay", o.weight_decay},
             {"option.warmup_epochs", o.warmup_epochs},
             {"option.label_smoothing", o.label_smoothing}};
  return e;
}

// "saved with --epochs 2, this run has 3"; --augment by its names.
struct Mismatch {
  template <class V>
  std::invalid_argument operator()(const std::string& key, V saved, V now) const {
    if (key != k_flip_key) return option_mismatch(key, saved, now);
    return std::invalid_argument(std::string("saved with --augment ") + (now ? "none" : "flip") +
                                 ", this run has " + (now ? "flip" : "none"));
  }
};

}  // namespace

const training::HistoryFields<EpochRecord>& epoch_fields() {
  static const training::HistoryFields<EpochRecord> fields{
      {},
      {{"train_loss", &EpochRecord::train_loss},
       {"test_loss", &EpochRecord::test_loss},
       {"test_accuracy", &EpochRecord::test_accuracy},
       {"lr", &EpochRecord::lr},
       {"seconds", &EpochRecord::seconds}}};
  return fields;
}

void save_run(training::TrainingRun& run, const fs::path& dir, const RunIdentity& identity,
              const RunPosition& position) {
  TrainingExtras extras = identity_extras(identity);
  extras.integers["step"] = as_integer(position.step);
  training::save_history(extras, "epochs_done", position.history, epoch_fields());
  run.save(dir, extras);
}

RunPosition resume_run(training::TrainingRun& run, const fs::path& dir,
                       const RunIdentity& identity) {
  const training::SavedRun saved =
      run.resume(dir, identity_extras(identity), k_program, Mismatch{});
  RunPosition position;
  position.step = saved.size("step");
  position.history = saved.history("epochs_done", epoch_fields());
  for (std::size_t e = 0; e < position.history.size(); ++e) position.history[e].epoch = e + 1;
  return position;
}

}  // namespace fashion
