#include "training_state.hpp"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "../engine/errors.hpp"
#include "../io/checkpoint.hpp"
#include "../io/state_directory.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
constexpr char k_load[] = "load_training_state";
constexpr char k_save[] = "save_training_state";

// Copies every entry of `part` into `out` under "<prefix>.".
template <class T>
void add_prefixed(StateDict<T>& out, const std::string& prefix, StateDict<T> part) {
  for (auto& [k, v] : part.arrays) out.arrays.emplace(prefix + "." + k, std::move(v));
  for (auto& [k, v] : part.integers) out.integers.emplace(prefix + "." + k, v);
  for (auto& [k, v] : part.reals) out.reals.emplace(prefix + "." + k, v);
  for (auto& [k, v] : part.strings) out.strings.emplace(prefix + "." + k, std::move(v));
}

// Splits `all` by the prefix before the first '.'; an unknown prefix is refused.
template <class T>
struct Parts {
  StateDict<T> model, optimizer, scheduler, extra;
};

template <class T>
Parts<T> split(StateDict<T> all, const fs::path& dir, const char* fn = k_load) {
  Parts<T> parts;
  const auto part_of = [&](const std::string& key, std::string& rest) -> StateDict<T>& {
    const std::size_t dot = key.find('.');
    const std::string prefix = key.substr(0, dot);
    rest = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (!rest.empty()) {
      if (prefix == "model") return parts.model;
      if (prefix == "optimizer") return parts.optimizer;
      if (prefix == "scheduler") return parts.scheduler;
      if (prefix == "extra") return parts.extra;
    }
    detail::fail_value(fn, "entry " + detail::quoted(detail::escaped(key, 200)) + " of " +
                               detail::quoted(dir.string()) +
                               " does not start with model., optimizer., scheduler. or extra.");
  };
  std::string rest;
  for (auto& [k, v] : all.arrays) {
    StateDict<T>& part = part_of(k, rest);
    part.arrays.emplace(rest, std::move(v));
  }
  for (auto& [k, v] : all.integers) {
    StateDict<T>& part = part_of(k, rest);
    part.integers.emplace(rest, v);
  }
  for (auto& [k, v] : all.reals) {
    StateDict<T>& part = part_of(k, rest);
    part.reals.emplace(rest, v);
  }
  for (auto& [k, v] : all.strings) {
    StateDict<T>& part = part_of(k, rest);
    part.strings.emplace(rest, std::move(v));
  }
  return parts;
}

// The model's config, as the string "model.config" (absent in directories
// written before configs were recorded).
constexpr char k_config_entry[] = "config";

// The model's part: its config when recorded, and exactly its parameter
// names, each with its shape.
template <class T>
void check_model_part(const std::string& fn, const StateDict<T>& part, Module<T>& model,
                      const fs::path& dir) {
  const std::string where = "the training state " + detail::quoted(dir.string());
  const bool config_only =
      part.strings.empty() || (part.strings.size() == 1 && part.strings.count(k_config_entry) == 1);
  if (!part.integers.empty() || !part.reals.empty() || !config_only)
    detail::fail_value(fn, where + " has model entries that are not arrays");
  if (!part.strings.empty()) {
    const ModuleConfig stored =
        parse_module_config(part.strings.at(k_config_entry), fn, where + " 'model.config'");
    const ModuleConfig mine = model.checkpoint_config();
    if (stored != mine) fail_config_mismatch(fn, where, stored, mine);
  }
  const auto named = model.named_parameters();
  for (const auto& [name, p] : named) {
    const auto it = part.arrays.find(name);
    if (it == part.arrays.end())
      detail::fail_value(fn, where + " has no array 'model." + name +
                                 "' for the model's parameter " + detail::quoted(name));
    const auto& got = it->second.shape();
    const auto& want = p->value.shape();
    if (got.size() != want.size() || !std::equal(got.begin(), got.end(), want.begin()))
      detail::fail_value(fn, where + ": 'model." + name + "' has shape " + detail::shape_str(got) +
                                 ", the model expects " + detail::shape_str(want));
  }
  if (part.arrays.size() != named.size())
    for (const auto& stored : part.arrays) {
      const std::string& name = stored.first;  // (a lambda cannot capture a structured binding)
      const bool known = std::any_of(named.begin(), named.end(),
                                     [&](const auto& entry) { return entry.first == name; });
      if (!known)
        detail::fail_value(fn, where + " has the array " +
                                   detail::quoted("model." + detail::escaped(name, 200)) +
                                   ", not a parameter of the model");
    }
}

