// load_llama, llama_state_dict, export_llama and LlamaForCausalLM (hf_llama.hpp).
#include "hf_llama.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "../../engine/errors.hpp"
#include "../../io/files.hpp"
#include "../../io/json_reader.hpp"
#include "../../io/safetensors_detail.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

constexpr const char* k_load = "load_llama";
constexpr const char* k_single = "model.safetensors";
constexpr const char* k_index = "model.safetensors.index.json";
// An index lists a few thousand names: a few hundred kilobytes.
constexpr std::size_t k_max_index_bytes = 64u << 20;

// One tensor of the checkpoint: its Hugging Face name and shape, and the
// parameter it fills (null while only headers are checked).
template <class T>
struct LlamaSlot {
  std::string name;
  std::vector<std::size_t> shape;
  Parameter<T>* target = nullptr;
};

// Every tensor of a checkpoint of `c`, in Hugging Face's order (that of
// LlamaForCausalLM.state_dict()); targets into `model` when given.
template <class T>
std::vector<LlamaSlot<T>> llama_slots(const LlamaConfig& c, LlamaForCausalLM<T>* model) {
  const std::size_t d = c.hidden_size, f = c.intermediate_size, v = c.vocab_size;
  const std::size_t dh = d / c.num_attention_heads;
  const std::size_t q = c.num_attention_heads * dh, kv = c.num_key_value_heads * dh;
  std::vector<LlamaSlot<T>> slots;
  GPT<T>* gpt = model ? &model->gpt : nullptr;
  const auto add = [&](std::string name, std::vector<std::size_t> shape, Parameter<T>* target) {
    slots.push_back({std::move(name), std::move(shape), target});
  };
  const auto linear = [&](const std::string& name, Linear<T>* module, std::size_t out,
                          std::size_t in, bool bias) {
    add(name + ".weight", {out, in}, module ? &module->weight : nullptr);
    if (bias) add(name + ".bias", {out}, module ? &module->bias : nullptr);
  };
  const auto norm = [](auto& variant) { return &std::get<RMSNorm<T>>(variant).weight; };
  add("model.embed_tokens.weight", {v, d}, gpt ? &gpt->wte.weight : nullptr);
  for (std::size_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    TransformerBlock<T>* block = gpt ? &gpt->h[l] : nullptr;
    CausalSelfAttention<T>* attn = block ? &block->attn : nullptr;
    GatedExpert<T>* mlp = block ? &std::get<GatedExpert<T>>(block->mlp) : nullptr;
    linear(p + "self_attn.q_proj", attn ? &*attn->q_proj : nullptr, q, d, c.qkv_bias);
    linear(p + "self_attn.k_proj", attn ? &*attn->k_proj : nullptr, kv, d, c.qkv_bias);
    linear(p + "self_attn.v_proj", attn ? &*attn->v_proj : nullptr, kv, d, c.qkv_bias);
    linear(p + "self_attn.o_proj", attn ? &*attn->o_proj : nullptr, d, q, c.o_bias);
    linear(p + "mlp.gate_proj", mlp ? &mlp->gate : nullptr, f, d, false);
    linear(p + "mlp.up_proj", mlp ? &mlp->up : nullptr, f, d, false);
    linear(p + "mlp.down_proj", mlp ? &mlp->down : nullptr, d, f, false);
    add(p + "input_layernorm.weight", {d}, block ? norm(block->ln_1) : nullptr);
    add(p + "post_attention_layernorm.weight", {d}, block ? norm(block->ln_2) : nullptr);
  }
  add("model.norm.weight", {d}, gpt ? norm(gpt->ln_f) : nullptr);
  if (!c.tie_word_embeddings) add("lm_head.weight", {v, d}, gpt ? &gpt->lm_head->weight : nullptr);
  return slots;
}

std::string layout(const LlamaConfig& c) {
  return "Hugging Face " + c.model_type + " with vocab_size " + std::to_string(c.vocab_size) +
         ", hidden_size " + std::to_string(c.hidden_size) + ", intermediate_size " +
         std::to_string(c.intermediate_size) + ", " + std::to_string(c.num_hidden_layers) +
         " layers, " + std::to_string(c.num_attention_heads) + " heads, " +
         std::to_string(c.num_key_value_heads) + " key/value heads; nn.Linear weights [out, in]";
}

// Names a checkpoint may hold that are not parameters: the rotary buffers
// older transformers saved, and the head of a tied model (compared with the
// embedding).
std::set<std::string> skipped_names(const LlamaConfig& c) {
  std::set<std::string> out;
  for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
    out.insert("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq");
  if (c.tie_word_embeddings) out.insert("lm_head.weight");
  return out;
}

