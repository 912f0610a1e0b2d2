// Module<T>: parameter naming, zero_grad, copies, and checkpoints. The
// modules under test are defined here so that these tests do not depend on
// Linear or the FFN modules.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/modules/module.hpp>
#include <xtgrad/modules/io/npy.hpp>

#include "support/test_helpers.hpp"

using xtgrad::testing::directory_names;
using xtgrad::testing::TempDir;

using namespace xtgrad;
namespace fs = std::filesystem;

namespace {

// A leaf: two parameters of its own.
template <class T>
class TestLeaf : public Module<T> {
 public:
  TestLeaf(std::size_t in, std::size_t out, std::uint32_t seed)
      : weight("weight", testing::random_array<T>({out, in}, seed)),
        bias("bias", testing::random_array<T>({out}, seed + 1)) {}

  Parameter<T> weight;
  Parameter<T> bias;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_parameter(prefix, weight, out);
    this->add_parameter(prefix, bias, out);
  }
};

// Two children and, optionally, a 0-d parameter of its own.
template <class T>
class TestComposite : public Module<T> {
 public:
  explicit TestComposite(std::uint32_t seed, bool with_scale = true, std::size_t hidden = 4)
      : w1(3, hidden, seed),
        w2(hidden, 3, seed + 10),
        scale("scale", xt::xarray<T>(T(0.5))),
        with_scale_(with_scale) {}

  TestLeaf<T> w1;
  TestLeaf<T> w2;
  Parameter<T> scale;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_child(prefix, "w1", w1, out);
    this->add_child(prefix, "w2", w2, out);
    if (with_scale_) this->add_parameter(prefix, scale, out);
  }

 private:
  bool with_scale_;
};

// Nesting two levels deep.
template <class T>
class TestOuter : public Module<T> {
 public:
  TestOuter() : block(1), head(3, 2, 40) {}
  TestComposite<T> block;
  TestLeaf<T> head;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_child(prefix, "block", block, out);
    this->add_child(prefix, "head", head, out);
  }
};

// Lists one parameter twice under the same name.
template <class T>
class TestDuplicate : public Module<T> {
 public:
  TestDuplicate() : a(1, 1, 1), b(1, 1, 2) {}
  TestLeaf<T> a, b;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_child(prefix, "a", a, out);
    this->add_child(prefix, "a", b, out);
  }
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

template <class T>
std::vector<std::string> names_of(const typename Module<T>::NamedParameters& named) {
  std::vector<std::string> names;
  for (const auto& entry : named) names.push_back(entry.first);
  return names;
}

// Copies of every parameter value, in named_parameters order.
template <class T>
std::vector<xt::xarray<T>> snapshot(Module<T>& module) {
  std::vector<xt::xarray<T>> values;
  for (Parameter<T>* p : module.parameters()) values.push_back(p->value);
  return values;
}

// Same shapes and the same bits (NaN payloads and -0.0 included).
template <class T>
bool bit_equal(const std::vector<xt::xarray<T>>& a, const std::vector<xt::xarray<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].shape() != b[i].shape() ||
        (a[i].size() > 0 && std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(T)) != 0))
      return false;
  return true;
}

const std::vector<std::string> k_composite_names = {"w1.weight", "w1.bias", "w2.weight", "w2.bias",
                                                    "scale"};

}  // namespace

TEST_CASE_TEMPLATE("module: named_parameters gives dotted names in a stable order", T, float,
                   double) {
  TestComposite<T> m(1);
  const auto named = m.named_parameters();
  CHECK(names_of<T>(named) == k_composite_names);
  CHECK(named[0].second == &m.w1.weight);
  CHECK(named[1].second == &m.w1.bias);
  CHECK(named[2].second == &m.w2.weight);
  CHECK(named[3].second == &m.w2.bias);
  CHECK(named[4].second == &m.scale);
  CHECK(names_of<T>(m.named_parameters()) == k_composite_names);  // the same on every call

  const TestComposite<T>& const_m = m;
  const auto const_named = const_m.named_parameters();
  REQUIRE(const_named.size() == named.size());
  for (std::size_t i = 0; i < named.size(); ++i) {
    CHECK(const_named[i].first == named[i].first);
    CHECK(const_named[i].second == named[i].second);
  }
  const std::vector<Parameter<T>*> params = m.parameters();
  REQUIRE(params.size() == named.size());
  for (std::size_t i = 0; i < named.size(); ++i) CHECK(params[i] == named[i].second);

  TestOuter<T> outer;
  CHECK(names_of<T>(outer.named_parameters()) ==
        std::vector<std::string>{"block.w1.weight", "block.w1.bias", "block.w2.weight",
                                 "block.w2.bias", "block.scale", "head.weight", "head.bias"});
}

