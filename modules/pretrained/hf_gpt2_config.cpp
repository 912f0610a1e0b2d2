// gpt2_config_from_json (hf_gpt2_config.hpp): a GPT2Config config.json as a GPTConfig.
#include "hf_gpt2_config.hpp"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "../../engine/errors.hpp"
#include "../../io/files.hpp"
#include "../../io/json_reader.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_gpt2_config_function = "gpt2_config_from_json";
constexpr std::size_t k_max_gpt2_config_bytes = 1'000'000;

struct Gpt2ConfigReader {
  const nlohmann::ordered_json& j;
  std::string where;  // "config '<path>'"

  [[noreturn]] void fail(const std::string& what) const {
    detail::fail_value(k_gpt2_config_function, where + ": " + what);
  }
  const nlohmann::ordered_json* find(const char* key) const {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }
  std::size_t size(const char* key, const char* alias = nullptr) const {
    const nlohmann::ordered_json* v = find(key);
    if (!v && alias) v = find(alias);
    if (!v)
      fail(std::string("has no \"") + key + "\"" +
           (alias ? std::string(" (or \"") + alias + "\")" : ""));
    if (!v->is_number_unsigned() || v->get<std::size_t>() == 0)
      fail(std::string("\"") + key + "\" is " + v->dump() + ", expected a positive integer");
    return v->get<std::size_t>();
  }
  double number(const char* key, double fallback, bool probability) const {
    const nlohmann::ordered_json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
        (probability && v->get<double>() > 1))
      fail(std::string("\"") + key + "\" is " + v->dump() + ", expected a " +
           (probability ? "probability in [0, 1]" : "finite number >= 0"));
    return v->get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    const nlohmann::ordered_json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean())
      fail(std::string("\"") + key + "\" is " + v->dump() + ", expected true or false");
    return v->get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    const nlohmann::ordered_json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string())
      fail(std::string("\"") + key + "\" is " + v->dump() + ", expected a string");
    return v->get<std::string>();
  }
};

}  // namespace

GPTConfig gpt2_config_from_json(const std::filesystem::path& path) {
  const std::string where = "config " + detail::path_str(path);
  const nlohmann::ordered_json j =
      detail::read_json_file(path, k_gpt2_config_function, where + " ", k_max_gpt2_config_bytes,
                             detail::JsonKeys::last_wins);
  if (!j.is_object()) detail::fail_value(k_gpt2_config_function, where + " is not a JSON object");
  const Gpt2ConfigReader r{j, where};
  const std::string model_type = r.text("model_type", "gpt2");
  if (model_type != "gpt2")
    r.fail("\"model_type\" is \"" + detail::escaped(model_type, 100) + "\", expected \"gpt2\"");
  const std::string activation = r.text("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    r.fail("\"activation_function\" is \"" + detail::escaped(activation, 100) +
           "\"; GPT computes the tanh GELU of \"gelu_new\" and \"gelu_pytorch_tanh\" only");
  if (!r.flag("scale_attn_weights", true))
    r.fail("\"scale_attn_weights\" is false; GPT always scales scores by 1 / sqrt(head size)");
  if (r.flag("scale_attn_by_inverse_layer_idx", false))
    r.fail("\"scale_attn_by_inverse_layer_idx\" is true, which GPT does not implement");
  GPTConfig c;
  c.style = GPTStyle::gpt2;
  c.vocab_size = r.size("vocab_size", "n_vocab");
  c.block_size = r.size("n_positions", "n_ctx");
  c.n_embd = r.size("n_embd");
  c.n_layer = r.size("n_layer");
  c.n_head = r.size("n_head");
  if (c.n_embd % c.n_head != 0)
    r.fail("\"n_head\" " + std::to_string(c.n_head) + " does not divide \"n_embd\" " +
           std::to_string(c.n_embd));
  if (const nlohmann::ordered_json* inner = r.find("n_inner"); inner && !inner->is_null())
    c.ffn_hidden = r.size("n_inner");
  c.eps = r.number("layer_norm_epsilon", 1e-5, false);
  c.dropout = r.number("resid_pdrop", 0.1, true);
  c.tie_embeddings = r.flag("tie_word_embeddings", true);
  return c;
}

}  // namespace xtgrad
