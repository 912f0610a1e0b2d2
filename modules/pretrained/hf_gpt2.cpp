#include "hf_gpt2.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "../../engine/errors.hpp"
#include "../../io/safetensors_detail.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

// One parameter to fill: the checkpoint's name and shape (the layouts are
// the same: GPT's gpt2 style and CausalSelfAttention's llama layout store
// every weight as Hugging Face does).
template <class T>
struct Gpt2Slot {
  std::string key;
  std::vector<std::size_t> file_shape;
  Parameter<T>* target;
};

std::string dotted(std::string prefix) {
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  return prefix;
}

template <class T>
std::vector<std::size_t> shape_of(const Parameter<T>& p) {
  return {p.value.shape().begin(), p.value.shape().end()};
}

// One block's parameters under `prefix` ("h.0."): a gpt2-style block's
// names and layouts are HF GPT2Block's (transformer_block.hpp). A LoRA
// adapter's parameters are not GPT-2's and are left out.
template <class T>
void block_slots(TransformerBlock<T>& block, const std::string& prefix,
                 std::vector<Gpt2Slot<T>>& slots, std::set<std::string>& buffers) {
  for (const auto& [name, p] : block.named_parameters())
    if (name.find(".lora_") == std::string::npos) slots.push_back({prefix + name, shape_of(*p), p});
  buffers.insert(prefix + "attn.bias");
  buffers.insert(prefix + "attn.masked_bias");
}

template <class T>
void require_gpt2(const char* function, GPTStyle style, bool sparse) {
  if (style != GPTStyle::gpt2)
    detail::fail_argument(function, "model",
                          "is of the llama style; GPT-2 checkpoints load into the gpt2 style");
  detail::Check(function).argument(
      !sparse, "model",
      "has sparse (mixture-of-experts) FFNs; GPT-2 checkpoints hold dense ones (num_experts 0)");
}

[[noreturn]] void fail_unknown(const char* function, const std::string& name,
                               const std::string& layout) {
  detail::fail_value(function, "tensor " + detail::quoted_name(name) +
                                   " is not a parameter or buffer of the model (" + layout + ")");
}

template <class T, class S>
void check_slot_shape(const char* function, const Gpt2Slot<T>& slot, const S& shape,
                      const std::string& layout) {
  if (!std::equal(shape.begin(), shape.end(), slot.file_shape.begin(), slot.file_shape.end()))
    detail::fail_value(function, "tensor " + detail::quoted_name(slot.key) + " has shape " +
                                     detail::shape_str(shape) + ", expected " +
                                     detail::shape_str(slot.file_shape) + " (" + layout + ")");
}

// Checks every slot and every name of `tensors` (those starting with
// `scope`), then assigns all slots: all or nothing.
template <class T>
void load_slots(const char* function, const TensorMap& tensors,
                const std::vector<Gpt2Slot<T>>& slots, const std::set<std::string>& skipped,
                const std::string& scope, const std::string& layout) {
  std::set<std::string> known = skipped;
  for (const Gpt2Slot<T>& s : slots) known.insert(s.key);
  for (const auto& [name, tensor] : tensors)
    if (name.compare(0, scope.size(), scope) == 0 && !known.count(name))
      fail_unknown(function, name, layout);
  std::vector<xt::xarray<T>> values;
  values.reserve(slots.size());
  for (const Gpt2Slot<T>& slot : slots) {
    const xt::xarray<T>& a = get_tensor<T>(tensors, slot.key, function);
    check_slot_shape(function, slot, a.shape(), layout);
    values.push_back(a);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].target->set_value(std::move(values[i]));
}

// The tensor `name` of a header as get_tensor<T> would return it: refused
// as get_tensor refuses it when missing or not of a T dtype.
template <class T>
const SafetensorsDeclared& declared_tensor(
    const char* function, const std::map<std::string, const SafetensorsDeclared*>& by_name,
    const std::string& name) {
  const auto found = by_name.find(name);
  if (found == by_name.end()) {
    std::vector<const std::string*> names;
    names.reserve(by_name.size());
    for (const auto& entry : by_name) names.push_back(&entry.first);
    detail::fail_no_tensor(function, name, names);
  }
  if (!detail::dtype_reads_as<T>(found->second->dtype))
    detail::fail_tensor_dtype<T>(function, name, found->second->dtype);
  return *found->second;
}

// The checks of load_slots on what a file's header declares, in the same
// order and with the same messages, before any tensor is read.
template <class T>
void check_declared(const char* function, const std::vector<SafetensorsDeclared>& declared,
                    const std::vector<Gpt2Slot<T>>& slots, const std::set<std::string>& skipped,
                    const std::string& scope, const std::string& layout) {
  std::map<std::string, const SafetensorsDeclared*> by_name;  // those under `scope`
  for (const SafetensorsDeclared& d : declared)
    if (d.name.compare(0, scope.size(), scope) == 0) by_name.emplace(d.name, &d);
  std::set<std::string> known = skipped;
  for (const Gpt2Slot<T>& s : slots) known.insert(s.key);
  for (const auto& [name, d] : by_name)
    if (!known.count(name)) fail_unknown(function, name, layout);
  for (const Gpt2Slot<T>& slot : slots) {
    const SafetensorsDeclared& d = declared_tensor<T>(function, by_name, slot.key);
    check_slot_shape(function, slot, d.shape, layout);
  }
}

