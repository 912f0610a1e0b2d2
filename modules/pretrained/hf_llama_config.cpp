// llama_config_from_json and llama_config_json (hf_llama_config.hpp).
#include "hf_llama_config.hpp"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "../../engine/errors.hpp"
#include "../../io/files.hpp"
#include "../../io/json_reader.hpp"

namespace xtgrad {

namespace {

constexpr std::size_t k_max_llama_config_bytes = 1'000'000;

using Json = nlohmann::ordered_json;

struct LlamaConfigReader {
  const Json& j;
  std::string function;
  std::string where;  // "config '<path>'"

  [[noreturn]] void fail(const std::string& what) const {
    detail::fail_value(function, where + ": " + what);
  }
  // The value of `key`, or null when absent or null.
  const Json* find(const Json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const Json* find(const char* key) const { return find(j, key); }
  std::size_t size(const Json& v, const std::string& key) const {
    if (!v.is_number_unsigned() || v.get<std::size_t>() == 0)
      fail("\"" + key + "\" is " + detail::escaped(v.dump(), 100) +
           ", expected a positive integer");
    return v.get<std::size_t>();
  }
  std::size_t size(const char* key) const {
    const Json* v = find(key);
    if (!v) fail(std::string("has no \"") + key + "\"");
    return size(*v, key);
  }
  double positive(const Json& object, const char* key, const std::string& shown,
                  std::optional<double> fallback) const {
    const Json* v = find(object, key);
    if (!v) {
      if (!fallback) fail("\"" + shown + "\" is missing");
      return *fallback;
    }
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0)
      fail("\"" + shown + "\" is " + detail::escaped(v->dump(), 100) +
           ", expected a finite number > 0");
    return v->get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean())
      fail(std::string("\"") + key + "\" is " + detail::escaped(v->dump(), 100) +
           ", expected true or false");
    return v->get<bool>();
  }
  std::string text(const Json& object, const char* key, const std::string& shown,
                   const std::string& fallback) const {
    const Json* v = find(object, key);
    if (!v) return fallback;
    if (!v->is_string())
      fail("\"" + shown + "\" is " + detail::escaped(v->dump(), 100) + ", expected a string");
    return v->get<std::string>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    return text(j, key, key, fallback);
  }
};

RopeScaling rope_scaling(const LlamaConfigReader& r) {
  const Json* v = r.find("rope_scaling");
  RopeScaling s;
  if (!v) return s;
  if (!v->is_object())
    r.fail("\"rope_scaling\" is " + detail::escaped(v->dump(), 100) +
           ", expected null or an object");
  std::string type = r.text(*v, "rope_type", "rope_scaling.rope_type", "");
  if (type.empty()) type = r.text(*v, "type", "rope_scaling.type", "");
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeScaling::Type::linear;
    s.factor = r.positive(*v, "factor", "rope_scaling.factor", std::nullopt);
    return s;
  }
  if (type == "llama3") {
    s.type = RopeScaling::Type::llama3;
    s.factor = r.positive(*v, "factor", "rope_scaling.factor", std::nullopt);
    // All required, as _compute_llama3_parameters reads them.
    s.low_freq_factor =
        r.positive(*v, "low_freq_factor", "rope_scaling.low_freq_factor", std::nullopt);
    s.high_freq_factor =
        r.positive(*v, "high_freq_factor", "rope_scaling.high_freq_factor", std::nullopt);
    s.original_max_position_embeddings =
        r.positive(*v, "original_max_position_embeddings",
                   "rope_scaling.original_max_position_embeddings", std::nullopt);
    if (!(s.low_freq_factor < s.high_freq_factor))
      r.fail("\"rope_scaling\" has low_freq_factor " + detail::number_str(s.low_freq_factor) +
             " >= high_freq_factor " + detail::number_str(s.high_freq_factor));
    return s;
  }
  r.fail("\"rope_scaling\" has the type \"" + detail::escaped(type, 100) +
         "\", which xtgrad does not implement; expected \"default\", \"linear\" or \"llama3\"");
}

const char* architecture(const std::string& model_type) {
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

}  // namespace