TEST_CASE("module: a duplicate parameter name is a std::logic_error") {
  TestDuplicate<double> m;
  CHECK_THROWS_WITH_PARTS(m.named_parameters(), std::logic_error,
                          {"named_parameters", "duplicate parameter name 'a.weight'"});
  CHECK_THROWS_AS(m.parameters(), std::logic_error);
}

TEST_CASE_TEMPLATE("module: zero_grad clears every parameter's gradient", T, float, double) {
  TestComposite<T> m(2);
  for (Parameter<T>* p : m.parameters()) {
    p->grad = xt::ones<T>(p->value.shape());
    p->has_grad = true;
  }
  m.zero_grad();
  for (Parameter<T>* p : m.parameters()) {
    CHECK(p->grad.shape() == p->value.shape());
    CHECK(xt::all(xt::equal(p->grad, T(0))));
    CHECK_FALSE(p->has_grad);
  }
}

TEST_CASE_TEMPLATE("module: copies own their parameters", T, float, double) {
  TestComposite<T> original(3);
  const auto before = snapshot<T>(original);

  TestComposite<T> copy = original;
  CHECK(bit_equal(snapshot<T>(copy), before));
  const auto copy_named = copy.named_parameters();
  CHECK(copy_named[0].second == &copy.w1.weight);  // the copy lists its own members
  CHECK(copy_named[4].second == &copy.scale);
  for (Parameter<T>* p : copy.parameters()) p->value += T(1);
  CHECK(bit_equal(snapshot<T>(original), before));

  TestComposite<T> assigned(99);
  assigned = original;
  CHECK(bit_equal(snapshot<T>(assigned), before));
  assigned.w2.bias.value.fill(T(7));
  CHECK(bit_equal(snapshot<T>(original), before));

  TestComposite<T> moved = std::move(assigned);
  CHECK(moved.named_parameters()[3].second == &moved.w2.bias);
  CHECK(xt::all(xt::equal(moved.w2.bias.value, T(7))));
}

TEST_CASE_TEMPLATE("module: save then load restores every value bit for bit", T, float, double) {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<T> saved(4);
  // Values a text format or a conversion would not keep.
  saved.w1.bias.value(0) = -T(0);
  saved.w1.bias.value(1) = std::numeric_limits<T>::quiet_NaN();
  saved.w1.bias.value(2) = std::numeric_limits<T>::infinity();
  saved.w1.bias.value(3) = std::numeric_limits<T>::denorm_min();
  saved.scale.value() = T(1) / T(3);
  saved.save(dir);

  CHECK(directory_names(dir) == std::vector<std::string>{"manifest.tsv", "scale.npy", "w1.bias.npy",
                                                         "w1.weight.npy", "w2.bias.npy",
                                                         "w2.weight.npy"});
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});  // no temporary left
  const std::string dtype = sizeof(T) == 4 ? "float32" : "float64";
  CHECK(read_text(dir / "manifest.tsv") ==
        "xtgrad-checkpoint 1\n"
        "w1.weight\t" +
            dtype +
            "\t4x3\tw1.weight.npy\n"
            "w1.bias\t" +
            dtype +
            "\t4\tw1.bias.npy\n"
            "w2.weight\t" +
            dtype +
            "\t3x4\tw2.weight.npy\n"
            "w2.bias\t" +
            dtype +
            "\t3\tw2.bias.npy\n"
            "scale\t" +
            dtype + "\tscalar\tscale.npy\n");
  // Each file is a plain .npy of that parameter.
  CHECK(load_npy<T>(dir / "w2.weight.npy") == saved.w2.weight.value);

  TestComposite<T> loaded(5);
  REQUIRE_FALSE(bit_equal(snapshot<T>(loaded), snapshot<T>(saved)));
  loaded.w1.weight.grad.fill(T(2));
  loaded.load(dir);
  CHECK(bit_equal(snapshot<T>(loaded), snapshot<T>(saved)));
  CHECK(std::signbit(loaded.w1.bias.value(0)));
  CHECK(std::isnan(loaded.w1.bias.value(1)));
  CHECK(xt::all(xt::equal(loaded.w1.weight.grad, T(2))));  // load leaves gradients alone
}

