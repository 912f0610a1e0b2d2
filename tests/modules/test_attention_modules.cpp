// The attention modules: MultiheadAttention against torch.nn.MultiheadAttention
// (values and every gradient, tests/support/fixtures/make_transformer.py),
// CausalSelfAttention (LLaMA layout against a PyTorch LlamaAttention, both
// layouts by gradcheck, the KV-cache path against the full forward), KvCache,
// and every error path.

#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/ops/mask.hpp>
#include <xtgrad/modules/attention.hpp>
#include <xtgrad/modules/kv_cache.hpp>
#include <xtgrad/modules/pretrained/hf_gpt2.hpp>

#include "support/bad_input.hpp"
#include "support/fixture_files.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/transformer_fixtures.hpp"
#include "support/module_gradcheck.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::transformer;

namespace {

template <class T>
MultiheadAttention<T> torch_mha() {
  MultiheadAttention<T> mha(fx::mha_embed_dim, fx::mha_num_heads);
  const std::size_t e = fx::mha_embed_dim;
  mha.in_proj_weight.value = from_fixture<T>(fx::mha_in_proj_weight, {3 * e, e});
  mha.in_proj_bias.value = from_fixture<T>(fx::mha_in_proj_bias, {3 * e});
  mha.out_proj.weight.value = from_fixture<T>(fx::mha_out_proj_weight, {e, e});
  mha.out_proj.bias.value = from_fixture<T>(fx::mha_out_proj_bias, {e});
  return mha;
}

// Gradients of the four parameters against the fixture's.
void check_parameter_grads(MultiheadAttention<double>& mha, const double* d_in_w,
                           const double* d_in_b, const double* d_out_w, const double* d_out_b) {
  const std::size_t e = fx::mha_embed_dim;
  check_close(mha.in_proj_weight.grad, from_fixture<double>(d_in_w, {3 * e, e}), 1e-10, 1e-12);
  check_close(mha.in_proj_bias.grad, from_fixture<double>(d_in_b, {3 * e}), 1e-10, 1e-12);
  check_close(mha.out_proj.weight.grad, from_fixture<double>(d_out_w, {e, e}), 1e-10, 1e-12);
  check_close(mha.out_proj.bias.grad, from_fixture<double>(d_out_b, {e}), 1e-10, 1e-12);
}

xt::xarray<bool> fixture_bools(const bool* values, const std::vector<std::size_t>& shape) {
  xt::xarray<bool> a = xt::empty<bool>(shape);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = values[i];
  return a;
}

// torch's causal attn_mask, written out: true above the diagonal = not allowed.
xt::xarray<bool> torch_causal(std::size_t t) {
  xt::xarray<bool> m = xt::zeros<bool>({t, t});
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = i + 1; j < t; ++j) m(i, j) = true;
  return m;
}

CausalSelfAttentionOptions llama_options(std::size_t heads, std::size_t kv_heads) {
  CausalSelfAttentionOptions o;
  o.n_heads = heads;
  o.n_kv_heads = kv_heads;
  o.layout = AttentionLayout::llama;
  o.rotary = true;
  return o;
}

}  // namespace

TEST_CASE("MultiheadAttention: parameter names, shapes and torch's initialization") {
  Generator g(7);
  MultiheadAttention<double> mha(8, 2, {}, g);
  const auto named = mha.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "in_proj_weight");
  CHECK(named[1].first == "in_proj_bias");
  CHECK(named[2].first == "out_proj.weight");
  CHECK(named[3].first == "out_proj.bias");
  CHECK(mha.in_proj_weight.value.shape() == Shape{24, 8});
  CHECK(xt::all(xt::equal(mha.in_proj_bias.value, 0.0)));
  CHECK(xt::all(xt::equal(mha.out_proj.bias.value, 0.0)));
  const double xavier = std::sqrt(6.0 / (8 + 24));
  CHECK(xt::amax(xt::abs(mha.in_proj_weight.value))() <= xavier);
  CHECK(xt::amax(xt::abs(mha.in_proj_weight.value))() > 0.8 * xavier);
  MultiheadAttention<double> no_bias(8, 2, {false, 0.0});
  CHECK(no_bias.named_parameters().size() == 2);
  CHECK(mha.config().describe() ==
        "MultiheadAttention(embed_dim=8, num_heads=2, bias=true, dropout=0)");
}