LlamaConfig llama_config_from_json(const std::filesystem::path& path, const std::string& function) {
  const std::string where = "config " + detail::path_str(path);
  const Json j = detail::read_json_file(path, function, where + " ", k_max_llama_config_bytes,
                                        detail::JsonKeys::last_wins);
  if (!j.is_object()) detail::fail_value(function, where + " is not a JSON object");
  const LlamaConfigReader r{j, function, where};
  LlamaConfig c;
  c.model_type = r.text("model_type", "llama");
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2")
    r.fail("\"model_type\" is \"" + detail::escaped(c.model_type, 100) +
           "\", expected \"llama\", \"mistral\" or \"qwen2\"");
  const std::string act = r.text("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    r.fail("\"hidden_act\" is \"" + detail::escaped(act, 100) +
           "\"; the llama style computes SwiGLU (\"silu\") only");
  c.vocab_size = r.size("vocab_size");
  c.hidden_size = r.size("hidden_size");
  c.intermediate_size = r.size("intermediate_size");
  c.num_hidden_layers = r.size("num_hidden_layers");
  c.num_attention_heads = r.size("num_attention_heads");
  c.max_position_embeddings = r.size("max_position_embeddings");
  c.num_key_value_heads = c.num_attention_heads;
  if (const Json* kv = r.find("num_key_value_heads"))
    c.num_key_value_heads = r.size(*kv, "num_key_value_heads");
  if (c.hidden_size % c.num_attention_heads != 0)
    r.fail("\"num_attention_heads\" " + std::to_string(c.num_attention_heads) +
           " does not divide \"hidden_size\" " + std::to_string(c.hidden_size));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("\"num_key_value_heads\" " + std::to_string(c.num_key_value_heads) +
           " does not divide \"num_attention_heads\" " + std::to_string(c.num_attention_heads));
  const std::size_t head_size = c.hidden_size / c.num_attention_heads;
  if (const Json* hd = r.find("head_dim"); hd && r.size(*hd, "head_dim") != head_size)
    r.fail("\"head_dim\" is " + hd->dump() + ", but GPT's head size is hidden_size / " +
           "num_attention_heads = " + std::to_string(head_size) +
           "; a head_dim of its own is not supported");
  if (head_size % 2 != 0)
    r.fail("the head size hidden_size / num_attention_heads is " + std::to_string(head_size) +
           ", but rotary embeddings need an even one");
  c.rms_norm_eps = r.positive(j, "rms_norm_eps", "rms_norm_eps", 1e-6);
  c.rope_theta = r.positive(j, "rope_theta", "rope_theta", 10000.0);
  c.rope_scaling = rope_scaling(r);
  c.tie_word_embeddings = r.flag("tie_word_embeddings", false);
  const bool attention_bias = r.flag("attention_bias", false);
  c.qkv_bias = attention_bias || c.model_type == "qwen2";
  c.o_bias = attention_bias && c.model_type != "qwen2";
  if (r.flag("mlp_bias", false))
    r.fail("\"mlp_bias\" is true; the llama style's MLP has no biases");
  if (const Json* p = r.find("attention_dropout");
      p && !(p->is_number() && p->get<double>() == 0.0))
    r.fail("\"attention_dropout\" is " + detail::escaped(p->dump(), 100) +
           ", expected 0 (GPT has one dropout for embeddings, attention and residuals)");
  if (c.model_type == "mistral" || (c.model_type == "qwen2" && r.flag("use_sliding_window", false)))
    if (const Json* w = r.find("sliding_window")) c.sliding_window = r.size(*w, "sliding_window");
  c.torch_dtype = r.text("torch_dtype", "float32");
  if (c.torch_dtype != "float32" && c.torch_dtype != "float16" && c.torch_dtype != "bfloat16" &&
      c.torch_dtype != "float64")
    r.fail("\"torch_dtype\" is \"" + detail::escaped(c.torch_dtype, 100) +
           "\", expected \"float32\", \"float16\", \"bfloat16\" or \"float64\"");
  return c;
}

std::string llama_config_json(const LlamaConfig& c) {
  Json j;
  j["architectures"] = Json::array({architecture(c.model_type)});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.hidden_size / c.num_attention_heads;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::none) {
    j["rope_scaling"] = nullptr;
  } else {
    const RopeScaling& s = c.rope_scaling;
    Json scaling;
    scaling["rope_type"] = s.type == RopeScaling::Type::linear ? "linear" : "llama3";
    scaling["factor"] = s.factor;
    if (s.type == RopeScaling::Type::llama3) {
      scaling["low_freq_factor"] = s.low_freq_factor;
      scaling["high_freq_factor"] = s.high_freq_factor;
      scaling["original_max_position_embeddings"] = s.original_max_position_embeddings;
    }
    j["rope_scaling"] = scaling;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type == "qwen2") {
    if (!c.qkv_bias || c.o_bias)
      detail::fail_argument("llama_config_json", "config",
                            "is a qwen2 config whose attention biases are not q/k/v only");
    j["use_sliding_window"] = c.sliding_window.has_value();
  } else {
    if (c.qkv_bias != c.o_bias)
      detail::fail_argument("llama_config_json", "config",
                            "has q/k/v biases without the o_proj one (or the reverse), which only "
                            "model_type qwen2 (q/k/v) describes");
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = false;
  }
  j["attention_dropout"] = 0.0;
  if (c.model_type != "llama") {
    if (c.sliding_window)
      j["sliding_window"] = *c.sliding_window;
    else
      j["sliding_window"] = nullptr;
  }
  j["torch_dtype"] = c.torch_dtype;
  return j.dump(2) + "\n";
}

GPTConfig llama_gpt_config(const LlamaConfig& c, std::size_t block_size) {
  GPTConfig g;
  g.style = GPTStyle::llama;
  g.vocab_size = c.vocab_size;
  g.block_size = block_size;
  g.n_layer = c.num_hidden_layers;
  g.n_head = c.num_attention_heads;
  g.n_kv_head = c.num_key_value_heads;
  g.n_embd = c.hidden_size;
  g.ffn_hidden = c.intermediate_size;
  g.dropout = 0.0;
  g.tie_embeddings = c.tie_word_embeddings;
  g.eps = c.rms_norm_eps;
  detail::copy_attention_options(g, c);
  return g;
}

}  // namespace xtgrad
