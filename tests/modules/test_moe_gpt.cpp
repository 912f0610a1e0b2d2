// GPT and TransformerBlock with sparse mixture-of-experts FFNs: the names of
// both styles, forward, backward and the auxiliary losses against a
// composition by hand (the model's embeddings, norms and attention, a
// standalone SparseMoe holding the same weights, the tied head), gradients
// against finite differences, the KV cache and generate against the full
// forward, checkpoints, and the bad options.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/cross_entropy.hpp>
#include <xtgrad/engine/ops/elementwise.hpp>
#include <xtgrad/engine/ops/embedding.hpp>
#include <xtgrad/engine/ops/linear.hpp>
#include <xtgrad/engine/ops/reduce.hpp>
#include <xtgrad/engine/ops/shape.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/pretrained/hf_gpt2.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

// gpt2: layer 0 dense, layer 1 sparse (decoder_sparse_step 2); llama: both
// sparse, weights not renormalized, both losses weighted.
GPTConfig tiny_moe(GPTStyle style) {
  GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 9;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.style = style;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 5;
  c.router_aux_loss_coef = 0.3;
  c.router_z_loss_coef = 0.2;
  if (style == GPTStyle::gpt2) {
    c.decoder_sparse_step = 2;
  } else {
    c.n_kv_head = 1;
    c.ffn_hidden = 12;
    c.norm_topk_prob = false;
  }
  return c;
}

template <class T>
void spread(Module<T>& m, std::uint32_t seed) {
  for (auto* p : m.parameters())
    p->value = xt::cast<T>(
        random_array(std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()),
                     seed++, -0.6, 0.6));
}

Indices tokens(std::vector<std::int64_t> ids, std::size_t batch = 1) {
  Indices t = xt::empty<std::int64_t>(std::vector<std::size_t>{batch, ids.size() / batch});
  std::copy(ids.begin(), ids.end(), t.begin());
  return t;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_moe_gpt_scratch";
  fs::create_directories(dir);
  fs::remove_all(dir / name);
  return dir / name;
}

std::vector<std::string> names_of(Module<double>& m) {
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The gradients of every parameter, by name.
std::map<std::string, xt::xarray<double>> gradients(Module<double>& m) {
  std::map<std::string, xt::xarray<double>> out;
  for (const auto& [name, p] : m.named_parameters()) out[name] = p->grad;
  return out;
}

}  // namespace

TEST_CASE("MoE GPT: the sparse layers, their Hugging Face names and the config") {
  GPT<double> gpt2(tiny_moe(GPTStyle::gpt2));
  const std::vector<std::string> g = names_of(gpt2);
  CHECK(!gpt2.is_sparse_layer(0));
  CHECK(gpt2.is_sparse_layer(1));
  CHECK(has(g, "h.0.mlp.c_fc.weight"));  // dense layer 0 as before
  CHECK(has(g, "h.1.mlp.gate.weight"));
  CHECK(has(g, "h.1.mlp.experts.3.w2.weight"));
  CHECK(gpt2.h[1].sparse_moe()->experts[0].activation() == Activation::gelu_tanh);
  CHECK(gpt2.h[1].sparse_moe()->experts[0].gate.weight.value.shape() == Shape{5, 8});

  GPT<double> llama(tiny_moe(GPTStyle::llama));
  const std::vector<std::string> l = names_of(llama);
  CHECK(has(l, "h.0.block_sparse_moe.gate.weight"));
  CHECK(has(l, "h.1.block_sparse_moe.experts.0.w1.weight"));
  CHECK(has(l, "h.1.block_sparse_moe.experts.0.w3.weight"));
  CHECK(!has(l, "h.0.mlp.w_up"));
  CHECK(llama.h[0].sparse_moe()->experts[0].activation() == Activation::silu);
  CHECK(*llama.gpt_config().moe_intermediate_size == 5);

  // The residual scaling reaches each expert's w2; the router is normal(0, 0.02).
  const auto rms = [](const xt::xarray<double>& a) { return std::sqrt(double(xt::mean(a * a)())); };
  GPTConfig wide = tiny_moe(GPTStyle::llama);
  wide.n_embd = 64;
  wide.moe_intermediate_size = 64;
  GPT<double> init(wide);
  CHECK(rms(init.h[1].sparse_moe()->experts[2].down.weight.value) ==
        doctest::Approx(0.02 / 2.0).epsilon(0.1));
  CHECK(rms(init.h[1].sparse_moe()->experts[2].up.weight.value) ==
        doctest::Approx(0.02).epsilon(0.1));

  // config(): the MoE keys only for a MoE GPT; parsed back unchanged.
  const std::string json = to_json(llama.config());
  for (const char* key :
       {"\"num_experts\":\"4\"", "\"num_experts_per_tok\":\"2\"", "\"decoder_sparse_step\":\"1\"",
        "\"moe_intermediate_size\":\"5\"", "\"norm_topk_prob\":\"false\"", "router_aux_loss_coef",
        "router_z_loss_coef", "capacity_factor"})
    CHECK_MESSAGE(json.find(key) != std::string::npos, key << " in " << json);
  CHECK(parse_module_config(json, "test", "config") == llama.config());
  GPTConfig dense = tiny_moe(GPTStyle::llama);
  dense.num_experts = 0;
  GPT<double> dense_model(dense);
  CHECK(to_json(dense_model.config()).find("experts") == std::string::npos);
  // A dense GPT's losses are constant zeros beside the plain forward's logits.
  Tape<double> tape;
  const GPTOutput<double> zero = dense_model.forward_with_losses(tape, tokens({1, 2}));
  CHECK(zero.aux_loss.value()() == 0.0);
  CHECK(zero.load_balancing_loss.value()() == 0.0);
  CHECK_FALSE(zero.aux_loss.requires_grad());
  check_close(zero.logits.value(), dense_model.infer(tokens({1, 2})), 0, 0);
  REQUIRE(dense_model.router_stats().size() == 2);
  CHECK(dense_model.router_stats()[1].routed.empty());

  // A block built directly: the child's name and its config.
  TransformerBlockOptions o;
  o.style = GPTStyle::llama;
  o.n_heads = 2;
  o.ffn_hidden = 3;
  o.moe = SparseMoeOptions{};
  o.moe->num_experts = 3;
  TransformerBlock<double> block(4, o);
  CHECK(has(names_of(block), "block_sparse_moe.experts.2.w3.weight"));
  REQUIRE(block.config().children.size() == 1);
  CHECK(block.config().children[0].first == "block_sparse_moe");
  CHECK(block.config().children[0].second == block.sparse_moe()->config());
}

