// Whole Hugging Face LLaMA-family checkpoints (tests/support/fixtures/make_llama.py):
// tied and untied heads, llama3 and linear rope scaling, a sharded checkpoint,
// bf16 weights and Qwen2's attention biases against LlamaForCausalLM's logits;
// the KV cache; the export and its round trip; every refusal of load_llama.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/io/safetensors.hpp>
#include <xtgrad/modules/pretrained/hf_llama.hpp>

#include "support/bit_equal.hpp"
#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/llama_fixtures.hpp"
#include "support/safetensors_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::llama;

namespace {

fs::path fixture(const std::string& name) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" / "llama" / name;
}

Indices ids() {
  return fixture_array<std::int64_t>(fx::tokens_shape, fx::tokens);
}

template <std::size_t N>
xt::xarray<double> reference(const double (&logits)[N]) {
  return fixture_array<double>(fx::logits_shape, logits);
}

// A copy of the fixture directory `name` in `dir`.
fs::path copy_of(const TempDir& dir, const std::string& name) {
  const fs::path out = dir / name;
  fs::copy(fixture(name), out);
  return out;
}

nlohmann::json read_json(const fs::path& path) {
  return nlohmann::json::parse(read_file(path));
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  write_file(path, j.dump(2));
}

}  // namespace

TEST_CASE_TEMPLATE("load_llama: each checkpoint gives LlamaForCausalLM's logits", T, float,
                   double) {
  // The reference is float64 from the stored weights; float differs by its rounding.
  const double tol = std::is_same_v<T, double> ? 1e-10 : 5e-5;
  const auto check = [&](const std::string& name, const xt::xarray<double>& expected) {
    INFO("checkpoint " << name);
    const LlamaForCausalLM<T> model = load_llama<T>(fixture(name));
    check_close(model.infer(ids()), expected, tol, tol);
  };
  check("tied_llama3", reference(fx::tied_llama3_logits));
  check("untied_sharded_linear", reference(fx::untied_sharded_linear_logits));
  check("bf16", reference(fx::bf16_logits));
  check("qwen2_bias", reference(fx::qwen2_bias_logits));
}

TEST_CASE("load_llama: the config, Hugging Face's names, tied and untied heads") {
  const LlamaForCausalLM<float> tied = load_llama<float>(fixture("tied_llama3"));
  const LlamaConfig& c = tied.llama_config();
  CHECK(c.model_type == "llama");
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(c.rope_scaling.original_max_position_embeddings == 64.0);
  CHECK(tied.gpt.gpt_config().block_size == 32);
  CHECK(!tied.gpt.lm_head);

  std::vector<std::string> names;
  for (const auto& [name, p] : const_cast<LlamaForCausalLM<float>&>(tied).named_parameters())
    names.push_back(name);
  const std::vector<std::string> layer0 = {"model.embed_tokens.weight",
                                           "model.layers.0.self_attn.q_proj.weight",
                                           "model.layers.0.self_attn.k_proj.weight",
                                           "model.layers.0.self_attn.v_proj.weight",
                                           "model.layers.0.self_attn.o_proj.weight",
                                           "model.layers.0.mlp.gate_proj.weight",
                                           "model.layers.0.mlp.up_proj.weight",
                                           "model.layers.0.mlp.down_proj.weight",
                                           "model.layers.0.input_layernorm.weight",
                                           "model.layers.0.post_attention_layernorm.weight"};
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 10) == layer0);
  CHECK(names.back() == "model.norm.weight");
  CHECK(names.size() == 1 + 2 * 9 + 1);

  // The state dict is the file: same names, layouts and (float32) values, and
  // the file loads into a model of the config by load_state_dict alone.
  for (const char* name : {"tied_llama3", "qwen2_bias"}) {
    INFO("checkpoint " << name);
    const TensorMap file = read_safetensors(fixture(name) / "model.safetensors").tensors;
    const LlamaForCausalLM<float> model = load_llama<float>(fixture(name));
    const TensorDict<float> dict = llama_state_dict(model);
    CHECK(dict.keys() == model.state_dict().keys());
    LlamaForCausalLM<float> fresh(model.llama_config());
    fresh.load_state_dict(file);
    CHECK(bit_equal(fresh.infer(ids()), model.infer(ids())));
    CHECK(dict.size() == file.size());
    for (const auto& entry : dict) {
      const std::string key = entry.first;
      INFO("tensor " << key);
      REQUIRE(file.count(key) == 1);
      CHECK(bit_equal(entry.second, file.at(key).get<float>()));
    }
  }

  const LlamaForCausalLM<float> untied = load_llama<float>(fixture("untied_sharded_linear"));
  CHECK(untied.gpt.lm_head);
  CHECK(untied.state_dict().contains("lm_head.weight"));
  CHECK(untied.llama_config().rope_scaling.type == RopeScaling::Type::linear);
  const LlamaForCausalLM<float> qwen = load_llama<float>(fixture("qwen2_bias"));
  CHECK(qwen.state_dict().contains("model.layers.1.self_attn.v_proj.bias"));
  CHECK(!qwen.state_dict().contains("model.layers.1.self_attn.o_proj.bias"));
}

