#include "hf_mlp.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>
#include <vector>

#include <xtensor/xmanipulation.hpp>

#include "../../engine/errors.hpp"
#include "../../io/safetensors_detail.hpp"
#include "../state_loading.hpp"
#include "hf_config.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::quoted_name;

// One parameter to fill: the checkpoint's name and shape, and whether the
// checkpoint stores it transposed relative to xtgrad's layout.
template <class T>
struct MlpSlot {
  std::string key;
  std::vector<std::size_t> file_shape;
  Parameter<T>* target;
  bool transposed;
};

// A checkpoint name the module has no parameter for, and why that matters.
struct Unmatched {
  std::string key;
  std::string why;
};

// What a layer is loaded from: the tensors read (all of a TensorMap, or
// only the MLP's of a file), every name the file or map has, and how
// messages name it.
struct Source {
  const TensorMap& tensors;
  std::vector<std::string> names;
  std::string what;  // "the state dict" or "file '<path>'"
};

// The model a loader reads, for messages and for finding its layers.
struct Model {
  const char* name;       // "LLaMA"
  const char* first_key;  // a name every layer has: "up_proj.weight"
};

std::string key(std::string prefix, const std::string& name) {
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  return prefix + name;
}

// "layers.2" before "layers.10": runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      const std::string na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      const std::size_t za = na.find_first_not_of('0'), zb = nb.find_first_not_of('0');
      const std::string ta = za == std::string::npos ? "" : na.substr(za);
      const std::string tb = zb == std::string::npos ? "" : nb.substr(zb);
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// At most 6 names: the first 4, "...", the last; then how many in all.
std::string bounded_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names.size() > 6 && i == 4) {
      out += ", ...";
      i = names.size() - 1;
    }
    out += (out.empty() ? "" : ", ") + quoted_name(names[i]);
  }
  return out + " (" + std::to_string(names.size()) + " in all)";
}

// The missing tensor `name`: what the source has under the prefix, or, when
// nothing is there, the prefixes of the layers it does have.
[[noreturn]] void fail_missing(const std::string& function, const Source& source,
                               const std::string& name, const std::string& prefix,
                               const Model& model) {
  const std::string under = key(prefix, "");
  std::vector<std::string> inside;
  for (const std::string& n : source.names)
    if (n.compare(0, under.size(), under) == 0) inside.push_back(n);
  if (!inside.empty())
    detail::fail_value(
        function, "no tensor " + quoted_name(name) + " in " + source.what +
                      (under.empty() ? "; it has " : "; under " + quoted_name(under) + " it has ") +
                      bounded_list(inside));
  const std::string suffix = std::string(".") + model.first_key;
  std::vector<std::string> layers;
  for (const std::string& n : source.names)
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      layers.push_back(n.substr(0, n.size() - suffix.size()));
  std::sort(layers.begin(), layers.end(), natural_less);
  std::string has;
  if (!layers.empty()) {
    has = "the " + std::string(model.name) + " MLP layers it has are " + bounded_list(layers);
  } else {
    has = "it has no name ending in " + quoted_name(suffix) + ", so no " + model.name +
          " MLP layer, among its " + std::to_string(source.names.size()) + " tensors";
    for (std::size_t i = 0; i < source.names.size() && i < 4; ++i)
      has += (i ? ", " : ": ") + quoted_name(source.names[i]);
    if (source.names.size() > 4) has += ", ...";
  }
  detail::fail_value(function, "no tensor under " + quoted_name(under) + " (looking for " +
                                   quoted_name(name) + ") in " + source.what + "; " + has);
}

// All or nothing: every slot is read, checked and converted into `values`
// before any parameter is assigned.
template <class T>
void load_slots(const std::string& function, const Source& source,
                const std::vector<MlpSlot<T>>& slots, const std::vector<Unmatched>& unmatched,
                const std::string& layout, const std::string& prefix, const Model& model) {
  for (const Unmatched& u : unmatched)
    if (source.tensors.count(u.key))
      detail::fail_value(
          function, "tensor " + quoted_name(u.key) + " is in " + source.what + ", but " + u.why);
  std::vector<const StoredTensor*> found;
  for (const MlpSlot<T>& slot : slots) {
    const auto it = source.tensors.find(slot.key);
    if (it == source.tensors.end()) fail_missing(function, source, slot.key, prefix, model);
    const std::vector<std::size_t> shape = it->second.shape();
    if (shape != slot.file_shape)
      detail::fail_value(function, "tensor " + quoted_name(slot.key) + " has shape " +
                                       detail::shape_str(shape) + ", expected " +
                                       detail::shape_str(slot.file_shape) + " (" + layout + ")");
    found.push_back(&it->second);
  }
  std::vector<xt::xarray<T>> values;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    xt::xarray<T> value = detail::stored_as<T>(*found[i]);
    values.push_back(slots[i].transposed ? xt::xarray<T>(xt::transpose(value)) : std::move(value));
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].target->set_value(std::move(values[i]));
}