[[noreturn]] void fail(const std::string& what) {
  detail::fail_value(k_load, what);
}

std::string file_str(const fs::path& file) {
  return "file " + detail::path_str(file);
}

// The files holding the weights and, for a sharded checkpoint, the file
// the index names for each tensor.
struct Files {
  std::vector<fs::path> paths;
  std::map<std::string, fs::path> index;  // empty for model.safetensors
  fs::path index_path;
};

Files weight_files(const fs::path& dir) {
  Files out;
  const fs::path index = dir / k_index, single = dir / k_single;
  if (!fs::exists(index)) {
    if (!fs::exists(single))
      fail("directory " + detail::path_str(dir) + " has neither " + k_single + " nor " + k_index);
    out.paths.push_back(single);
    return out;
  }
  out.index_path = index;
  const std::string where = "index " + detail::path_str(index);
  const nlohmann::ordered_json j = detail::read_json_file(
      index, k_load, where + " ", k_max_index_bytes, detail::JsonKeys::last_wins);
  const auto map = j.is_object() ? j.find("weight_map") : j.end();
  if (map == j.end() || !map->is_object())
    fail(where + " has no \"weight_map\" object (tensor name -> file)");
  std::set<std::string> files;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string() || !detail::is_plain_file_name(file.get<std::string>()))
      fail(where + ": tensor " + detail::quoted_name(name) + " is mapped to " +
           detail::escaped(file.dump(), 200) + ", expected the name of a file beside the index");
    out.index.emplace(name, dir / file.get<std::string>());
    files.insert(file.get<std::string>());
  }
  for (const std::string& f : files) {
    const fs::path path = dir / f;
    if (!fs::exists(path)) {
      std::string some;
      for (const auto& [name, p] : out.index)
        if (p == path) {
          some = name;
          break;
        }
      fail(where + " places tensor " + detail::quoted_name(some) + " in " + file_str(path) +
           ", which does not exist");
    }
    out.paths.push_back(path);
  }
  return out;
}

// Where each expected tensor is, and in which order each file holds them:
// checked from the index and every file's header before anything is read.
template <class T>
std::map<fs::path, std::vector<std::string>> check_headers(const LlamaConfig& c,
                                                           const Files& files) {
  const std::vector<LlamaSlot<T>> slots = llama_slots<T>(c, nullptr);
  std::map<std::string, const LlamaSlot<T>*> expected;
  for (const LlamaSlot<T>& s : slots) expected.emplace(s.name, &s);
  const std::set<std::string> skipped = skipped_names(c);
  const std::string shapes = layout(c);
  const std::vector<std::size_t> head_shape{c.vocab_size, c.hidden_size};
  for (const auto& [name, path] : files.index)
    if (!expected.count(name) && !skipped.count(name))
      fail("index " + detail::path_str(files.index_path) + ": tensor " + detail::quoted_name(name) +
           " is not a parameter of the model (" + shapes + ")");
  std::map<std::string, fs::path> found;
  std::map<fs::path, std::vector<std::string>> order;
  for (const fs::path& path : files.paths) {
    const auto check = [&](const std::vector<SafetensorsDeclared>& declared,
                           const SafetensorsMetadata&) {
      for (const SafetensorsDeclared& d : declared) {
        const std::string where = file_str(path) + ": tensor " + detail::quoted_name(d.name);
        const auto slot = expected.find(d.name);
        const bool skip = skipped.count(d.name) > 0;
        if (slot == expected.end() && !skip)
          fail(where + " is not a parameter of the model (" + shapes + ")");
        if (const auto seen = found.find(d.name); seen != found.end())
          fail(where + " is also in " + file_str(seen->second));
        if (!files.index.empty()) {
          const auto placed = files.index.find(d.name);
          if (placed == files.index.end())
            fail(where + " is not in the index " + detail::path_str(files.index_path));
          if (placed->second != path)
            fail(where + " is placed in " + file_str(placed->second) + " by the index");
        }
        found.emplace(d.name, path);
        const std::vector<std::size_t>& want = skip ? head_shape : slot->second->shape;
        if (d.name == "lm_head.weight" || !skip) {
          if (d.shape != want)
            fail(where + " has shape " + detail::shape_str(d.shape) + ", expected " +
                 detail::shape_str(want) + " (" + shapes + ")");
          order[path].push_back(d.name);
        }
      }
    };
    detail::read_safetensors_for(
        k_load, path, [](const std::string&) { return false; }, check);
  }
  for (const LlamaSlot<T>& s : slots)
    if (!found.count(s.name)) {
      if (!files.index.empty() && files.index.count(s.name))
        fail("index " + detail::path_str(files.index_path) + " places tensor " +
             detail::quoted_name(s.name) + " in " + file_str(files.index.at(s.name)) +
             ", whose header does not declare it");
      std::string searched;
      for (const fs::path& p : files.paths)
        searched += (searched.empty() ? "" : ", ") + file_str(p);
      fail("tensor " + detail::quoted_name(s.name) + " (" + detail::shape_str(s.shape) +
           ") is missing from " + searched + " (" + shapes + ")");
    }
  return order;
}

