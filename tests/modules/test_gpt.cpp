// TransformerBlock and GPT: structure, initialization, gradients (gradcheck
// in double), the KV-cache path against the full forward, generation
// (greedy against the full forward's argmax step by step, seeded sampling),
// checkpoints, and every error path.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/transformer_block.hpp>

#include "support/bad_input.hpp"
#include "support/module_gradcheck.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

GPTConfig tiny(GPTStyle style) {
  GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 9;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 8;
  c.style = style;
  if (style == GPTStyle::llama) {
    c.n_kv_head = 2;
    c.ffn_hidden = 12;
  }
  return c;
}

// Parameters spread out (the 0.02 initialization makes near-uniform logits).
template <class T>
void spread(Module<T>& m, std::uint32_t seed) {
  for (auto* p : m.parameters())
    p->value = xt::cast<T>(
        random_array(std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()),
                     seed++, -0.6, 0.6));
}

Indices tokens(std::initializer_list<std::int64_t> ids) {
  Indices t = xt::empty<std::int64_t>(std::vector<std::size_t>{1, ids.size()});
  std::copy(ids.begin(), ids.end(), t.begin());
  return t;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_gpt_scratch";
  fs::create_directories(dir);
  fs::remove_all(dir / name);
  return dir / name;
}

}  // namespace

TEST_CASE("TransformerBlock: the children and names of both styles") {
  TransformerBlockOptions o;
  o.n_heads = 2;
  TransformerBlock<double> gpt2(8, o);
  std::vector<std::string> names;
  for (const auto& [name, p] : gpt2.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{
                     "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                     "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"});
  CHECK(std::get<GPT2MLP<double>>(gpt2.mlp).n_inner() == 32);
  CHECK(std::get<GPT2MLP<double>>(gpt2.mlp).c_fc.weight.value.shape() == Shape{8, 32});
  o.style = GPTStyle::llama;
  o.n_kv_heads = 1;
  TransformerBlock<double> llama(8, o);
  names.clear();
  for (const auto& [name, p] : llama.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"ln_1.weight", "attn.q_proj.weight", "attn.k_proj.weight",
                                          "attn.v_proj.weight", "attn.o_proj.weight", "ln_2.weight",
                                          "mlp.w_up", "mlp.w_gate", "mlp.w_down"});
  // LLaMA's rule: 256 * ceil(floor(2 * 32 / 3) / 256) = 256.
  CHECK(std::get<GatedFFN<double>>(llama.mlp).w_up.value.shape() == Shape{8, 256});
  CHECK(default_ffn_hidden(GPTStyle::llama, 4096) == 11008);  // LLaMA-7B's width
}

TEST_CASE("TransformerBlock: gradcheck in double, gpt2 and llama (GQA, rotary)") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    TransformerBlockOptions o;
    o.style = style;
    o.n_heads = 2;
    o.n_kv_heads = style == GPTStyle::llama ? 1 : 2;
    o.ffn_hidden = 6;
    TransformerBlock<double> block(4, o);
    spread(block, 100);
    check_module_gradients(block, random_array({2, 3, 4}, 7));
  }
}

