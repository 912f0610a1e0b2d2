#include "lora.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "../io/files.hpp"
#include "../io/json_reader.hpp"
#include "../io/safetensors.hpp"
#include "mlp.hpp"
#include "moe.hpp"
#include "state_loading.hpp"

namespace xtgrad {

namespace fs = std::filesystem;

namespace {

// PEFT's names: the model under "base_model.model.", the files of save_pretrained.
constexpr const char* k_key_prefix = "base_model.model.";
constexpr const char* k_weights_file = "adapter_model.safetensors";
constexpr const char* k_config_file = "adapter_config.json";
// An adapter_config.json is a few hundred bytes; a larger file is not one.
constexpr std::size_t k_max_adapter_config_bytes = std::size_t(1) << 20;

// A Linear or Conv1D of a model, seen as the place of an adapter.
template <class T>
struct Layer {
  std::string name;  // dotted, "" for the model itself
  std::optional<LoRALayer<T>>* lora;
  Parameter<T>* weight;
  WeightLayout layout;
  std::size_t in, out;
};

template <class T>
std::optional<Layer<T>> as_layer(const std::string& name, Module<T>* module) {
  if (auto* linear = dynamic_cast<Linear<T>*>(module))
    return Layer<T>{name,
                    &linear->lora,
                    &linear->weight,
                    WeightLayout::out_in,
                    linear->in_features(),
                    linear->out_features()};
  if (auto* conv = dynamic_cast<Conv1D<T>*>(module))
    return Layer<T>{name, &conv->lora, &conv->weight, WeightLayout::in_out, conv->nx(), conv->nf()};
  return std::nullopt;
}

// Every Linear and Conv1D of `model`, in named_modules() order.
template <class T>
std::vector<Layer<T>> layers_of(Module<T>& model) {
  std::vector<Layer<T>> out;
  for (const auto& [name, module] : model.named_modules())
    if (std::optional<Layer<T>> layer = as_layer(name, module)) out.push_back(*layer);
  return out;
}

template <class T>
std::vector<Layer<T>> adapted_layers(Module<T>& model) {
  std::vector<Layer<T>> out;
  for (Layer<T>& layer : layers_of(model))
    if (*layer.lora) out.push_back(layer);
  return out;
}

// PEFT's target_modules rule: the name equals the target or ends with "." + target.
bool matches(const std::string& name, const std::string& target) {
  if (name == target) return true;
  const std::size_t n = name.size(), t = target.size();
  return n > t && name[n - t - 1] == '.' && name.compare(n - t, t, target) == 0;
}

std::string parent_name(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

std::string last_name(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// PEFT's key of an adapter tensor: "base_model.model.<layer>.<what>".
std::string peft_key(const std::string& layer, const char* what) {
  return k_key_prefix + (layer.empty() ? std::string() : layer + ".") + what;
}

// The dotted name of the nearest listed module above `name`.
template <class T>
std::string owner_name(const std::map<std::string, Module<T>*>& by_name, const std::string& name) {
  std::string owner = parent_name(name);
  while (!by_name.count(owner)) owner = parent_name(owner);
  return owner;
}

// Whether the module `name` is one of a SparseMoe's routed experts, which
// the MoE's fused kernels run without calling their forwards (a shared
// expert, and a GatedExpert that is a model's MLP, run their own forward).
template <class T>
bool routed_expert(const std::map<std::string, Module<T>*>& by_name, const std::string& name) {
  const auto* expert = dynamic_cast<GatedExpert<T>*>(by_name.at(name));
  if (!expert || name.empty()) return false;
  const auto* moe = dynamic_cast<SparseMoe<T>*>(by_name.at(owner_name(by_name, name)));
  return moe && std::any_of(moe->experts.begin(), moe->experts.end(),
                            [&](const GatedExpert<T>& e) { return &e == expert; });
}

// The layers apply_lora would adapt, after every check (nothing changes).
template <class T>
std::vector<Layer<T>> plan_lora(const char* function, Module<T>& model,
                                const std::vector<std::string>& target_modules,
                                const LoRAOptions& options) {
  const detail::Check check(function);
  detail::check_lora_options(function, options);
  check.argument(!target_modules.empty(), "target_modules", "is empty, expected module names");
  for (const std::string& target : target_modules)
    check.argument(!target.empty(), "target_modules", "holds an empty name");
  const auto modules = model.named_modules();
  std::map<std::string, Module<T>*> by_name(modules.begin(), modules.end());
  std::vector<Layer<T>> out;
  for (const auto& entry : modules) {
    const std::string& name = entry.first;  // a lambda below captures it
    Module<T>* module = entry.second;
    const bool wanted = std::any_of(target_modules.begin(), target_modules.end(),
                                    [&](const std::string& t) { return matches(name, t); });
    if (!wanted || name.empty()) continue;
    const std::optional<Layer<T>> layer = as_layer(name, module);
    check.argument(layer.has_value(), "target_modules", "matches ", detail::quoted(name), ", a ",
                   module->config().type, "; LoRA adapts Linear and Conv1D layers only");
    const std::string owner = owner_name(by_name, name);
    Module<T>* parent = by_name.at(owner);
    const bool fused = dynamic_cast<Mlp<T>*>(parent) || routed_expert(by_name, owner);
    check.argument(!fused, "target_modules", "matches ", detail::quoted(name), ", a layer of ",
                   parent->config().type,
                   ", whose fused forward never calls the layer's; LoRA cannot adapt it");
    check.argument(!*layer->lora, "target_modules", "matches ", detail::quoted(name),
                   ", which already has a LoRA adapter");
    out.push_back(*layer);
  }
  if (out.empty()) {
    std::string layers;
    std::size_t count = 0;
    for (const auto& [name, module] : modules)
      if (!name.empty() && as_layer(name, module) && count++ < 20)
        layers += (layers.empty() ? "" : ", ") + detail::quoted(name);
    check.argument(false, "target_modules", "matched no Linear or Conv1D layer of the model (",
                   count == 0 ? "it has none" : "its layers: " + layers, count > 20 ? ", ..." : "",
                   ")");
  }
  return out;
}

template <class T>
std::vector<std::string> attach(Module<T>& model, std::vector<Layer<T>>& layers,
                                const LoRAOptions& options, Generator& generator) {
  for (Parameter<T>* p : model.parameters()) p->set_requires_grad(false);
  std::vector<std::string> names;
  for (Layer<T>& layer : layers) {
    layer.lora->emplace(layer.in, layer.out, options, generator);
    names.push_back(layer.name);
  }
  return names;
}

bool same_options(const LoRAOptions& a, const LoRAOptions& b) {
  return a.r == b.r && a.lora_alpha == b.lora_alpha && a.lora_dropout == b.lora_dropout;
}

}  // namespace

template <class T>
LoRALinear<T>::LoRALinear(std::size_t in_features, std::size_t out_features, bool bias,
                          const LoRAOptions& options, Generator& generator)
    : LoRALinear(Linear<T>(in_features, out_features, bias, generator), options, generator) {}

template <class T>
LoRALinear<T>::LoRALinear(Linear<T> base, const LoRAOptions& options, Generator& generator)
    : Linear<T>(std::move(base)) {
  detail::check_lora_options("LoRALinear", options);
  this->lora.emplace(this->in_features(), this->out_features(), options, generator);
  this->weight.set_requires_grad(false);
  if (this->has_bias()) this->bias.set_requires_grad(false);
}

template <class T>
std::vector<std::string> apply_lora(Module<T>& model,
                                    const std::vector<std::string>& target_modules,
                                    const LoRAOptions& options, Generator& generator) {
  std::vector<Layer<T>> layers = plan_lora("apply_lora", model, target_modules, options);
  return attach(model, layers, options, generator);
}

template <class T>
std::vector<std::string> apply_lora(Module<T>& model,
                                    const std::vector<std::string>& target_modules, std::size_t r,
                                    double lora_alpha, double lora_dropout, std::uint64_t seed) {
  Generator generator(seed);
  return apply_lora(model, target_modules, LoRAOptions{r, lora_alpha, lora_dropout}, generator);
}

template <class T>
std::vector<std::string> lora_layers(Module<T>& model) {
  std::vector<std::string> names;
  for (const Layer<T>& layer : adapted_layers(model)) names.push_back(layer.name);
  return names;
}

template <class T>
std::vector<std::string> merge_lora(Module<T>& model) {
  std::vector<std::string> names;
  for (Layer<T>& layer : adapted_layers(model))
    if (!(*layer.lora)->merged()) {
      (*layer.lora)->merge_into(layer.weight->value, layer.layout);
      layer.weight->mark_changed();
      names.push_back(layer.name);
    }
  return names;
}

template <class T>
std::vector<std::string> unmerge_lora(Module<T>& model) {
  std::vector<std::string> names;
  for (Layer<T>& layer : adapted_layers(model))
    if ((*layer.lora)->merged()) {
      (*layer.lora)->unmerge_from(layer.weight->value, layer.layout);
      layer.weight->mark_changed();
      names.push_back(layer.name);
    }
  return names;
}

template <class T>
TensorDict<T> lora_state_dict(Module<T>& model) {
  TensorDict<T> out;
  for (const Layer<T>& layer : adapted_layers(model)) {
    out.insert(peft_key(layer.name, "lora_A.weight"), (*layer.lora)->lora_A.value);
    out.insert(peft_key(layer.name, "lora_B.weight"), (*layer.lora)->lora_B.value);
  }
  return out;
}

template <class T>
void save_lora_adapter(Module<T>& model, const fs::path& dir) {
  const detail::Check check("save_lora_adapter");
  const std::vector<Layer<T>> layers = adapted_layers(model);
  check.argument(!layers.empty(), "model", "has no LoRA adapter (apply_lora adds them)");
  const LoRAOptions options = (*layers.front().lora)->options();
  std::set<std::string> targets;
  bool fan_in_fan_out = false;
  for (const Layer<T>& layer : layers) {
    const LoRALayer<T>& lora = **layer.lora;
    check.argument(same_options(lora.options(), options), "model", "adapts ",
                   detail::quoted(layer.name), " with options other than ",
                   detail::quoted(layers.front().name),
                   "'s; one adapter_config.json holds one set of options");
    check.argument(!lora.merged(), "model", "has the adapter of ", detail::quoted(layer.name),
                   " merged into its weight; unmerge_lora before saving the adapters");
    targets.insert(last_name(layer.name));
    fan_in_fan_out = fan_in_fan_out || layer.layout == WeightLayout::in_out;
  }
  TensorMap tensors;
  for (const auto& [name, value] : lora_state_dict(model))
    tensors.emplace(name, StoredTensor(value));

  // PEFT's LoraConfig as save_pretrained writes it (sorted keys, indent 2).
  nlohmann::json config;
  config["peft_type"] = "LORA";
  config["r"] = options.r;
  if (options.lora_alpha == std::floor(options.lora_alpha) && std::abs(options.lora_alpha) < 1e15)
    config["lora_alpha"] = static_cast<std::int64_t>(options.lora_alpha);
  else
    config["lora_alpha"] = options.lora_alpha;
  config["lora_dropout"] = options.lora_dropout;
  config["target_modules"] = std::vector<std::string>(targets.begin(), targets.end());
  config["bias"] = "none";
  config["fan_in_fan_out"] = fan_in_fan_out;
  config["init_lora_weights"] = true;
  config["inference_mode"] = true;
  config["use_rslora"] = false;
  config["modules_to_save"] = nullptr;
  config["base_model_name_or_path"] = nullptr;
  config["task_type"] = nullptr;
  const std::string text = config.dump(2);

  fs::create_directories(dir);
  write_safetensors(dir / k_weights_file, tensors, {{"format", "pt"}});
  const fs::path target = dir / k_config_file;
  const fs::path fresh = dir / (std::string(k_config_file) + ".tmp-" + detail::random_suffix());
  detail::write_new_file(fresh, {{text.data(), text.size()}}, "save_lora_adapter");
  fs::rename(fresh, target);
  detail::fsync_directory(dir);
}

namespace {

// adapter_config.json as LoRAOptions and target_modules, refusing what
// xtgrad's LoRA does not compute.
struct AdapterConfig {
  LoRAOptions options;
  std::vector<std::string> target_modules;
};

AdapterConfig read_adapter_config(const fs::path& path) {
  const std::string function = "load_lora_adapter";
  const std::string where = "adapter config " + detail::path_str(path) + ": ";
  const nlohmann::ordered_json json = detail::read_json_file(
      path, function, where, k_max_adapter_config_bytes, detail::JsonKeys::last_wins);
  const auto fail = [&](const std::string& what) { detail::fail_value(function, where + what); };
  if (!json.is_object()) fail("is not a JSON object");
  const auto field = [&](const char* key) -> const nlohmann::ordered_json* {
    const auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;
  };
  const auto required = [&](const char* key) -> const nlohmann::ordered_json& {
    const nlohmann::ordered_json* v = field(key);
    if (!v) fail(std::string("has no \"") + key + "\"");
    return *v;
  };
  if (const auto* type = field("peft_type"); type && *type != "LORA")
    fail("\"peft_type\" is " + type->dump() + ", expected \"LORA\"");
  AdapterConfig out;
  const auto& r = required("r");
  if (!r.is_number_unsigned() || r.get<std::uint64_t>() == 0)
    fail("\"r\" is " + r.dump() + ", expected an integer >= 1");
  out.options.r = r.get<std::size_t>();
  const auto& alpha = required("lora_alpha");
  if (!alpha.is_number()) fail("\"lora_alpha\" is " + alpha.dump() + ", expected a number");
  out.options.lora_alpha = alpha.get<double>();
  const auto* dropout = field("lora_dropout");
  if (dropout && !dropout->is_number())
    fail("\"lora_dropout\" is " + dropout->dump() + ", expected a number");
  out.options.lora_dropout = dropout ? dropout->get<double>() : 0.0;
  const auto& targets = required("target_modules");
  if (!targets.is_array())
    fail("\"target_modules\" is " + detail::escaped(targets.dump(), 100) +
         ", expected a list of module names (a regular expression is not supported)");
  for (const auto& t : targets) {
    if (!t.is_string()) fail("\"target_modules\" holds " + t.dump() + ", expected a module name");
    out.target_modules.push_back(t.get<std::string>());
  }
  if (const auto* bias = field("bias"); bias && *bias != "none")
    fail("\"bias\" is " + bias->dump() +
         ", expected \"none\" (adapters of biases are not supported)");
  if (const auto* rs = field("use_rslora"); rs && *rs != false)
    fail("\"use_rslora\" is " + rs->dump() + ", expected false");
  if (const auto* save = field("modules_to_save"); save && !save->empty())
    fail("\"modules_to_save\" is " + detail::escaped(save->dump(), 100) +
         ", expected null (whole modules in an adapter are not supported)");
  detail::check_lora_options("load_lora_adapter", out.options);
  return out;
}

}  // namespace

template <class T>
void load_lora_adapter(Module<T>& model, const fs::path& dir) {
  const detail::Check check("load_lora_adapter");
  const AdapterConfig config = read_adapter_config(dir / k_config_file);
  const Safetensors file = read_safetensors(dir / k_weights_file);

  std::vector<Layer<T>> layers = adapted_layers(model);
  const bool fresh = layers.empty();
  if (fresh) {
    layers = plan_lora("load_lora_adapter", model, config.target_modules, config.options);
  } else {
    for (const Layer<T>& layer : layers) {
      check.argument(same_options((*layer.lora)->options(), config.options), "model",
                     "has an adapter on ", detail::quoted(layer.name),
                     " whose options differ from the adapter config's");
      check.argument(!(*layer.lora)->merged(), "model", "has the adapter of ",
                     detail::quoted(layer.name),
                     " merged into its weight; unmerge_lora before loading adapters");
    }
  }
  // The names and shapes the model expects, against the file's.
  std::map<std::string, std::pair<const Layer<T>*, Shape>> expected;
  for (const Layer<T>& layer : layers) {
    expected[peft_key(layer.name, "lora_A.weight")] = {&layer, Shape{config.options.r, layer.in}};
    expected[peft_key(layer.name, "lora_B.weight")] = {&layer, Shape{layer.out, config.options.r}};
  }
  for (const auto& [name, stored] : file.tensors) {
    check.value(expected.count(name) > 0, "adapter ", detail::path_str(dir),
                " holds the unexpected tensor ", detail::quoted(detail::escaped(name, 200)));
    const std::vector<std::size_t> shape = stored.shape();
    const Shape& want = expected.at(name).second;
    check.value(Shape(shape.begin(), shape.end()) == want, "adapter ", detail::path_str(dir),
                ": size mismatch for ", detail::quoted(name), ": copying a param with shape ",
                detail::shape_str(shape), ", the shape in current model is ",
                detail::shape_str(want));
  }
  for (const auto& entry : expected)
    check.value(file.tensors.count(entry.first) > 0, "adapter ", detail::path_str(dir),
                " lacks the tensor ", detail::quoted(entry.first));

  // Every check has passed: attach (for a fresh model), then assign.
  if (fresh) {
    Generator unused(k_default_seed);  // A is overwritten below
    attach(model, layers, config.options, unused);
  }
  for (const Layer<T>& layer : layers) {
    LoRALayer<T>& lora = **layer.lora;
    lora.lora_A.set_value(
        detail::stored_as<T>(file.tensors.at(peft_key(layer.name, "lora_A.weight"))));
    lora.lora_B.set_value(
        detail::stored_as<T>(file.tensors.at(peft_key(layer.name, "lora_B.weight"))));
  }
}

#define XTGRAD_LORA(T)                                                                      \
  template class LoRALinear<T>;                                                             \
  template std::vector<std::string> apply_lora(Module<T>&, const std::vector<std::string>&, \
                                               const LoRAOptions&, Generator&);             \
  template std::vector<std::string> apply_lora(Module<T>&, const std::vector<std::string>&, \
                                               std::size_t, double, double, std::uint64_t); \
  template std::vector<std::string> lora_layers(Module<T>&);                                \
  template std::vector<std::string> merge_lora(Module<T>&);                                 \
  template std::vector<std::string> unmerge_lora(Module<T>&);                               \
  template TensorDict<T> lora_state_dict(Module<T>&);                                       \
  template void save_lora_adapter(Module<T>&, const fs::path&);                             \
  template void load_lora_adapter(Module<T>&, const fs::path&);
XTGRAD_LORA(float)
XTGRAD_LORA(double)
#undef XTGRAD_LORA

}  // namespace xtgrad
