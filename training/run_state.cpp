// The helpers of run_state.hpp.

#include "run_state.hpp"

#include <cstring>
#include <fstream>

#include "../modules/dropout.hpp"

namespace xtgrad::training {

namespace {

constexpr const char* k_dropout_prefix = "dropout_step.";

}  // namespace

std::int64_t seed_bits(std::uint64_t seed) {
  std::int64_t out = 0;
  std::memcpy(&out, &seed, sizeof out);  // every seed, exactly
  return out;
}

std::string history_key(std::size_t i, const char* field) {
  return "history." + std::to_string(i) + "." + field;
}

void save_run(const std::filesystem::path& dir, Module<float>& model,
              const optim::Optimizer<float>& optimizer, const optim::LRScheduler<float>& schedule,
              TrainingExtras extras) {
  for (auto& [name, module] : model.named_modules())
    if (const auto* dropout = dynamic_cast<const Dropout<float>*>(module))
      extras.integers[k_dropout_prefix + name] = as_integer(dropout->step());
  save_training_state(dir, model, optimizer, &schedule, extras);
}

void restore_dropout_steps(Module<float>& model, const TrainingExtras& saved,
                           const std::string& program) {
  for (auto& [name, module] : model.named_modules())
    if (auto* dropout = dynamic_cast<Dropout<float>*>(module))
      dropout->set_step(
          static_cast<std::uint64_t>(required(saved.integers, k_dropout_prefix + name, program)));
}

std::size_t SavedRun::size(const std::string& key) const {
  try {
    return static_cast<std::size_t>(required(extras.integers, key, program));
  } catch (const std::invalid_argument& e) {
    rethrow_resume_error(dir, e);
  }
}

double SavedRun::real(const std::string& key) const {
  try {
    return required(extras.reals, key, program);
  } catch (const std::invalid_argument& e) {
    rethrow_resume_error(dir, e);
  }
}

std::vector<std::size_t> SavedRun::sizes(const std::string& prefix, std::size_t count) const {
  std::vector<std::size_t> values;
  for (std::size_t j = 0; j < count; ++j) values.push_back(size(prefix + std::to_string(j)));
  return values;
}

void save_sizes(TrainingExtras& extras, const std::string& prefix,
                const std::vector<std::size_t>& values) {
  for (std::size_t j = 0; j < values.size(); ++j)
    extras.integers[prefix + std::to_string(j)] = as_integer(values[j]);
}

void write_text_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::trunc);
  if (out) out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + file.string() + "'");
}

void rethrow_resume_error(const std::filesystem::path& dir, const std::invalid_argument& e) {
  throw std::invalid_argument("--resume '" + dir.string() + "': " + e.what());
}

}  // namespace xtgrad::training