TEST_CASE("GPT: names, config and the GPT-2 / nanoGPT initialization") {
  Generator g(1);
  GPTConfig c = tiny(GPTStyle::gpt2);
  c.n_layer = 8;
  c.n_embd = 64;
  c.block_size = 64;
  GPT<double> model(c, g);
  const auto named = model.named_parameters();
  CHECK(named.front().first == "wte.weight");
  CHECK(named[1].first == "wpe.weight");
  CHECK(named[2].first == "h.0.ln_1.weight");
  CHECK(named.back().first == "ln_f.bias");
  const auto rms = [](const xt::xarray<double>& a) { return std::sqrt(xt::mean(xt::square(a))()); };
  CHECK(rms(model.wte.weight.value) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(rms(model.h[3].attn.c_attn->weight.value) == doctest::Approx(0.02).epsilon(0.05));
  const double residual = 0.02 / std::sqrt(2.0 * 8);
  CHECK(rms(model.h[3].attn.c_proj->weight.value) == doctest::Approx(residual).epsilon(0.1));
  CHECK(rms(std::get<GPT2MLP<double>>(model.h[3].mlp).c_proj.weight.value) ==
        doctest::Approx(residual).epsilon(0.1));
  CHECK(xt::all(xt::equal(model.h[3].attn.c_attn->bias.value, 0.0)));
  CHECK(xt::all(xt::equal(std::get<LayerNorm<double>>(model.h[3].ln_1).weight.value, 1.0)));
  CHECK(model.config().describe() ==
        "GPT(vocab_size=11, block_size=64, n_layer=8, n_head=4, n_embd=64, n_kv_head=4, "
        "ffn_hidden=256, style=gpt2, dropout=0, tie_embeddings=true, eps=1e-05, "
        "rope_theta=10000)");
  GPTConfig untied = tiny(GPTStyle::llama);
  untied.tie_embeddings = false;
  GPT<double> llama(untied);
  CHECK(llama.named_parameters().back().first == "lm_head.weight");
  CHECK(!llama.wpe);
}

TEST_CASE("GPT: forward shapes, tied logits and parameter gradients") {
  GPT<double> model(tiny(GPTStyle::gpt2));
  spread(model, 1);
  Tape<double> tape;
  const Var<double> logits = model.forward(tape, tokens({1, 2, 3}));
  CHECK(logits.shape() == Shape{1, 3, 11});
  const Indices flat = {4, 5};
  CHECK(model.infer(flat).shape() == Shape{2, 11});
  // d(sum of the logits)/d(wte) by central differences on a few elements.
  model.zero_grad();
  tape.backward(logits, xt::ones<double>({1, 3, 11}));
  const auto loss = [&] { return xt::sum(model.infer(tokens({1, 2, 3})))(); };
  for (const std::size_t i : {0, 13, 30, 87}) {
    double& w = model.wte.weight.value.data()[i];
    const double saved = w;
    w = saved + 1e-6;
    const double plus = loss();
    w = saved - 1e-6;
    const double minus = loss();
    w = saved;
    CHECK(model.wte.weight.grad.data()[i] == doctest::Approx((plus - minus) / 2e-6).epsilon(1e-5));
  }
}

TEST_CASE("GPT: each KV-cache step equals the full forward's last position (gpt2, llama)") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    GPT<double> model(tiny(style));
    spread(model, 50);
    const Indices sequence = tokens({3, 1, 4, 1, 5, 9, 2, 6});
    KvCache<double> cache = model.make_cache(1);
    Tape<double> tape;
    tape.set_grad_enabled(false);
    // Prompt of three, then one token per step.
    const Var<double> prompt = model.forward(
        tape, xt::xarray<std::int64_t>(xt::view(sequence, xt::all(), xt::range(0, 3))), cache);
    check_close(
        prompt.value(),
        model.infer(xt::xarray<std::int64_t>(xt::view(sequence, xt::all(), xt::range(0, 3)))),
        1e-12, 1e-12);
    for (std::size_t t = 3; t < 8; ++t) {
      const Var<double> step = model.forward(
          tape, xt::xarray<std::int64_t>(xt::view(sequence, xt::all(), xt::range(t, t + 1))),
          cache);
      const xt::xarray<double> full =
          model.infer(xt::xarray<std::int64_t>(xt::view(sequence, xt::all(), xt::range(0, t + 1))));
      check_close(step.value(),
                  xt::xarray<double>(xt::view(full, xt::all(), xt::range(t, t + 1), xt::all())),
                  1e-11, 1e-12);
    }
  }
}

TEST_CASE("GPT: generate at temperature 0 is the full forward's argmax, step by step") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    GPT<double> model(tiny(style));
    spread(model, 70);
    const std::vector<std::int64_t> out = model.generate({2, 7}, 6, 0.0);
    REQUIRE(out.size() == 8);
    CHECK(out[0] == 2);
    CHECK(out[1] == 7);
    for (std::size_t t = 2; t < out.size(); ++t) {
      Indices prefix = xt::empty<std::int64_t>(std::vector<std::size_t>{t});
      std::copy(out.begin(), out.begin() + std::ptrdiff_t(t), prefix.begin());
      const xt::xarray<double> logits = model.infer(prefix);
      const auto last = xt::view(logits, t - 1, xt::all());
      CHECK(out[t] == std::int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
    }
    CHECK(model.generate({2, 7}, 6, 1.0, std::size_t(1), 99) == out);  // top_k = 1 is greedy
  }
}

TEST_CASE("GPT: seeded sampling repeats, other seeds differ, top_k restricts the draws") {
  GPT<float> model(tiny(GPTStyle::gpt2));
  spread(model, 3);
  const auto a = model.generate({1}, 8, 2.0, std::nullopt, 42);
  CHECK(model.generate({1}, 8, 2.0, std::nullopt, 42) == a);
  bool any_differs = false;
  for (std::uint64_t seed = 1; seed < 6; ++seed)
    any_differs = any_differs || model.generate({1}, 8, 2.0, std::nullopt, seed) != a;
  CHECK(any_differs);
  // With top_k = 2 every drawn token is one of the two most likely of its step.
  const auto b = model.generate({1}, 8, 5.0, std::size_t(2), 7);
  for (std::size_t t = 1; t < b.size(); ++t) {
    Indices prefix = xt::empty<std::int64_t>(std::vector<std::size_t>{t});
    std::copy(b.begin(), b.begin() + std::ptrdiff_t(t), prefix.begin());
    const xt::xarray<float> logits = model.infer(prefix);
    std::vector<float> row(logits.end() - 11, logits.end());
    std::vector<float> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    CHECK(row[std::size_t(b[t])] >= sorted[1]);
  }
  CHECK(model.generate({1, 2}, 0) == std::vector<std::int64_t>{1, 2});
}

