// safetensors reading and writing. References: the files of
// tests/support/fixtures/make_hf_mlp.py (written as the reference writer
// writes them, with torch's values and F16 / BF16 conversions), files and
// headers built by hand here (tests/support/safetensors_bytes.hpp), and bit
// patterns decoded by hand. The hostile files are in
// tests/hardening/test_bad_input_safetensors.cpp.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xtgrad/io/safetensors.hpp>
#include <xtgrad/modules/linear.hpp>
#include <xtgrad/modules/safetensors_checkpoint.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/hf_mlp_fixtures.hpp"
#include "support/safetensors_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::hf_mlp;

namespace {

fs::path fixture(const std::string& name) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" / "hf_mlp" / name;
}

template <class T>
bool bit_equal(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Bit for bit against fixture values that are exactly representable in float.
void check_float_bits(const xt::xarray<float>& a, const double* expected, std::size_t n) {
  REQUIRE(a.size() == n);
  for (std::size_t i = 0; i < n; ++i) {
    const float e = static_cast<float>(expected[i]);
    INFO("element " << i << ": " << a.data()[i] << ", expected " << e);
    CHECK(std::memcmp(&a.data()[i], &e, sizeof e) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("safetensors: reads the F32 and F64 files of the fixture script", T, float,
                   double) {
  const std::string suffix = std::is_same_v<T, float> ? "_f32" : "_f64";
  const Safetensors llama = read_safetensors(fixture("llama_mlp" + suffix + ".safetensors"));
  CHECK(llama.metadata == SafetensorsMetadata{{"format", "pt"}});
  std::vector<std::string> names;
  for (const auto& [name, tensor] : llama.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{
                     "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.gate_proj.weight",
                     "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight",
                     "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
                     "model.norm.weight"});
  const StoredTensor& up = llama.tensors.at("model.layers.1.mlp.up_proj.weight");
  CHECK(up.dtype() == (std::is_same_v<T, float> ? SafetensorsDtype::F32 : SafetensorsDtype::F64));
  CHECK(up.holds<T>());
  CHECK(up.shape() == std::vector<std::size_t>{fx::intermediate, fx::hidden});
  CHECK(bit_equal(up.get<T>(),
                  from_fixture<T>(fx::llama_up_proj_weight, {fx::intermediate, fx::hidden})));
  CHECK(llama.tensors.at("model.norm.weight").get<T>() == xt::xarray<T>(xt::ones<T>({fx::hidden})));

  const Safetensors gpt2 = read_safetensors(fixture("gpt2_mlp" + suffix + ".safetensors"));
  CHECK(gpt2.tensors.size() == 9);
  const xt::xarray<T>& c_fc = get_tensor<T>(gpt2.tensors, "h.1.mlp.c_fc.weight");
  CHECK(bit_equal(c_fc, from_fixture<T>(fx::gpt2_c_fc_weight, {fx::n_embd, 4 * fx::n_embd})));
  CHECK(get_tensor<T>(gpt2.tensors, "h.0.mlp.c_proj.bias").shape() ==
        std::vector<std::size_t>{fx::n_embd});
}

TEST_CASE("safetensors: F16 and BF16 are converted to float exactly as torch converts them") {
  const Safetensors file = read_safetensors(fixture("halves.safetensors"));
  CHECK(file.metadata.empty());
  REQUIRE(file.tensors.size() == 3);
  const StoredTensor& half = file.tensors.at("half");
  const StoredTensor& bfloat = file.tensors.at("bfloat");
  CHECK(half.dtype() == SafetensorsDtype::F16);
  CHECK(bfloat.dtype() == SafetensorsDtype::BF16);
  CHECK(file.tensors.at("single").dtype() == SafetensorsDtype::F32);
  CHECK(half.shape() == std::vector<std::size_t>{2, 8});
  CHECK(bfloat.shape() == std::vector<std::size_t>{2, 8});
  CHECK_FALSE(half.holds<double>());
  check_float_bits(half.get<float>(), fx::half_values, 16);
  check_float_bits(bfloat.get<float>(), fx::bfloat_values, 16);
  check_float_bits(file.tensors.at("single").get<float>(), fx::single_values, 3);
}

TEST_CASE("safetensors: F16 and BF16 bit patterns, every class of value, decoded by hand") {
  TempDir dir;
  // binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits.
  const std::vector<std::uint16_t> half_bits = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff,
                                                0x0400, 0x8000, 0x7c00, 0xfc00, 0x3555};
  const std::vector<float> half_expected = {1.0f,
                                            -2.0f,
                                            65504.0f,
                                            std::ldexp(1.0f, -24),  // smallest subnormal
                                            1023 * std::ldexp(1.0f, -24),
                                            std::ldexp(1.0f, -14),  // smallest normal
                                            -0.0f,
                                            std::numeric_limits<float>::infinity(),
                                            -std::numeric_limits<float>::infinity(),
                                            (1 + 341 / 1024.0f) / 4};  // 0x3555: 2^-2 * 1.333
  // bfloat16: the upper 16 bits of a binary32.
  const std::vector<std::uint16_t> bf16_bits = {0x3f80, 0x4049, 0xff80, 0x0001, 0x8000};
  const std::vector<float> bf16_expected = {
      1.0f, 3.140625f, -std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -133), -0.0f};
  std::string data = words({0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x8000, 0x7c00, 0xfc00,
                            0x3555, 0x7e00}) +
                     words({0x3f80, 0x4049, 0xff80, 0x0001, 0x8000, 0x7fc0});
  write_file(dir / "h.safetensors", safetensors_file("{" + entry("h", "F16", "11", 0, 22) + "," +
                                                         entry("b", "BF16", "6", 22, 34) + "}",
                                                     data));
  const Safetensors file = read_safetensors(dir / "h.safetensors");
  const xt::xarray<float>& h = file.tensors.at("h").get<float>();
  const xt::xarray<float>& b = file.tensors.at("b").get<float>();
  for (std::size_t i = 0; i < half_expected.size(); ++i) {
    INFO("F16 " << std::hex << half_bits[i]);
    CHECK(std::memcmp(&h(i), &half_expected[i], sizeof(float)) == 0);
  }
  CHECK(std::isnan(h(10)));  // 0x7e00: a quiet NaN
  for (std::size_t i = 0; i < bf16_expected.size(); ++i) {
    INFO("BF16 " << std::hex << bf16_bits[i]);
    CHECK(std::memcmp(&b(i), &bf16_expected[i], sizeof(float)) == 0);
  }
  CHECK(std::isnan(b(5)));
}

TEST_CASE("safetensors: write then read round-trips every shape, both dtypes, bit for bit") {
  TempDir dir;
  TensorMap tensors;
  tensors.emplace("scalar", StoredTensor(xt::xarray<double>(3.25)));
  tensors.emplace("empty", StoredTensor(xt::xarray<float>::from_shape({2, 0, 4})));
  tensors.emplace("matrix", StoredTensor(random_array<float>({2, 3}, 1, -10, 10)));
  tensors.emplace("cube", StoredTensor(random_array<double>({2, 3, 4}, 2, -10, 10)));
  tensors.emplace("vector", StoredTensor(random_array<float>({5}, 3)));
  tensors.emplace("quote\" back\\slash\nline \xc3\xa9", StoredTensor(xt::xarray<float>{1, 2}));
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"note", "\"quoted\"\t\xe2\x9c\x93"}};
  write_safetensors(dir / "m.safetensors", tensors, metadata);
  const Safetensors back = read_safetensors(dir / "m.safetensors");
  CHECK(back.metadata == metadata);
  REQUIRE(back.tensors.size() == tensors.size());
  for (const auto& entry : tensors) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& tensor = std::get<1>(entry);
    INFO("tensor " << name);
    const StoredTensor& read = back.tensors.at(name);
    CHECK(read.dtype() == tensor.dtype());
    CHECK(read.shape() == tensor.shape());
    if (tensor.holds<float>())
      CHECK(bit_equal(read.get<float>(), tensor.get<float>()));
    else
      CHECK(bit_equal(read.get<double>(), tensor.get<double>()));
  }
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"m.safetensors"});  // no temp file
}

