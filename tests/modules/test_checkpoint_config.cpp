// Checkpoints that record what they hold (io/module_config.hpp, io/checkpoint.hpp,
// modules/safetensors_checkpoint.hpp, training/training_state.hpp): the config
// each module reports, the formats on disk, the refusal of another type or
// configuration naming both, version-1 directories, safetensors checkpoints
// (atomic, read by NumPy with torch's names), training states, and the
// NumPy snippet of docs/interop.md.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/io/checkpoint.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>

#include "support/bit_equal.hpp"
#include "support/file_size_limit.hpp"
#include "support/fixtures/modules_fixtures.hpp"
#include "support/module_fixtures.hpp"
#include "support/python.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;
namespace fx = xtgrad::fixtures::modules;

namespace {

std::string quoted_path(const fs::path& p) {
  return "'" + p.string() + "'";
}

template <class T>
std::unique_ptr<Sequential<T>> linear_then(Activation activation) {
  auto net = std::make_unique<Sequential<T>>();
  net->template emplace_back<Linear<T>>(4, 8);
  net->push_back(ActivationLayer<T>(activation));
  return net;
}

}  // namespace

// ---------------------------------------------------------------- config()

TEST_CASE("config: every module describes its type and options") {
  using D = double;
  Generator g(1);
  CHECK(Linear<D>(4, 8).config().describe() == "Linear(in_features=4, out_features=8, bias=true)");
  CHECK(Linear<D>(4, 8, false).config().describe() ==
        "Linear(in_features=4, out_features=8, bias=false)");
  CHECK(FeedForward<D>(4, 16).config().describe() ==
        "FeedForward(d_model=4, d_ff=16, activation=gelu, bias=true, dropout=0)");
  CHECK(FeedForward<D>(4, 16, Activation::gelu_tanh, 0.1, g).config().describe() ==
        "FeedForward(d_model=4, d_ff=16, activation=gelu_tanh, bias=true, dropout=0.1)");
  CHECK(PositionwiseFFN<D>(4, 16).config().describe() ==
        "PositionwiseFFN(d_model=4, d_ff=16, dropout=0)");
  CHECK(GatedFFN<D>(4, 8, 3, Activation::silu, GatedBias{true, false, true}).config().describe() ==
        "GatedFFN(d_in=4, d_hidden=8, d_out=3, activation=silu, bias_up=true, bias_gate=false, "
        "bias_down=true, dropout=0)");
  CHECK(LayerNorm<D>(5).config().describe() ==
        "LayerNorm(normalized_shape=5, eps=1e-05, elementwise_affine=true, bias=true)");
  CHECK(RMSNorm<D>(5, 1e-8, false).config().describe() ==
        "RMSNorm(normalized_shape=5, eps=1e-08, elementwise_affine=false)");
  CHECK(Dropout<D>(0.25).config().describe() == "Dropout(p=0.25)");
  CHECK(Embedding<D>(10, 3, -1).config().describe() ==
        "Embedding(num_embeddings=10, embedding_dim=3, padding_idx=9)");
  CHECK(Embedding<D>(10, 3).config().describe() ==
        "Embedding(num_embeddings=10, embedding_dim=3, padding_idx=none)");
  CHECK(ActivationLayer<D>(Activation::gelu_sigmoid).config().describe() ==
        "ActivationLayer(activation=gelu_sigmoid)");
  CHECK(linear_then<D>(Activation::relu)->config().describe() ==
        "Sequential(0=Linear(in_features=4, out_features=8, bias=true), "
        "1=ActivationLayer(activation=relu))");
  MlpOptions mlp;
  mlp.activation = Activation::silu;
  mlp.bias = false;
  CHECK(Mlp<D>(4, {6, 5}, 3, mlp).config().describe() ==
        "Mlp(in_features=4, hidden_features=[6, 5], out_features=3, activation=silu, dropout=0, "
        "bias=false)");
  PreNormResidualOptions gated;
  gated.norm = NormKind::rms_norm;
  gated.ffn = FFNKind::gated;
  gated.gated_bias = GatedBias{true, false, false};
  gated.dropout = 0.5;
  CHECK(PreNormResidual<D>(5, 6, gated).config().describe() ==
        "PreNormResidual(d_model=5, d_ff=6, norm=rms_norm, eps=1e-06, ffn=gated, activation=silu, "
        "bias_up=true, bias_gate=false, bias_down=false, dropout=0.5, ffn_dropout=0)");
  CHECK(PreNormResidual<D>(5, 7).config().describe() ==
        "PreNormResidual(d_model=5, d_ff=7, norm=layer_norm, eps=1e-05, ffn=feed_forward, "
        "activation=gelu, dropout=0, ffn_dropout=0)");
  // A module that does not describe itself: "Module" and its children's configs.
  CHECK(TestComposite<D>(1).config().describe() == "Module(w1=Module(), w2=Module())");
}

