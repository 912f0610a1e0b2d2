// Module::state_dict and Module::load_state_dict, and the loading rules they
// share with the checkpoints (state_loading.hpp). The rules and messages are
// torch.nn.Module.load_state_dict's (torch/nn/modules/module.py,
// _load_from_state_dict and load_state_dict).
#include "state_loading.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "../engine/errors.hpp"

namespace xtgrad {

namespace detail {

namespace {

// At most this many names are listed in one message.
constexpr std::size_t k_max_listed = 50;

std::string key_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < k_max_listed; ++i)
    out += (i ? ", \"" : "\"") + escaped(names[i], 200) + "\"";
  if (names.size() > k_max_listed) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

template <class T>
std::vector<std::size_t> shape_of(const SourceTensor<T>& s) {
  if (s.value) return {s.value->shape().begin(), s.value->shape().end()};
  if (s.declared) return s.declared->shape;
  return s.stored->shape();
}

// Whether a source held in a file holds float64 values.
template <class T>
bool holds_double(const SourceTensor<T>& s) {
  if (s.declared) return s.declared->dtype == SafetensorsDtype::F64;
  return s.stored->template holds<double>();
}

// The dtype of a source as messages name it.
template <class T>
std::string dtype_of(const SourceTensor<T>& s) {
  if (s.value) return sizeof(T) == 4 ? "float32" : "float64";
  return std::string(safetensors_dtype_name(s.declared ? s.declared->dtype : s.stored->dtype())) +
         (holds_double(s) ? " (float64)" : " (float32)");
}

// The value as T: a copy, or a conversion (stored_as).
template <class T>
xt::xarray<T> value_of(const SourceTensor<T>& s) {
  if (s.value) return *s.value;
  return stored_as<T>(*s.stored);
}

}  // namespace

// torch's copy_: a float64 to float32 cast rounds to nearest; float32 to
// float64 is exact.
template <class T>
xt::xarray<T> stored_as(const StoredTensor& stored) {
  if (stored.holds<T>()) return stored.get<T>();
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  const xt::xarray<Other>& other = stored.get<Other>();
  xt::xarray<T> out = xt::xarray<T>::from_shape(other.shape());
  std::transform(other.data(), other.data() + other.size(), out.data(),
                 [](Other v) { return static_cast<T>(v); });
  return out;
}

template xt::xarray<float> stored_as(const StoredTensor&);
template xt::xarray<double> stored_as(const StoredTensor&);

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A line for a checkpoint whose gpt2-style MLP has the names GPT had before
// they were GPT-2's (an unexpected "...mlp.w1.weight" where "...mlp.c_fc.weight"
// is missing), saying how to load it; "" otherwise.
std::string legacy_gpt2_mlp_hint(const IncompatibleKeys& keys) {
  for (const std::string& name : keys.unexpected_keys) {
    if (!ends_with(name, "mlp.w1.weight")) continue;
    const std::string current = name.substr(0, name.size() - 9) + "c_fc.weight";
    for (const std::string& missing : keys.missing_keys)
      if (missing == current)
        return "\n\t\"" + escaped(name, 200) +
               "\" is the gpt2-style MLP's former name (nn.Linear [out, in]); it is now \"" +
               escaped(current, 200) + "\"" +
               " (GPT-2's Conv1D [in, out]): load rename_legacy_gpt2_mlp(state) instead "
               "(modules/gpt2_mlp.hpp).";
  }
  return "";
}

// The checks: throws naming every mismatch, else the source matched to each
// parameter (nullptr: missing) and the missing and unexpected names.
template <class T>
std::vector<const SourceTensor<T>*> match_sources(
    const std::string& function, const std::string& type,
    const std::vector<std::pair<std::string, Parameter<T>*>>& params,
    const std::vector<SourceTensor<T>>& sources, bool strict, DtypeRule rule,
    IncompatibleKeys& keys) {
  std::map<std::string, const SourceTensor<T>*> by_name;
  for (const SourceTensor<T>& s : sources) by_name.emplace(s.name, &s);
  std::set<std::string> param_names;
  std::vector<std::string> errors;
  std::vector<const SourceTensor<T>*> matched(params.size(), nullptr);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    param_names.insert(name);
    const auto found = by_name.find(name);
    if (found == by_name.end() ||
        (!found->second->value && !found->second->stored && !found->second->declared)) {
      keys.missing_keys.push_back(name);
      continue;
    }
    const SourceTensor<T>& s = *found->second;
    const std::vector<std::size_t> shape = shape_of(s);
    if (!std::equal(shape.begin(), shape.end(), p->value.shape().begin(), p->value.shape().end())) {
      errors.push_back("size mismatch for " + escaped(name, 200) + ": copying a param with shape " +
                       shape_str(shape) + " from checkpoint, the shape in current model is " +
                       shape_str(p->value.shape()) + ".");
      continue;
    }
    if (rule == DtypeRule::exact && !s.value && holds_double(s) != (sizeof(T) == 8)) {
      errors.push_back("dtype mismatch for " + escaped(name, 200) + ": the checkpoint holds " +
                       dtype_of(s) + ", the parameter in current model is " +
                       (sizeof(T) == 4 ? "float32" : "float64") +
                       "; a checkpoint is not converted between float32 and float64 (load it "
                       "with load_state_dict to convert).");
      continue;
    }
    matched[i] = &s;
  }
  for (const SourceTensor<T>& s : sources)
    if (param_names.count(s.name) == 0) keys.unexpected_keys.push_back(s.name);
  if (strict) {
    if (!keys.unexpected_keys.empty())
      errors.insert(errors.begin(),
                    "Unexpected key(s) in state_dict: " + key_list(keys.unexpected_keys) + ". ");
    if (!keys.missing_keys.empty())
      errors.insert(errors.begin(),
                    "Missing key(s) in state_dict: " + key_list(keys.missing_keys) + ". ");
  }
  if (!errors.empty()) {
    std::string what = "Error(s) in loading state_dict for " + escaped(type, 200) + ":";
    for (const std::string& e : errors) what += "\n\t" + e;
    what += legacy_gpt2_mlp_hint(keys);
    fail_value(function, what);
  }
  return matched;
}

}  // namespace

