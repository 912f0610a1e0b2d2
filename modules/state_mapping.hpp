#pragma once
// Renaming the entries of a state dict (TensorDict<T>) or of a TensorMap (a
// safetensors file's tensors), so that a checkpoint whose module tree names
// its parameters otherwise loads with Module::load_state_dict:
//
//   strip_prefix(d, "encoder.")     the entries whose names start with
//                                   "encoder.", without it (a submodule's
//                                   state out of a model's; the others are
//                                   left out)
//   add_prefix(d, "encoder.")       every name with "encoder." in front
//   rename_keys(d, {{"a", "b"}})    exact names renamed, the others kept
//   rename_keys(d, function)        every name through `function`
//   rename_prefixes(d, rules)       a name that starts with a rule's `from`
//                                   has it replaced by its `to` (the first
//                                   rule that matches); the others kept
//
// Prefixes are used as given: "encoder" also matches "encoder2.w"; end them
// with '.' to mean a module. The result is a new dict (values copied; a
// TensorDict keeps its order, a TensorMap is ordered by name). Refused with
// std::invalid_argument "xtgrad::<function>: ...", before anything is
// built: two names renamed to one, a name renamed to "", strip_prefix of a
// prefix no name has, rename_keys of a name the dict does not have (a typo
// would otherwise leave the entry as it was, silently).
//
// Named mappings, for rename_prefixes, from PyTorch's nn.Sequential (whose
// children are named by position):
//   sequential_to_feed_forward()  nn.Sequential(Linear(d_model, d_ff), act,
//                                 Linear(d_ff, d_model)) -> FeedForward:
//                                 "0." -> "w1.", "2." -> "w2."
//   sequential_to_mlp(n)          nn.Sequential(Linear, act, Linear, act, ...,
//                                 Linear) of n Linears -> Mlp (mlp.hpp, which
//                                 follows torchvision.ops.MLP and has a
//                                 Dropout after each activation): "0." -> "0.",
//                                 "2." -> "3.", ..., "2i." -> "3i."
// An activation with parameters (nn.PReLU's "1.weight") has no counterpart
// and stays as it is, so that a strict load_state_dict reports it.
//
//   TensorMap file = read_safetensors("sequential.safetensors").tensors;
//   FeedForward<float> ffn(16, 64, Activation::relu);
//   ffn.load_state_dict(rename_prefixes(file, sequential_to_feed_forward()));

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../engine/errors.hpp"
#include "../io/safetensors.hpp"
#include "tensor_dict.hpp"

namespace xtgrad {

// (from, to) prefix pairs, tried in order.
using PrefixRules = std::vector<std::pair<std::string, std::string>>;

inline PrefixRules sequential_to_feed_forward() {
  return {{"0.", "w1."}, {"2.", "w2."}};
}

inline PrefixRules sequential_to_mlp(std::size_t num_linears) {
  detail::check_positive_size("sequential_to_mlp", "num_linears", num_linears);
  PrefixRules rules;
  for (std::size_t i = 0; i < num_linears; ++i)
    rules.emplace_back(std::to_string(2 * i) + ".", std::to_string(3 * i) + ".");
  return rules;
}

namespace detail {

template <class T>
void put_entry(TensorDict<T>& out, std::string name, const xt::xarray<T>& value) {
  out.insert(std::move(name), value);
}

inline void put_entry(TensorMap& out, std::string name, const StoredTensor& value) {
  out.emplace(std::move(name), value);
}

// Every entry of `dict` under the name `rename` gives it (nullopt: left
// out), checked for "" and for collisions before the copy is built.
template <class Dict, class F>
Dict renamed_entries(const std::string& function, const Dict& dict, F&& rename) {
  std::vector<std::optional<std::string>> names;
  std::map<std::string, std::string> seen;  // new name -> old name
  for (const auto& [name, value] : dict) {
    std::optional<std::string> to = rename(name);
    if (to && to->empty())
      fail_value(function, "renames " + quoted_escaped(name) + " to an empty name");
    if (to) {
      const auto [it, fresh] = seen.emplace(*to, name);
      if (!fresh)
        fail_value(function, "renames both " + quoted_escaped(it->second) + " and " +
                                 quoted_escaped(name) + " to " + quoted_escaped(*to));
    }
    names.push_back(std::move(to));
  }
  Dict out;
  std::size_t i = 0;
  for (const auto& [name, value] : dict)
    if (names[i++]) put_entry(out, std::move(*names[i - 1]), value);
  return out;
}

inline bool has_prefix(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace detail

template <class Dict>
Dict strip_prefix(const Dict& dict, const std::string& prefix) {
  bool any = false;
  for (const auto& entry : dict) any = any || detail::has_prefix(entry.first, prefix);
  if (!any) {
    std::string some;
    std::size_t shown = 0;
    for (const auto& entry : dict) {
      if (shown++ == 3) {
        some += ", ...";
        break;
      }
      some += (shown > 1 ? ", " : "") + detail::quoted(detail::escaped(entry.first, 200));
    }
    detail::fail_argument("strip_prefix", "prefix",
                          detail::quoted(detail::escaped(prefix, 200)) +
                              " starts no name of the dict, expected the prefix of some (it has " +
                              std::to_string(dict.size()) + " entries" +
                              (some.empty() ? "" : ": " + some) + ")");
  }
  return detail::renamed_entries("strip_prefix", dict,
                                 [&](const std::string& name) -> std::optional<std::string> {
                                   if (!detail::has_prefix(name, prefix)) return std::nullopt;
                                   return name.substr(prefix.size());
                                 });
}

template <class Dict>
Dict add_prefix(const Dict& dict, const std::string& prefix) {
  return detail::renamed_entries("add_prefix", dict, [&](const std::string& name) {
    return std::optional<std::string>(prefix + name);
  });
}

template <class Dict>
Dict rename_keys(const Dict& dict, const std::map<std::string, std::string>& names) {
  for (const auto& [from, to] : names) {
    bool found = false;
    for (const auto& entry : dict) found = found || entry.first == from;
    if (!found)
      detail::fail_argument("rename_keys", "names",
                            "renames " + detail::quoted(detail::escaped(from, 200)) +
                                ", which is not in the dict, expected names the dict has");
  }
  return detail::renamed_entries("rename_keys", dict, [&](const std::string& name) {
    const auto it = names.find(name);
    return std::optional<std::string>(it == names.end() ? name : it->second);
  });
}

template <class Dict>
Dict rename_keys(const Dict& dict, const std::function<std::string(const std::string&)>& rename) {
  if (!rename) detail::fail_argument("rename_keys", "rename", "is empty, expected a function");
  return detail::renamed_entries("rename_keys", dict, [&](const std::string& name) {
    return std::optional<std::string>(rename(name));
  });
}

template <class Dict>
Dict rename_prefixes(const Dict& dict, const PrefixRules& rules) {
  return detail::renamed_entries("rename_prefixes", dict, [&](const std::string& name) {
    for (const auto& [from, to] : rules)
      if (detail::has_prefix(name, from))
        return std::optional<std::string>(to + name.substr(from.size()));
    return std::optional<std::string>(name);
  });
}

}  // namespace xtgrad