template <class T>
std::string gpt2_layout(const GPT<T>& model) {
  const GPTConfig& c = model.gpt_config();
  return "HF GPT-2 with vocab_size " + std::to_string(c.vocab_size) + ", n_positions " +
         std::to_string(c.block_size) + ", n_embd " + std::to_string(c.n_embd) + ", n_layer " +
         std::to_string(c.n_layer) + ", n_inner " + std::to_string(*c.ffn_hidden) +
         "; Conv1D weights [in, out]";
}

template <class T>
std::vector<Gpt2Slot<T>> llama_slots(CausalSelfAttention<T>& attention, const std::string& prefix) {
  if (attention.options().layout != AttentionLayout::llama)
    detail::fail_argument("load_llama_attention", "attention",
                          "has the gpt2 layout; LLaMA weights load into the llama layout");
  const auto slot = [&](const char* name, Linear<T>& linear) {
    return Gpt2Slot<T>{prefix + name, shape_of(linear.weight), &linear.weight};
  };
  return {slot("q_proj.weight", *attention.q_proj), slot("k_proj.weight", *attention.k_proj),
          slot("v_proj.weight", *attention.v_proj), slot("o_proj.weight", *attention.o_proj)};
}

template <class T>
std::string llama_layout(const CausalSelfAttention<T>& a) {
  return "LlamaAttention with hidden_size " + std::to_string(a.n_embd()) + ", " +
         std::to_string(a.n_heads()) + " heads, " + std::to_string(a.n_kv_heads()) +
         " key/value heads, no biases; nn.Linear weights [out, in]";
}

[[noreturn]] void fail_tied_head(const char* function, const std::string& prefix) {
  detail::fail_value(function, "tensor 'lm_head.weight' differs from '" + prefix +
                                   "wte.weight', but the model ties them "
                                   "(GPTConfig::tie_embeddings = false to load both)");
}

// The slots of a whole model, under "transformer." when the file has
// "transformer.wte.weight" (`has` tells which names the file holds); a tied
// model skips the file's lm_head.weight (its values are compared with wte's).
template <class T>
std::vector<Gpt2Slot<T>> gpt2_slots(GPT<T>& model,
                                    const std::function<bool(const std::string&)>& has,
                                    std::set<std::string>& skipped, std::string& prefix) {
  prefix = has("transformer.wte.weight") ? "transformer." : "";
  std::vector<Gpt2Slot<T>> slots;
  slots.push_back({prefix + "wte.weight", shape_of(model.wte.weight), &model.wte.weight});
  slots.push_back({prefix + "wpe.weight", shape_of(model.wpe->weight), &model.wpe->weight});
  for (std::size_t l = 0; l < model.h.size(); ++l)
    block_slots(model.h[l], prefix + "h." + std::to_string(l) + ".", slots, skipped);
  auto& ln_f = std::get<LayerNorm<T>>(model.ln_f);
  slots.push_back({prefix + "ln_f.weight", shape_of(ln_f.weight), &ln_f.weight});
  slots.push_back({prefix + "ln_f.bias", shape_of(ln_f.bias), &ln_f.bias});
  const std::string head = "lm_head.weight";
  if (model.lm_head)
    slots.push_back({head, shape_of(model.lm_head->weight), &model.lm_head->weight});
  else if (has(head))
    skipped.insert(head);
  return slots;
}

}  // namespace

template <class T>
void load_gpt2(GPT<T>& model, const TensorMap& tensors) {
  const char* function = "load_gpt2";
  require_gpt2<T>(function, model.gpt_config().style, model.gpt_config().num_experts > 0);
  std::set<std::string> skipped;
  std::string prefix;
  const std::vector<Gpt2Slot<T>> slots = gpt2_slots(
      model, [&](const std::string& name) { return tensors.count(name) > 0; }, skipped, prefix);
  const std::string head = "lm_head.weight";
  if (!model.lm_head && tensors.count(head)) {
    // A tied checkpoint that still holds lm_head.weight: it must be wte's.
    const xt::xarray<T>& lm = get_tensor<T>(tensors, head, function);
    const xt::xarray<T>& wte = get_tensor<T>(tensors, prefix + "wte.weight", function);
    if (lm.shape() != wte.shape() || !std::equal(lm.begin(), lm.end(), wte.begin()))
      fail_tied_head(function, prefix);
  }
  load_slots(function, tensors, slots, skipped, "", gpt2_layout(model));
}