TEST_CASE(
    "next_token_loss: cross_entropy of the logits [B, T, V] flattened - other ranks refused") {
  GPT<double> model(tiny(GPTStyle::gpt2));
  spread(model, 2);
  Tape<double> tape;
  const Var<double> logits = model.forward(tape, tokens({1, 2, 3, 4, 5, 6}));
  const Indices targets = {2, 3, 4, 5, 6, 7};
  const Var<double> loss = next_token_loss(logits, targets);
  CHECK(loss.value()() == cross_entropy(reshape(logits, {6, 11}), targets).value()());
  CHECK_THROWS_WITH_AS(next_token_loss(reshape(logits, {6, 11}), targets),
                       "xtgrad::next_token_loss: argument 'logits' has shape [6, 11], expected "
                       "[B, T, V]",
                       std::invalid_argument);
}

TEST_CASE("GPT: dropout in training only - gradcheck of a block with its dropout masks fixed") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    GPTConfig c = tiny(style);
    c.dropout = 0.3;
    GPT<double> model(c);
    spread(model, 5);
    Tape<double> tape;
    const xt::xarray<double> trained = model.forward(tape, tokens({1, 2, 3})).value();
    const xt::xarray<double> evaluated = model.infer(tokens({1, 2, 3}));
    CHECK(xt::amax(xt::abs(trained - evaluated))() > 1e-3);
    model.eval();
    Tape<double> again;
    check_close(model.forward(again, tokens({1, 2, 3})).value(), evaluated, 0, 0);

    TransformerBlockOptions o;
    o.style = style;
    o.n_heads = 2;
    o.dropout = 0.25;
    o.ffn_hidden = 6;
    Generator g(3);
    TransformerBlock<double> block(4, o, g);
    spread(block, 20);
    check_module_gradients(block, random_array({2, 3, 4}, 5), [&] {
      block.attn.attn_dropout.set_step(0);
      block.attn.resid_dropout.set_step(0);
      block.dropout.set_step(0);
    });
  }
}

TEST_CASE("GPT: save and load round trip, and a checkpoint of another config is refused") {
  GPT<double> model(tiny(GPTStyle::llama));
  spread(model, 9);
  const fs::path path = scratch("gpt.safetensors");
  model.save(path);
  GPT<double> other(tiny(GPTStyle::llama));
  other.load(path);
  check_close(other.infer(tokens({1, 2, 3})), model.infer(tokens({1, 2, 3})), 0, 0);
  GPTConfig wider = tiny(GPTStyle::llama);
  wider.n_kv_head = 4;
  GPT<double> mismatch(wider);
  CHECK_THROWS_WITH_PARTS(mismatch.load(path), std::invalid_argument,
                          {"xtgrad::Module::load", "n_kv_head=2", "n_kv_head=4"});
}

