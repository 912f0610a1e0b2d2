#pragma once
// ModuleConfig: what a module is, as a checkpoint records it. Its type name
// ("FeedForward"), the options that fix its parameters and its forward
// (sizes, activation, biases, eps, dropout p; not seeds, steps or values), in
// the order of the constructor's arguments, and, for a container whose
// children the options do not determine (Sequential, or a module that does not
// override Module::config), the children's configs by name. Two modules with
// equal configs have the same parameter names and shapes and compute the
// same function of their parameters.
//
// Text, as messages show it (torch's module repr, one line):
//   Linear(in_features=4, out_features=8, bias=true)
//   Sequential(0=Linear(in_features=4, out_features=8, bias=true),
//   1=ActivationLayer(activation=relu))
// JSON, as checkpoints store it (every option value a string, in order):
//   {"type":"Linear","options":{"in_features":"4","out_features":"8","bias":"true"}}
//   {"type":"Sequential","options":{},"children":[["0",{"type":"Linear",...}],...]}
// Option values: sizes in decimal, booleans "true" / "false", reals as the
// shortest decimal that reads back as the same double ("1e-05", "0.1"),
// activations by name ("gelu"), absent optionals "none".
//
// It lives in io/ because it is the record a checkpoint file holds: io/
// reads, writes and compares it without knowing any module, and modules/
// (Module::config) fill it in.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace xtgrad {

struct ModuleConfig {
  std::string type;
  std::vector<std::pair<std::string, std::string>> options;
  std::vector<std::pair<std::string, ModuleConfig>> children;

  ModuleConfig() = default;
  explicit ModuleConfig(std::string type_) : type(std::move(type_)) {}

  // Appends an option; returns *this.
  ModuleConfig& add(std::string key, std::string value);
  ModuleConfig& add(std::string key, const char* value) {
    return add(std::move(key), std::string(value));
  }
  ModuleConfig& add(std::string key, std::size_t value);
  ModuleConfig& add(std::string key, bool value);
  ModuleConfig& add(std::string key, double value);

  // The text form above; names and values read from a file are shown with
  // their control characters escaped.
  std::string describe() const;

  friend bool operator==(const ModuleConfig& a, const ModuleConfig& b) {
    return a.type == b.type && a.options == b.options && a.children == b.children;
  }
  friend bool operator!=(const ModuleConfig& a, const ModuleConfig& b) { return !(a == b); }
};

// The JSON form above (compact, no whitespace, no control characters).
std::string to_json(const ModuleConfig& config);

// Parses the JSON form, written for hostile input: one object with a
// non-empty string "type", an object "options" of strings, and optionally an
// array "children" of [name, config] pairs; nothing else, no duplicate key
// or child name, at most 128 levels of JSON nesting and 1,000,000 bytes.
// std::invalid_argument "xtgrad::<function>: <where>: module config ..."
// saying what is wrong.
ModuleConfig parse_module_config(const std::string& json, const std::string& function,
                                 const std::string& where);

}  // namespace xtgrad