// The tensor `name` of `path`, read alone and converted to T.
template <class T>
xt::xarray<T> read_one(const fs::path& path, const std::string& name,
                       const std::vector<std::size_t>& shape) {
  const Safetensors file = detail::read_safetensors_for(
      k_load, path, [&](const std::string& n) { return n == name; }, {});
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end() || it->second.shape() != shape)
    fail(file_str(path) + ": tensor " + detail::quoted_name(name) +
         " changed while the checkpoint was read");
  const StoredTensor& t = it->second;
  if (t.holds<T>()) return t.get<T>();
  if constexpr (std::is_same_v<T, float>)
    return xt::cast<float>(t.get<double>());
  else
    return xt::cast<double>(t.get<float>());
}

template <class T>
void write_config(const fs::path& dir, const LlamaConfig& config) {
  LlamaConfig c = config;
  c.torch_dtype = std::is_same_v<T, float> ? "float32" : "float64";
  const std::string text = llama_config_json(c);
  const fs::path target = dir / "config.json";
  const fs::path temp = dir / (".config.json." + detail::random_suffix() + ".tmp");
  detail::write_new_file(temp, {detail::ByteSpan{text.data(), text.size()}}, "export_llama");
  std::error_code error;
  fs::rename(temp, target, error);
  if (error) {
    fs::remove(temp, error);
    detail::fail_io("export_llama",
                    "cannot rename " + detail::path_str(temp) + " to " + detail::path_str(target));
  }
  detail::fsync_directory(dir);
}

GPTConfig gpt_config(const LlamaConfig& config, std::optional<std::size_t> block_size) {
  GPTConfig c = llama_gpt_config(config, block_size.value_or(config.max_position_embeddings));
  c.hf_mlp = true;
  return c;
}

}  // namespace

template <class T>
LlamaForCausalLM<T>::LlamaForCausalLM(const LlamaConfig& config,
                                      std::optional<std::size_t> block_size)
    : config_(config), gpt(gpt_config(config, block_size)) {}

template <class T>
void LlamaForCausalLM<T>::collect_parameters(const std::string& prefix,
                                             typename Module<T>::NamedParameters& out) {
  // Hugging Face's order: embed_tokens; per layer self_attn, mlp, input_layernorm,
  // post_attention_layernorm; norm; lm_head.
  const auto child = [&](const std::string& name, auto& variant) {
    std::visit([&](auto& m) { this->add_child(prefix, name, m, out); }, variant);
  };
  this->add_child(prefix, "model.embed_tokens", gpt.wte, out);
  this->add_child(prefix, "model.dropout", gpt.drop, out);
  for (std::size_t l = 0; l < gpt.h.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    TransformerBlock<T>& block = gpt.h[l];
    this->add_child(prefix, p + "self_attn", block.attn, out);
    child(p + "mlp", block.mlp);
    this->add_child(prefix, p + "dropout", block.dropout, out);
    child(p + "input_layernorm", block.ln_1);
    child(p + "post_attention_layernorm", block.ln_2);
  }
  child("model.norm", gpt.ln_f);
  if (gpt.lm_head) this->add_child(prefix, "lm_head", *gpt.lm_head, out);
}

template <class T>
ModuleConfig LlamaForCausalLM<T>::config() const {
  const LlamaConfig& c = config_;
  ModuleConfig out("LlamaForCausalLM");
  out.add("model_type", c.model_type)
      .add("vocab_size", c.vocab_size)
      .add("hidden_size", c.hidden_size)
      .add("intermediate_size", c.intermediate_size)
      .add("num_hidden_layers", c.num_hidden_layers)
      .add("num_attention_heads", c.num_attention_heads)
      .add("num_key_value_heads", c.num_key_value_heads)
      .add("max_position_embeddings", c.max_position_embeddings)
      .add("block_size", gpt.gpt_config().block_size)
      .add("rms_norm_eps", c.rms_norm_eps)
      .add("rope_theta", c.rope_theta)
      .add("tie_word_embeddings", c.tie_word_embeddings)
      .add("qkv_bias", c.qkv_bias)
      .add("o_bias", c.o_bias);
  detail::add_rope_scaling(out, c.rope_scaling);
  return out;
}