TEST_CASE("MoE GPT: forward, backward and the aux losses equal a composition by hand") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    const GPTConfig c = tiny_moe(style);
    GPT<double> model(c);
    spread(model, 11);
    const Indices ids = tokens({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, 2);  // [2, 6]
    const xt::xarray<double> dy = random_array({2, 6, 11}, 5);

    Tape<double> tape;
    const GPTOutput<double> out = model.forward_with_losses(tape, ids);
    tape.backward(add(sum(mul(out.logits, tape.leaf(dy, false))), out.aux_loss));
    const auto expected_grads = gradients(model);
    const std::vector<MoeStats> stats = model.router_stats();
    model.zero_grad();

    // By hand: standalone SparseMoe modules holding the sparse layers' weights.
    std::vector<SparseMoe<double>> moes;
    for (std::size_t l = 0; l < c.n_layer; ++l) {
      if (!model.is_sparse_layer(l)) continue;
      const SparseMoe<double>& inside = *model.h[l].sparse_moe();
      moes.emplace_back(c.n_embd, *c.moe_intermediate_size, inside.options());
      moes.back().load_state_dict(inside.state_dict());
    }
    Tape<double> t;
    Var<double> x = embedding(ids, t.param(model.wte.weight));  // [2, 6, C]
    if (model.wpe) {
      Indices positions = xt::arange<std::int64_t>(6);
      x = add(x, embedding(positions, t.param(model.wpe->weight)));
    }
    Var<double> balance = t.leaf(xt::xarray<double>(0.0), false), z = balance;
    std::vector<double> layer_balance;
    for (std::size_t l = 0, m = 0; l < c.n_layer; ++l) {
      TransformerBlock<double>& block = model.h[l];
      if (!model.is_sparse_layer(l)) {
        x = block.forward(x);
        continue;
      }
      const Var<double> a = std::visit([&](auto& n) { return n.forward(x); }, block.ln_1);
      const Var<double> h = add(x, block.attn.forward(a));
      const MoeOutput<double> f = moes[m].forward_with_losses(
          std::visit([&](auto& n) { return n.forward(h); }, block.ln_2));
      CHECK(moes[m].router_stats().routed == stats[l].routed);
      CHECK(moes[m].router_stats().tokens == 12);
      x = add(h, f.y);
      balance = add(balance, f.load_balancing_loss);
      z = add(z, f.z_loss);
      layer_balance.push_back(f.load_balancing_loss.value()());
      ++m;
    }
    x = std::visit([&](auto& n) { return n.forward(x); }, model.ln_f);
    const Var<double> logits =
        linear(x, t.param(model.wte.weight), std::nullopt, WeightLayout::out_in);
    const Var<double> aux =
        add(scale(balance, c.router_aux_loss_coef), scale(z, c.router_z_loss_coef));
    check_close(out.logits.value(), logits.value(), 1e-12, 1e-12);
    check_close(out.load_balancing_loss.value(), balance.value(), 1e-12, 1e-14);
    check_close(out.z_loss.value(), z.value(), 1e-12, 1e-14);
    check_close(out.aux_loss.value(), aux.value(), 1e-12, 1e-14);
    CHECK(layer_balance.size() == (style == GPTStyle::gpt2 ? 1 : 2));

    t.backward(add(sum(mul(logits, t.leaf(dy, false))), aux));
    // The shared modules' gradients landed in the model, the experts' in moes.
    std::map<std::string, xt::xarray<double>> got = gradients(model);
    for (std::size_t l = 0, m = 0; l < c.n_layer; ++l) {
      if (!model.is_sparse_layer(l)) continue;
      const std::string prefix = "h." + std::to_string(l) + "." + model.h[l].mlp_name() + ".";
      for (const auto& [name, p] : moes[m].named_parameters()) got[prefix + name] = p->grad;
      ++m;
    }
    for (const auto& [key, grad] : expected_grads) {
      const std::string name = key;  // INFO captures no structured binding (clang)
      INFO(name);
      check_close(got.at(name), grad, 1e-10, 1e-12);
    }

    // Plain forward: the same logits, no loss recorded; the recompute path too.
    Tape<double> plain;
    check_close(model.forward(plain, ids).value(), out.logits.value(), 0, 0);
    model.set_recompute_every(1);
    Tape<double> recomputed;
    check_close(model.forward(recomputed, ids).value(), out.logits.value(), 0, 0);
  }
}

