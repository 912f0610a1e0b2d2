#pragma once
// Small modules defined in the tests, so that the Module and checkpoint tests
// do not depend on Linear or the FFN modules, and helpers to compare their
// parameter values.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/modules/module.hpp>

#include "support/test_helpers.hpp"

namespace xtgrad::testing {

// A leaf: a weight [out, in] and a bias [out] of its own.
template <class T>
class TestLeaf : public Module<T> {
 public:
  TestLeaf(std::size_t in, std::size_t out, std::uint32_t seed)
      : weight("weight", random_array<T>({out, in}, seed)),
        bias("bias", random_array<T>({out}, seed + 1)) {}

  Parameter<T> weight;
  Parameter<T> bias;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_parameter(prefix, weight, out);
    this->add_parameter(prefix, bias, out);
  }
};

// Two children w1 (3 -> hidden) and w2 (hidden -> 3) and, optionally, a 0-d
// parameter "scale" of its own.
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

// The parameter names of TestComposite with its scale, in order.
inline const std::vector<std::string> k_composite_names = {"w1.weight", "w1.bias", "w2.weight",
                                                           "w2.bias", "scale"};

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

}  // namespace xtgrad::testing