TEST_CASE("load_llama: the KV cache and generate equal the full forward") {
  for (const char* name : {"tied_llama3", "qwen2_bias"}) {
    INFO("checkpoint " << name);
    LlamaForCausalLM<double> model = load_llama<double>(fixture(name));
    const Indices tokens = ids();
    const xt::xarray<double> full = model.infer(tokens);  // [T, V]
    // Row by row through the cache (positions offset by what is cached).
    KvCache<double> cache = model.make_cache(1);
    Tape<double> tape;
    tape.set_grad_enabled(false);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      Indices one = xt::empty<std::int64_t>(std::vector<std::size_t>{1, 1});
      one(0, 0) = tokens(t);
      const Var<double> row = model.forward(tape, one, cache);  // [1, 1, V]
      check_close(xt::xarray<double>(xt::view(row.value(), 0, 0, xt::all())),
                  xt::xarray<double>(xt::view(full, t, xt::all())), 1e-12, 1e-12);
      tape.clear();
    }
    // Greedy generation: each token the argmax of the full forward of what came before.
    const std::vector<std::int64_t> prompt(fx::tokens, fx::tokens + 3);
    const std::vector<std::int64_t> out = model.generate(prompt, 5, 0.0);
    REQUIRE(out.size() == 8);
    for (std::size_t n = 3; n < out.size(); ++n) {
      Indices before = xt::empty<std::int64_t>(std::vector<std::size_t>{n});
      std::copy(out.begin(), out.begin() + std::ptrdiff_t(n), before.begin());
      const xt::xarray<double> logits = model.infer(before);
      const auto last = xt::view(logits, n - 1, xt::all());
      CHECK(out[n] == std::int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
    }
  }
}

TEST_CASE_TEMPLATE("export_llama: load_llama reads the export back bit for bit", T, float, double) {
  const TempDir dir("hf_llama_export");
  for (const char* name : {"untied_sharded_linear", "tied_llama3", "qwen2_bias", "bf16"}) {
    INFO("checkpoint " << name);
    const LlamaForCausalLM<T> model = load_llama<T>(fixture(name));
    const fs::path out = dir / name;
    export_llama(model, out);
    CHECK(directory_names(out) == std::vector<std::string>{"config.json", "model.safetensors"});
    const nlohmann::json config = read_json(out / "config.json");
    CHECK(config["torch_dtype"] == (std::is_same_v<T, float> ? "float32" : "float64"));
    CHECK(config["num_key_value_heads"] == 2);
    const LlamaForCausalLM<T> back = load_llama<T>(out);
    const TensorDict<T> a = model.state_dict(), b = back.state_dict();
    REQUIRE(a.keys() == b.keys());
    for (const auto& [key, value] : a) CHECK(bit_equal(value, b.at(key)));
    CHECK(back.llama_config().rope_scaling.type == model.llama_config().rope_scaling.type);
    CHECK(back.llama_config().qkv_bias == model.llama_config().qkv_bias);
    CHECK(back.llama_config().tie_word_embeddings == model.llama_config().tie_word_embeddings);
    CHECK(bit_equal(back.infer(ids()), model.infer(ids())));
  }
  // An index beside the export would be read instead of it.
  write_file(dir / "qwen2_bias" / "model.safetensors.index.json", "{}");
  CHECK_THROWS_WITH_PARTS(export_llama(load_llama<T>(fixture("qwen2_bias")), dir / "qwen2_bias"),
                          std::invalid_argument,
                          {"export_llama", "'dir'", "model.safetensors.index.json"});
}

TEST_CASE("LlamaForCausalLM: save and load as any module - GPT's options it uses") {
  const TempDir dir("hf_llama_module");
  const LlamaForCausalLM<float> model = load_llama<float>(fixture("qwen2_bias"));
  model.save(dir / "qwen.safetensors");
  LlamaForCausalLM<float> copy(model.llama_config());
  copy.load(dir / "qwen.safetensors");
  CHECK(bit_equal(copy.infer(ids()), model.infer(ids())));
  // The GPT options are the llama style's alone.
  GPTConfig gpt2;
  gpt2.vocab_size = gpt2.block_size = gpt2.n_embd = 8;
  gpt2.n_layer = gpt2.n_head = 1;
  gpt2.hf_mlp = true;
  CHECK_THROWS_WITH_PARTS(GPT<float>{gpt2}, std::invalid_argument,
                          {"TransformerBlock", "'hf_mlp'", "gpt2 style"});
  gpt2.hf_mlp = false;
  gpt2.qkv_bias = true;
  CHECK_THROWS_WITH_PARTS(GPT<float>{gpt2}, std::invalid_argument,
                          {"CausalSelfAttention", "'qkv_bias'", "gpt2 layout"});
}