TEST_CASE("module: save replaces a previous checkpoint and accepts an empty directory") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> first(6), second(7), loaded(8);
  first.save(dir);
  second.save(dir);  // dir exists: swapped atomically, the old contents removed
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});
  loaded.load(dir);
  CHECK(bit_equal(snapshot<double>(loaded), snapshot<double>(second)));

  fs::create_directory(tmp / "empty");
  first.save(tmp / "empty/");  // a trailing separator names the same directory
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt", "empty"});
  loaded.load(tmp / "empty");
  CHECK(bit_equal(snapshot<double>(loaded), snapshot<double>(first)));
}

TEST_CASE("module: an interrupted save leaves the previous checkpoint loadable") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<float> old_values(9);
  old_values.save(dir);
  const std::string old_manifest = read_text(dir / "manifest.tsv");

  TestComposite<float> new_values(10);
  std::size_t calls = 0;
  detail::checkpoint_write_hook = [&](std::size_t files_written) {
    ++calls;
    if (files_written == 1) throw std::runtime_error("simulated crash after the first file");
  };
  CHECK_THROWS_WITH_PARTS(new_values.save(dir), std::runtime_error, {"simulated crash"});
  detail::checkpoint_write_hook = nullptr;
  CHECK(calls == 1);

  // The old checkpoint is untouched and no temporary directory is left.
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});
  CHECK(read_text(dir / "manifest.tsv") == old_manifest);
  TestComposite<float> loaded(11);
  loaded.load(dir);
  CHECK(bit_equal(snapshot<float>(loaded), snapshot<float>(old_values)));

  // The same when the very first save into a new directory is interrupted.
  detail::checkpoint_write_hook = [](std::size_t) { throw std::runtime_error("simulated"); };
  CHECK_THROWS_AS(new_values.save(tmp / "fresh"), std::runtime_error);
  detail::checkpoint_write_hook = nullptr;
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});
}

TEST_CASE("module: save refuses to overwrite what is not a checkpoint") {
  TempDir tmp;
  TestComposite<double> m(12);

  fs::create_directory(tmp / "data");
  write_text(tmp / "data" / "notes.txt", "precious");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "data"), std::invalid_argument,
                          {"Module::save", "data", "not an xtgrad checkpoint", "refusing"});
  CHECK(directory_names(tmp / "data") == std::vector<std::string>{"notes.txt"});
  CHECK(read_text(tmp / "data" / "notes.txt") == "precious");

  write_text(tmp / "data" / "manifest.tsv", "something else\n");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "data"), std::invalid_argument,
                          {"not an xtgrad checkpoint"});

  write_text(tmp / "file", "precious");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "file"), std::invalid_argument,
                          {"Module::save", "file", "not a directory"});
  CHECK(read_text(tmp / "file") == "precious");
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"data", "file"});

  CHECK_THROWS_WITH_PARTS(m.save(tmp / "no" / "such" / "parent"), std::runtime_error,
                          {"Module::save", "cannot create the temporary directory"});
}

TEST_CASE("module: save rejects a parameter name that cannot be a file name") {
  TempDir tmp;
  TestLeaf<float> m(2, 2, 13);
  m.weight.name = "sub/weight";
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "ckpt"), std::invalid_argument,
                          {"Module::save", "'sub/weight'", "no '/'"});
  m.weight.name = "tab\tname";
  CHECK_THROWS_AS(m.save(tmp / "ckpt"), std::invalid_argument);
  CHECK(directory_names(tmp.path()).empty());
}