TEST_CASE("MultiheadAttention: self-attention equals torch, forward and every gradient") {
  MultiheadAttention<double> mha = torch_mha<double>();
  Tape<double> tape;
  const Var<double> x = tape.leaf(fixture_array<double>(fx::mha_self_x_shape, fx::mha_self_x));
  const Var<double> y = mha.forward(x);
  check_close(y.value(), fixture_array<double>(fx::mha_self_y_shape, fx::mha_self_y), 1e-12, 1e-12);
  tape.backward(y, fixture_array<double>(fx::mha_self_y_shape, fx::mha_self_dy));
  check_close(x.grad(), fixture_array<double>(fx::mha_self_x_shape, fx::mha_self_dx), 1e-10, 1e-12);
  check_parameter_grads(mha, fx::mha_self_d_in_proj_weight, fx::mha_self_d_in_proj_bias,
                        fx::mha_self_d_out_proj_weight, fx::mha_self_d_out_proj_bias);
}

TEST_CASE("MultiheadAttention: float self-attention equals torch to float rounding") {
  MultiheadAttention<float> mha = torch_mha<float>();
  const xt::xarray<float> y = mha.infer(fixture_array<float>(fx::mha_self_x_shape, fx::mha_self_x));
  check_close(y, fixture_array<double>(fx::mha_self_y_shape, fx::mha_self_y), 1e-5, 1e-6);
}