TEST_CASE("GPT: every bad argument throws before anything changes") {
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto with = [](auto change) {
    GPTConfig c = tiny(GPTStyle::gpt2);
    change(c);
    return c;
  };
  bad("zero vocab", [&] { GPT<double>(with([](GPTConfig& c) { c.vocab_size = 0; })); },
      Expect::invalid_argument, {"GPT", "'vocab_size'", "positive"});
  bad("heads not dividing", [&] { GPT<double>(with([](GPTConfig& c) { c.n_head = 3; })); },
      Expect::invalid_argument, {"GPT", "'n_head'", "does not divide n_embd 8"});
  bad("gpt2 with n_kv_head", [&] { GPT<double>(with([](GPTConfig& c) { c.n_kv_head = 2; })); },
      Expect::invalid_argument, {"GPT", "'n_kv_head'", "gpt2 style"});
  bad("kv heads not dividing",
      [&] {
        GPT<double>(with([](GPTConfig& c) {
          c.style = GPTStyle::llama;
          c.n_kv_head = 3;
        }));
      },
      Expect::invalid_argument, {"GPT", "'n_kv_head'", "does not divide n_head 4"});
  bad("dropout", [&] { GPT<double>(with([](GPTConfig& c) { c.dropout = -0.1; })); },
      Expect::invalid_argument, {"GPT", "'dropout'"});
  bad("eps", [&] { GPT<double>(with([](GPTConfig& c) { c.eps = -1; })); }, Expect::invalid_argument,
      {"GPT", "'eps'"});

  TransformerBlockOptions block_options;
  block_options.n_heads = 2;
  TransformerBlock<double> block(8, block_options);
  bad("block: gpt2 with n_kv_heads",
      [&] {
        TransformerBlockOptions o = block_options;
        o.n_kv_heads = 1;
        TransformerBlock<double>(8, o);
      },
      Expect::invalid_argument, {"TransformerBlock", "'n_kv_heads'", "gpt2 style"});
  bad("block: zero ffn_hidden",
      [&] {
        TransformerBlockOptions o = block_options;
        o.ffn_hidden = 0;
        TransformerBlock<double>(8, o);
      },
      Expect::invalid_argument, {"TransformerBlock", "'ffn_hidden'", "positive"});

  GPT<double> model(tiny(GPTStyle::gpt2));
  Tape<double> tape, off;
  const Var<double> unbatched = tape.leaf(random_array({3, 8}, 1));
  const Var<double> narrow = tape.leaf(random_array({1, 3, 6}, 2));
  bad("block: [T, C] input", [&] { block.forward(unbatched); }, Expect::invalid_argument,
      {"TransformerBlock", "'x'", "[3, 8]", "[B, T, 8]"});
  bad("block: wrong width", [&] { block.forward(narrow); }, Expect::invalid_argument,
      {"TransformerBlock", "'x'", "[1, 3, 6]", "[B, T, 8]"});
  off.set_grad_enabled(false);
  KvCache<double> cache = model.make_cache(1);
  KvCache<double> wrong_batch = model.make_cache(2);
  bad("token outside vocab",
      [&] {
        model.forward(tape, tokens({1, 11}));
      },
      Expect::invalid_argument, {"GPT::forward", "'tokens'", "holds 11", "[0, 11)"});
  bad("negative token", [&] { model.forward(tape, tokens({-1})); }, Expect::invalid_argument,
      {"GPT::forward", "'tokens'", "holds -1"});
  bad("T > block_size",
      [&] {
        model.forward(tape, tokens({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
      },
      Expect::invalid_argument, {"GPT::forward", "'tokens'", "10 positions", "block_size 9"});
  bad("rank 3 tokens",
      [&] {
        model.forward(tape, Indices(xt::zeros<std::int64_t>({1, 1, 2})));
      },
      Expect::invalid_argument, {"GPT::forward", "'tokens'", "[B, T] or [T]"});
  bad("no tokens",
      [&] {
        model.forward(tape, Indices(xt::zeros<std::int64_t>({1, 0})));
      },
      Expect::invalid_argument, {"GPT::forward", "'tokens'", "at least one token"});
  bad("cache on a recording tape", [&] { model.forward(tape, tokens({1}), cache); },
      Expect::logic_error, {"GPT::forward", "recording is off"});
  bad("cache of another batch", [&] { model.forward(off, tokens({1}), wrong_batch); },
      Expect::invalid_argument, {"GPT::forward", "'cache'", "batch 2", "make_cache"});
  bad("cache past block_size",
      [&] {
        model.forward(off, tokens({1, 2, 3, 4, 5, 6, 7, 8, 9}), cache);
      },
      Expect::invalid_argument, {"GPT::forward", "'tokens'", "after the 1 cached", "block_size 9"});
  rows.back().setup = [&] { model.forward(off, tokens({1}), cache); };
  rows.back().teardown = [&] { cache.clear(); };
  bad("generate: empty prompt", [&] { model.generate({}, 2); }, Expect::invalid_argument,
      {"GPT::generate", "'prompt'", "empty"});
  bad("generate: too long",
      [&] {
        model.generate({1, 2, 3}, 7);
      },
      Expect::invalid_argument, {"GPT::generate", "'max_new_tokens'", "block_size 9"});
  bad("generate: temperature", [&] { model.generate({1}, 2, -1.0); }, Expect::invalid_argument,
      {"GPT::generate", "'temperature'", "-1"});
  bad("generate: top_k 0", [&] { model.generate({1}, 2, 1.0, std::size_t(0)); },
      Expect::invalid_argument, {"GPT::generate", "'top_k'"});
  bad("generate: prompt outside vocab", [&] { model.generate({12}, 2); }, Expect::invalid_argument,
      {"GPT::generate", "'prompt'", "holds 12"});
  const auto snapshot = [&] {
    State s;
    s.add(tape.size());
    for (const auto& [name, p] : model.named_parameters()) s.add(*p);
    for (const auto& [name, p] : block.named_parameters()) s.add(*p);
    for (std::size_t l = 0; l < 2; ++l) s.add(cache.length(l));
    return s;
  };
  report("GPT", run_rows(rows, snapshot));
}