template <class T>
std::vector<MlpSlot<T>> llama_slots(GatedFFN<T>& ffn, const std::string& prefix,
                                    std::vector<Unmatched>& unmatched) {
  const std::size_t d_in = ffn.w_up.value.shape()[0], d_hidden = ffn.w_up.value.shape()[1];
  const std::size_t d_out = ffn.w_down.value.shape()[1];
  std::vector<MlpSlot<T>> slots = {
      {key(prefix, "up_proj.weight"), {d_hidden, d_in}, &ffn.w_up, true},
      {key(prefix, "gate_proj.weight"), {d_hidden, d_in}, &ffn.w_gate, true},
      {key(prefix, "down_proj.weight"), {d_out, d_hidden}, &ffn.w_down, true}};
  // A bias the module has is loaded; one it lacks must not be in the checkpoint.
  const auto bias = [&](bool present, const char* name, std::size_t size, Parameter<T>& p,
                        const char* field) {
    if (present)
      slots.push_back({key(prefix, name), {size}, &p, false});
    else
      unmatched.push_back({key(prefix, name), std::string("the GatedFFN has no b_") + field +
                                                  " (construct it with a GatedBias whose " + field +
                                                  " is true to load it)"});
  };
  bias(ffn.bias().up, "up_proj.bias", d_hidden, ffn.b_up, "up");
  bias(ffn.bias().gate, "gate_proj.bias", d_hidden, ffn.b_gate, "gate");
  bias(ffn.bias().down, "down_proj.bias", d_out, ffn.b_down, "down");
  return slots;
}

template <class T>
std::string llama_layout(const GatedFFN<T>& ffn) {
  return "nn.Linear's [out, in] for a GatedFFN with d_in " +
         std::to_string(ffn.w_up.value.shape()[0]) + ", d_hidden " +
         std::to_string(ffn.w_up.value.shape()[1]) + ", d_out " +
         std::to_string(ffn.w_down.value.shape()[1]);
}

template <class T>
std::vector<MlpSlot<T>> gpt2_slots(FeedForward<T>& ffn, const std::string& prefix) {
  const std::size_t d_model = ffn.d_model(), d_ff = ffn.d_ff();
  return {{key(prefix, "c_fc.weight"), {d_model, d_ff}, &ffn.w1.weight, true},
          {key(prefix, "c_fc.bias"), {d_ff}, &ffn.w1.bias, false},
          {key(prefix, "c_proj.weight"), {d_ff, d_model}, &ffn.w2.weight, true},
          {key(prefix, "c_proj.bias"), {d_model}, &ffn.w2.bias, false}};
}

template <class T>
std::string gpt2_layout(const FeedForward<T>& ffn) {
  return "Conv1D's [in, out] for a FeedForward with d_model " + std::to_string(ffn.d_model()) +
         ", d_ff " + std::to_string(ffn.d_ff());
}

const Model k_llama{"LLaMA", "up_proj.weight"};
const Model k_gpt2{"GPT-2", "c_fc.weight"};

// Loads from a TensorMap: every name of it is listed when one is missing.
template <class T>
void load_map(const std::string& function, const TensorMap& tensors,
              const std::vector<MlpSlot<T>>& slots, const std::vector<Unmatched>& unmatched,
              const std::string& layout, const std::string& prefix, const Model& model) {
  Source source{tensors, {}, "the state dict"};
  for (const auto& entry : tensors) source.names.push_back(entry.first);
  load_slots(function, source, slots, unmatched, layout, prefix, model);
}

// Loads from a file, reading only the named tensors (every name is kept).
template <class T>
void load_file(const std::string& function, const fs::path& file,
               const std::vector<MlpSlot<T>>& slots, const std::vector<Unmatched>& unmatched,
               const std::string& layout, const std::string& prefix, const Model& model) {
  std::set<std::string> wanted;
  for (const MlpSlot<T>& s : slots) wanted.insert(s.key);
  for (const Unmatched& u : unmatched) wanted.insert(u.key);
  std::vector<std::string> names;
  const TensorMap tensors = read_safetensors(file, [&](const std::string& name) {
                              names.push_back(name);
                              return wanted.count(name) > 0;
                            }).tensors;
  std::sort(names.begin(), names.end());
  const Source source{tensors, std::move(names), "file " + detail::path_str(file)};
  load_slots(function, source, slots, unmatched, layout, prefix, model);
}