template <class T>
IncompatibleKeys check_sources(const std::string& function, const std::string& type,
                               const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                               const std::vector<SourceTensor<T>>& sources, bool strict,
                               DtypeRule rule) {
  IncompatibleKeys keys;
  match_sources(function, type, params, sources, strict, rule, keys);
  return keys;
}

template <class T>
IncompatibleKeys load_sources(const std::string& function, const std::string& type,
                              const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                              const std::vector<SourceTensor<T>>& sources, bool strict,
                              DtypeRule rule) {
  IncompatibleKeys keys;
  const std::vector<const SourceTensor<T>*> matched =
      match_sources(function, type, params, sources, strict, rule, keys);
  // Every check has passed: convert, then assign (a conversion cannot fail
  // half-way through the assignments).
  std::vector<xt::xarray<T>> values(params.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    if (matched[i]) values[i] = value_of(*matched[i]);
  for (std::size_t i = 0; i < params.size(); ++i)
    if (matched[i]) params[i].second->set_value(std::move(values[i]));
  return keys;
}

template IncompatibleKeys check_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<float>*>>&,
    const std::vector<SourceTensor<float>>&, bool, DtypeRule);
template IncompatibleKeys check_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<double>*>>&,
    const std::vector<SourceTensor<double>>&, bool, DtypeRule);
template IncompatibleKeys load_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<float>*>>&,
    const std::vector<SourceTensor<float>>&, bool, DtypeRule);
template IncompatibleKeys load_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<double>*>>&,
    const std::vector<SourceTensor<double>>&, bool, DtypeRule);

}  // namespace detail

namespace {
constexpr char k_load_state_dict[] = "Module::load_state_dict";
}  // namespace

template <class T>
TensorDict<T> Module<T>::state_dict() const {
  TensorDict<T> out;
  for (const auto& [name, p] : named_parameters()) out.insert(name, p->value);
  return out;
}

template <class T>
IncompatibleKeys Module<T>::load_state_dict(const TensorDict<T>& dict, bool strict) {
  std::vector<detail::SourceTensor<T>> sources;
  for (const auto& [name, value] : dict) sources.push_back({name, &value, nullptr});
  const NamedParameters named = named_parameters();
  return detail::load_sources<T>(k_load_state_dict, config().type, {named.begin(), named.end()},
                                 sources, strict, detail::DtypeRule::convert);
}

template <class T>
IncompatibleKeys Module<T>::load_state_dict(const std::map<std::string, StoredTensor>& tensors,
                                            bool strict) {
  std::vector<detail::SourceTensor<T>> sources;
  for (const auto& [name, tensor] : tensors) sources.push_back({name, nullptr, &tensor});
  const NamedParameters named = named_parameters();
  return detail::load_sources<T>(k_load_state_dict, config().type, {named.begin(), named.end()},
                                 sources, strict, detail::DtypeRule::convert);
}

template <class T>
IncompatibleKeys Module<T>::load_state_dict(const Safetensors& file, bool strict) {
  return load_state_dict(file.tensors, strict);
}

template TensorDict<float> Module<float>::state_dict() const;
template TensorDict<double> Module<double>::state_dict() const;
template IncompatibleKeys Module<float>::load_state_dict(const TensorDict<float>&, bool);
template IncompatibleKeys Module<double>::load_state_dict(const TensorDict<double>&, bool);
template IncompatibleKeys Module<float>::load_state_dict(const std::map<std::string, StoredTensor>&,
                                                         bool);
template IncompatibleKeys Module<double>::load_state_dict(
    const std::map<std::string, StoredTensor>&, bool);
template IncompatibleKeys Module<float>::load_state_dict(const Safetensors&, bool);
template IncompatibleKeys Module<double>::load_state_dict(const Safetensors&, bool);

}  // namespace xtgrad