TEST_CASE("module: a failed load leaves the module unchanged") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> saved(14);
  saved.save(dir);
  TestComposite<double> target(15);
  const auto before = snapshot<double>(target);
  const auto check_unchanged = [&] { CHECK(bit_equal(snapshot<double>(target), before)); };

  SUBCASE("a parameter of the module is missing from the checkpoint") {
    TestComposite<double> no_scale(16, false);
    fs::remove_all(dir);
    no_scale.save(dir);
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "missing parameter(s) 'scale'"});
    check_unchanged();
  }
  SUBCASE("the checkpoint has a parameter the module lacks") {
    TestComposite<double> no_scale(16, false);
    const auto no_scale_before = snapshot<double>(no_scale);
    CHECK_THROWS_WITH_PARTS(
        no_scale.load(dir), std::invalid_argument,
        {"Module::load", "unexpected parameter(s) 'scale'", "not in the module"});
    CHECK(bit_equal(snapshot<double>(no_scale), no_scale_before));
  }
  SUBCASE("a shape differs") {
    TestComposite<double> wide(17, true, 5);
    const auto wide_before = snapshot<double>(wide);
    CHECK_THROWS_WITH_PARTS(
        wide.load(dir), std::invalid_argument,
        {"Module::load", "parameter 'w1.weight'", "shape [4, 3]", "the module expects [5, 3]"});
    CHECK(bit_equal(snapshot<double>(wide), wide_before));
  }
  SUBCASE("a float32 checkpoint into a double module") {
    TestComposite<float> single(18);
    fs::remove_all(dir);
    single.save(dir);
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "parameter 'w1.weight'", "stores float32",
                             "module's parameter is float64"});
    check_unchanged();
  }
  SUBCASE("a manifest that lies about the dtype is caught by the file check") {
    TestComposite<float> single(18);
    fs::remove_all(dir);
    single.save(dir);
    std::string manifest = read_text(dir / "manifest.tsv");
    for (std::size_t at; (at = manifest.find("float32")) != std::string::npos;)
      manifest.replace(at, 7, "float64");
    write_text(dir / "manifest.tsv", manifest);
    CHECK_THROWS_WITH_PARTS(
        target.load(dir), std::invalid_argument,
        {"parameter 'w1.weight'", "w1.weight.npy", "has dtype float32", "expected float64"});
    check_unchanged();
  }
  SUBCASE("a corrupt (truncated) file, read after the others") {
    const fs::path file = dir / "scale.npy";
    const std::string bytes = read_text(file);
    write_text(file, bytes.substr(0, bytes.size() - 3));
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "parameter 'scale'", "scale.npy", "truncated"});
    check_unchanged();
  }
  SUBCASE("a file missing") {
    fs::remove(dir / "w2.bias.npy");
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::runtime_error,
                            {"Module::load", "parameter 'w2.bias'", "w2.bias.npy", "cannot open"});
    check_unchanged();
  }
  SUBCASE("a file whose shape disagrees with the manifest") {
    save_npy(dir / "w2.bias.npy", xt::xarray<double>{{1.0, 2.0, 3.0}});
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"parameter 'w2.bias'", "holds shape [1, 3]", "manifest says [3]"});
    check_unchanged();
  }
  SUBCASE("the manifest is missing") {
    fs::remove(dir / "manifest.tsv");
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "ckpt", "has no manifest.tsv"});
    check_unchanged();
  }
  SUBCASE("malformed manifests") {
    const std::string good = read_text(dir / "manifest.tsv");
    const auto check_manifest = [&](const std::string& text, const std::string& what) {
      INFO("manifest:\n" << text);
      write_text(dir / "manifest.tsv", text);
      CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                              {"Module::load", "manifest.tsv", what});
      check_unchanged();
    };
    check_manifest("", "first line is an empty file");
    check_manifest("xtgrad-checkpoint 2\n", "expected 'xtgrad-checkpoint 1'");
    check_manifest(good + "extra\tfloat64\n", "line 7: expected 4 tab-separated fields");
    check_manifest(good + "scale\tfloat64\tscalar\tscale.npy\n", "'scale' is listed twice");
    check_manifest(good + "x\tint32\t2\tx.npy\n", "dtype 'int32'");
    check_manifest(good + "x\tfloat64\t2by3\tx.npy\n", "shape '2by3'");
    check_manifest(good + "x\tfloat64\t2\t../x.npy\n", "file '../x.npy'");
  }
  SUBCASE("the directory does not exist") {
    CHECK_THROWS_WITH_PARTS(target.load(tmp / "absent"), std::runtime_error,
                            {"Module::load", "absent", "No such file"});
    check_unchanged();
  }
}
