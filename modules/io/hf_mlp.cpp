#include "hf_mlp.hpp"

#include <set>
#include <utility>
#include <vector>

#include <xtensor/xmanipulation.hpp>

#include "../../engine/errors.hpp"
#include "safetensors_detail.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

// One parameter to fill: the checkpoint's name and shape, and whether the
// checkpoint stores it transposed relative to xtgrad's layout.
template <class T>
struct Slot {
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

std::string key(std::string prefix, const std::string& name) {
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  return prefix + name;
}

// All or nothing: every slot is read and checked into `values` before any
// parameter is assigned.
template <class T>
void load_slots(const std::string& function, const TensorMap& tensors,
                const std::vector<Slot<T>>& slots, const std::vector<Unmatched>& unmatched,
                const std::string& layout) {
  for (const Unmatched& u : unmatched)
    if (tensors.count(u.key))
      detail::fail_value(
          function, "tensor " + detail::quoted_name(u.key) + " is in the checkpoint, but " + u.why);
  std::vector<xt::xarray<T>> values;
  for (const Slot<T>& slot : slots) {
    const xt::xarray<T>& a = get_tensor<T>(tensors, slot.key, function);
    if (!std::equal(a.shape().begin(), a.shape().end(), slot.file_shape.begin(),
                    slot.file_shape.end()))
      detail::fail_value(function, "tensor " + detail::quoted_name(slot.key) + " has shape " +
                                       detail::shape_str(a.shape()) + ", expected " +
                                       detail::shape_str(slot.file_shape) + " (" + layout + ")");
    values.push_back(slot.transposed ? xt::xarray<T>(xt::transpose(a)) : a);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].target->value = std::move(values[i]);
}

template <class T>
std::vector<Slot<T>> llama_slots(GatedFFN<T>& ffn, const std::string& prefix,
                                 std::vector<Unmatched>& unmatched) {
  const std::size_t d_in = ffn.w_up.value.shape()[0], d_hidden = ffn.w_up.value.shape()[1];
  const std::size_t d_out = ffn.w_down.value.shape()[1];
  std::vector<Slot<T>> slots = {
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
std::vector<Slot<T>> gpt2_slots(FeedForward<T>& ffn, const std::string& prefix) {
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

// Reads only the named tensors of `file`.
template <class T>
TensorMap read_only(const fs::path& file, const std::vector<Slot<T>>& slots,
                    const std::vector<Unmatched>& unmatched) {
  std::set<std::string> wanted;
  for (const Slot<T>& s : slots) wanted.insert(s.key);
  for (const Unmatched& u : unmatched) wanted.insert(u.key);
  return read_safetensors(file, [&](const std::string& name) { return wanted.count(name) > 0; })
      .tensors;
}

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
  const std::vector<Slot<T>> slots = llama_slots(ffn, prefix, unmatched);
  load_slots("load_llama_mlp", tensors, slots, unmatched, llama_layout(ffn));
}

template <class T>
void load_llama_mlp(GatedFFN<T>& ffn, const fs::path& file, const std::string& prefix) {
  std::vector<Unmatched> unmatched;
  const std::vector<Slot<T>> slots = llama_slots(ffn, prefix, unmatched);
  load_slots("load_llama_mlp", read_only(file, slots, unmatched), slots, unmatched,
             llama_layout(ffn));
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const TensorMap& tensors, const std::string& prefix) {
  load_slots("load_gpt2_mlp", tensors, gpt2_slots(ffn, prefix), {}, gpt2_layout(ffn));
}

template <class T>
void load_gpt2_mlp(FeedForward<T>& ffn, const fs::path& file, const std::string& prefix) {
  const std::vector<Slot<T>> slots = gpt2_slots(ffn, prefix);
  load_slots("load_gpt2_mlp", read_only(file, slots, {}), slots, {}, gpt2_layout(ffn));
}

template void load_llama_mlp(GatedFFN<float>&, const TensorMap&, const std::string&);
template void load_llama_mlp(GatedFFN<double>&, const TensorMap&, const std::string&);
template void load_llama_mlp(GatedFFN<float>&, const fs::path&, const std::string&);
template void load_llama_mlp(GatedFFN<double>&, const fs::path&, const std::string&);
template void load_gpt2_mlp(FeedForward<float>&, const TensorMap&, const std::string&);
template void load_gpt2_mlp(FeedForward<double>&, const TensorMap&, const std::string&);
template void load_gpt2_mlp(FeedForward<float>&, const fs::path&, const std::string&);
template void load_gpt2_mlp(FeedForward<double>&, const fs::path&, const std::string&);

}  // namespace xtgrad
