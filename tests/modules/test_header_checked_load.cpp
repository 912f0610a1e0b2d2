// Loads that refuse a safetensors file from its header: Module::load of a
// .safetensors checkpoint, load_gpt2 and load_llama_attention compare every
// name, dtype and shape the header declares with the model before reading a
// tensor. The files are sparse (ftruncate: no disk blocks, nothing read) and
// self-consistent, declaring 1 GiB and 64 GiB tensors of the wrong shape: the
// right error comes at the cost of the header, the peak memory of the process
// hardly grows (a reader that allocated first would need the whole size, or
// throw std::bad_alloc), and the model is unchanged.

#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/modules/linear.hpp>
#include <xtgrad/modules/pretrained/hf_gpt2.hpp>

#include "support/fixture_files.hpp"
#include "support/module_fixtures.hpp"
#include "support/peak_memory.hpp"
#include "support/safetensors_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

// A JSON string literal of text that has no control characters.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text)
    out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

std::string shape_list(const std::vector<std::size_t>& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out;
}

struct Declared {
  std::string name, dtype;
  std::vector<std::size_t> shape;
};

// Writes a safetensors file declaring `tensors` (laid out in the order
// given) under `metadata`, its data a hole of the declared size. False when
// the file system cannot hold such a sparse file.
bool write_sparse(const fs::path& path, const std::vector<Declared>& tensors,
                  const SafetensorsMetadata& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      json += (first ? "" : ",") + json_string(key) + ":" + json_string(value);
      first = false;
    }
    json += "},";
  }
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::size_t bytes = tensors[i].dtype == "F64" ? 8 : 4;
    for (const std::size_t d : tensors[i].shape) bytes *= d;
    json += (i ? "," : "") + entry(tensors[i].name, tensors[i].dtype, shape_list(tensors[i].shape),
                                   offset, offset + bytes);
    offset += bytes;
  }
  json += "}";
  const std::string head = safetensors_file(json);
  std::ofstream(path, std::ios::binary) << head;
  return ::truncate(path.c_str(), static_cast<off_t>(head.size() + offset)) == 0;
}

// The two declared sizes of each case: 1 GiB and 64 GiB of `bytes`-byte elements.
std::vector<std::vector<std::size_t>> huge_shapes(std::size_t bytes) {
  if (bytes == 8) return {{16384, 8192}, {131072, 65536}};
  return {{16384, 16384}, {131072, 131072}};
}

// Runs `load` (which must throw std::invalid_argument with `parts`) and
// checks that the peak memory grew by less than 64 MiB.
void check_refused_cheaply(const std::function<void()>& load,
                           const std::vector<std::string>& parts) {
  const std::size_t peak_before = peak_rss_bytes();
  bool refused = false;
  try {
    load();
  } catch (const std::invalid_argument& e) {
    refused = true;
    INFO(e.what());
    CHECK(message_contains(e, parts));
  }
  CHECK(refused);
  const std::size_t growth = peak_rss_bytes() - peak_before;
  INFO("peak resident memory grew by " << growth << " bytes");
  CHECK(growth < (std::size_t(64) << 20));  // far below the 1 GiB of the smaller file
}

}  // namespace

