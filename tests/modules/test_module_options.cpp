// Options registered beside parameters (Module::add_option): a custom module's
// hyperparameter that changes no shape (its number of heads) is recorded in
// its config and refuses a checkpoint of another value, in both checkpoint
// formats, whether or not the module writes its own config().
#include <doctest/doctest.h>

#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::TempDir;

namespace {

// Attention-like: n_head splits the projection's output, no shape shows it.
class Heads : public Module<double> {
 public:
  Heads(std::size_t n_head, Activation activation) : n_head_(n_head), activation_(activation) {}
  Linear<double> proj{8, 8};

 protected:
  void collect_parameters(const std::string& prefix, NamedParameters& out) override {
    add_option(prefix, "n_head", n_head_, out);
    add_option(prefix, "activation", activation_, out);
    add_child(prefix, "proj", proj, out);
  }

 private:
  std::size_t n_head_;
  Activation activation_;
};

// The same, with a config() of its own that forgets n_head.
class HeadsWithConfig : public Heads {
 public:
  using Heads::Heads;
  ModuleConfig config() const override { return ModuleConfig("HeadsWithConfig").add("d", 8ul); }
};

}  // namespace

TEST_CASE("module options: the base config records registered options beside the children") {
  const Heads four(4, Activation::gelu);
  CHECK(four.config().describe() ==
        "Module(n_head=4, activation=gelu, proj=Linear(in_features=8, out_features=8, "
        "bias=true))");
  CHECK(four.checkpoint_config() == four.config());
  CHECK(Heads(8, Activation::gelu).config() != four.config());
  // A module that registers none: config() and what a checkpoint records are equal.
  const Linear<double> linear(3, 2);
  CHECK(linear.checkpoint_config() == linear.config());
}

TEST_CASE("module options: a checkpoint of another head count is refused") {
  TempDir dir("options");
  for (const std::string name : {"four", "four.safetensors"}) {
    Heads four(4, Activation::relu);
    four.save(dir / name);
    Heads same(4, Activation::relu);
    CHECK_NOTHROW(same.load(dir / name));
    Heads eight(8, Activation::relu);
    CHECK_THROWS_WITH_PARTS(eight.load(dir / name), std::invalid_argument,
                            {"Module::load", "n_head=4", "n_head=8"});
  }
}

TEST_CASE("module options: a config() that forgets a registered option still refuses") {
  const HeadsWithConfig four(4, Activation::silu);
  CHECK(four.config().describe() == "HeadsWithConfig(d=8)");
  CHECK(four.checkpoint_config().describe() == "HeadsWithConfig(d=8, n_head=4, activation=silu)");
  TempDir dir("options");
  four.save(dir / "four");
  HeadsWithConfig eight(8, Activation::silu);
  CHECK_THROWS_WITH_PARTS(eight.load(dir / "four"), std::invalid_argument,
                          {"Module::load", "n_head=4", "n_head=8"});
}