// A value and at most three state buffers per parameter.
template <class T>
std::size_t array_limit(const Module<T>& model, const optim::Optimizer<T>& optimizer) {
  constexpr std::size_t k_buffers_per_parameter = 3;
  std::size_t elements = 0;
  for (const auto& [name, p] : model.named_parameters()) elements += p->value.size();
  for (const Parameter<T>* p : optimizer.parameters())
    elements += k_buffers_per_parameter * p->value.size();
  return elements * sizeof(T);
}

}  // namespace

template <class T>
void save_training_state(const fs::path& dir, const Module<T>& model,
                         const optim::Optimizer<T>& optimizer,
                         const detail::SchedulerArg<T>* scheduler, const TrainingExtras& extras) {
  StateDict<T> all;
  StateDict<T> model_part;
  for (const auto& [name, p] : model.named_parameters()) model_part.arrays.emplace(name, p->value);
  model_part.strings.emplace(k_config_entry, to_json(model.checkpoint_config()));
  add_prefixed(all, "model", std::move(model_part));
  add_prefixed(all, "optimizer", optimizer.state_dict());
  if (scheduler != nullptr) add_prefixed(all, "scheduler", scheduler->state_dict());
  StateDict<T> extra_part;
  extra_part.integers = extras.integers;
  extra_part.reals = extras.reals;
  add_prefixed(all, "extra", std::move(extra_part));
  save_state_directory(dir, all, k_save);
}

template <class T>
TrainingExtras load_training_state(const fs::path& dir, Module<T>& model,
                                   optim::Optimizer<T>& optimizer,
                                   detail::SchedulerArg<T>* scheduler) {
  Parts<T> parts = split(load_state_directory<T>(dir, array_limit(model, optimizer), k_load), dir);
  const std::string where = "the training state " + detail::quoted(dir.string());
  // Every check first: nothing changes unless all three parts fit.
  check_model_part(k_load, parts.model, model, dir);
  optimizer.check_state_dict(parts.optimizer);
  if (scheduler != nullptr && parts.scheduler.empty())
    detail::fail_value(k_load, where + " holds no schedule state, but a " + scheduler->name() +
                                   " was given to load it into");
  if (scheduler == nullptr && !parts.scheduler.empty())
    detail::fail_value(k_load, where + " holds the state of a schedule, but none was given");
  if (scheduler != nullptr) scheduler->check_state_dict(parts.scheduler);
  if (!parts.extra.arrays.empty() || !parts.extra.strings.empty())
    detail::fail_value(k_load, where + " has extra entries that are not int64 or float64 scalars");

  for (const auto& [name, p] : model.named_parameters())
    p->set_value(std::move(parts.model.arrays.at(name)));
  optimizer.load_state_dict(parts.optimizer);
  if (scheduler != nullptr) scheduler->load_state_dict(parts.scheduler);
  return {std::move(parts.extra.integers), std::move(parts.extra.reals)};
}

template <class T>
void load_model_from_training_state(const fs::path& dir, Module<T>& model) {
  constexpr char k_fn[] = "load_model_from_training_state";
  std::size_t elements = 0;
  for (const auto& [name, p] : model.named_parameters()) elements += p->value.size();
  constexpr std::size_t k_arrays_per_parameter = 4;  // a value and at most three state buffers
  Parts<T> parts = split(
      load_state_directory<T>(dir, k_arrays_per_parameter * elements * sizeof(T), k_fn), dir, k_fn);
  check_model_part(k_fn, parts.model, model, dir);
  for (const auto& [name, p] : model.named_parameters())
    p->set_value(std::move(parts.model.arrays.at(name)));
}

template void save_training_state(const fs::path&, const Module<float>&,
                                  const optim::Optimizer<float>&, const optim::LRScheduler<float>*,
                                  const TrainingExtras&);
template void save_training_state(const fs::path&, const Module<double>&,
                                  const optim::Optimizer<double>&,
                                  const optim::LRScheduler<double>*, const TrainingExtras&);
template TrainingExtras load_training_state(const fs::path&, Module<float>&,
                                            optim::Optimizer<float>&, optim::LRScheduler<float>*);
template TrainingExtras load_training_state(const fs::path&, Module<double>&,
                                            optim::Optimizer<double>&, optim::LRScheduler<double>*);
template void load_model_from_training_state(const fs::path&, Module<float>&);
template void load_model_from_training_state(const fs::path&, Module<double>&);

}  // namespace xtgrad
