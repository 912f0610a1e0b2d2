// Reading the activation of a Hugging Face config.json (hf_config.hpp).

#include "hf_config.hpp"

#include <utility>

#include <nlohmann/json.hpp>

#include "../../engine/errors.hpp"
#include "../../io/files.hpp"
#include "../../io/json_reader.hpp"

namespace xtgrad {

namespace {

// A config.json is a few kilobytes; a larger file is not one.
constexpr std::size_t k_max_hf_config_bytes = 16u << 20;

const std::pair<const char*, Activation> k_names[] = {
    {"gelu_new", Activation::gelu_tanh}, {"gelu_pytorch_tanh", Activation::gelu_tanh},
    {"gelu", Activation::gelu},          {"quick_gelu", Activation::gelu_sigmoid},
    {"relu", Activation::relu},          {"silu", Activation::silu},
    {"swish", Activation::silu}};

std::string known_names() {
  std::string out;
  for (const auto& [name, activation] : k_names) out += std::string(out.empty() ? "" : ", ") + name;
  return out;
}

// `where` names the config the name comes from, or is "".
Activation lookup(const std::string& name, const std::string& function, const std::string& where) {
  for (const auto& [known, activation] : k_names)
    if (name == known) return activation;
  detail::fail_value(function, where + "the Hugging Face activation " +
                                   detail::quoted(detail::escaped(name, 100)) +
                                   " is not one xtgrad computes, expected one of " + known_names());
}

}  // namespace

Activation hf_activation(const std::string& name, const std::string& function) {
  return lookup(name, function, "");
}

Activation hf_config_activation(const std::filesystem::path& config_json, const std::string& key,
                                const std::string& model_type, const std::string& fallback,
                                const std::string& function) {
  const std::string where = "config " + detail::path_str(config_json) + ": ";
  const nlohmann::ordered_json config = detail::read_json_file(
      config_json, function, where, k_max_hf_config_bytes, detail::JsonKeys::last_wins);
  if (!config.is_object())
    detail::fail_value(function,
                       where + "is not a JSON object, expected a Hugging Face config.json object");
  const auto value = config.find(key);
  if (value != config.end()) {
    if (!value->is_string())
      detail::fail_value(function, where + "\"" + key + "\" is " + value->type_name() +
                                       ", expected a string such as \"" + fallback + "\"");
    return lookup(value->get<std::string>(), function, where + "\"" + key + "\": ");
  }
  const auto type = config.find("model_type");
  if (type != config.end() && !(type->is_string() && type->get<std::string>() == model_type))
    detail::fail_value(function, where + "has no \"" + key + "\" and its model_type is " +
                                     detail::escaped(type->dump(), 100) + ", not \"" + model_type +
                                     "\", whose default \"" + fallback + "\" would apply");
  return lookup(fallback, function, where);
}

}  // namespace xtgrad