TEST_CASE("load_llama: block_size, and a sliding window narrower than it") {
  const LlamaForCausalLM<float> small = load_llama<float>(fixture("bf16"), {8});
  CHECK(small.gpt.gpt_config().block_size == 8);
  CHECK_THROWS_WITH_PARTS(load_llama<float>(fixture("bf16"), {33}), std::invalid_argument,
                          {"load_llama", "'options.block_size'", "33", "32"});
  const TempDir dir("hf_llama_window");
  const fs::path qwen = copy_of(dir, "qwen2_bias");
  nlohmann::json config = read_json(qwen / "config.json");
  config["use_sliding_window"] = true;
  config["sliding_window"] = 16;
  write_json(qwen / "config.json", config);
  CHECK_THROWS_WITH_PARTS(load_llama<float>(qwen), std::invalid_argument,
                          {"load_llama", "config.json", "\"sliding_window\" is 16", "32"});
  CHECK(load_llama<float>(qwen, {16}).gpt.gpt_config().block_size == 16);
}

TEST_CASE("load_llama: refusals name the file and the tensor") {
  const TempDir dir("hf_llama_errors");
  const std::string norm = "'model.norm.weight'";
  // A copy of the single-file checkpoint whose tensors `edit` changes.
  const auto edited = [&](const std::string& name, const auto& edit) {
    const fs::path out = dir / name;
    fs::copy(fixture("tied_llama3"), out);
    TensorMap tensors = read_safetensors(out / "model.safetensors").tensors;
    edit(tensors);
    fs::remove(out / "model.safetensors");
    write_safetensors(out / "model.safetensors", tensors);
    return out;
  };

  SUBCASE("missing files") {
    const fs::path empty = dir / "empty";
    fs::create_directories(empty);
    CHECK_THROWS_WITH_PARTS(load_llama<float>(empty), std::invalid_argument,
                            {"xtgrad::load_llama", "empty", "has no config.json"});
    fs::copy(fixture("tied_llama3") / "config.json", empty / "config.json");
    CHECK_THROWS_WITH_PARTS(load_llama<float>(empty), std::invalid_argument,
                            {"load_llama", "model.safetensors", "model.safetensors.index.json"});
    const fs::path sharded = copy_of(dir, "untied_sharded_linear");
    fs::remove(sharded / "model-00002-of-00002.safetensors");
    CHECK_THROWS_WITH_PARTS(
        load_llama<float>(sharded), std::invalid_argument,
        {"load_llama", "model-00002-of-00002.safetensors", "does not exist", "'lm_head.weight'"});
  }
  SUBCASE("a missing tensor, an unexpected one, a shape") {
    const fs::path missing =
        edited("missing", [](TensorMap& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
    CHECK_THROWS_WITH_PARTS(load_llama<float>(missing), std::invalid_argument,
                            {"load_llama", "'model.layers.1.mlp.up_proj.weight'", "is missing",
                             "missing/model.safetensors"});
    const fs::path extra = edited("extra", [](TensorMap& t) {
      t.emplace("model.layers.0.mlp.extra.weight", StoredTensor(xt::xarray<float>{1.0f}));
    });
    CHECK_THROWS_WITH_PARTS(load_llama<float>(extra), std::invalid_argument,
                            {"load_llama", "extra/model.safetensors",
                             "'model.layers.0.mlp.extra.weight'", "is not a parameter"});
    const fs::path shape = edited("shape", [](TensorMap& t) {
      t["model.norm.weight"] = StoredTensor(xt::xarray<float>(xt::ones<float>({31})));
    });
    CHECK_THROWS_WITH_PARTS(load_llama<float>(shape), std::invalid_argument,
                            {"load_llama", "shape/model.safetensors", norm, "[31]", "[32]"});
    const fs::path head = edited("head", [](TensorMap& t) {
      xt::xarray<float> e = t.at("model.embed_tokens.weight").get<float>();
      e(0, 0) += 1.0f;
      t.emplace("lm_head.weight", StoredTensor(e));
    });
    CHECK_THROWS_WITH_PARTS(load_llama<float>(head), std::invalid_argument,
                            {"load_llama", "'lm_head.weight'", "differs", "tie_word_embeddings"});
    // A tied checkpoint that saved its head too loads.
    const fs::path same = edited("same_head", [](TensorMap& t) {
      t.emplace("lm_head.weight", t.at("model.embed_tokens.weight"));
    });
    CHECK(!load_llama<float>(same).gpt.lm_head);
  }
  SUBCASE("a dtype xtgrad does not read") {
    const fs::path bad = copy_of(dir, "tied_llama3");
    write_file(bad / "model.safetensors",
               safetensors_file("{" + entry("model.norm.weight", "I32", "32", 0, 128) + "}",
                                std::string(128, '\0')));
    CHECK_THROWS_WITH_PARTS(load_llama<float>(bad), std::invalid_argument,
                            {"load_llama", "model.safetensors", norm, "unsupported dtype 'I32'"});
  }
  SUBCASE("a truncated shard, a shard the index contradicts") {
    const fs::path sharded = copy_of(dir, "untied_sharded_linear");
    const fs::path second = sharded / "model-00002-of-00002.safetensors";
    const std::string bytes = read_file(second);
    write_file(second, bytes.substr(0, bytes.size() - 100));
    CHECK_THROWS_WITH_PARTS(load_llama<float>(sharded), std::invalid_argument,
                            {"load_llama", "model-00002-of-00002.safetensors", "is truncated", norm,
                             "is the first cut off"});
    write_file(second, bytes);
    CHECK(load_llama<float>(sharded).gpt.lm_head);
    nlohmann::json index = read_json(sharded / "model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    write_json(sharded / "model.safetensors.index.json", index);
    CHECK_THROWS_WITH_PARTS(load_llama<float>(sharded), std::invalid_argument,
                            {"load_llama", "model-00002-of-00002.safetensors", norm,
                             "model-00001-of-00002.safetensors", "by the index"});
    index["weight_map"]["model.norm.weight"] = "../model.safetensors";
    write_json(sharded / "model.safetensors.index.json", index);
    CHECK_THROWS_WITH_PARTS(
        load_llama<float>(sharded), std::invalid_argument,
        {"load_llama", "model.safetensors.index.json", norm, "beside the index"});
  }
  SUBCASE("config.json") {
    const fs::path model = copy_of(dir, "tied_llama3");
    const nlohmann::json good = read_json(model / "config.json");
    const auto refused = [&](const char* key, const nlohmann::json& value,
                             const std::vector<std::string>& parts) {
      nlohmann::json config = good;
      config[key] = value;
      write_json(model / "config.json", config);
      INFO("key " << key);
      CHECK_THROWS_WITH_PARTS(load_llama<double>(model), std::invalid_argument, (parts));
    };
    refused("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}},
            {"load_llama", "config.json", "\"rope_scaling\"", "\"dynamic\"", "\"llama3\""});
    refused("rope_scaling", {{"type", "yarn"}, {"factor", 2.0}}, {"\"yarn\""});
    refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", -1.0}},
            {"\"rope_scaling.factor\" is -1"});
    refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}},
            {"\"rope_scaling.low_freq_factor\" is missing"});
    refused("head_dim", 16, {"\"head_dim\" is 16", "8"});
    refused("hidden_act", "gelu", {"\"hidden_act\"", "\"gelu\""});
    refused("model_type", "gemma", {"\"model_type\"", "\"gemma\""});
    refused("mlp_bias", true, {"\"mlp_bias\""});
    refused("num_key_value_heads", 3, {"\"num_key_value_heads\" 3", "4"});
    refused("hidden_size", 0, {"\"hidden_size\" is 0"});
    refused("attention_dropout", 0.1, {"\"attention_dropout\""});
    nlohmann::json config = good;
    config.erase("vocab_size");
    write_json(model / "config.json", config);
    CHECK_THROWS_WITH_PARTS(load_llama<float>(model), std::invalid_argument,
                            {"load_llama", "has no \"vocab_size\""});
  }
}

TEST_CASE("apply_rotary: rope scaling refuses factors out of range") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>(xt::ones<double>({2, 4})));
  RopeScaling s;
  s.type = RopeScaling::Type::llama3;
  s.factor = 8.0;
  s.low_freq_factor = 4.0;
  s.high_freq_factor = 1.0;
  CHECK_THROWS_WITH_PARTS(apply_rotary(x, 0, 10000.0, s), std::invalid_argument,
                          {"apply_rotary", "'scaling'", "low_freq_factor 4", "high_freq_factor 1"});
  s.type = RopeScaling::Type::linear;
  s.factor = 0.0;
  CHECK_THROWS_WITH_PARTS(apply_rotary(x, 0, 10000.0, s), std::invalid_argument,
                          {"apply_rotary", "'scaling'", "factor 0"});
  CHECK(tape.size() == 1);  // nothing recorded
}