namespace {

// One cross-attention fixture case: forward, and the gradients of query,
// key, value and the parameters.
#define XTGRAD_MHA_CROSS_CASE(name, masks)                                                         \
  do {                                                                                             \
    MultiheadAttention<double> mha = torch_mha<double>();                                          \
    Tape<double> tape;                                                                             \
    const Var<double> q =                                                                          \
        tape.leaf(fixture_array<double>(fx::mha_##name##_query_shape, fx::mha_##name##_query));    \
    const Var<double> k =                                                                          \
        tape.leaf(fixture_array<double>(fx::mha_##name##_key_shape, fx::mha_##name##_key));        \
    const Var<double> v =                                                                          \
        tape.leaf(fixture_array<double>(fx::mha_##name##_value_shape, fx::mha_##name##_value));    \
    const Var<double> y = mha.forward(q, k, v, masks);                                             \
    check_close(y.value(), fixture_array<double>(fx::mha_##name##_y_shape, fx::mha_##name##_y),    \
                1e-12, 1e-12);                                                                     \
    tape.backward(y, fixture_array<double>(fx::mha_##name##_y_shape, fx::mha_##name##_dy));        \
    check_close(q.grad(),                                                                          \
                fixture_array<double>(fx::mha_##name##_query_shape, fx::mha_##name##_dquery),      \
                1e-10, 1e-12);                                                                     \
    check_close(k.grad(),                                                                          \
                fixture_array<double>(fx::mha_##name##_key_shape, fx::mha_##name##_dkey), 1e-10,   \
                1e-12);                                                                            \
    check_close(v.grad(),                                                                          \
                fixture_array<double>(fx::mha_##name##_value_shape, fx::mha_##name##_dvalue),      \
                1e-10, 1e-12);                                                                     \
    check_parameter_grads(mha, fx::mha_##name##_d_in_proj_weight, fx::mha_##name##_d_in_proj_bias, \
                          fx::mha_##name##_d_out_proj_weight, fx::mha_##name##_d_out_proj_bias);   \
  } while (false)

}  // namespace

TEST_CASE("MultiheadAttention: cross-attention equals torch, forward and every gradient") {
  XTGRAD_MHA_CROSS_CASE(cross, MhaMasks<double>{});
}

TEST_CASE("MultiheadAttention: key_padding_mask (true = ignore) equals torch") {
  MhaMasks<double> masks;
  masks.key_padding_mask =
      fixture_bools(fx::mha_key_padding_mask,
                    {fx::mha_key_padding_mask_shape[0], fx::mha_key_padding_mask_shape[1]});
  XTGRAD_MHA_CROSS_CASE(padding, masks);
}

TEST_CASE("MultiheadAttention: an additive float attn_mask equals torch") {
  MhaMasks<double> masks;
  masks.attn_mask = fixture_array<double>(fx::mha_additive_mask_shape, fx::mha_additive_mask);
  XTGRAD_MHA_CROSS_CASE(additive, masks);
}

TEST_CASE("MultiheadAttention: causal, as a bool attn_mask and as is_causal, equals torch") {
  const xt::xarray<double> x = fixture_array<double>(fx::mha_causal_x_shape, fx::mha_causal_x);
  const xt::xarray<double> expected =
      fixture_array<double>(fx::mha_causal_y_shape, fx::mha_causal_y);
  for (const bool as_flag : {false, true}) {
    INFO("is_causal: " << as_flag);
    MultiheadAttention<double> mha = torch_mha<double>();
    MhaMasks<double> masks;
    if (as_flag)
      masks.is_causal = true;
    else
      masks.attn_mask = torch_causal(x.shape()[1]);
    Tape<double> tape;
    const Var<double> xv = tape.leaf(x);
    const Var<double> y = mha.forward(xv, masks);
    check_close(y.value(), expected, 1e-12, 1e-12);
    tape.backward(y, fixture_array<double>(fx::mha_causal_y_shape, fx::mha_causal_dy));
    check_close(xv.grad(), fixture_array<double>(fx::mha_causal_x_shape, fx::mha_causal_dx), 1e-10,
                1e-12);
    check_parameter_grads(mha, fx::mha_causal_d_in_proj_weight, fx::mha_causal_d_in_proj_bias,
                          fx::mha_causal_d_out_proj_weight, fx::mha_causal_d_out_proj_bias);
  }
}

TEST_CASE("MultiheadAttention: a per-head [B*H, Tq, Tk] bool mask equals the [Tq, Tk] one") {
  MultiheadAttention<double> mha = torch_mha<double>();
  const xt::xarray<double> x = random_array({2, 3, 8}, 11);
  MhaMasks<double> flat, per_head;
  flat.attn_mask = torch_causal(3);
  xt::xarray<bool> repeated = xt::zeros<bool>(std::vector<std::size_t>{4, 3, 3});
  for (std::size_t bh = 0; bh < 4; ++bh) xt::view(repeated, bh) = torch_causal(3);
  per_head.attn_mask = repeated;
  Tape<double> tape;
  const Var<double> xv = tape.leaf(x);
  check_close(mha.forward(xv, per_head).value(), mha.forward(xv, flat).value(), 1e-14, 1e-14);
}

TEST_CASE("MultiheadAttention: gradcheck of self- and cross-attention in double") {
  Generator g(3);
  MultiheadAttention<double> mha(6, 3, {}, g);
  for (auto* p : mha.parameters())
    p->value += random_array(
        std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()), 5, -0.3, 0.3);
  check_module_gradients(mha, random_array({2, 4, 6}, 21));
  MhaMasks<double> masks;
  masks.key_padding_mask = xt::xarray<bool>{{false, true, false}, {false, false, false}};
  masks.is_causal = false;
  check_gradients(
      [&](const std::vector<Var<double>>& v) { return mha.forward(v[0], v[1], v[2], masks); },
      {random_array({2, 2, 6}, 22), random_array({2, 3, 6}, 23), random_array({2, 3, 6}, 24)});
}

TEST_CASE("MultiheadAttention: unbatched [T, E] input equals the batch of one, as torch") {
  MultiheadAttention<double> mha = torch_mha<double>();
  const xt::xarray<double> x = random_array({3, 8}, 31), kv = random_array({4, 8}, 32);
  const auto batch_of_one = [](xt::xarray<double> a) {
    a.reshape({std::size_t(1), a.shape()[0], a.shape()[1]});
    return a;
  };
  const xt::xarray<double> self = mha.infer(x);  // forward(x): the fused self-attention path
  REQUIRE(self.shape() == Shape{3, 8});
  check_close(batch_of_one(self), mha.infer(batch_of_one(x)), 1e-14, 1e-14);

  // Cross-attention with a key_padding_mask [Tk] and a causal attn_mask [Tq, Tk]: values and
  // every gradient against the batch of one.
  MhaMasks<double> masks, batched;
  masks.key_padding_mask = xt::xarray<bool>{false, false, true, false};
  masks.attn_mask = xt::xarray<bool>{
      {false, true, true, true}, {false, false, true, true}, {false, false, false, true}};
  batched = masks;
  batched.key_padding_mask = xt::xarray<bool>{{false, false, true, false}};
  const xt::xarray<double> dy = random_array({3, 8}, 33);
  Tape<double> tape, ref;
  const Var<double> q = tape.leaf(x), k = tape.leaf(kv), v = tape.leaf(kv);
  const Var<double> y = mha.forward(q, k, v, masks);
  REQUIRE(y.shape() == Shape{3, 8});
  tape.backward(y, dy);
  const std::vector<xt::xarray<double>> grads = {mha.in_proj_weight.grad, mha.out_proj.weight.grad};
  mha.zero_grad();
  const Var<double> rq = ref.leaf(batch_of_one(x)), rk = ref.leaf(batch_of_one(kv)),
                    rv = ref.leaf(batch_of_one(kv));
  const Var<double> ry = mha.forward(rq, rk, rv, batched);
  ref.backward(ry, batch_of_one(dy));
  check_close(batch_of_one(y.value()), ry.value(), 1e-14, 1e-14);
  check_close(batch_of_one(q.grad()), rq.grad(), 1e-14, 1e-14);
  check_close(batch_of_one(k.grad()), rk.grad(), 1e-14, 1e-14);
  check_close(grads[0], mha.in_proj_weight.grad, 1e-14, 1e-14);
  check_close(grads[1], mha.out_proj.weight.grad, 1e-14, 1e-14);

  // All three unbatched, or none; the masks in their unbatched shapes.
  Tape<double> bad;
  const Var<double> x2 = bad.leaf(x), kv3 = bad.leaf(batch_of_one(kv));
  const std::size_t before = bad.size();
  CHECK(message_of([&] { mha.forward(x2, kv3, kv3); }) ==
        "xtgrad::MultiheadAttention: argument 'key' has shape [1, 4, 8], expected [T, 8] "
        "(unbatched, as query)");
  CHECK(message_of([&] { mha.forward(x2, bad.leaf(kv), bad.leaf(kv), batched); }) ==
        "xtgrad::MultiheadAttention: argument 'key_padding_mask' has shape [1, 4], expected [4] "
        "(keys; unbatched)");
  CHECK(bad.size() == before + 2);  // only the two leaves
}

TEST_CASE(
    "CausalSelfAttention: the llama layout with GQA and rotary equals PyTorch's LlamaAttention") {
  CausalSelfAttention<double> attn(fx::llama_hidden,
                                   llama_options(fx::llama_heads, fx::llama_kv_heads));
  const fs::path file = transformer_fixture_file("llama_attention.safetensors");
  load_llama_attention(attn, file, llama_attention_prefix(0));
  const TensorMap tensors = read_safetensors(file).tensors;
  const xt::xarray<double> x = get_tensor<double>(tensors, "x");
  check_close(attn.infer(x), get_tensor<double>(tensors, "y"), 1e-12, 1e-12);
}

TEST_CASE("CausalSelfAttention: names, shapes and initialization of both layouts") {
  CausalSelfAttentionOptions gpt2;
  gpt2.n_heads = 4;
  CausalSelfAttention<double> a(16, gpt2);
  const auto named = a.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "c_attn.weight");
  CHECK(a.c_attn->weight.value.shape() == Shape{16, 48});
  CHECK(named[3].first == "c_proj.bias");
  CHECK(xt::all(xt::equal(a.c_attn->bias.value, 0.0)));
  const double std = std::sqrt(xt::mean(xt::square(a.c_attn->weight.value))());
  CHECK(std == doctest::Approx(0.02).epsilon(0.1));
  CausalSelfAttention<double> l(16, llama_options(4, 2));
  const auto lnamed = l.named_parameters();
  REQUIRE(lnamed.size() == 4);
  CHECK(lnamed[1].first == "k_proj.weight");
  CHECK(l.k_proj->weight.value.shape() == Shape{8, 16});
  CHECK(l.o_proj->weight.value.shape() == Shape{16, 16});
}

TEST_CASE("CausalSelfAttention: gradcheck of the gpt2 (packed and GQA) and llama layouts") {
  Generator g(9);
  CausalSelfAttentionOptions packed;
  packed.n_heads = 2;
  CausalSelfAttentionOptions grouped = packed;
  grouped.n_heads = 4;
  grouped.n_kv_heads = 2;
  grouped.rotary = true;
  for (const auto& options : {packed, grouped, llama_options(4, 2), llama_options(2, 1)}) {
    CausalSelfAttention<double> attn(8, options, g);
    for (auto* p : attn.parameters())
      p->value =
          random_array(std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()),
                       31, -0.5, 0.5);
    check_module_gradients(attn, random_array({2, 3, 8}, 41));
  }
}

TEST_CASE("CausalSelfAttention: the KV-cache steps equal the full forward, both layouts") {
  for (const bool llama : {false, true}) {
    INFO("llama: " << llama);
    CausalSelfAttentionOptions options = llama ? llama_options(4, 2) : CausalSelfAttentionOptions{};
    if (!llama) options.n_heads = 2;
    Generator g(5);
    CausalSelfAttention<double> attn(8, options, g);
    for (auto* p : attn.parameters())
      p->value = random_array(
          std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()), 3, -0.5, 0.5);
    const xt::xarray<double> x = random_array({2, 5, 8}, 8);
    const xt::xarray<double> full = attn.infer(x);
    KvCache<double> cache(2, 1, attn.n_kv_heads(), attn.head_dim(), 6);
    Tape<double> tape;
    tape.set_grad_enabled(false);
    // A prefix of two rows at once, then one row at a time.
    const Var<double> first =
        attn.forward(tape.leaf(xt::xarray<double>(xt::view(x, xt::all(), xt::range(0, 2)))), cache);
    check_close(first.value(), xt::xarray<double>(xt::view(full, xt::all(), xt::range(0, 2))),
                1e-12, 1e-13);
    for (std::size_t t = 2; t < 5; ++t) {
      const Var<double> y = attn.forward(
          tape.leaf(xt::xarray<double>(xt::view(x, xt::all(), xt::range(t, t + 1)))), cache);
      check_close(y.value(), xt::xarray<double>(xt::view(full, xt::all(), xt::range(t, t + 1))),
                  1e-12, 1e-13);
    }
    CHECK(cache.length(0) == 5);
  }
}

TEST_CASE("attention modules: checkpoints round trip, and record their options") {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_attention_modules_scratch";
  fs::create_directories(dir);
  MultiheadAttention<double> mha(8, 2, {true, 0.1});
  mha.in_proj_weight.value += 1.0;
  mha.save(dir / "mha.safetensors");
  MultiheadAttention<double> mha_back(8, 2, {true, 0.1});
  mha_back.load(dir / "mha.safetensors");
  CHECK(mha_back.in_proj_weight.value == mha.in_proj_weight.value);
  CausalSelfAttention<double> attn(8, llama_options(4, 2));
  attn.save(dir / "attn.safetensors");
  CausalSelfAttention<double> other_heads(8, llama_options(4, 4));
  CHECK_THROWS_WITH_PARTS(other_heads.load(dir / "attn.safetensors"), std::invalid_argument,
                          {"Module::load", "n_kv_heads=2", "n_kv_heads=4"});
  CHECK(attn.config().describe() ==
        "CausalSelfAttention(n_embd=8, n_heads=4, n_kv_heads=2, layout=llama, rotary=true, "
        "rope_theta=10000, attn_dropout=0, resid_dropout=0)");
}

TEST_CASE("KvCache: append, read back and capacity") {
  KvCache<double> cache(1, 2, 2, 3, 4);
  CHECK(cache.length(1) == 0);
  const xt::xarray<double> k = random_array({1, 2, 3, 3}, 1), v = random_array({1, 2, 3, 3}, 2);
  cache.append(1, k, v);
  CHECK(cache.length(1) == 3);
  CHECK(cache.length(0) == 0);
  CHECK(cache.keys(1) == k);
  CHECK(cache.values(1) == v);
  const xt::xarray<double> k2 = random_array({1, 2, 1, 3}, 3);
  cache.append(1, k2, k2);
  CHECK(xt::xarray<double>(xt::view(cache.keys(1), xt::all(), xt::all(), xt::range(3, 4))) == k2);
  CHECK_THROWS_WITH_PARTS(cache.append(1, k2, k2), std::invalid_argument,
                          {"KvCache::append", "holds 4 positions", "capacity 4"});
  CHECK_THROWS_WITH_PARTS(cache.append(2, k2, k2), std::invalid_argument,
                          {"KvCache::append", "'layer'", "has 2 layers"});
  CHECK_THROWS_WITH_PARTS(cache.append(0, random_array({1, 3, 1, 3}, 4), k2), std::invalid_argument,
                          {"KvCache::append", "'k'", "[1, 2, T, 3]"});
  CHECK_THROWS_WITH_PARTS(KvCache<double>(1, 1, 0, 3, 4), std::invalid_argument,
                          {"KvCache", "'n_kv_heads'", "positive"});
  cache.clear();
  CHECK(cache.length(1) == 0);
}

TEST_CASE("attention modules: every bad argument throws before anything changes") {
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  bad("MHA: heads not dividing", [] { MultiheadAttention<double>(8, 3); }, Expect::invalid_argument,
      {"MultiheadAttention", "'num_heads'", "does not divide embed_dim 8"});
  bad("MHA: zero embed_dim", [] { MultiheadAttention<double>(0, 1); }, Expect::invalid_argument,
      {"MultiheadAttention", "'embed_dim'", "positive"});
  bad("MHA: dropout",
      [] {
        MultiheadAttention<double>(8, 2, {true, 1.5});
      },
      Expect::invalid_argument, {"MultiheadAttention", "'dropout'", "[0, 1]"});
  bad("CSA: heads not dividing",
      [] {
        CausalSelfAttentionOptions three;
        three.n_heads = 3;
        CausalSelfAttention<double>(8, three);
      },
      Expect::invalid_argument, {"CausalSelfAttention", "'n_heads'", "does not divide n_embd 8"});
  bad("CSA: kv heads not dividing", [] { CausalSelfAttention<double>(12, llama_options(4, 3)); },
      Expect::invalid_argument,
      {"CausalSelfAttention", "'n_kv_heads'", "does not divide n_heads 4"});
  bad("CSA: odd head size with rotary", [] { CausalSelfAttention<double>(6, llama_options(2, 2)); },
      Expect::invalid_argument, {"CausalSelfAttention", "'rotary'", "even head size"});
  bad("CSA: zero n_embd", [] { CausalSelfAttention<double>(0, CausalSelfAttentionOptions{}); },
      Expect::invalid_argument, {"CausalSelfAttention", "'n_embd'"});

  MultiheadAttention<double> mha(8, 2);
  CausalSelfAttention<double> attn(8, llama_options(2, 1));
  Tape<double> tape, no_grad;
  no_grad.set_grad_enabled(false);
  const Var<double> x = tape.leaf(random_array({2, 3, 8}, 1));
  const Var<double> narrow = tape.leaf(random_array({2, 3, 6}, 2));
  const Var<double> other_batch = tape.leaf(random_array({3, 4, 8}, 3));
  const Var<double> x_off = no_grad.leaf(random_array({2, 3, 8}, 4));
  KvCache<double> cache(2, 1, 1, 4, 4);
  KvCache<double> wrong_heads(2, 1, 2, 4, 8);
  bad("MHA: query width", [&] { mha.forward(narrow); }, Expect::invalid_argument,
      {"MultiheadAttention", "'query'", "[2, 3, 6]", "[B, T, 8]"});
  bad("MHA: key batch", [&] { mha.forward(x, other_batch, other_batch); }, Expect::invalid_argument,
      {"MultiheadAttention", "'key'", "[3, 4, 8]", "[2, T, 8]"});
  MhaMasks<double> kpm;
  kpm.key_padding_mask = xt::xarray<bool>{{false, true}};
  bad("MHA: key_padding_mask shape", [&] { mha.forward(x, kpm); }, Expect::invalid_argument,
      {"MultiheadAttention", "'key_padding_mask'", "[1, 2]", "[2, 3]"});
  MhaMasks<double> wide;
  wide.attn_mask = xt::xarray<double>(xt::zeros<double>({3, 4}));
  bad("MHA: attn_mask shape", [&] { mha.forward(x, wide); }, Expect::invalid_argument,
      {"MultiheadAttention", "'attn_mask'", "[3, 4]", "[3, 3] or [4, 3, 3]"});
  bad("CSA: x width", [&] { attn.forward(narrow); }, Expect::invalid_argument,
      {"CausalSelfAttention", "'x'", "[2, 3, 6]", "[B, T, 8]"});
  bad("CSA: cache on a recording tape", [&] { attn.forward(x, cache); }, Expect::logic_error,
      {"CausalSelfAttention", "recording is off"});
  bad("CSA: cache of other heads", [&] { attn.forward(x_off, wrong_heads); },
      Expect::invalid_argument, {"CausalSelfAttention", "'cache'", "2 key/value heads"});
  bad("CSA: cache layer", [&] { attn.forward(x_off, cache, 1); }, Expect::invalid_argument,
      {"CausalSelfAttention", "'layer'", "has 1 layers"});
  rows.push_back({"CSA: cache full",
                  [&] { attn.forward(x_off, cache); },
                  Expect::invalid_argument,
                  {"CausalSelfAttention", "holds 3 positions", "capacity 4"},
                  [&] { attn.forward(x_off, cache); },
                  [&] { cache.clear(); }});
  const auto snapshot = [&] {
    State s;
    s.add(tape.size());
    s.add(no_grad.size());
    for (const auto& [name, p] : mha.named_parameters()) s.add(*p);
    for (const auto& [name, p] : attn.named_parameters()) s.add(*p);
    s.add(cache.length(0));
    s.add(attn.attn_dropout.step());
    return s;
  };
  report("attention modules", run_rows(rows, snapshot));
}