template <class T>
LlamaForCausalLM<T> load_llama(const fs::path& dir, const LlamaLoadOptions& options) {
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) fail("directory " + detail::path_str(dir) + " has no config.json");
  const LlamaConfig config = llama_config_from_json(config_path, k_load);
  const std::size_t context = options.block_size.value_or(config.max_position_embeddings);
  const detail::Check check(k_load);
  check.argument(context > 0 && context <= config.max_position_embeddings, "options.block_size",
                 "is ", context, ", expected 1 .. max_position_embeddings ",
                 config.max_position_embeddings);
  if (config.sliding_window && *config.sliding_window < context)
    fail("config " + detail::path_str(config_path) + ": \"sliding_window\" is " +
         std::to_string(*config.sliding_window) + ", smaller than the context " +
         std::to_string(context) +
         " the model is built for; GPT attends to every earlier position (pass "
         "LlamaLoadOptions::block_size <= the window)");
  const Files files = weight_files(dir);
  const std::map<fs::path, std::vector<std::string>> order = check_headers<T>(config, files);

  LlamaForCausalLM<T> model(config, context);
  std::map<std::string, LlamaSlot<T>> slots;
  for (LlamaSlot<T>& s : llama_slots<T>(config, &model)) slots.emplace(s.name, s);
  std::optional<std::pair<fs::path, std::vector<std::size_t>>> tied_head;
  for (const fs::path& path : files.paths) {
    const auto names = order.find(path);
    if (names == order.end()) continue;
    for (const std::string& name : names->second) {
      const auto slot = slots.find(name);
      if (slot == slots.end()) {  // a tied head, compared once the embedding is in
        tied_head.emplace(path, std::vector<std::size_t>{config.vocab_size, config.hidden_size});
        continue;
      }
      slot->second.target->set_value(read_one<T>(path, name, slot->second.shape));
    }
  }
  if (tied_head) {
    const xt::xarray<T> head = read_one<T>(tied_head->first, "lm_head.weight", tied_head->second);
    const xt::xarray<T>& embedding = model.gpt.wte.weight.value;
    if (!std::equal(head.begin(), head.end(), embedding.begin()))
      fail(file_str(tied_head->first) +
           ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but the config "
           "ties them (tie_word_embeddings)");
  }
  return model;
}

template <class T>
TensorDict<T> llama_state_dict(const LlamaForCausalLM<T>& model) {
  // The slots of load_llama, read instead of written.
  LlamaForCausalLM<T>& m = const_cast<LlamaForCausalLM<T>&>(model);  // only read
  TensorDict<T> out;
  for (const LlamaSlot<T>& s : llama_slots<T>(model.llama_config(), &m))
    out.insert(s.name, s.target->value);
  return out;
}

template <class T>
void export_llama(const LlamaForCausalLM<T>& model, const fs::path& dir) {
  const char* function = "export_llama";
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir))
    detail::fail_io(function, "cannot create the directory " + detail::path_str(dir));
  if (fs::exists(dir / k_index))
    detail::fail_argument(function, "dir",
                          detail::path_str(dir) + " holds " + k_index +
                              ", which load_llama would read instead of the exported " + k_single +
                              "; expected a directory without it");
  TensorMap tensors;
  for (const auto& [name, value] : llama_state_dict(model))
    tensors.emplace(name, StoredTensor(value));
  write_safetensors(dir / k_single, tensors, {{"format", "pt"}});
  write_config<T>(dir, model.llama_config());
}

template class LlamaForCausalLM<float>;
template class LlamaForCausalLM<double>;
template LlamaForCausalLM<float> load_llama(const fs::path&, const LlamaLoadOptions&);
template LlamaForCausalLM<double> load_llama(const fs::path&, const LlamaLoadOptions&);
template TensorDict<float> llama_state_dict(const LlamaForCausalLM<float>&);
template TensorDict<double> llama_state_dict(const LlamaForCausalLM<double>&);
template void export_llama(const LlamaForCausalLM<float>&, const fs::path&);
template void export_llama(const LlamaForCausalLM<double>&, const fs::path&);

}  // namespace xtgrad
