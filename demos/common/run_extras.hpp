#pragma once
// What train_fashion and train_gpt share in saving and resuming a run: the
// loop's own values kept as TrainingExtras (training/training_state.hpp)
// beside the model, the optimizer and the schedule.
//
//   seed_bits(seed)          a uint64 seed as the int64 of the same bits
//   as_integer(n)            a size as int64
//   history_key(i, field)    "history.<i>.<field>": one field of record i
//   required(map, key, who)  map[key], or std::invalid_argument
//                            "not a <who> run: no '<key>'"
//   option_mismatch(...)     "saved with --batch-size 128, this run has 64"
//                            for the key "option.batch_size"
//   save_dropout_steps / restore_dropout_steps: every Dropout module's step
//                            (by its name in named_modules) under
//                            "dropout_step.<name>": the masks still to come

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include <xtgrad/modules/dropout.hpp>
#include <xtgrad/training/training_state.hpp>

namespace demos {

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

void save_dropout_steps(xtgrad::Module<float>& model, xtgrad::TrainingExtras& extras);
// std::invalid_argument "not a <program> run: ..." when a step is missing.
void restore_dropout_steps(xtgrad::Module<float>& model, const xtgrad::TrainingExtras& saved,
                           const std::string& program);

}  // namespace demos
