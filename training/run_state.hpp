#pragma once
// training::save_run and resume_run: a program's training run saved to and
// resumed from one training-state directory (training_state.hpp, written
// atomically: a failed save leaves the previous one whole) with the model, the optimizer, the schedule and the
// loop's own values as TrainingExtras: the options that fix the run's
// numbers (its identity, checked on resume), its position (the step, the
// history) and every Dropout module's step (by its name in named_modules:
// the masks still to come). So a run resumed after step k continues bit for
// bit as the uninterrupted run would have. Under mpirun with --zero 1|2 the
// optimizer given is the consolidated one (training/training_optimizer.hpp):
// the directory is the same as without.
//
//   seed_bits(seed)          a uint64 seed as the int64 of the same bits
//   as_integer(n)            a size as int64
//   required(map, key, who)  map[key], or std::invalid_argument
//                            "not a <who> run: no '<key>'"
//   option_mismatch(...)     "saved with --batch-size 128, this run has 64"
//                            for the key "option.batch_size"
//   HistoryFields            the fields of a history record, saved as
//                            "history.<i>.<field>" (and write_history_csv)
//   position_extras(...)     the identity, the step and the history to save
//   save_sizes(extras, p, v) a list of sizes as "<p>0", "<p>1", ...
//                            (SavedRun::sizes reads it back)
// The messages speak of the command-line options such a program has
// (--resume DIR, --batch-size for "option.batch_size").

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../modules/module.hpp"
#include "../optim/lr_scheduler.hpp"
#include "../optim/optimizer.hpp"
#include "training_state.hpp"

namespace xtgrad::training {

// The fields of a history record R (one record of a saved run, one row of
// a program's history.csv): sizes, then reals, by name.
template <class R>
struct HistoryFields {
  std::vector<std::pair<const char*, std::size_t R::*>> sizes;
  std::vector<std::pair<const char*, double R::*>> reals;
};

std::int64_t seed_bits(std::uint64_t seed);

inline std::int64_t as_integer(std::size_t v) {
  return static_cast<std::int64_t>(v);
}

std::string history_key(std::size_t i, const char* field);

template <class Map>
auto required(const Map& map, const std::string& key, const std::string& program) {
  const auto it = map.find(key);
  if (it == map.end()) throw std::invalid_argument("not a " + program + " run: no '" + key + "'");
  return it->second;
}

// The option is the key after its first '.', with '_' written '-'.
template <class V>
std::invalid_argument option_mismatch(const std::string& key, V saved, V now) {
  std::string option = key.substr(key.find('.') + 1);
  for (char& c : option)
    if (c == '_') c = '-';
  std::ostringstream message;
  message << "saved with --" << option << " " << saved << ", this run has " << now;
  return std::invalid_argument(message.str());
}

// Writes `history` into `extras`, its length under `count_key`.
template <class R>
void save_history(TrainingExtras& extras, const std::string& count_key,
                  const std::vector<R>& history, const HistoryFields<R>& fields) {
  extras.integers[count_key] = as_integer(history.size());
  for (std::size_t i = 0; i < history.size(); ++i) {
    for (const auto& [name, field] : fields.sizes)
      extras.integers[history_key(i, name)] = as_integer(history[i].*field);
    for (const auto& [name, field] : fields.reals)
      extras.reals[history_key(i, name)] = history[i].*field;
  }
}

// What a loop saves after a step: `identity` with the run's position, the
// step done as "step" and `history` (save_history under `count_key`).
template <class R>
TrainingExtras position_extras(TrainingExtras identity, std::size_t step,
                               const std::string& count_key, const std::vector<R>& history,
                               const HistoryFields<R>& fields) {
  identity.integers["step"] = as_integer(step);
  save_history(identity, count_key, history, fields);
  return identity;
}

// Writes `values` into `extras` as "<prefix><j>", j from 0.
void save_sizes(TrainingExtras& extras, const std::string& prefix,
                const std::vector<std::size_t>& values);

template <class R>
std::vector<R> load_history(const TrainingExtras& saved, const std::string& count_key,
                            const HistoryFields<R>& fields, const std::string& program) {
  std::vector<R> history;
  const std::int64_t records = required(saved.integers, count_key, program);
  for (std::int64_t k = 0; k < records; ++k) {
    const auto i = static_cast<std::size_t>(k);
    R r;
    for (const auto& [name, field] : fields.sizes)
      r.*field = static_cast<std::size_t>(required(saved.integers, history_key(i, name), program));
    for (const auto& [name, field] : fields.reals)
      r.*field = required(saved.reals, history_key(i, name), program);
    history.push_back(r);
  }
  return history;
}

// Writes `text` to `file` (truncated); std::runtime_error "cannot write
// '<file>'" when it cannot be opened or written.
void write_text_file(const std::filesystem::path& file, const std::string& text);

// history.csv, as Keras's CSVLogger writes one: a header of the fields'
// names, then one row per record, the reals to the last bit (%.17g) but
// "seconds" (%.3f). std::runtime_error "cannot write '<file>'" on failure.
template <class R>
void write_history_csv(const std::filesystem::path& file, const std::vector<R>& history,
                       const HistoryFields<R>& fields) {
  std::string text, line;
  for (const auto& [name, field] : fields.sizes)
    line += (line.empty() ? "" : ",") + std::string(name);
  for (const auto& [name, field] : fields.reals)
    line += (line.empty() ? "" : ",") + std::string(name);
  text += line + "\n";
  char cell[64];
  for (const R& r : history) {
    line.clear();
    for (const auto& [name, field] : fields.sizes)
      line += (line.empty() ? "" : ",") + std::to_string(r.*field);
    for (const auto& [name, field] : fields.reals) {
      std::snprintf(cell, sizeof cell, std::string(name) == "seconds" ? "%.3f" : "%.17g", r.*field);
      line += (line.empty() ? "" : ",") + std::string(cell);
    }
    text += line + "\n";
  }
  write_text_file(file, text);
}

// `e` as "--resume '<dir>': <what>".
[[noreturn]] void rethrow_resume_error(const std::filesystem::path& dir,
                                       const std::invalid_argument& e);

// The extras of a resumed run, read by key: a missing one throws
// std::invalid_argument "--resume '<dir>': not a <program> run: no '<key>'".
struct SavedRun {
  TrainingExtras extras;
  std::filesystem::path dir;
  std::string program;