TEST_CASE("safetensors: the header is the reference writer's, padded with spaces to 8 bytes") {
  TempDir dir;
  // F64 before F32 (the reference sorts by dtype, descending), then by name.
  TensorMap tensors;
  tensors.emplace("b", StoredTensor(xt::xarray<float>{1.5f, -2.0f}));
  tensors.emplace(
      "a", StoredTensor(xt::xarray<float>(xt::xarray<float>::from_shape({1, 1}) * 0.0f + 0.25f)));
  tensors.emplace("z", StoredTensor(xt::xarray<double>{1.0, 2.0}));
  write_safetensors(dir / "h.safetensors", tensors, {{"format", "pt"}});
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[16,20]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[20,28]}}";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  REQUIRE(padded.size() % 8 == 0);
  const float a[] = {0.25f}, b[] = {1.5f, -2.0f};
  const double z[] = {1.0, 2.0};
  const std::string data = std::string(reinterpret_cast<const char*>(z), sizeof z) +
                           std::string(reinterpret_cast<const char*>(a), sizeof a) +
                           std::string(reinterpret_cast<const char*>(b), sizeof b);
  CHECK(read_file(dir / "h.safetensors") == le64(padded.size()) + padded + data);

  // Every header length modulo 8 pads to the next multiple; no metadata, no key.
  for (std::size_t length = 1; length <= 9; ++length) {
    const std::string name(length, 'n');
    write_safetensors(dir / "p.safetensors", {{name, StoredTensor(xt::xarray<float>{1})}});
    const std::string text =
        "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const std::string bytes = read_file(dir / "p.safetensors");
    INFO("name length " << length);
    CHECK(bytes.substr(0, 8) == le64(text.size() + (8 - text.size() % 8) % 8));
    CHECK(bytes.substr(8, text.size()) == text);
    CHECK((bytes.size() - 4 - 8) % 8 == 0);
    CHECK(bytes.find_first_not_of(' ', 8 + text.size()) == bytes.size() - 4);
  }
}