template <class T>
void load_gpt2(GPT<T>& model, const fs::path& file) {
  const char* function = "load_gpt2";
  require_gpt2<T>(function, model.gpt_config().style, model.gpt_config().num_experts > 0);
  // Every name, dtype and shape the header declares is checked against the
  // model before any tensor is read.
  const auto check_header = [&](const std::vector<SafetensorsDeclared>& declared,
                                const SafetensorsMetadata&) {
    std::map<std::string, const SafetensorsDeclared*> by_name;
    for (const SafetensorsDeclared& d : declared) by_name.emplace(d.name, &d);
    std::set<std::string> skipped;
    std::string prefix;
    const std::vector<Gpt2Slot<T>> slots = gpt2_slots(
        model, [&](const std::string& name) { return by_name.count(name) > 0; }, skipped, prefix);
    const std::string head = "lm_head.weight";
    if (!model.lm_head && by_name.count(head)) {
      // A tied lm_head.weight of another shape than wte's differs from it.
      const SafetensorsDeclared& lm = declared_tensor<T>(function, by_name, head);
      const SafetensorsDeclared& wte = declared_tensor<T>(function, by_name, prefix + "wte.weight");
      if (lm.shape != wte.shape) fail_tied_head(function, prefix);
    }
    check_declared(function, declared, slots, skipped, "", gpt2_layout(model));
  };
  load_gpt2(model, detail::read_safetensors_for(function, file, {}, check_header).tensors);
}

template <class T>
void load_gpt2_block(TransformerBlock<T>& block, const TensorMap& tensors,
                     const std::string& prefix) {
  const char* function = "load_gpt2_block";
  require_gpt2<T>(function, block.options().style, block.sparse_moe() != nullptr);
  std::vector<Gpt2Slot<T>> slots;
  std::set<std::string> skipped;
  block_slots(block, dotted(prefix), slots, skipped);
  load_slots(function, tensors, slots, skipped, dotted(prefix),
             "HF GPT2Block with n_embd " + std::to_string(block.n_embd()) + ", n_inner " +
                 std::to_string(*block.options().ffn_hidden));
}

template <class T>
TensorDict<T> export_gpt2(const GPT<T>& model) {
  require_gpt2<T>("export_gpt2", model.gpt_config().style, model.gpt_config().num_experts > 0);
  // GPT's names and layouts are GPT2Model's (no prefix; lm_head.weight only
  // when not tied): its state dict, without any LoRA adapter's parameters.
  TensorDict<T> out;
  for (const auto& [name, p] : model.named_parameters())
    if (name.find(".lora_") == std::string::npos) out.insert(name, p->value);
  return out;
}

template <class T>
void save_gpt2(const GPT<T>& model, const fs::path& file) {
  TensorMap tensors;
  for (const auto& [name, value] : export_gpt2(model)) tensors.emplace(name, StoredTensor(value));
  write_safetensors(file, tensors, {{"format", "pt"}});
}

std::string llama_attention_prefix(std::size_t layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn";
}

template <class T>
void load_llama_attention(CausalSelfAttention<T>& attention, const TensorMap& tensors,
                          const std::string& prefix) {
  const std::vector<Gpt2Slot<T>> slots = llama_slots(attention, dotted(prefix));
  std::set<std::string> none;
  load_slots("load_llama_attention", tensors, slots, none, dotted(prefix), llama_layout(attention));
}

template <class T>
void load_llama_attention(CausalSelfAttention<T>& attention, const fs::path& file,
                          const std::string& prefix) {
  const std::string scope = dotted(prefix);
  const std::vector<Gpt2Slot<T>> slots = llama_slots(attention, scope);
  const auto check_header = [&](const std::vector<SafetensorsDeclared>& declared,
                                const SafetensorsMetadata&) {
    check_declared("load_llama_attention", declared, slots, {}, scope, llama_layout(attention));
  };
  // Everything under the attention's prefix, so that a bias there is seen and refused.
  const TensorMap tensors =
      read_safetensors(
          file, [&](const std::string& name) { return name.compare(0, scope.size(), scope) == 0; },
          check_header)
          .tensors;
  load_llama_attention(attention, tensors, prefix);
}

#define XTGRAD_HF_GPT2_INSTANTIATE(T)                                                        \
  template void load_gpt2(GPT<T>&, const TensorMap&);                                        \
  template void load_gpt2(GPT<T>&, const fs::path&);                                         \
  template void load_gpt2_block(TransformerBlock<T>&, const TensorMap&, const std::string&); \
  template TensorDict<T> export_gpt2(const GPT<T>&);                                         \
  template void save_gpt2(const GPT<T>&, const fs::path&);                                   \
  template void load_llama_attention(CausalSelfAttention<T>&, const TensorMap&,              \
                                     const std::string&);                                    \
  template void load_llama_attention(CausalSelfAttention<T>&, const fs::path&, const std::string&);
XTGRAD_HF_GPT2_INSTANTIATE(float)
XTGRAD_HF_GPT2_INSTANTIATE(double)
#undef XTGRAD_HF_GPT2_INSTANTIATE

}  // namespace xtgrad
