// LoRA (modules/lora.hpp, lora_layer.hpp): a LoRA layer against PEFT's math
// (PyTorch fixture) and against its composition from engine ops in double,
// frozen base parameters (no gradient, no optimizer state, untouched by a
// step), apply_lora on the attention and FFN modules and GPT in both styles
// (names kept, errors), merge / unmerge, the PEFT adapter files round trip,
// and a short fine-tune of a tiny GPT.

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/safetensors.hpp>
#include <xtgrad/modules/feed_forward.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/lora.hpp>
#include <xtgrad/modules/mlp.hpp>
#include <xtgrad/modules/multihead_attention.hpp>
#include <xtgrad/optim/adamw.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/lora_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::lora;

namespace {

template <std::size_t N>
xt::xarray<double> fixture(const double (&values)[N], std::vector<std::size_t> shape) {
  REQUIRE(std::size_t(xt::compute_size(shape)) == N);
  return from_fixture<double>(values, shape);
}

GPTConfig tiny(GPTStyle style) {
  GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.style = style;
  if (style == GPTStyle::llama) {
    c.n_kv_head = 1;
    c.ffn_hidden = 12;
  }
  return c;
}

Indices token_ids(std::size_t rows, std::size_t cols, std::int64_t vocab, std::int64_t step) {
  Indices t = xt::empty<std::int64_t>(std::vector<std::size_t>{rows, cols});
  for (std::size_t i = 0; i < t.size(); ++i)
    t.data()[i] = (static_cast<std::int64_t>(i) * step + 3) % vocab;
  return t;
}

// Random B for every adapter (a fresh B = 0 would hide every adapter term).
void randomize_lora_B(Module<double>& model, std::uint32_t seed) {
  for (const auto& [name, p] : model.named_parameters())
    if (name.find("lora_B") != std::string::npos)
      p->value = random_array({p->value.shape()[0], p->value.shape()[1]}, seed++, -0.5, 0.5);
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_lora_scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::vector<std::string> names_of(Module<double>& m) {
  std::vector<std::string> out;
  for (const auto& entry : m.named_parameters()) out.push_back(entry.first);
  return out;
}

}  // namespace

TEST_CASE("LoRALinear: values and gradients equal PEFT's (PyTorch) and the composition") {
  Generator g(1);
  Linear<double> base(fx::in, fx::out, true, g);
  base.weight.value = fixture(fx::linear_weight, {fx::out, fx::in});
  base.bias.value = fixture(fx::linear_bias, {fx::out});
  LoRALinear<double> layer(base, LoRAOptions{fx::r, fx::lora_alpha, 0.0}, g);
  layer.adapter().lora_A.value = fixture(fx::linear_lora_A, {fx::r, fx::in});
  layer.adapter().lora_B.value = fixture(fx::linear_lora_B, {fx::out, fx::r});
  CHECK(layer.adapter().scaling() == 3.0);
  CHECK(names_of(layer) ==
        std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"});

  const xt::xarray<double> x = fixture_array<double>(fx::x_shape, fx::linear_x);
  const xt::xarray<double> dy = fixture_array<double>(fx::y_shape, fx::linear_dy);
  Tape<double> tape;
  const Var<double> xv = tape.leaf(x);
  const Var<double> y = layer(xv);
  tape.backward(y, dy);
  check_close(y.value(), fixture_array<double>(fx::y_shape, fx::linear_y));
  check_close(xv.grad(), fixture_array<double>(fx::x_shape, fx::linear_dx));
  check_close(layer.adapter().lora_A.grad, fixture(fx::linear_dlora_A, {fx::r, fx::in}));
  check_close(layer.adapter().lora_B.grad, fixture(fx::linear_dlora_B, {fx::out, fx::r}));
  // Only A and B get gradients: the frozen base holds no gradient buffer.
  CHECK(!layer.weight.requires_grad);
  CHECK(!layer.weight.has_grad);
  CHECK(layer.weight.grad.size() == 0);
  CHECK(layer.bias.grad.size() == 0);

  // The composition base + scaled product, from engine ops, to 1e-12.
  Tape<double> ref;
  const Var<double> rx = ref.leaf(x), w = ref.leaf(layer.weight.value, false),
                    b = ref.leaf(layer.bias.value, false),
                    a = ref.leaf(layer.adapter().lora_A.value),
                    bb = ref.leaf(layer.adapter().lora_B.value);
  const Var<double> ry = add(linear(rx, w, b), scale(linear(linear(rx, a), bb), 3.0));
  ref.backward(ry, dy);
  check_close(y.value(), ry.value());
  check_close(xv.grad(), rx.grad());
  check_close(layer.adapter().lora_A.grad, a.grad());
  check_close(layer.adapter().lora_B.grad, bb.grad());

  // Merged equals unmerged, and equals PEFT's merged weight.
  merge_lora<double>(layer);
  check_close(layer.weight.value, fixture(fx::linear_merged_weight, {fx::out, fx::in}));
  check_close(layer.infer(x), y.value());
  unmerge_lora<double>(layer);
  check_close(layer.weight.value, fixture(fx::linear_weight, {fx::out, fx::in}));
}

TEST_CASE("LoRA on a Conv1D: PEFT's fan_in_fan_out layer (PyTorch) and its merge") {
  Generator g(2);
  Conv1D<double> conv(fx::out, fx::in, g);
  conv.weight.value = fixture(fx::conv1d_weight, {fx::in, fx::out});
  conv.bias.value = fixture(fx::conv1d_bias, {fx::out});
  conv.lora.emplace(fx::in, fx::out, LoRAOptions{fx::r, fx::lora_alpha, 0.0}, g);
  conv.lora->lora_A.value = fixture(fx::conv1d_lora_A, {fx::r, fx::in});
  conv.lora->lora_B.value = fixture(fx::conv1d_lora_B, {fx::out, fx::r});
  const xt::xarray<double> x = fixture_array<double>(fx::x_shape, fx::conv1d_x);
  Tape<double> tape;
  const Var<double> xv = tape.leaf(x);
  const Var<double> y = conv(xv);
  tape.backward(y, fixture_array<double>(fx::y_shape, fx::conv1d_dy));
  check_close(y.value(), fixture_array<double>(fx::y_shape, fx::conv1d_y));
  check_close(xv.grad(), fixture_array<double>(fx::x_shape, fx::conv1d_dx));
  check_close(conv.lora->lora_A.grad, fixture(fx::conv1d_dlora_A, {fx::r, fx::in}));
  check_close(conv.lora->lora_B.grad, fixture(fx::conv1d_dlora_B, {fx::out, fx::r}));
  CHECK(conv.config().describe() == "Conv1D(nf=3, nx=4, lora_r=2, lora_alpha=6, lora_dropout=0)");
  merge_lora<double>(conv);
  check_close(conv.weight.value, fixture(fx::conv1d_merged_weight, {fx::in, fx::out}));
  check_close(conv.infer(x), y.value());
}

TEST_CASE("LoRA: PEFT's initialization leaves the layer's output unchanged") {
  Generator g(3);
  Linear<float> base(16, 5, true, g);
  const xt::xarray<float> x = xt::cast<float>(random_array({3, 16}, 4));
  const xt::xarray<float> before = base.infer(x);
  LoRALinear<float> layer(base, LoRAOptions{4, 8.0, 0.0}, g);
  CHECK(xt::all(xt::equal(layer.adapter().lora_B.value, 0.0f)));
  CHECK(layer.adapter().lora_A.value.shape() == Shape{4, 16});
  CHECK(xt::amax(xt::abs(layer.adapter().lora_A.value))() <= 0.25f);  // 1 / sqrt(16)
  CHECK(xt::amax(xt::abs(layer.adapter().lora_A.value))() > 0.15f);
  CHECK(layer.infer(x) == before);
}

TEST_CASE("LoRA: an optimizer steps A and B only, with no state for the frozen weights") {
  Generator g(5);
  LoRALinear<double> layer(6, 4, true, LoRAOptions{2, 4.0, 0.0}, g);
  const xt::xarray<double> w = layer.weight.value, b = layer.bias.value;
  const xt::xarray<double> a = layer.adapter().lora_A.value;
  optim::AdamW<double> adamw(layer.parameters(), optim::AdamWOptions(0.1));
  for (int step = 0; step < 2; ++step) {
    adamw.zero_grad();
    Tape<double> tape;
    tape.backward(sum(square(layer(tape.leaf(random_array({5, 6}, 6))))));
    adamw.step();
  }
  CHECK(layer.weight.value == w);
  CHECK(layer.bias.value == b);
  CHECK(layer.adapter().lora_A.value != a);
  CHECK(xt::any(xt::not_equal(layer.adapter().lora_B.value, 0.0)));
  // State for parameters 2 and 3 (lora_A, lora_B) only.
  for (const auto& entry : adamw.state_dict().arrays) {
    INFO(entry.first);
    CHECK((entry.first.rfind("state.2.", 0) == 0 || entry.first.rfind("state.3.", 0) == 0));
  }
  CHECK(layer.weight.grad.size() == 0);
  layer.weight.zero_grad();  // stays released
  CHECK(layer.weight.grad.size() == 0);
  layer.weight.set_requires_grad(true);  // unfrozen: a zero gradient of its shape again
  CHECK(layer.weight.grad == xt::zeros<double>({4, 6}));
  CHECK(!layer.weight.has_grad);
}

TEST_CASE("apply_lora: GPT in both styles keeps every name and adds PEFT's") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    CAPTURE(style_name(style));
    GPT<double> model(tiny(style));
    const std::vector<std::string> before = names_of(model);
    const std::vector<std::string> targets = style == GPTStyle::gpt2
                                                 ? std::vector<std::string>{"c_attn"}
                                                 : std::vector<std::string>{"q_proj", "v_proj"};
    const std::vector<std::string> wrapped = apply_lora<double>(model, targets, 4, 8.0);
    const std::vector<std::string> expected =
        style == GPTStyle::gpt2 ? std::vector<std::string>{"h.0.attn.c_attn", "h.1.attn.c_attn"}
                                : std::vector<std::string>{"h.0.attn.q_proj", "h.0.attn.v_proj",
                                                           "h.1.attn.q_proj", "h.1.attn.v_proj"};
    CHECK(wrapped == expected);
    CHECK(lora_layers<double>(model) == expected);
    std::vector<std::string> after = names_of(model), kept;
    for (const std::string& name : after)
      if (name.find(".lora_") == std::string::npos) kept.push_back(name);
    CHECK(kept == before);
    CHECK(after.size() == before.size() + 2 * expected.size());
    for (const auto& entry : model.named_parameters()) {
      const bool adapter = entry.first.find(".lora_") != std::string::npos;
      CHECK(entry.second->requires_grad == adapter);
    }
    // A fresh adapter changes nothing; the keys are PEFT's.
    const TensorDict<double> adapters = lora_state_dict<double>(model);
    CHECK(adapters.keys().front() == "base_model.model." + expected.front() + ".lora_A.weight");
  }
}