TEST_CASE("config: the JSON form round-trips and is what the formats store") {
  const ModuleConfig config = linear_then<double>(Activation::gelu)->config();
  const std::string json = to_json(config);
  CHECK(json ==
        "{\"type\":\"Sequential\",\"options\":{},\"children\":[[\"0\",{\"type\":\"Linear\","
        "\"options\":{\"in_features\":\"4\",\"out_features\":\"8\",\"bias\":\"true\"}}],[\"1\","
        "{\"type\":\"ActivationLayer\",\"options\":{\"activation\":\"gelu\"}}]]}");
  CHECK(parse_module_config(json, "f", "here") == config);
  ModuleConfig odd("A\tB");
  odd.add("k\x01", "v\xc3\xa9");
  CHECK(parse_module_config(to_json(odd), "f", "here") == odd);
  CHECK(to_json(odd).find('\t') == std::string::npos);
  CHECK(odd.describe() == "A\\tB(k\\x01=v\\xc3\\xa9)");
}

// ---------------------------------------------------------------- the formats

TEST_CASE("checkpoint: a directory records format version 2 and the module's config") {
  TempDir dir("ckpt-config");
  Linear<float>(2, 3).save(dir / "c");
  CHECK(read_file(dir / "c" / "manifest.tsv") ==
        "xtgrad-checkpoint 2\n"
        "module\t{\"type\":\"Linear\",\"options\":{\"in_features\":\"2\",\"out_features\":\"3\","
        "\"bias\":\"true\"}}\n"
        "weight\tfloat32\t3x2\tweight.npy\n"
        "bias\tfloat32\t3\tbias.npy\n");
}

TEST_CASE("checkpoint: a safetensors file records the version, type and config in __metadata__") {
  TempDir dir("ckpt-config");
  Linear<double> lin(2, 3);
  lin.save(dir / "m.safetensors");
  const Safetensors file = read_safetensors(dir / "m.safetensors");
  CHECK(file.metadata ==
        SafetensorsMetadata{{"format", "pt"},
                            {"xtgrad.version", "2"},
                            {"xtgrad.type", "Linear"},
                            {"xtgrad.config",
                             "{\"type\":\"Linear\",\"options\":{\"in_features\":\"2\","
                             "\"out_features\":\"3\",\"bias\":\"true\"}}"}});
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors.at("weight").dtype() == SafetensorsDtype::F64);
  CHECK(bit_equal(file.tensors.at("weight").get<double>(), lin.weight.value));
  CHECK(bit_equal(file.tensors.at("bias").get<double>(), lin.bias.value));
}

TEST_CASE_TEMPLATE("checkpoint: save then load round-trips in both formats", T, float, double) {
  TempDir dir("ckpt-config");
  for (const char* name : {"dir", "model.safetensors"}) {
    CAPTURE(name);
    Generator g1(1), g2(2);
    PreNormResidual<T> a(5, 7, {}, g1), b(5, 7, {}, g2);
    CHECK_FALSE(bit_equal(snapshot(a), snapshot(b)));
    a.save(dir / name);
    b.load(dir / name);
    CHECK(bit_equal(snapshot(a), snapshot(b)));
    a.save(dir / name);  // replaces the previous checkpoint
    b.load(dir / name);
  }
}

