// LoRA on LLaMA's MLP (modules/lora.hpp): a GatedExpert's gate_proj, up_proj
// and down_proj adapted, against the composition of engine ops in double
// (value and the adapters' gradients), merged against unmerged, the PEFT
// files of a LlamaForCausalLM's MLP adapters round trip, and a SparseMoe's
// routed experts refused (its shared expert adapted).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/safetensors.hpp>
#include <xtgrad/modules/lora.hpp>
#include <xtgrad/modules/moe.hpp>
#include <xtgrad/modules/pretrained/hf_llama.hpp>

#include "support/test_helpers.hpp"
#include "support/tiny_llama.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> k_mlp = {"gate_proj", "up_proj", "down_proj"};

// Every adapter's B drawn at random (a fresh one is 0 and changes nothing).
void nonzero_adapters(Module<double>& model) {
  std::uint32_t seed = 40;
  for (Parameter<double>* p : model.parameters())
    if (p->name == "lora_B.weight")
      p->value = random_array({p->value.shape()[0], p->value.shape()[1]}, seed++, -0.5, 0.5);
}

// x W^T + s (x A^T) B^T from the layer's values, as leaves.
Var<double> adapted(Tape<double>& tape, const Var<double>& x, Linear<double>& layer,
                    std::vector<Var<double>>& adapters) {
  const Var<double> a = tape.leaf(layer.lora->lora_A.value);
  const Var<double> b = tape.leaf(layer.lora->lora_B.value);
  adapters.insert(adapters.end(), {a, b});
  const Var<double> delta = scale(linear(linear(x, a), b), layer.lora->scaling());
  return add(linear(x, tape.leaf(layer.weight.value, false)), delta);
}

}  // namespace

TEST_CASE("apply_lora: a LLaMA MLP's three projections equal the composition in double") {
  Generator generator(3);
  GatedExpert<double> mlp(8, 12, Activation::silu, ExpertNames::llama, generator);
  CHECK(apply_lora<double>(mlp, k_mlp, 2, 4.0) == k_mlp);
  nonzero_adapters(mlp);
  const xt::xarray<double> xv = random_array({2, 3, 8}, 5), dy = random_array({2, 3, 8}, 6);

  Tape<double> tape;
  const Var<double> y = mlp.forward(tape.leaf(xv));
  tape.backward(y, dy);
  // down(up(x) * silu(gate(x))), each layer with its adapter
  Tape<double> ref_tape;
  std::vector<Var<double>> adapters;
  const Var<double> x = ref_tape.leaf(xv);
  const Var<double> g = adapted(ref_tape, x, mlp.gate, adapters);
  const Var<double> u = adapted(ref_tape, x, mlp.up, adapters);
  const Var<double> ref = adapted(ref_tape, mul(u, silu(g)), mlp.down, adapters);
  ref_tape.backward(ref, dy);

  check_close(y.value(), ref.value(), 1e-12, 1e-12);
  const std::vector<Linear<double>*> layers = {&mlp.gate, &mlp.up, &mlp.down};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    CAPTURE(i);
    check_close(layers[i]->lora->lora_A.grad, adapters[2 * i].grad(), 1e-12, 1e-12);
    check_close(layers[i]->lora->lora_B.grad, adapters[2 * i + 1].grad(), 1e-12, 1e-12);
    CHECK(!layers[i]->weight.has_grad);
  }

  // merged: the fused path on W + s B A
  const xt::xarray<double> unmerged = mlp.infer(xv), down = mlp.down.weight.value;
  CHECK(merge_lora<double>(mlp) == k_mlp);
  check_close(mlp.infer(xv), unmerged);
  CHECK(unmerge_lora<double>(mlp).size() == 3);
  check_close(mlp.down.weight.value, down, 1e-14, 1e-15);
}

TEST_CASE("LoRA on a LlamaForCausalLM's MLP: PEFT's names, and save / load round trip") {
  LlamaForCausalLM<double> model(tiny_llama());
  const std::vector<std::string> names = apply_lora<double>(model, k_mlp, 2, 4.0);
  REQUIRE(names.size() == 6);
  CHECK(names.front() == "model.layers.0.mlp.gate_proj");
  nonzero_adapters(model);
  Indices tokens = xt::empty<std::int64_t>(std::vector<std::size_t>{2, 5});
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens.data()[i] = std::int64_t(i * 5 % 13);
  const xt::xarray<double> logits = model.infer(tokens);

  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_lora_mlp_scratch";
  fs::remove_all(dir);
  save_lora_adapter<double>(model, dir);
  const Safetensors file = read_safetensors(dir / "adapter_model.safetensors");
  CHECK(file.tensors.size() == 12);
  CHECK(file.tensors.count("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight") == 1);
  const nlohmann::json config = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
  CHECK(config["target_modules"] == nlohmann::json({"down_proj", "gate_proj", "up_proj"}));

  LlamaForCausalLM<double> other(tiny_llama());  // the same base weights, no adapter yet
  load_lora_adapter<double>(other, dir);
  CHECK(lora_layers<double>(other) == names);
  check_close(other.infer(tokens), logits, 1e-13, 1e-13);
  fs::remove_all(dir);
}

TEST_CASE("apply_lora: a SparseMoe's routed experts are refused, its shared expert adapted") {
  SparseMoeOptions options;
  options.num_experts = 2;
  options.top_k = 1;
  options.shared_expert_intermediate_size = 6;
  SparseMoe<double> moe(8, 12, options);
  CHECK(message_of([&] { apply_lora<double>(moe, {"w1"}, 2, 2.0); }) ==
        "xtgrad::apply_lora: argument 'target_modules' matches 'experts.0.w1', a layer of "
        "GatedExpert, whose fused forward never calls the layer's; LoRA cannot adapt it");
  CHECK(apply_lora<double>(moe, {"shared_expert.gate_proj"}, 2, 2.0) ==
        std::vector<std::string>{"shared_expert.gate_proj"});
  nonzero_adapters(moe);
  const xt::xarray<double> x = random_array({5, 8}, 7);
  const xt::xarray<double> unmerged = moe.infer(x);
  merge_lora<double>(moe);
  check_close(moe.infer(x), unmerged);
}