TEST_CASE("safetensors: rewriting the fixture files gives the reference writer's bytes") {
  TempDir dir;
  for (const char* name : {"llama_mlp_f32.safetensors", "llama_mlp_f64.safetensors",
                           "gpt2_mlp_f32.safetensors", "gpt2_mlp_f64.safetensors"}) {
    INFO("file " << name);
    const Safetensors file = read_safetensors(fixture(name));
    write_safetensors(dir / name, file.tensors, file.metadata);
    CHECK(read_file(dir / name) == read_file(fixture(name)));
  }
}

TEST_CASE("safetensors: select reads only the chosen tensors and still checks the whole file") {
  const fs::path path = fixture("llama_mlp_f32.safetensors");
  const Safetensors some = read_safetensors(
      path, [](const std::string& name) { return name.rfind("model.layers.1.", 0) == 0; });
  CHECK(some.tensors.size() == 3);
  CHECK(some.tensors.count("model.layers.1.mlp.gate_proj.weight") == 1);
  CHECK(some.tensors.count("model.layers.0.mlp.gate_proj.weight") == 0);
  CHECK(some.metadata == SafetensorsMetadata{{"format", "pt"}});
  CHECK(bit_equal(
      some.tensors.at("model.layers.1.mlp.up_proj.weight").get<float>(),
      read_safetensors(path).tensors.at("model.layers.1.mlp.up_proj.weight").get<float>()));
  // A bad entry that is not selected is still refused.
  TempDir dir;
  write_file(dir / "bad.safetensors", safetensors_file("{" + entry("a", "F32", "1", 0, 4) + "," +
                                                           entry("b", "F32", "2", 4, 8) + "}",
                                                       std::string(8, '\0')));
  CHECK_THROWS_WITH_PARTS(
      read_safetensors(dir / "bad.safetensors", [](const std::string& n) { return n == "a"; }),
      std::invalid_argument, {"tensor 'b'", "hold 4 bytes", "has 8"});
}