TEST_CASE(
    "checkpoint: another type or configuration is refused naming the first difference, then both") {
  using D = double;
  struct Case {
    std::string label;
    std::function<std::unique_ptr<Module<D>>()> saved, loading;
    std::string holds, is, difference;
  };
  const std::string ff_gelu =
      "FeedForward(d_model=4, d_ff=16, activation=gelu, bias=true, dropout=0)";
  const std::vector<Case> cases = {
      {"another type, the same parameter names and shapes",
       [] { return std::make_unique<FeedForward<D>>(4, 16); },
       [] { return std::make_unique<PositionwiseFFN<D>>(4, 16); }, ff_gelu,
       "PositionwiseFFN(d_model=4, d_ff=16, dropout=0)",
       "'type' was saved as 'FeedForward', this module has 'PositionwiseFFN'"},
      {"another size", [] { return std::make_unique<FeedForward<D>>(4, 16); },
       [] { return std::make_unique<FeedForward<D>>(4, 8); }, ff_gelu,
       "FeedForward(d_model=4, d_ff=8, activation=gelu, bias=true, dropout=0)",
       "'d_ff' was saved as '16', this module has '8'"},
      {"another activation", [] { return std::make_unique<FeedForward<D>>(4, 16); },
       [] { return std::make_unique<FeedForward<D>>(4, 16, Activation::relu); }, ff_gelu,
       "FeedForward(d_model=4, d_ff=16, activation=relu, bias=true, dropout=0)",
       "'activation' was saved as 'gelu', this module has 'relu'"},
      {"a bias against none", [] { return std::make_unique<Linear<D>>(4, 8, true); },
       [] { return std::make_unique<Linear<D>>(4, 8, false); },
       "Linear(in_features=4, out_features=8, bias=true)",
       "Linear(in_features=4, out_features=8, bias=false)",
       "'bias' was saved as 'true', this module has 'false'"},
      {"another eps", [] { return std::make_unique<LayerNorm<D>>(4); },
       [] { return std::make_unique<LayerNorm<D>>(4, 1e-6); },
       "LayerNorm(normalized_shape=4, eps=1e-05, elementwise_affine=true, bias=true)",
       "LayerNorm(normalized_shape=4, eps=1e-06, elementwise_affine=true, bias=true)",
       "'eps' was saved as '1e-05', this module has '1e-06'"},
      {"a child of a Sequential", [] { return linear_then<D>(Activation::relu); },
       [] { return linear_then<D>(Activation::gelu); },
       "Sequential(0=Linear(in_features=4, out_features=8, bias=true), "
       "1=ActivationLayer(activation=relu))",
       "Sequential(0=Linear(in_features=4, out_features=8, bias=true), "
       "1=ActivationLayer(activation=gelu))",
       "'1.activation' was saved as 'relu', this module has 'gelu'"},
  };
  TempDir dir("ckpt-config");
  for (const Case& c : cases) {
    for (const char* name : {"dir", "m.safetensors"}) {
      CAPTURE(c.label);
      CAPTURE(name);
      const fs::path path = dir / (c.label.substr(0, 9) + name);
      c.saved()->save(path);
      std::unique_ptr<Module<D>> loading = c.loading();
      const auto before = snapshot(*loading);
      CHECK(message_of([&] { loading->load(path); }) ==
            "xtgrad::Module::load: checkpoint " + quoted_path(path) + ": " + c.difference +
                "; it holds " + c.holds + ", this module is " + c.is);
      CHECK(bit_equal(snapshot(*loading), before));
      c.saved()->load(path);  // its own config loads
    }
  }
}

