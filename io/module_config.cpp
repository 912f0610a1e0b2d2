#include "module_config.hpp"

#include <charconv>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "json_reader.hpp"

namespace xtgrad {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t k_max_module_config_bytes = 1'000'000;
// A name or value as describe() shows it: escaped, at most
// k_max_quoted_bytes of it, unquoted.
std::string shown_value(const std::string& text) {
  return detail::escaped(text, detail::k_max_quoted_bytes);
}

Json json_of(const ModuleConfig& config) {
  Json options = Json::object();
  for (const auto& [key, value] : config.options) options[key] = value;
  Json out = {{"type", config.type}, {"options", std::move(options)}};
  if (!config.children.empty()) {
    Json children = Json::array();
    for (const auto& [name, child] : config.children) children.push_back({name, json_of(child)});
    out["children"] = std::move(children);
  }
  return out;
}

struct Parser {
  const std::string& function;
  const std::string& where;

  [[noreturn]] void fail(const std::string& what) const {
    detail::fail_value(function, where + ": module config " + what);
  }

  ModuleConfig config(const Json& j, const std::string& at) const {
    if (!j.is_object()) fail(at + "is not a JSON object");
    for (const auto& item : j.items())
      if (item.key() != "type" && item.key() != "options" && item.key() != "children")
        fail(at + "has the unknown key " + detail::quoted_escaped(item.key()) +
             ", expected type, options and children");
    const auto type = j.find("type");
    if (type == j.end()) fail(at + "has no \"type\"");
    if (!type->is_string() || type->get<std::string>().empty())
      fail(at + "has a \"type\" that is not a non-empty string");
    ModuleConfig out(type->get<std::string>());
    const auto options = j.find("options");
    if (options == j.end() || !options->is_object()) fail(at + "has no \"options\" object");
    for (const auto& item : options->items()) {
      if (!item.value().is_string())
        fail(at + "option " + detail::quoted_escaped(item.key()) + " is not a string");
      out.add(item.key(), item.value().get<std::string>());
    }
    const auto children = j.find("children");
    if (children == j.end()) return out;
    if (!children->is_array()) fail(at + "has \"children\" that is not an array");
    std::set<std::string> names;
    for (const Json& child : *children) {
      if (!child.is_array() || child.size() != 2 || !child[0].is_string())
        fail(at + "has a child that is not a [name, config] pair");
      const std::string name = child[0].get<std::string>();
      if (!names.insert(name).second)
        fail(at + "has the child " + detail::quoted_escaped(name) + " twice");
      out.children.emplace_back(
          name, config(child[1], at + "child " + detail::quoted_escaped(name) + " "));
    }
    return out;
  }
};

}  // namespace

ModuleConfig& ModuleConfig::add(std::string key, std::string value) {
  options.emplace_back(std::move(key), std::move(value));
  return *this;
}

ModuleConfig& ModuleConfig::add(std::string key, std::size_t value) {
  return add(std::move(key), std::to_string(value));
}

ModuleConfig& ModuleConfig::add(std::string key, bool value) {
  return add(std::move(key), std::string(value ? "true" : "false"));
}

ModuleConfig& ModuleConfig::add(std::string key, double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return add(std::move(key), std::string(buffer, result.ptr));
}

std::string ModuleConfig::describe() const {
  std::string out = shown_value(type) + "(";
  bool first = true;
  for (const auto& [key, value] : options) {
    out += (first ? "" : ", ") + shown_value(key) + "=" + shown_value(value);
    first = false;
  }
  for (const auto& [name, child] : children) {
    out += (first ? "" : ", ") + shown_value(name) + "=" + child.describe();
    first = false;
  }
  return out + ")";
}

std::string to_json(const ModuleConfig& config) {
  // ensure_ascii: the text has no control characters and no bytes above
  // 0x7f, so it fits one manifest line and one safetensors metadata string;
  // invalid UTF-8 is replaced rather than thrown on (a type name is code's).
  return json_of(config).dump(-1, ' ', true, Json::error_handler_t::replace);
}

ModuleConfig parse_module_config(const std::string& text, const std::string& function,
                                 const std::string& where) {
  const Parser parser{function, where};
  return parser.config(
      detail::read_json(text, function, where + ": module config ", k_max_module_config_bytes), "");
}

}  // namespace xtgrad