TEST_CASE("apply_lora: MultiheadAttention's out_proj and FeedForward's layers") {
  Generator g(7);
  MultiheadAttention<double> mha(8, 2, {}, g);
  CHECK(apply_lora<double>(mha, {"out_proj"}, 2, 4.0) == std::vector<std::string>{"out_proj"});
  randomize_lora_B(mha, 8);
  const xt::xarray<double> x = random_array({2, 3, 8}, 9);
  const xt::xarray<double> adapted = mha.infer(x);
  merge_lora<double>(mha);
  check_close(mha.infer(x), adapted);

  // FeedForward: the composed path (adapters on) equals the fused one on merged weights.
  FeedForward<double> ffn(8, 12, Activation::gelu_tanh, g);
  CHECK(apply_lora<double>(ffn, {"w1", "w2"}, 3, 3.0) == std::vector<std::string>{"w1", "w2"});
  randomize_lora_B(ffn, 10);
  const xt::xarray<double> unmerged = ffn.infer(x);
  CHECK(merge_lora<double>(ffn).size() == 2);
  check_close(ffn.infer(x), unmerged);
  CHECK(unmerge_lora<double>(ffn).size() == 2);
  check_close(ffn.infer(x), unmerged);
}

TEST_CASE("apply_lora: bad arguments name the argument, before anything changes") {
  GPT<double> model(tiny(GPTStyle::llama));
  const auto fails = [&](const std::vector<std::string>& targets, std::size_t r, double alpha,
                         double dropout, const std::string& expected) {
    CHECK(message_of([&] { apply_lora<double>(model, targets, r, alpha, dropout); }) == expected);
  };
  fails({"c_attn"}, 4, 8.0, 0.0,
        "xtgrad::apply_lora: argument 'target_modules' matched no Linear or Conv1D layer of the "
        "model (its layers: 'h.0.attn.q_proj', 'h.0.attn.k_proj', 'h.0.attn.v_proj', "
        "'h.0.attn.o_proj', 'h.1.attn.q_proj', 'h.1.attn.k_proj', 'h.1.attn.v_proj', "
        "'h.1.attn.o_proj')");
  fails({"q_proj"}, 0, 8.0, 0.0, "xtgrad::apply_lora: argument 'r' is 0, expected a rank >= 1");
  fails({"q_proj"}, 4, -1.0, 0.0,
        "xtgrad::apply_lora: argument 'lora_alpha' is -1, expected a finite value > 0");
  fails({"q_proj"}, 4, 8.0, 1.5,
        "xtgrad::apply_lora: argument 'lora_dropout' is 1.5, expected a probability in [0, 1]");
  fails({}, 4, 8.0, 0.0,
        "xtgrad::apply_lora: argument 'target_modules' is empty, expected module names");
  fails({"ln_1"}, 4, 8.0, 0.0,
        "xtgrad::apply_lora: argument 'target_modules' matches 'h.0.ln_1', a RMSNorm; LoRA "
        "adapts Linear and Conv1D layers only");
  for (const auto& entry : model.named_parameters()) CHECK(entry.second->requires_grad);
  CHECK(lora_layers<double>(model).empty());

  apply_lora<double>(model, {"q_proj"}, 4, 8.0);
  fails({"q_proj"}, 4, 8.0, 0.0,
        "xtgrad::apply_lora: argument 'target_modules' matches 'h.0.attn.q_proj', which already "
        "has a LoRA adapter");
  Mlp<double> mlp(4, {5}, 2);
  CHECK(message_of([&] { apply_lora<double>(mlp, {"3"}, 2, 2.0); }) ==
        "xtgrad::apply_lora: argument 'target_modules' matches '3', a layer of Mlp, whose fused "
        "forward never calls the layer's; LoRA cannot adapt it");
}