TEST_CASE("checkpoint: a long config mismatch names the differing key first and cuts the configs") {
  using D = double;
  const auto net = [](std::size_t last) {
    auto s = std::make_unique<Sequential<D>>();
    for (std::size_t i = 0; i < 5; ++i) s->template emplace_back<Linear<D>>(8, 8);
    s->template emplace_back<Linear<D>>(8, last);
    return s;
  };
  TempDir dir("ckpt-config");
  net(3)->save(dir / "net");
  const std::string message = message_of([&] { net(4)->load(dir / "net"); });
  INFO(message);
  CHECK(message.rfind("xtgrad::Module::load: checkpoint " + quoted_path(dir / "net") +
                          ": '5.out_features' was saved as '3', this module has '4'; it "
                          "holds Sequential(0=Linear(in_features=8, out_features=8, bias=true), ",
                      0) == 0);
  CHECK(message.find("..., this module is Sequential(") != std::string::npos);
  // each config cut at 120 characters
  const std::string whole = net(3)->config().describe();
  CHECK(whole.size() > 300);
  CHECK(message.find(whole) == std::string::npos);
  CHECK(message.size() < dir.path().string().size() + 400);
}

TEST_CASE("checkpoint: a safetensors checkpoint keeps the dtype, as a directory does") {
  TempDir dir("ckpt-config");
  Linear<double>(2, 3).save(dir / "d.safetensors");
  Linear<float> lin(2, 3);
  const auto before = snapshot(lin);
  CHECK(message_of([&] { lin.load(dir / "d.safetensors"); }) ==
        "xtgrad::Module::load: Error(s) in loading state_dict for Linear:\n"
        "\tdtype mismatch for weight: the checkpoint holds F64 (float64), the parameter in current "
        "model is float32; a checkpoint is not converted between float32 and float64 (load it "
        "with load_state_dict to convert).\n"
        "\tdtype mismatch for bias: the checkpoint holds F64 (float64), the parameter in current "
        "model is float32; a checkpoint is not converted between float32 and float64 (load it "
        "with load_state_dict to convert).");
  CHECK(bit_equal(snapshot(lin), before));
  lin.load_state_dict(read_safetensors(dir / "d.safetensors"));  // converts
}

TEST_CASE("checkpoint: a safetensors checkpoint checks names as load_state_dict does") {
  TempDir dir("ckpt-config");
  // Same config (Module with no children), other parameters.
  TestLeaf<double>(3, 2, 1).save(dir / "leaf.safetensors");
  TestComposite<double>(1).save(dir / "composite.safetensors");
  TestComposite<double> composite(2);
  const auto before = snapshot(composite);
  write_safetensors(
      dir / "extra.safetensors",
      [] {
        TensorMap m = to_tensor_map(TestComposite<double>(3));
        m.emplace("zz.extra", StoredTensor(xt::xarray<double>{1}));
        return m;
      }(),
      read_safetensors(dir / "composite.safetensors").metadata);
  CHECK(message_of([&] { composite.load(dir / "extra.safetensors"); }) ==
        "xtgrad::Module::load: Error(s) in loading state_dict for Module:\n"
        "\tUnexpected key(s) in state_dict: \"zz.extra\". ");
  CHECK(bit_equal(snapshot(composite), before));
  composite.load(dir / "composite.safetensors");
  CHECK(bit_equal(snapshot(composite), snapshot(detail::lvalue(TestComposite<double>(1)))));
}

TEST_CASE("checkpoint: a failed safetensors save leaves the previous file as it was") {
  TempDir dir("ckpt-config");
  Linear<double> small(2, 3), large(64, 64);
  small.save(dir / "m.safetensors");
  const std::string before = read_file(dir / "m.safetensors");
  {
    FileSizeLimit limit(4096);  // the large module's 33 KB cannot be written
    REQUIRE(limit.set());
    CHECK_THROWS_AS(large.save(dir / "m.safetensors"), std::runtime_error);
  }
  CHECK(read_file(dir / "m.safetensors") == before);
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"m.safetensors"});
}