  std::size_t size(const std::string& key) const;
  double real(const std::string& key) const;
  // The `count` sizes save_sizes wrote under `prefix`.
  std::vector<std::size_t> sizes(const std::string& prefix, std::size_t count) const;
  template <class R>
  std::vector<R> history(const std::string& count_key, const HistoryFields<R>& fields) const {
    try {
      return load_history(extras, count_key, fields, program);
    } catch (const std::invalid_argument& e) {
      rethrow_resume_error(dir, e);
    }
  }
};

// Saves the run: `extras` (identity and position) and the dropout steps
// beside the model, the optimizer and the schedule.
void save_run(const std::filesystem::path& dir, Module<float>& model,
              const optim::Optimizer<float>& optimizer, const optim::LRScheduler<float>& schedule,
              TrainingExtras extras);

// The step of resume_run after the load.
void restore_dropout_steps(Module<float>& model, const TrainingExtras& saved,
                           const std::string& program);

// Loads the saved state into `model`, `optimizer` and `schedule` (built as
// for the first run), checks that every entry of `identity` was saved with
// the same value (the entry `first_key`, when given, first; a difference
// throws mismatch(key, saved, now)), restores the dropout steps and returns
// the saved extras. Every std::invalid_argument is rethrown as "--resume
// '<dir>': <what>".
template <class Mismatch>
TrainingExtras resume_run(const std::filesystem::path& dir, Module<float>& model,
                          optim::Optimizer<float>& optimizer, optim::LRScheduler<float>& schedule,
                          const TrainingExtras& identity, const std::string& program,
                          Mismatch mismatch, const std::string& first_key = "") {
  try {
    // The model, optimizer and schedule are loaded together (all or nothing);
    // the options are checked right after, before training starts.
    TrainingExtras saved = load_training_state(dir, model, optimizer, &schedule);
    const auto check = [&](const auto& now, const auto& was, const std::string& key) {
      if (required(was, key, program) != now.at(key)) throw mismatch(key, was.at(key), now.at(key));
    };
    if (!first_key.empty()) check(identity.integers, saved.integers, first_key);
    for (const auto& entry : identity.integers)
      check(identity.integers, saved.integers, entry.first);
    for (const auto& entry : identity.reals) check(identity.reals, saved.reals, entry.first);
    restore_dropout_steps(model, saved, program);
    return saved;
  } catch (const std::invalid_argument& e) {
    rethrow_resume_error(dir, e);
  }
}

}  // namespace xtgrad::training