TEST_CASE("LoRA: merged equals unmerged on a GPT, and unmerge restores the weights") {
  GPT<double> model(tiny(GPTStyle::llama));
  apply_lora<double>(model, {"q_proj", "v_proj", "o_proj"}, 2, 5.0);
  randomize_lora_B(model, 20);
  const Indices tokens = token_ids(2, 5, 11, 3);
  const xt::xarray<double> unmerged = model.infer(tokens);
  const xt::xarray<double> q = model.h[1].attn.q_proj->weight.value;
  CHECK(merge_lora<double>(model).size() == 6);
  CHECK(model.h[1].attn.q_proj->weight.value != q);
  check_close(model.infer(tokens), unmerged);
  CHECK(merge_lora<double>(model).empty());  // already merged
  unmerge_lora<double>(model);
  check_close(model.h[1].attn.q_proj->weight.value, q, 1e-14, 1e-15);
  check_close(model.infer(tokens), unmerged);
}

TEST_CASE("LoRA adapters: PEFT's files, saved and loaded alone") {
  GPT<double> model(tiny(GPTStyle::gpt2));
  apply_lora<double>(model, {"c_attn", "c_proj"}, 2, 16.0, 0.05);
  randomize_lora_B(model, 30);
  const fs::path dir = scratch("gpt2");
  save_lora_adapter<double>(model, dir);

  const Safetensors file = read_safetensors(dir / "adapter_model.safetensors");
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.tensors.size() == 12);  // "c_proj" matches attn.c_proj and mlp.c_proj, as in PEFT
  CHECK(file.tensors.count("base_model.model.h.1.attn.c_proj.lora_B.weight") == 1);
  CHECK(file.tensors.count("base_model.model.h.1.mlp.c_proj.lora_B.weight") == 1);
  const nlohmann::json config = nlohmann::json::parse(read_file(dir / "adapter_config.json"));
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["r"] == 2);
  CHECK(config["lora_alpha"] == 16);
  CHECK(config["lora_dropout"] == 0.05);
  CHECK(config["target_modules"] == nlohmann::json({"c_attn", "c_proj"}));
  CHECK(config["bias"] == "none");
  CHECK(config["fan_in_fan_out"] == true);

  // A fresh model with the same base: loading applies the adapters and their values.
  GPT<double> other(tiny(GPTStyle::gpt2));
  load_lora_adapter<double>(other, dir);
  CHECK(names_of(other) == names_of(model));
  const TensorDict<double> loaded = lora_state_dict<double>(other);
  for (const auto& entry : lora_state_dict<double>(model))
    CHECK(loaded.at(entry.first) == entry.second);
  model.eval();
  other.eval();
  const Indices tokens = token_ids(1, 6, 11, 5);
  CHECK(other.infer(tokens) == model.infer(tokens));

  // Onto a model that has the adapters already: only the values change.
  const TensorDict<double> saved = lora_state_dict<double>(model);
  randomize_lora_B(model, 60);
  load_lora_adapter<double>(model, dir);
  for (const auto& entry : saved)
    CHECK(lora_state_dict<double>(model).at(entry.first) == entry.second);

  // Refusals, before the model changes.
  GPT<double> llama(tiny(GPTStyle::llama));
  CHECK(message_of([&] {
          load_lora_adapter<double>(llama, dir);
        }).rfind("xtgrad::load_lora_adapter: argument 'target_modules' matched no Linear", 0) == 0);
  CHECK(lora_layers<double>(llama).empty());
  nlohmann::json biased = config;
  biased["bias"] = "all";
  write_file(dir / "adapter_config.json", biased.dump());
  GPT<double> third(tiny(GPTStyle::gpt2));
  CHECK(message_of([&] {
          load_lora_adapter<double>(third, dir);
        }).find("\"bias\" is \"all\", expected \"none\"") != std::string::npos);
  CHECK(lora_layers<double>(third).empty());
}