TEST_CASE("checkpoint: version-1 directories (no config) still load, by names and shapes") {
  TempDir dir("ckpt-config");
  FeedForward<double> gelu(4, 16, Activation::gelu, detail::lvalue(Generator(3)));
  save_checkpoint(dir / "v1", std::as_const(gelu).named_parameters());  // no config: version 1
  const std::string manifest = read_file(dir / "v1" / "manifest.tsv");
  CHECK(manifest.rfind("xtgrad-checkpoint 1\nw1.weight\tfloat64\t16x4\tw1.weight.npy\n", 0) == 0);
  FeedForward<double> relu(4, 16, Activation::relu);  // another config: nothing to tell it
  relu.load(dir / "v1");
  CHECK(bit_equal(snapshot(relu), snapshot(gelu)));
  FeedForward<double> other(4, 8);
  CHECK_THROWS_WITH_PARTS(other.load(dir / "v1"), std::invalid_argument,
                          {"Module::load", "parameter 'w1.weight'", "[16, 4]", "expects [8, 4]"});
}

// ---------------------------------------------------------------- training states

TEST_CASE("training state: records the model's config and refuses another model") {
  TempDir dir("ckpt-config");
  FeedForward<double> model(4, 8);
  optim::Adam<double> adam(model.parameters(), optim::AdamOptions(0.1));
  for (Parameter<double>* p : model.parameters()) {
    p->grad = random_array({p->value.shape().begin(), p->value.shape().end()}, 4);
    p->has_grad = true;
  }
  adam.step();
  save_training_state(dir / "t", model, adam, nullptr, {{{"step", 1}}, {}});
  CHECK(read_file(dir / "t" / "scalars.tsv")
            .find("string\tmodel.config\t{\"type\":\"FeedForward\",\"options\":{\"d_model\":"
                  "\"4\",\"d_ff\":\"8\",\"activation\":\"gelu\",\"bias\":\"true\",\"dropout\":"
                  "\"0\"}}\n") != std::string::npos);

  FeedForward<double> relu(4, 8, Activation::relu);
  optim::Adam<double> relu_adam(relu.parameters(), optim::AdamOptions(0.1));
  const auto before = snapshot(relu);
  const std::string mismatch =
      "the training state " + quoted_path(dir / "t") +
      ": 'activation' was saved as 'gelu', this module has 'relu'; it holds FeedForward(d_model=4, "
      "d_ff=8, activation=gelu, bias=true, dropout=0), this module is FeedForward(d_model=4, "
      "d_ff=8, activation=relu, bias=true, dropout=0)";
  CHECK(message_of([&] { load_training_state(dir / "t", relu, relu_adam, nullptr); }) ==
        "xtgrad::load_training_state: " + mismatch);
  CHECK(relu_adam.state(0) == nullptr);
  CHECK(message_of([&] { load_model_from_training_state(dir / "t", relu); }) ==
        "xtgrad::load_model_from_training_state: " + mismatch);
  CHECK(bit_equal(snapshot(relu), before));

  // Just the parameters, for evaluation: the optimizer's entries are ignored.
  FeedForward<double> fresh(4, 8, Activation::gelu, detail::lvalue(Generator(9)));
  load_model_from_training_state(dir / "t", fresh);
  CHECK(bit_equal(snapshot(fresh), snapshot(model)));
  // Module::load refuses a training state, naming the entries it does not know.
  CHECK_THROWS_WITH_PARTS(
      fresh.load(dir / "t"), std::invalid_argument,
      {"Module::load", "unexpected parameter(s) 'model.w1.bias', 'model.w1.weight'",
       "(it is a training-state directory: load_model_from_training_state "
       "loads its model)"});
}

