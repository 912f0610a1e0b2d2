// save_run, resume_run and read_saved_model (train.hpp, generate.hpp).

#include "generate.hpp"
#include "train.hpp"

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <xtgrad/io/state_directory.hpp>
#include <xtgrad/training/training_state.hpp>

#include <xtgrad/training/run_state.hpp>

#include "../common/program.hpp"

namespace gpt_demo {

namespace {

using namespace xtgrad;
using training::as_integer;
namespace fs = std::filesystem;

constexpr const char* k_program = "train_gpt";
constexpr const char* k_vocab_size = "vocab.size";
// The whole saved state is read for generation: at most this many bytes of arrays.
constexpr std::size_t k_max_array_bytes = std::size_t{1} << 32;

// The model's sizes (also what --generate needs) and the options a resumed
// run must repeat, as saved extras.
TrainingExtras identity_extras(const RunIdentity& id) {
  const ModelOptions& m = id.model;
  TrainingExtras e;
  demos::add_extras(e, "model.", m);
  demos::add_extras(e, "option.", id.options);
  e.integers["option.eval_interval"] = as_integer(id.options.eval_interval);
  e.integers["option.eval_windows"] = as_integer(id.options.eval_windows);
  e.integers["data.train_tokens"] = as_integer(id.train_tokens);
  e.integers["data.validation_tokens"] = as_integer(id.validation_tokens);
  // A sparse model's options (--experts 0, a dense one, has no others).
  e.integers["model.experts"] = as_integer(m.experts);
  if (m.experts > 0) {
    e.integers["model.experts_per_token"] = as_integer(m.experts_per_token);
    e.integers["model.expert_hidden"] = as_integer(m.expert_hidden);
    e.reals["model.aux_loss_coef"] = m.aux_loss_coef;
  }
  const std::vector<char32_t>& points = id.vocab.code_points();
  e.integers[k_vocab_size] = as_integer(points.size());
  training::save_sizes(e, "vocab.", {points.begin(), points.end()});
  return e;
}

// "saved with --batch-size 32, this run has 64" for the key "option.batch_size";
// the model's sizes as "--n-layer"; the data's and the vocabulary as the corpus.
struct Mismatch {
  template <class V>
  std::invalid_argument operator()(const std::string& key, V saved, V now) const {
    if (key.rfind("data.", 0) != 0 && key.rfind("vocab.", 0) != 0)
      return training::option_mismatch(key, saved, now);
    std::ostringstream message;
    message << "saved from another corpus (" << key << " " << saved << ", this corpus " << now
            << ")";
    return std::invalid_argument(message.str());
  }
};

// The routing records and the open interval's counts, as "experts.<i>.step",
// "experts.<i>.<j>" and "interval.experts.<j>" with their sizes.
void save_experts(TrainingExtras& extras, const RunPosition& position) {
  extras.integers["experts.size"] = as_integer(position.experts.size());
  std::size_t width = 0;
  for (std::size_t i = 0; i < position.experts.size(); ++i) {
    const std::string record = "experts." + std::to_string(i) + ".";
    width = position.experts[i].tokens.size();
    extras.integers[record + "step"] = as_integer(position.experts[i].step);
    training::save_sizes(extras, record, position.experts[i].tokens);
  }
  const std::vector<std::size_t>& open = position.interval.expert_tokens;
  extras.integers["experts.width"] = as_integer(width);
  extras.integers["interval.experts.size"] = as_integer(open.size());
  training::save_sizes(extras, "interval.experts.", open);
}

void load_experts(const training::SavedRun& saved, RunPosition& position) {
  const std::size_t records = saved.size("experts.size"), width = saved.size("experts.width");
  for (std::size_t i = 0; i < records; ++i) {
    const std::string record = "experts." + std::to_string(i) + ".";
    position.experts.push_back({saved.size(record + "step"), saved.sizes(record, width)});
  }
  position.interval.expert_tokens =
      saved.sizes("interval.experts.", saved.size("interval.experts.size"));
}

}  // namespace

const training::HistoryFields<HistoryRecord>& history_fields() {
  static const training::HistoryFields<HistoryRecord> fields{
      {{"step", &HistoryRecord::step}},
      {{"train_loss", &HistoryRecord::train_loss},
       {"val_loss", &HistoryRecord::val_loss},
       {"lr", &HistoryRecord::lr},
       {"seconds", &HistoryRecord::seconds}}};
  return fields;
}

void save_run(training::TrainingRun& run, const fs::path& dir, const RunIdentity& identity,
              const RunPosition& position) {
  TrainingExtras extras = training::position_extras(
      identity_extras(identity), position.step, "history.size", position.history, history_fields());
  extras.integers["interval.steps"] = as_integer(position.interval.steps);
  extras.reals["interval.loss_sum"] = position.interval.loss_sum;
  if (identity.model.experts > 0) save_experts(extras, position);
  run.save(dir, extras);
}

RunPosition resume_run(training::TrainingRun& run, const fs::path& dir,
                       const RunIdentity& identity) {
  // The vocabulary's size first: its entries differ whenever it does.
  const training::SavedRun saved =
      run.resume(dir, identity_extras(identity), k_program, Mismatch{}, k_vocab_size);
  RunPosition position;
  position.step = saved.size("step");
  position.interval.steps = saved.size("interval.steps");
  position.interval.loss_sum = saved.real("interval.loss_sum");
  position.history = saved.history("history.size", history_fields());
  if (identity.model.experts > 0) load_experts(saved, position);
  return position;
}

SavedModel read_saved_model(const fs::path& dir) {
  try {
    const StateDict<float> state =
        load_state_directory<float>(dir, k_max_array_bytes, "train_gpt --generate");
    const auto integer = [&](const std::string& key) {
      const std::int64_t v = training::required(state.integers, "extra." + key, k_program);
      if (v < 0) throw std::invalid_argument("'extra." + key + "' is negative");
      return static_cast<std::size_t>(v);
    };
    SavedModel saved;
    saved.options.n_layer = integer("model.n_layer");
    saved.options.n_head = integer("model.n_head");
    saved.options.n_embd = integer("model.n_embd");
    saved.options.block_size = integer("model.block_size");
    saved.options.dropout = training::required(state.reals, "extra.model.dropout", k_program);
    if (state.integers.count("extra.model.experts") >
        0) {  // absent: an earlier version's dense run
      saved.options.experts = integer("model.experts");
      if (saved.options.experts > 0) {
        saved.options.experts_per_token = integer("model.experts_per_token");
        saved.options.expert_hidden = integer("model.expert_hidden");
        saved.options.aux_loss_coef =
            training::required(state.reals, "extra.model.aux_loss_coef", k_program);
      }
    }
    saved.step = integer("step");
    const std::size_t size = integer(k_vocab_size);
    std::vector<char32_t> points;
    for (std::size_t i = 0; i < size; ++i)
      points.push_back(static_cast<char32_t>(integer("vocab." + std::to_string(i))));
    saved.vocab = Vocabulary::from_code_points(std::move(points));
    return saved;
  } catch (const std::exception& e) {
    throw std::invalid_argument("--generate '" + dir.string() + "': " + e.what());
  }
}

}  // namespace gpt_demo