TEST_CASE("LoRA: fine-tuning a tiny GPT on q/v lowers its loss, base weights bit-identical") {
  GPT<double> model(tiny(GPTStyle::llama));
  std::uint32_t seed = 40;  // spread out: GPT's 0.02 initialization hides the attention
  for (Parameter<double>* p : model.parameters())
    p->value =
        random_array(std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()),
                     seed++, -0.6, 0.6);
  const TensorDict<double> base = model.state_dict();
  apply_lora<double>(model, {"q_proj", "v_proj"}, 4, 8.0);
  optim::AdamW<double> adamw(model.parameters(), optim::AdamWOptions(0.05));
  const Indices inputs = token_ids(2, 6, 11, 3);
  Indices flat = token_ids(1, 12, 11, 7);
  flat.reshape({12});
  const auto loss_of = [&] {
    Tape<double> tape;
    const Var<double> logits = model.forward(tape, inputs);
    const Var<double> loss = cross_entropy(reshape(logits, {-1, 11}), Indices(flat));
    tape.backward(loss);
    return loss.value()();
  };
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 25; ++step) {
    adamw.zero_grad();
    last = loss_of();
    if (step == 0) first = last;
    adamw.step();
  }
  INFO("loss ", first, " -> ", last);
  CHECK(last < 0.9 * first);
  const TensorDict<double> after = model.state_dict();
  for (const auto& entry : base) CHECK(after.at(entry.first) == entry.second);
}

TEST_CASE("LoRA: activation recomputation gives the adapters the same gradients") {
  GPT<double> model(tiny(GPTStyle::gpt2));
  apply_lora<double>(model, {"c_attn", "mlp.c_proj"}, 2, 4.0);
  randomize_lora_B(model, 50);
  const Indices inputs = token_ids(2, 5, 11, 3);
  const auto grads = [&] {
    model.zero_grad();
    Tape<double> tape;
    tape.backward(sum(model.forward(tape, inputs)));
    std::vector<xt::xarray<double>> out;
    for (const Parameter<double>* p : model.parameters()) out.push_back(p->grad);
    return out;
  };
  const std::vector<xt::xarray<double>> plain = grads();
  model.set_recompute_every(1);
  CHECK(grads() == plain);
  CHECK(plain.front().size() == 0);  // wte: frozen, no gradient buffer
  std::size_t with_grad = 0;         // lora_A and lora_B of c_attn and mlp.c_proj in both blocks
  for (const auto& g : plain) with_grad += g.size() != 0 && xt::any(xt::not_equal(g, 0.0)) ? 1 : 0;
  CHECK(with_grad == 8);
}