// The module's activation against the one config.json sets.
void check_activation(const std::string& function, const char* module, Activation has,
                      const fs::path& config_json, const std::string& key,
                      const std::string& model_type, const std::string& fallback) {
  const Activation wanted = hf_config_activation(config_json, key, model_type, fallback, function);
  if (has != wanted)
    detail::fail_value(
        function, std::string("the ") + module + "'s activation is " + std::string(to_string(has)) +
                      ", but config " + detail::path_str(config_json) + " (\"" + key +
                      "\") asks for " + std::string(to_string(wanted)) + ": construct the " +
                      module + " with Activation::" + std::string(to_string(wanted)));
}

void check_llama(const std::string& function, Activation has, const fs::path& config_json) {
  check_activation(function, "GatedFFN", has, config_json, "hidden_act", "llama", "silu");
}

void check_gpt2(const std::string& function, Activation has, const fs::path& config_json) {
  check_activation(function, "FeedForward", has, config_json, "activation_function", "gpt2",
                   "gelu_new");
}

constexpr char k_load_llama[] = "load_llama_mlp";
constexpr char k_load_gpt2[] = "load_gpt2_mlp";

}  // namespace

std::string llama_mlp_prefix(std::size_t layer) {
  return "model.layers." + std::to_string(layer) + ".mlp";
}

std::string gpt2_mlp_prefix(std::size_t layer) {
  return "h." + std::to_string(layer) + ".mlp";
}

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const TensorMap& tensors, const std::string& prefix) {
  std::vector<Unmatched> unmatched;
  const std::vector<MlpSlot<T>> slots = llama_slots(ffn, prefix, unmatched);
  load_map(k_load_llama, tensors, slots, unmatched, llama_layout(ffn), prefix, k_llama);
}

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const fs::path& file, const std::string& prefix) {
  std::vector<Unmatched> unmatched;
  const std::vector<MlpSlot<T>> slots = llama_slots(ffn, prefix, unmatched);
  load_file(k_load_llama, file, slots, unmatched, llama_layout(ffn), prefix, k_llama);
}

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const TensorMap& tensors, const std::string& prefix,
                    const fs::path& config_json) {
  check_llama(k_load_llama, ffn.activation(), config_json);
  load_llama_mlp(ffn, tensors, prefix);
}

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const fs::path& file, const std::string& prefix,
                    const fs::path& config_json) {
  check_llama(k_load_llama, ffn.activation(), config_json);
  load_llama_mlp(ffn, file, prefix);
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const TensorMap& tensors, const std::string& prefix) {
  load_map(k_load_gpt2, tensors, gpt2_slots(ffn, prefix), {}, gpt2_layout(ffn), prefix, k_gpt2);
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const fs::path& file, const std::string& prefix) {
  load_file(k_load_gpt2, file, gpt2_slots(ffn, prefix), {}, gpt2_layout(ffn), prefix, k_gpt2);
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const TensorMap& tensors, const std::string& prefix,
                   const fs::path& config_json) {
  check_gpt2(k_load_gpt2, ffn.activation(), config_json);
  load_gpt2_mlp(ffn, tensors, prefix);
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const fs::path& file, const std::string& prefix,
                   const fs::path& config_json) {
  check_gpt2(k_load_gpt2, ffn.activation(), config_json);
  load_gpt2_mlp(ffn, file, prefix);
}

#define XTGRAD_HF_MLP(T)                                                              \
  template void load_llama_mlp(GatedFFN<T>&, const TensorMap&, const std::string&);   \
  template void load_llama_mlp(GatedFFN<T>&, const fs::path&, const std::string&);    \
  template void load_llama_mlp(GatedFFN<T>&, const TensorMap&, const std::string&,    \
                               const fs::path&);                                      \
  template void load_llama_mlp(GatedFFN<T>&, const fs::path&, const std::string&,     \
                               const fs::path&);                                      \
  template void load_gpt2_mlp(FeedForward<T>&, const TensorMap&, const std::string&); \
  template void load_gpt2_mlp(FeedForward<T>&, const fs::path&, const std::string&);  \
  template void load_gpt2_mlp(FeedForward<T>&, const TensorMap&, const std::string&,  \
                              const fs::path&);                                       \
  template void load_gpt2_mlp(FeedForward<T>&, const fs::path&, const std::string&,   \
                              const fs::path&);
XTGRAD_HF_MLP(float)
XTGRAD_HF_MLP(double)
#undef XTGRAD_HF_MLP

}  // namespace xtgrad
