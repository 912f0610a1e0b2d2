// save_run and resume_run (run_state.hpp).

#include "run_state.hpp"

#include <stdexcept>
#include <string>

#include <xtgrad/training/training_state.hpp>

#include "../common/run_extras.hpp"

namespace fashion {

namespace {

using namespace xtgrad;
using demos::as_integer;
using demos::history_key;
using demos::option_mismatch;
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
                {"option.seed", demos::seed_bits(o.seed)},
                {k_flip_key, o.flip},
                {"option.train_images", as_integer(id.train_images)}};
  e.reals = {{"option.dropout", c.dropout},
             {"option.lr", o.lr},
             {"option.weight_decay", o.weight_decay},
             {"option.warmup_epochs", o.warmup_epochs},
             {"option.label_smoothing", o.label_smoothing}};
  return e;
}

template <class Map>
auto required(const Map& map, const std::string& key) {
  return demos::required(map, key, k_program);
}

}  // namespace

void save_run(const fs::path& dir, Module<float>& model, const optim::Optimizer<float>& optimizer,
              const optim::LRScheduler<float>& schedule, const RunIdentity& identity,
              const RunPosition& position) {
  TrainingExtras extras = identity_extras(identity);
  extras.integers["epochs_done"] = as_integer(position.history.size());
  extras.integers["step"] = as_integer(position.step);
  for (std::size_t i = 0; i < position.history.size(); ++i) {
    const EpochRecord& r = position.history[i];
    extras.reals[history_key(i, "train_loss")] = r.train_loss;
    extras.reals[history_key(i, "test_loss")] = r.test_loss;
    extras.reals[history_key(i, "test_accuracy")] = r.test_accuracy;
    extras.reals[history_key(i, "lr")] = r.lr;
    extras.reals[history_key(i, "seconds")] = r.seconds;
  }
  demos::save_dropout_steps(model, extras);
  save_training_state(dir, model, optimizer, &schedule, extras);
}

RunPosition resume_run(const fs::path& dir, Module<float>& model,
                       optim::Optimizer<float>& optimizer, optim::LRScheduler<float>& schedule,
                       const RunIdentity& identity) {
  try {
    // The model, optimizer and schedule are loaded together (all or nothing);
    // the options are checked right after, before training starts.
    const TrainingExtras saved = load_training_state(dir, model, optimizer, &schedule);
    const TrainingExtras now = identity_extras(identity);
    for (const auto& [key, value] : now.integers)
      if (required(saved.integers, key) != value)
        throw key == k_flip_key
            ? std::invalid_argument(std::string("saved with --augment ") +
                                    (value ? "none" : "flip") + ", this run has " +
                                    (value ? "flip" : "none"))
            : option_mismatch(key, saved.integers.at(key), value);
    for (const auto& [key, value] : now.reals)
      if (required(saved.reals, key) != value)
        throw option_mismatch(key, saved.reals.at(key), value);
    RunPosition position;
    position.step = static_cast<std::size_t>(required(saved.integers, "step"));
    const std::int64_t epochs_done = required(saved.integers, "epochs_done");
    for (std::int64_t i = 0; i < epochs_done; ++i) {
      const auto e = static_cast<std::size_t>(i);
      EpochRecord r;
      r.epoch = e + 1;
      r.train_loss = required(saved.reals, history_key(e, "train_loss"));
      r.test_loss = required(saved.reals, history_key(e, "test_loss"));
      r.test_accuracy = required(saved.reals, history_key(e, "test_accuracy"));
      r.lr = required(saved.reals, history_key(e, "lr"));
      r.seconds = required(saved.reals, history_key(e, "seconds"));
      position.history.push_back(r);
    }
    demos::restore_dropout_steps(model, saved, k_program);
    return position;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--resume '" + dir.string() + "': " + e.what());
  }
}

}  // namespace fashion