TEST_CASE(
    "Module::load: a safetensors checkpoint declaring another shape is refused from its header") {
  TempDir tmp("header-load");
  Linear<double> m(3, 4);
  m.save(tmp / "good.safetensors");
  const SafetensorsMetadata metadata = read_safetensors(tmp / "good.safetensors").metadata;
  const auto before = snapshot<double>(m);
  for (const std::vector<std::size_t>& shape : huge_shapes(8)) {
    const std::string shown = detail::shape_str(shape);
    INFO("declared weight " << shown);
    const fs::path path = tmp / "huge.safetensors";
    // bias first and right: it must not be assigned either
    if (!write_sparse(path, {{"bias", "F64", {4}}, {"weight", "F64", shape}}, metadata)) {
      MESSAGE("SKIPPED: this file system cannot hold a sparse file of " << shown);
      continue;
    }
    REQUIRE(read_safetensors(path, [](const std::string&) { return false; }).metadata ==
            metadata);  // the file itself is valid
    check_refused_cheaply([&] { m.load(path); },
                          {"xtgrad::Module::load: Error(s) in loading state_dict for Linear:",
                           "size mismatch for weight: copying a param with shape " + shown +
                               " from checkpoint, the shape in current model is [4, 3]."});
    CHECK(bit_equal(snapshot<double>(m), before));
  }
  // Another dtype is refused from the header too: F32 declared for a double module.
  const fs::path f32 = tmp / "f32.safetensors";
  REQUIRE(write_sparse(f32, {{"bias", "F64", {4}}, {"weight", "F32", {16384, 16384}}}, metadata));
  check_refused_cheaply([&] { m.load(f32); }, {"Module::load", "size mismatch for weight"});
  CHECK(bit_equal(snapshot<double>(m), before));
}

TEST_CASE(
    "load_gpt2 and load_llama_attention: a tensor of another shape is refused from the header") {
  TempDir tmp("header-gpt2");
  GPT<float> model(gpt2_config_from_json(transformer_fixture_file("gpt2_tiny_config.json")));
  const TensorMap tensors =
      read_safetensors(transformer_fixture_file("gpt2_tiny.safetensors")).tensors;
  const auto before = snapshot<float>(model);
  const std::string wte = "transformer.wte.weight";
  for (const std::vector<std::size_t>& shape : huge_shapes(4)) {
    const std::string shown = detail::shape_str(shape);
    INFO("declared " << wte << " " << shown);
    std::vector<Declared> declared;
    for (const auto& [name, t] : tensors)
      declared.push_back({name, "F32", name == wte ? shape : t.shape()});
    const fs::path path = tmp / "huge.safetensors";
    if (!write_sparse(path, declared, {{"format", "pt"}})) {
      MESSAGE("SKIPPED: this file system cannot hold a sparse file of " << shown);
      continue;
    }
    check_refused_cheaply(
        [&] { load_gpt2(model, path); },
        {"xtgrad::load_gpt2: tensor '" + wte + "' has shape " + shown + ", expected " +
         detail::shape_str(tensors.at(wte).shape()) + " (HF GPT-2"});
    CHECK(bit_equal(snapshot<float>(model), before));
  }
  // The same file with the right shapes loads (the checks pass, then the data is read).
  std::vector<Declared> right;
  for (const auto& [name, t] : tensors) right.push_back({name, "F32", t.shape()});
  REQUIRE(write_sparse(tmp / "zeros.safetensors", right, {{"format", "pt"}}));
  load_gpt2(model, tmp / "zeros.safetensors");
  const xt::xarray<float>& loaded = model.wte.weight.value;
  CHECK(std::all_of(loaded.begin(), loaded.end(), [](float x) { return x == 0.0f; }));

  CausalSelfAttentionOptions options;
  options.n_heads = 4;
  options.n_kv_heads = 2;
  options.layout = AttentionLayout::llama;
  options.rotary = true;
  CausalSelfAttention<double> attention(16, options);
  const auto attention_before = snapshot<double>(attention);
  const fs::path llama = tmp / "llama.safetensors";
  REQUIRE(write_sparse(llama,
                       {{"model.layers.0.self_attn.k_proj.weight", "F64", {8, 16}},
                        {"model.layers.0.self_attn.o_proj.weight", "F64", {16, 16}},
                        {"model.layers.0.self_attn.q_proj.weight", "F64", {16384, 8192}},
                        {"model.layers.0.self_attn.v_proj.weight", "F64", {8, 16}}},
                       {}));
  check_refused_cheaply(
      [&] { load_llama_attention(attention, llama, llama_attention_prefix(0)); },
      {"xtgrad::load_llama_attention: tensor 'model.layers.0.self_attn.q_proj.weight' has shape "
       "[16384, 8192], expected [16, 16]"});
  CHECK(bit_equal(snapshot<double>(attention), attention_before));
}
