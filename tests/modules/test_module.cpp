// Module<T>: parameter naming, zero_grad and copies. Checkpoints (save and
// load) are tested in test_checkpoint.cpp.

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include <xtgrad/modules/module.hpp>
#include <xtgrad/modules/parameter_count.hpp>

#include "support/module_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using testing::bit_equal;
using testing::k_composite_names;
using testing::snapshot;
using testing::TestComposite;
using testing::TestLeaf;

namespace {

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

// Lists child a, then b under the name `second`, or a again when `tied`:
// b under "a" is a duplicate name; a under another name is one Parameter
// listed twice (a tied weight).
template <class T>
class TestTwice : public Module<T> {
 public:
  explicit TestTwice(std::string second, bool tied = false)
      : a(1, 1, 1), b(1, 1, 2), second_(std::move(second)), tied_(tied) {}
  TestLeaf<T> a, b;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_child(prefix, "a", a, out);
    this->add_child(prefix, second_, tied_ ? a : b, out);
  }

 private:
  std::string second_;
  bool tied_;
};

template <class T>
std::vector<std::string> names_of(const typename Module<T>::NamedParameters& named) {
  std::vector<std::string> names;
  for (const auto& entry : named) names.push_back(entry.first);
  return names;
}

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
  TestTwice<double> m("a");
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

TEST_CASE("module: parameter_count counts a tied parameter once, and the trainable ones") {
  TestTwice<float> model("tied", /*tied=*/true);  // a: 1 x 1 weight and 1 bias, listed twice
  CHECK(model.parameters().size() == 4);
  CHECK(parameter_count(model) == 2);
  model.a.weight.set_requires_grad(false);
  CHECK(parameter_count(model, /*trainable_only=*/true) == 1);
  CHECK(parameter_count(model) == 2);
}