TEST_CASE("safetensors: a failed write leaves the existing file as it was") {
  TempDir dir;
  const TensorMap good = {{"w", StoredTensor(xt::xarray<float>{1, 2, 3})}};
  write_safetensors(dir / "m.safetensors", good);
  const std::string before = read_file(dir / "m.safetensors");
  const TensorMap reserved = {{"__metadata__", StoredTensor(xt::xarray<float>{1})}};
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "m.safetensors", reserved), std::invalid_argument,
                          {"write_safetensors", "'tensors'", "'__metadata__'", "reserves"});
  const TensorMap bad_utf8 = {{"w\xff", StoredTensor(xt::xarray<float>{1})}};
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "m.safetensors", bad_utf8), std::invalid_argument,
                          {"write_safetensors", "not valid UTF-8"});
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "m.safetensors", good, {{"k", "v\xc3"}}),
                          std::invalid_argument, {"'metadata'", "the value", "not valid UTF-8"});
  const TensorMap deep = {
      {"d", StoredTensor(xt::xarray<float>(xt::zeros<float>(std::vector<std::size_t>(65, 1))))}};
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "m.safetensors", deep), std::invalid_argument,
                          {"tensor 'd'", "65 dimensions", "at most 64"});
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir.path() / "", good), std::invalid_argument,
                          {"write_safetensors", "names a directory"});
  // The rename onto a non-empty directory fails after the data was written.
  fs::create_directories(dir / "taken" / "inside");
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "taken", good), std::runtime_error,
                          {"write_safetensors", "rename"});
  CHECK_THROWS_WITH_PARTS(write_safetensors(dir / "missing" / "m.safetensors", good),
                          std::runtime_error, {"write_safetensors", "cannot create"});
  CHECK(read_file(dir / "m.safetensors") == before);
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"m.safetensors", "taken"});
}

TEST_CASE(
    "safetensors: get_tensor and StoredTensor::get refuse a missing name and the other type") {
  const TensorMap tensors = {{"a", StoredTensor(xt::xarray<float>{1})},
                             {"b", StoredTensor(xt::xarray<double>{2})},
                             {"c", StoredTensor(xt::xarray<float>{3}, SafetensorsDtype::BF16)}};
  CHECK(get_tensor<float>(tensors, "a")(0) == 1.0f);
  CHECK(get_tensor<float>(tensors, "c")(0) == 3.0f);
  CHECK_THROWS_WITH_PARTS(get_tensor<float>(tensors, "x", "load_it"), std::invalid_argument,
                          {"xtgrad::load_it", "no tensor 'x'", "3 tensors: 'a', 'b', 'c'"});
  CHECK_THROWS_WITH_PARTS(get_tensor<float>(tensors, "b"), std::invalid_argument,
                          {"get_tensor", "tensor 'b' has dtype F64", "expected F32", "float32"});
  CHECK_THROWS_WITH_PARTS(get_tensor<double>(tensors, "c"), std::invalid_argument,
                          {"tensor 'c' has dtype BF16", "expected F64"});
  CHECK_THROWS_WITH_PARTS(tensors.at("a").get<double>(), std::invalid_argument,
                          {"StoredTensor::get", "float32", "expected float64"});
  CHECK_THROWS_WITH_PARTS(StoredTensor(xt::xarray<float>{1}, SafetensorsDtype::F64),
                          std::invalid_argument, {"StoredTensor", "'dtype'", "F64"});
  CHECK(std::string(safetensors_dtype_name(SafetensorsDtype::BF16)) == "BF16");
  const StoredTensor none;
  CHECK(none.dtype() == SafetensorsDtype::F32);
  CHECK(none.shape() == std::vector<std::size_t>{0});
}

TEST_CASE_TEMPLATE("safetensors: to_tensor_map holds a module's parameters by their names", T,
                   float, double) {
  const Linear<T> linear(3, 2);
  const TensorMap tensors = to_tensor_map(linear);
  REQUIRE(tensors.size() == 2);
  CHECK(bit_equal(tensors.at("weight").get<T>(), linear.weight.value));
  CHECK(bit_equal(tensors.at("bias").get<T>(), linear.bias.value));
  CHECK(tensors.at("weight").dtype() ==
        (std::is_same_v<T, float> ? SafetensorsDtype::F32 : SafetensorsDtype::F64));
}
