#include "activation.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <utility>

#include "errors.hpp"

namespace xtgrad {

namespace {

// In enumeration order: the error message lists them in this order too.
constexpr std::array<std::pair<Activation, const char*>, 6> k_activation_names{{
    {Activation::relu, "relu"},
    {Activation::gelu, "gelu"},
    {Activation::gelu_tanh, "gelu_tanh"},
    {Activation::gelu_sigmoid, "gelu_sigmoid"},
    {Activation::silu, "silu"},
    {Activation::tanh, "tanh"},
}};

}  // namespace

Activation parse_activation(std::string_view name) {
  if (const std::optional<Activation> activation = detail::find_activation(name))
    return *activation;
  detail::fail_value("parse_activation", "unknown activation " + detail::quoted(std::string(name)) +
                                             "; valid names are " +
                                             detail::valid_activation_names());
}

std::string_view to_string(Activation activation) {
  return detail::activation_name(activation, "to_string", "activation");
}

namespace detail {

const char* activation_name(Activation activation, const char* op, const char* arg) {
  for (const auto& [candidate, name] : k_activation_names)
    if (candidate == activation) return name;
  fail_argument(op, arg,
                "is Activation(" + std::to_string(static_cast<int>(activation)) +
                    "), expected one of " + valid_activation_names());
}

std::optional<Activation> find_activation(std::string_view name) {
  for (const auto& [activation, candidate] : k_activation_names)
    if (name == candidate) return activation;
  return std::nullopt;
}

std::string valid_activation_names() {
  std::string names;
  for (const auto& entry : k_activation_names) {
    if (!names.empty()) names += ", ";
    names += entry.second;
  }
  return names;
}

}  // namespace detail

}  // namespace xtgrad
