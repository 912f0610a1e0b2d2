#pragma once
// TensorDict<T>: a module's state dict, as torch.nn.Module.state_dict()
// returns it: the parameters' values by their dotted names ("w1.weight"), in
// the order of named_parameters() (torch's OrderedDict order), with lookup by
// name. Values are copies: changing the dict does not change the module.
//
// IncompatibleKeys: what load_state_dict(dict, strict = false) reports, as
// torch's _IncompatibleKeys: the module's parameters the dict lacks
// (missing_keys, in the module's order) and the dict's names the module does
// not have (unexpected_keys, in the dict's order).

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../engine/errors.hpp"

namespace xtgrad {

template <class T>
class TensorDict {
 public:
  using Entry = std::pair<std::string, xt::xarray<T>>;

  // Appends `name`; std::invalid_argument when it is already there.
  void insert(std::string name, xt::xarray<T> value) {
    if (!index_.emplace(name, entries_.size()).second)
      detail::fail_argument("TensorDict::insert", "name",
                            detail::quoted(detail::escaped(name, 200)) + " is already in the dict");
    entries_.emplace_back(std::move(name), std::move(value));
  }

  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // The value of `name`; std::invalid_argument naming it when it is absent.
  const xt::xarray<T>& at(const std::string& name) const { return entries_[position(name)].second; }
  xt::xarray<T>& at(const std::string& name) { return entries_[position(name)].second; }

  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // The names, in order.
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.first);
    return out;
  }
  // Iteration in order, over (name, value) pairs; names cannot be changed.
  typename std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  typename std::vector<Entry>::const_iterator end() const { return entries_.end(); }

 private:
  std::size_t position(const std::string& name) const {
    const auto found = index_.find(name);
    if (found == index_.end())
      detail::fail_argument("TensorDict::at", "name",
                            detail::quoted(detail::escaped(name, 200)) + " is not in the dict");
    return found->second;
  }

  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
};

struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

}  // namespace xtgrad