TEST_CASE("training state: one written before configs were recorded still loads") {
  TempDir dir("ckpt-config");
  Linear<double> model(3, 2);
  optim::SGD<double> sgd(model.parameters(), optim::SGDOptions(0.1));
  save_training_state(dir / "t", model, sgd, nullptr);
  // Drop the model.config line, as in a directory of an earlier version.
  const std::string scalars = read_file(dir / "t" / "scalars.tsv");
  const std::size_t begin = scalars.find("string\tmodel.config\t");
  REQUIRE(begin != std::string::npos);
  write_file(dir / "t" / "scalars.tsv",
             scalars.substr(0, begin) + scalars.substr(scalars.find('\n', begin) + 1));
  Linear<double> fresh(3, 2, true, detail::lvalue(Generator(4)));
  optim::SGD<double> fresh_sgd(fresh.parameters(), optim::SGDOptions(0.1));
  load_training_state(dir / "t", fresh, fresh_sgd, nullptr);
  CHECK(bit_equal(snapshot(fresh), snapshot(model)));
}

// ---------------------------------------------------------------- other readers

TEST_CASE("checkpoint: NumPy reads a safetensors checkpoint with torch's state_dict names") {
  const std::string python = python_with_numpy();
  if (python.empty()) {
    MESSAGE("SKIPPED: no python3 with numpy (tried /usr/bin/python3 and python3)");
    return;
  }
  TempDir dir("ckpt-config");
  PreNormResidualOptions gated;
  gated.norm = NormKind::rms_norm;
  gated.ffn = FFNKind::gated;
  gated.gated_bias = GatedBias{true, false, true};
  PreNormResidual<float>(5, 6, gated).save(dir / "block.safetensors");
  std::string command = python + " '" + XTGRAD_SOURCE_DIR +
                        "/tests/support/fixtures/check_xtgrad_safetensors.py' --module '" +
                        (dir / "block.safetensors").string() + "' PreNormResidual";
  for (const fx::Tensor& t : fx::block_rms_gated_params) command += std::string(" ") + t.name;
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("docs: the NumPy snippet of docs/interop.md reads and writes a checkpoint") {
  // The snippet is the block after <!-- numpy_checkpoint --> in docs/interop.md,
  // run as it is with `ckpt` set to a checkpoint directory.
  const std::string readme = read_file(fs::path(XTGRAD_SOURCE_DIR) / "docs" / "interop.md");
  const std::string open = "<!-- numpy_checkpoint -->\n```python\n";
  const std::size_t begin = readme.find(open);
  REQUIRE(begin != std::string::npos);
  const std::size_t end = readme.find("```\n", begin + open.size());
  REQUIRE(end != std::string::npos);
  const std::string snippet = readme.substr(begin + open.size(), end - begin - open.size());
  CHECK(std::count(snippet.begin(), snippet.end(), '\n') == 5);
  const std::string python = python_with_numpy();
  if (python.empty()) {
    MESSAGE("SKIPPED: no python3 with numpy (tried /usr/bin/python3 and python3)");
    return;
  }
  TempDir dir("readme-numpy");
  FeedForward<float> ff(4, 16);
  ff.save(dir / "ckpt");
  const auto saved = snapshot(ff);
  write_file(dir / "snippet.py",
             "import sys\nckpt = sys.argv[1]\n" + snippet +
                 "assert config['type'] == 'FeedForward' and config['options']['d_ff'] == '16'\n"
                 "assert list(params) == ['w1.weight', 'w1.bias', 'w2.weight', 'w2.bias']\n"
                 "assert params['w1.weight'].shape == (16, 4) and params['w1.weight'].dtype == "
                 "np.float32\n");
  const std::string command =
      python + " '" + (dir / "snippet.py").string() + "' '" + (dir / "ckpt").string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  // The snippet wrote every parameter back doubled: xtgrad loads that.
  FeedForward<float> back(4, 16, Activation::gelu, detail::lvalue(Generator(8)));
  back.load(dir / "ckpt");
  const auto loaded = snapshot(back);
  REQUIRE(loaded.size() == saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    CAPTURE(i);
    REQUIRE(loaded[i].shape() == saved[i].shape());
    for (std::size_t k = 0; k < saved[i].size(); ++k)
      CHECK(loaded[i].data()[k] == 2.0f * saved[i].data()[k]);
  }
}
