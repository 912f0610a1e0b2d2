#include "module.hpp"

#include <algorithm>
#include <set>

#include "../engine/errors.hpp"
#include "../io/checkpoint.hpp"
#include "safetensors_checkpoint.hpp"

namespace xtgrad {

namespace fs = std::filesystem;

template <class T>
typename Module<T>::NamedParameters Module<T>::named_parameters() {
  NamedParameters out;
  collect_parameters("", out);
  std::set<std::string> seen;
  for (const auto& entry : out)
    if (!seen.insert(entry.first).second)
      detail::fail_logic("Module::named_parameters",
                         "duplicate parameter name " + detail::quoted(entry.first) +
                             "; give every parameter and child module a distinct name");
  return out;
}

template <class T>
std::vector<std::pair<std::string, const Parameter<T>*>> Module<T>::named_parameters() const {
  // collect_parameters only takes addresses; calling it through const_cast
  // never modifies *this.
  const NamedParameters all = const_cast<Module<T>*>(this)->named_parameters();
  return {all.begin(), all.end()};
}

template <class T>
std::vector<Parameter<T>*> Module<T>::parameters() {
  std::vector<Parameter<T>*> out;
  for (const auto& entry : named_parameters()) out.push_back(entry.second);
  return out;
}

template <class T>
typename Module<T>::NamedModules Module<T>::named_modules() {
  NamedModules modules{{"", this}};
  NamedParameters listing;
  listing.on_child = [&modules](const std::string& name, Module<T>& child) {
    modules.emplace_back(name, &child);
  };
  collect_parameters("", listing);
  return modules;
}

template <class T>
Module<T>& Module<T>::train(bool mode) {
  for (const auto& entry : named_modules()) entry.second->training_ = mode;
  return *this;
}

template <class T>
void Module<T>::zero_grad() {
  for (Parameter<T>* p : parameters()) p->zero_grad();
}

template <class T>
Var<T> Module<T>::forward(const Var<T>&) {
  detail::fail_logic("Module::forward",
                     "this module does not define forward(x); override it to call the module "
                     "(or infer) on one tensor");
}

template <class T>
xt::xarray<T> Module<T>::infer(const xt::xarray<T>& x) const {
  const detail::InferenceScope inference;
  Tape<T> tape;
  tape.set_grad_enabled(false);
  // forward only reads the Parameters when recording is off (Tape::param
  // touches no gradient then), so calling it through const_cast is safe.
  const Var<T> y = const_cast<Module<T>*>(this)->forward(tape.leaf(x, false));
  return std::move(tape.value_mut(y.index()));
}

template <class T>
void Module<T>::add_parameter(const std::string& prefix, Parameter<T>& p, NamedParameters& out) {
  out.emplace_back(prefix + p.name, &p);
}

template <class T>
void Module<T>::add_child(const std::string& prefix, const std::string& child_name,
                          Module<T>& child, NamedParameters& out) {
  if (out.on_child) out.on_child(prefix + child_name, child);
  child.collect_parameters(prefix + child_name + ".", out);
}

template <class T>
ModuleConfig Module<T>::config() const {
  return children_config("Module");
}

template <class T>
ModuleConfig Module<T>::children_config(std::string type) const {
  // The direct children are those add_child reports that are not inside the
  // child reported before them (the listing is pre-order).
  ModuleConfig out(std::move(type));
  std::string last;
  NamedParameters listing;
  listing.on_child = [&](const std::string& name, Module<T>& child) {
    if (!last.empty() && name.rfind(last + ".", 0) == 0) return;
    last = name;
    out.children.emplace_back(name, child.checkpoint_config());
  };
  listing.on_option = [&](const std::string& prefix, const std::string& key,
                          const std::string& value) {
    if (prefix.empty()) out.options.emplace_back(key, value);
  };
  // collect_parameters only takes addresses (see named_parameters() const).
  const_cast<Module<T>*>(this)->collect_parameters("", listing);
  return out;
}

template <class T>
std::vector<std::pair<std::string, std::string>> Module<T>::registered_options() const {
  std::vector<std::pair<std::string, std::string>> options;
  NamedParameters listing;
  listing.on_option = [&](const std::string& prefix, const std::string& key,
                          const std::string& value) {
    if (prefix.empty()) options.emplace_back(key, value);
  };
  const_cast<Module<T>*>(this)->collect_parameters("", listing);
  return options;
}

template <class T>
ModuleConfig Module<T>::checkpoint_config() const {
  ModuleConfig out = config();
  for (auto& option : registered_options()) {
    const auto same_key = [&](const auto& listed) { return listed.first == option.first; };
    if (std::none_of(out.options.begin(), out.options.end(), same_key))
      out.options.push_back(std::move(option));
  }
  return out;
}

namespace {
bool is_safetensors_path(const fs::path& path) {
  return path.extension() == ".safetensors";
}
}  // namespace

template <class T>
void Module<T>::save(const fs::path& path) const {
  if (is_safetensors_path(path))
    save_safetensors_checkpoint(path, *this);
  else
    save_checkpoint(path, named_parameters(), "Module::save", checkpoint_config());
}

template <class T>
void Module<T>::load(const fs::path& path) {
  if (is_safetensors_path(path))
    load_safetensors_checkpoint(path, *this, "Module::load");
  else
    load_checkpoint(path, named_parameters(), "Module::load", checkpoint_config());
}

template class Module<float>;
template class Module<double>;

}  // namespace xtgrad