TEST_CASE("MoE GPT: gradients of the loss plus aux_loss against finite differences") {
  GPTConfig c;
  c.vocab_size = 5;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = 4;
  c.style = GPTStyle::llama;
  c.ffn_hidden = 3;
  c.num_experts = 3;
  c.num_experts_per_tok = 2;
  c.router_aux_loss_coef = 0.5;
  c.router_z_loss_coef = 0.25;
  GPT<double> model(c);
  spread(model, 21);
  const Indices ids = tokens({1, 4, 0, 2});
  Indices targets = xt::empty<std::int64_t>(std::vector<std::size_t>{4});
  targets = Indices({4, 0, 2, 3});
  const auto loss_of = [&](Tape<double>& tape) {
    const GPTOutput<double> out = model.forward_with_losses(tape, ids);
    return add(cross_entropy(reshape(out.logits, {-1, 5}), targets), out.aux_loss);
  };
  Tape<double> tape;
  model.zero_grad();
  tape.backward(loss_of(tape));
  const double eps = 1e-6;
  for (const auto& [key, p] : model.named_parameters()) {
    const std::string name = key;  // INFO captures no structured binding (clang)
    for (std::size_t i = 0; i < p->value.size(); ++i) {
      double& element = p->value.data()[i];
      const double saved = element;
      element = saved + eps;
      Tape<double> a;
      const double plus = loss_of(a).value()();
      element = saved - eps;
      Tape<double> b;
      const double minus = loss_of(b).value()();
      element = saved;
      const double numeric = (plus - minus) / (2 * eps);
      const double analytic = p->grad.data()[i];
      INFO(name << "[" << i << "]: analytic " << analytic << ", numeric " << numeric);
      CHECK(std::abs(analytic - numeric) <= 1e-6 + 1e-4 * std::abs(numeric));
    }
  }
}

TEST_CASE("MoE GPT: the KV cache and generate equal the full forward (gpt2, llama)") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    GPT<double> model(tiny_moe(style));
    spread(model, 50);
    const std::vector<std::int64_t> sequence{3, 1, 4, 1, 5, 9, 2};
    KvCache<double> cache = model.make_cache(1);
    Tape<double> tape;
    tape.set_grad_enabled(false);
    const Var<double> prompt = model.forward(tape, tokens({3, 1, 4}), cache);
    check_close(prompt.value(), model.infer(tokens({3, 1, 4})), 1e-12, 1e-12);
    for (std::size_t t = 3; t < sequence.size(); ++t) {
      const Var<double> step = model.forward(tape, tokens({sequence[t]}), cache);
      const xt::xarray<double> full = model.infer(
          tokens(std::vector<std::int64_t>(sequence.begin(), sequence.begin() + t + 1)));
      check_close(step.value(),
                  xt::xarray<double>(xt::view(full, xt::all(), xt::range(t, t + 1), xt::all())),
                  1e-11, 1e-12);
    }
    const std::vector<std::int64_t> out = model.generate({2, 7}, 5, 0.0);
    REQUIRE(out.size() == 7);
    for (std::size_t t = 2; t < out.size(); ++t) {
      const xt::xarray<double> logits =
          model.infer(tokens(std::vector<std::int64_t>(out.begin(), out.begin() + t)));
      const auto last = xt::view(logits, 0, t - 1, xt::all());
      CHECK(out[t] == std::int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
    }
  }
}

TEST_CASE("MoE GPT: save and load round trip - a dense or other MoE model refuses the checkpoint") {
  GPT<double> model(tiny_moe(GPTStyle::llama));
  spread(model, 9);
  const fs::path path = scratch("moe_gpt.safetensors");
  model.save(path);
  GPT<double> other(tiny_moe(GPTStyle::llama));
  other.load(path);
  check_close(other.infer(tokens({1, 2, 3})), model.infer(tokens({1, 2, 3})), 0, 0);
  GPTConfig dense = tiny_moe(GPTStyle::llama);
  dense.num_experts = 0;
  GPT<double> dense_model(dense);
  CHECK_THROWS_WITH_PARTS(
      dense_model.load(path), std::invalid_argument,
      {"xtgrad::Module::load", "'num_experts' was saved as '4', this module has none"});
  GPTConfig top1 = tiny_moe(GPTStyle::llama);
  top1.num_experts_per_tok = 1;
  GPT<double> top1_model(top1);
  CHECK_THROWS_WITH_PARTS(
      top1_model.load(path), std::invalid_argument,
      {"xtgrad::Module::load", "'num_experts_per_tok' was saved as '2', this module has '1'"});
}

TEST_CASE("MoE GPT: every bad option throws before anything changes") {
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto with = [](auto change) {
    GPTConfig c = tiny_moe(GPTStyle::gpt2);
    change(c);
    return c;
  };
  bad("one expert", [&] { GPT<double>(with([](GPTConfig& c) { c.num_experts = 1; })); },
      Expect::invalid_argument, {"GPT", "'num_experts'", "is 1", "at least 2"});
  bad("k = 0", [&] { GPT<double>(with([](GPTConfig& c) { c.num_experts_per_tok = 0; })); },
      Expect::invalid_argument, {"GPT", "'num_experts_per_tok'", "is 0", "num_experts = 4"});
  bad("k > E", [&] { GPT<double>(with([](GPTConfig& c) { c.num_experts_per_tok = 5; })); },
      Expect::invalid_argument, {"GPT", "'num_experts_per_tok'", "is 5"});
  bad("sparse step 0", [&] { GPT<double>(with([](GPTConfig& c) { c.decoder_sparse_step = 0; })); },
      Expect::invalid_argument, {"GPT", "'decoder_sparse_step'", "is 0", "n_layer = 2"});
  bad("no sparse layer",
      [&] { GPT<double>(with([](GPTConfig& c) { c.decoder_sparse_step = 3; })); },
      Expect::invalid_argument, {"GPT", "'decoder_sparse_step'", "is 3"});
  bad("zero expert width",
      [&] { GPT<double>(with([](GPTConfig& c) { c.moe_intermediate_size = 0; })); },
      Expect::invalid_argument, {"GPT", "'moe_intermediate_size'"});
  bad("capacity factor", [&] { GPT<double>(with([](GPTConfig& c) { c.capacity_factor = -1.0; })); },
      Expect::invalid_argument, {"GPT", "'capacity_factor'", "-1"});
  bad("aux coefficient",
      [&] { GPT<double>(with([](GPTConfig& c) { c.router_aux_loss_coef = std::nan(""); })); },
      Expect::invalid_argument, {"GPT", "'router_aux_loss_coef'"});
  bad("z coefficient",
      [&] { GPT<double>(with([](GPTConfig& c) { c.router_z_loss_coef = -1.0; })); },
      Expect::invalid_argument, {"GPT", "'router_z_loss_coef'"});

  GPT<double> model(tiny_moe(GPTStyle::gpt2));
  Tape<double> tape;
  bad("recompute keeps no aux loss",
      [&] {
        model.forward_with_losses(tape, tokens({1, 2}));
      },
      Expect::logic_error, {"GPT::forward_with_losses", "set_recompute_every"});
  rows.back().setup = [&] { model.set_recompute_every(1); };
  rows.back().teardown = [&] { model.set_recompute_every(0); };
  bad("tokens outside vocab", [&] { model.forward_with_losses(tape, tokens({11})); },
      Expect::invalid_argument, {"GPT::forward_with_losses", "'tokens'", "holds 11"});
  bad("GPT-2 export of a MoE model", [&] { export_gpt2(model); }, Expect::invalid_argument,
      {"export_gpt2", "'model'", "mixture-of-experts"});
  const auto snapshot = [&] {
    State s;
    s.add(tape.size());
    for (const auto& [name, p] : model.named_parameters()) s.add(*p);
    return s;
  };
  report("MoE GPT", run_rows(rows, snapshot));
}
